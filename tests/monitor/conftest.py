"""`tritonkit monitor`'s tests: the server, stand-ins (a Triton exposition, pynvml) and
helpers its behaviour files share; tests/test_watch.py, test_doctor.py and
test_diagnose.py use them too."""

from __future__ import annotations

import itertools
import sys
import time
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from tests.conftest import run_cli
from tritonkit.monitor.alerts import AlertThresholds
from tritonkit.monitor.nvml import GpuSample, GpuUnavailableError, Nvml
from tritonkit.monitor.triton_metrics import ModelCounters, parse_metrics


# As tritonserver 2.51.0 (CPU build) serves it, after 5 requests of batch 2.
TRITON_2_51_METRICS = """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="example",version="1"} 5
# HELP nv_inference_request_failure Number of failed inference requests, all batch sizes
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{model="example",reason="OTHER",version="1"} 0
nv_inference_request_failure{model="example",reason="BACKEND",version="1"} 1
# HELP nv_inference_count Number of inferences performed (does not include cached requests)
# TYPE nv_inference_count counter
nv_inference_count{model="example",version="1"} 10
# HELP nv_inference_exec_count Number of model executions performed (does not include cached requests)
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{model="example",version="1"} 5
# TYPE nv_inference_request_duration_us counter
nv_inference_request_duration_us{model="example",version="1"} 94584
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{model="example",version="1"} 308
# TYPE nv_inference_compute_input_duration_us counter
nv_inference_compute_input_duration_us{model="example",version="1"} 230
# TYPE nv_inference_compute_infer_duration_us counter
nv_inference_compute_infer_duration_us{model="example",version="1"} 93616
# TYPE nv_inference_compute_output_duration_us counter
nv_inference_compute_output_duration_us{model="example",version="1"} 407
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="example",version="1"} 2
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-1"} 0.5
# TYPE nv_cpu_utilization gauge
nv_cpu_utilization 1
"""


def _nvml_works() -> bool:
    try:
        with Nvml():
            return True
    except GpuUnavailableError:
        return False


def _versions(requests: dict[str, int]) -> str:
    """Triton's request counter for the versions of model "example" it reports."""
    return "# TYPE nv_inference_request_success counter\n" + "".join(
        f'nv_inference_request_success{{model="example",version="{v}"}} {n}\n'
        for v, n in requests.items())


# Triton's per-model families, as its core names them (HELP lines from Triton 2.51's own
# /metrics), and the ModelCounters field each one fills.
_FAMILIES = (
    ("nv_inference_request_success", "counter", "request_success"),
    ("nv_inference_request_failure", "counter", "request_failure"),
    ("nv_inference_count", "counter", "inference_count"),
    ("nv_inference_exec_count", "counter", "exec_count"),
    ("nv_inference_request_duration_us", "counter", "request_duration_us"),
    ("nv_inference_queue_duration_us", "counter", "queue_duration_us"),
    ("nv_inference_compute_input_duration_us", "counter", "compute_input_duration_us"),
    ("nv_inference_compute_infer_duration_us", "counter", "compute_infer_duration_us"),
    ("nv_inference_compute_output_duration_us", "counter", "compute_output_duration_us"),
    ("nv_inference_pending_request_count", "gauge", "pending_request_count"),
)


def triton_exposition(series: dict[tuple[str, str, str], ModelCounters],
                      gpu_uuids: tuple[str, ...] = ()) -> str:
    """Triton's /metrics text for these series: (model, version, gpu_uuid) -> counters,
    "" for a series without a GPU. The label set is the one Triton's core gives them
    (triton-inference-server/core src/metric_model_reporter.cc GetMetricLabels: "model",
    "version", and "gpu_uuid" only for a model instance of kind GPU; the model's own
    reporter, which counts its pending requests, has none), in prometheus-cpp's sorted
    order; failures are split by "reason" as Triton 2.51 splits them. A model given as
    "namespace/model" gets the "namespace" label (--model-namespacing=true)."""
    lines = []
    for family, kind, attribute in _FAMILIES:
        lines.append(f"# TYPE {family} {kind}")
        for (model, version, uuid), counters in series.items():
            gpu = f'gpu_uuid="{uuid}",' if uuid else ""
            namespace, _, name = model.rpartition("/")
            model = f'{name}",namespace="{namespace}' if namespace else model
            value = getattr(counters, attribute) or 0
            if family == "nv_inference_request_failure":
                lines += [f'{family}{{{gpu}model="{model}",reason="OTHER",version="{version}"}} 0',
                          f'{family}{{{gpu}model="{model}",reason="BACKEND",version="{version}"}} '
                          f"{value:.0f}"]
            else:
                lines.append(f'{family}{{{gpu}model="{model}",version="{version}"}} {value:.0f}')
    lines.append("# TYPE nv_gpu_utilization gauge")
    lines += [f'nv_gpu_utilization{{gpu_uuid="{uuid}"}} 0.500000' for uuid in gpu_uuids]
    return "\n".join(lines) + "\n"


def _served(requests: float, batch: float = 1, pending: float = 0) -> ModelCounters:
    return ModelCounters(request_success=requests, inference_count=requests * batch,
                         exec_count=requests, request_duration_us=requests * 900,
                         queue_duration_us=requests * 100, compute_input_duration_us=requests * 50,
                         compute_infer_duration_us=requests * 700,
                         compute_output_duration_us=requests * 20,
                         pending_request_count=pending)


def _triton_rows(out: str) -> list[dict[str, str]]:
    """The rows of every Triton table printed, in order, each by its column's header."""
    rows, header = [], None
    for line in out.splitlines():
        words = line.replace("queue ms", "queue_ms").replace("comp ms", "comp_ms").split()
        if words[:1] in (["GPUs"], ["Triton"]):
            header = None
        elif words[:1] == ["model"]:
            header = words
        elif header and words[:1] == ["counts"]:
            header = None       # the table ends: its caption is no row
        elif header and len(words) == len(header):
            rows.append(dict(zip(header, words)))
    return rows


def _scraping(monkeypatch, *texts: str) -> None:
    """Triton's metrics endpoint answering these recorded texts, one per scrape, then the
    last again (a run whose samples a busy host did not slow takes more)."""
    answers = itertools.chain(texts, itertools.repeat(texts[-1]))
    monkeypatch.setattr(sys.modules["tritonkit.monitor.watch"], "scrape",   # the module, not
                        lambda url, at: parse_metrics(next(answers), at=at))  # watch()


# A python-backend model that fails as a backend does: it raises on a request whose first
# value is -9 (Triton counts a failure), and answers -7 with an error response (which
# Triton 2.51 counts as a success: server#7713).
FLAKY_MODEL = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT__0").as_numpy()
            if x[0, 0] == -9:
                raise RuntimeError("a backend failure")
            if x[0, 0] == -7:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("an error response")))
                continue
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT__0", np.zeros((x.shape[0], 3), np.float32))]))
        return responses
"""


@pytest.fixture(scope="package")
def failing_server(tmp_path_factory):
    """The real local Triton serving the example, "flaky" (FLAKY_MODEL) and "pipeline", an
    ensemble of one step: flaky."""
    import shutil

    from tests.conftest import EXAMPLE_REPOSITORY
    from tests.warmup.conftest import ENSEMBLE
    from tritonkit.server.state import load_deployment

    repo = tmp_path_factory.mktemp("failing") / "repo"
    shutil.copytree(EXAMPLE_REPOSITORY, repo,
                    ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    (repo / "flaky" / "1").mkdir(parents=True)
    (repo / "flaky" / "config.pbtxt").write_text(
        (repo / "example" / "config.pbtxt").read_text().replace('"example"', '"flaky"'))
    (repo / "flaky" / "1" / "model.py").write_text(FLAKY_MODEL)
    (repo / "pipeline" / "1").mkdir(parents=True)
    (repo / "pipeline" / "config.pbtxt").write_text(
        ENSEMBLE.replace('model_name: "example"', 'model_name: "flaky"'))
    assert run_cli("deploy", "--repository", repo, "--http-port", "0", "--grpc-port", "0",
                   "--metrics-port", "0", "--timeout", "60") == 0, "tritonkit deploy failed"
    yield load_deployment(repo)
    run_cli("down", "--repository", repo)


def _infer_failing(deployment, model: str, first: float, count: int, width: int = 4) -> int:
    """Send ``count`` requests of one row ``[first, 1, 1, ...]`` (``width`` values) to
    ``model``; how many the client saw fail."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    client = httpclient.InferenceServerClient(deployment.http_url)
    failed = 0
    for _ in range(count):
        values = np.ones((1, width), dtype=np.float32)
        values[0, 0] = first
        tensor = httpclient.InferInput("X" if model == "pipeline" else "INPUT__0",
                                       list(values.shape), "FP32")
        tensor.set_data_from_numpy(values)
        try:
            client.infer(model, [tensor])
        except InferenceServerException:
            failed += 1
    client.close()
    return failed


def _settled(deployment, counted: dict[tuple[str, str], float]):
    """A scrape once every (model, counter) has reached its count (a count lands just after
    its response), or the last one within 30 s (a busy host's; the wait ends when the
    counts do)."""
    from tritonkit.monitor.triton_metrics import scrape

    deadline = time.monotonic() + 30
    while True:
        metrics = scrape(deployment.metrics_url, at=time.monotonic())
        if time.monotonic() > deadline or all(
                getattr(metrics.models[model], name) >= value
                for (model, name), value in counted.items()):
            return metrics


def _nvml_error(name: str) -> Exception:
    """The error pynvml raises for NVML's NVML_ERROR_<name> (its own class and text)."""
    import pynvml

    return pynvml.NVMLError(getattr(pynvml, f"NVML_ERROR_{name}"))


def _raising(name: str):
    """An NVML call that fails with NVML_ERROR_<name>."""
    def call(*_args):
        raise _nvml_error(name)
    return call


def _fake_pynvml(power_supported: bool = True, clock_events: int = 0) -> SimpleNamespace:
    """pynvml's surface as a Tesla P100 under load would answer it (no GPU on CI), raising
    pynvml's own errors; ``clock_events``: NVML's clocks-event reasons bitmask."""
    import pynvml

    def power(_handle):
        if not power_supported:
            raise _nvml_error("NOT_SUPPORTED")
        return 187_500  # mW

    return SimpleNamespace(
        NVMLError=pynvml.NVMLError, NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2,
        NVML_PCIE_UTIL_TX_BYTES=0, NVML_PCIE_UTIL_RX_BYTES=1,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlSystemGetDriverVersion=lambda: "535.104.05",
        nvmlDeviceGetCudaComputeCapability=lambda h: (6, 0),
        nvmlDeviceGetName=lambda h: b"Tesla P100-PCIE-16GB",
        nvmlDeviceGetUUID=lambda h: "GPU-abc",
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=93, memory=40),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=12 * 2**30, total=16 * 2**30),
        nvmlDeviceGetTemperature=lambda h, sensor: 71,
        nvmlDeviceGetPowerUsage=power,
        nvmlDeviceGetClockInfo=lambda h, clock: {1: 1328, 2: 715}[clock],
        nvmlDeviceGetPcieThroughput=lambda h, counter: {1: 12_000_000, 0: 500_000}[counter],
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 3,
        nvmlDeviceGetCurrPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: clock_events,
        NVML_FEATURE_ENABLED=1, nvmlDeviceGetRetiredPagesPendingStatus=lambda h: 0,
        # row remapping is Ampere's; Pascal retires pages
        nvmlDeviceGetRemappedRows=_raising("NOT_SUPPORTED"), nvmlDeviceGetEccMode=lambda h: [1, 1],
    )


def _failing_from_now_on(fake: SimpleNamespace, error: str) -> None:
    """Every per-GPU call of ``fake`` fails with NVML_ERROR_<error> from now on."""
    for name in [n for n in vars(fake) if n.startswith("nvmlDevice")]:
        setattr(fake, name, _raising(error))


LIMITS = AlertThresholds(temperature_c=85, memory_pct=95, low_utilization_pct=60,
                         low_utilization_minutes=5, idle_utilization_pct=5,
                         temperature_hysteresis_c=5, hw_slowdown_samples=3)


def _gpu(util=90.0, mem_pct=50.0, temp=60.0) -> GpuSample:
    return GpuSample(0, "NVIDIA A10", "GPU-1", util, mem_pct * 240, 24000, temp, 100.0,
                     1695, 6251, 100.0, 50.0)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds + 0.01   # every sleep overshoots a little


TWO_MODELS = {("bert", "1", ""): replace(_served(1000, batch=4), request_failure=2),
              ("vision", "1", ""): _served(40, batch=8),
              ("vision", "2", ""): replace(_served(60, batch=2), queue_duration_us=60 * 4000)}
