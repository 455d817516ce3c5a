"""`tritonkit loadtest`'s tests: the servers and helpers its behaviour files share."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_REPOSITORY, ROOT, run_cli
from tritonkit.client import Endpoint
from tritonkit.deploy import deploy_local, down
from tritonkit.loadtest import LevelResult, LoadSpec, LoadTestResult, Window, run_loadtest


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in
                Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:       # ended meanwhile
        return []


def _command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return b""


def load_test_workers(pid: int) -> set[int]:
    """A load-test process's workers: the children of its fork server (a child of it, on
    multiprocessing's command line for one), or children spawned where there is none."""
    workers = set()
    for child in _children(pid):
        line = _command_line(child)
        if b"multiprocessing.forkserver" in line:
            workers.update(_children(child))
        elif b"multiprocessing.spawn" in line:
            workers.add(child)
    return workers


def _timeline(p99s: list[float], maxes: list[float] | None = None) -> list[Window]:
    maxes = maxes or [p * 1.2 for p in p99s]
    return [Window(index=i, start_s=float(i), ok=100, errors=0, qps=100.0, p50_ms=p / 2,
                   p99_ms=p, max_ms=m) for i, (p, m) in enumerate(zip(p99s, maxes))]


MS, S = 1_000_000, 1_000_000_000


def _level_from(records, *, mode="closed", cpu_s=0.0, never_sent=(), held_back=False, back_at=0,
                given_up=(), timeout_s=1.0, duration_s=2, window_s=1):
    """A level merged from one worker's raw records: (origin ns, latency ns, None for an
    answer, else the error's kind or the exception the send raised); ``duration_s`` (2)
    measured from 0 in ``window_s`` (1) windows, after a warm-up (negative origins); ``given_up``:
    origins still out at ``back_at``."""
    from tritonkit.loadtest._run import _merge, _plans, plan_slots
    from tritonkit.loadtest._server import StatsSnapshot
    from tritonkit.loadtest._worker import _give_up_on, _never_sent, _Records

    common = dict(model="m", duration_s=duration_s, warmup_s=0, window_s=window_s, timeout_s=timeout_s)
    spec = LoadSpec(concurrency=(1,), **common) if mode == "closed" else LoadSpec(rates=(10.0,), **common)
    level = spec.levels()[0]
    plan, = _plans(spec, None, "-", level, plan_slots(spec, level))
    rec = _Records()
    for origin, latency, kind in records:
        rec.origins.append(origin)
        rec.latencies.append(latency)
        rec.codes.append(0 if kind is None else rec.code(kind) if isinstance(kind, BaseException)
                         else rec.kind_code(kind))
        if mode == "open":
            rec.lags.append(0)
            rec.waited.append(False)
    _never_sent(list(never_sent), duration_s * S, rec, back_at, held_since=0 if held_back else None)
    _give_up_on(dict(enumerate(given_up)), rec, plan, back_at)
    summary = rec.summary(plan, t0=0) | {"cpu_s": cpu_s}
    return _merge(spec, 1 if mode == "closed" else 10.0, [summary], [], None, StatsSnapshot(), 0,
                  1 if mode == "open" else None)


def _stalled_then_idle():
    """Open loop, 6 s: answers in 1 ms in second 0; one request due at 1.0 s that the server
    held until 3.5 s, nothing else due until 5 s; answers again in second 5."""
    return _level_from([*[(i * 100 * MS, MS, None) for i in range(10)],
                        (1_000 * MS, 2_500 * MS, None),
                        *[(5_000 * MS + i * 100 * MS, MS, None) for i in range(10)]],
                       mode="open", duration_s=6)


def _failed_in_second(second: int, errors: int = 40) -> list[Window]:
    """Six windows at 1 ms, the one at ``second`` every request an error answer (no latency)."""
    timeline = _timeline([1.0] * 6)
    timeline[second] = Window(index=second, start_s=float(second), ok=0, errors=errors, qps=0.0,
                              p50_ms=None, p99_ms=None, max_ms=None, came_back=errors, waiting_ms=0.5)
    return timeline


def _some_failed_in_second(second: int, ok: int, errors: int, not_sent: int = 0) -> list[Window]:
    """Six windows at 1 ms, the one at ``second`` with ``errors`` among its requests, its
    latency (the answered ones') as ordinary as the others'."""
    timeline = _timeline([1.0] * 6)
    timeline[second] = Window(index=second, start_s=float(second), ok=ok, errors=errors,
                              not_sent=not_sent, qps=float(ok), p50_ms=0.5, p99_ms=1.0, max_ms=1.2,
                              came_back=ok + errors - not_sent, waiting_ms=0.5)
    return timeline


def _result(p99=5.0, qps=100.0, sent=1000, errors=None, ended_early=None) -> LoadTestResult:
    errors = errors or {}
    level = LevelResult(
        mode="closed", level=4, workers=1, duration_s=10, sent=sent, ok=sent - sum(errors.values()),
        errors=errors, qps=qps, infer_per_s=qps, latency_ms={"p50": p99 / 3, "p99": p99},
        timeline=[], spikes=[], events=[], server_split_ms=None, ended_early=ended_early)
    return LoadTestResult(spec=LoadSpec(model="m", concurrency=(4,)), server="s", request="r",
                          levels=[level])


@pytest.fixture(scope="package")
def served(tmp_path_factory):
    """The example repository served by the real embedded Triton for this package's tests."""
    repo = tmp_path_factory.mktemp("loadtest") / "repo"
    shutil.copytree(EXAMPLE_REPOSITORY, repo, ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    deployment = deploy_local(repo, http_port=0, grpc_port=0, metrics_port=0, timeout=120)
    yield deployment
    down(repo)


class _At:
    """A progress callback that runs ``action`` once, in a thread, ``second`` s into the measurement.

    It fires when the run's progress says so, late by however long a busy machine takes:
    ``left_at(t)`` says how many seconds of the level were left at ``time.perf_counter()`` t.
    """

    def __init__(self, second: float, warmup_s: float, action) -> None:
        self.when, self.action, self.thread = warmup_s + second, action, None

    def __call__(self, label, elapsed_s, total_s, done) -> None:
        if self.thread is None and elapsed_s >= self.when:
            self._left = (time.perf_counter(), total_s - elapsed_s)
            self.thread = threading.Thread(target=self.action)
            self.thread.start()

    def left_at(self, t: float) -> float:
        fired_at, left = self._left
        return left - (t - fired_at)

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()

    @property
    def ran(self) -> bool:
        return self.thread is not None


def _loadtest(deployment, *args) -> int:
    return run_cli("loadtest", "--repository", deployment.repository, "--model", "example",
                   "--warmup-s", "0.3", *args)


class _Frozen:
    """An action that stops the server process for ``seconds`` (it answers nothing meanwhile);
    ``began``: when it did (``time.perf_counter``)."""

    def __init__(self, deployment, seconds: float) -> None:
        self.pid, self.seconds, self.began = deployment.pid, seconds, None

    def __call__(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)
        self.began = time.perf_counter()
        try:
            time.sleep(self.seconds)
        finally:
            os.kill(self.pid, signal.SIGCONT)


def _run_with(deployment, spec: LoadSpec, at: _At) -> LoadTestResult:
    try:
        return run_loadtest(Endpoint.from_deployment(deployment), spec, progress=at)
    finally:
        at.join()
        os.kill(deployment.pid, signal.SIGCONT)


_PAIR_CONFIG = """name: "pair"
backend: "python"
max_batch_size: 8
input { name: "input_ids" data_type: TYPE_INT64 dims: -1 }
input { name: "attention_mask" data_type: TYPE_INT64 dims: -1 }
output { name: "hidden" data_type: TYPE_FP32 dims: -1 }
"""


_PAIR_MODEL = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            ids = pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy()
            mask = pb_utils.get_input_tensor_by_name(request, "attention_mask").as_numpy()
            if ids.shape != mask.shape:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    f"input_ids {list(ids.shape)} and attention_mask {list(mask.shape)} must "
                    "share their sequence length", pb_utils.TritonError.INVALID_ARG)))
                continue
            if ids.shape[1] > 256:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    f"sequences longer than 256 are not supported (got {ids.shape[1]})",
                    pb_utils.TritonError.UNKNOWN)))
                continue
            hidden = (ids * mask).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("hidden", hidden)]))
        return responses
"""


_CRASH_CONFIG = """name: "crash"
backend: "python"
max_batch_size: 0
input { name: "X" data_type: TYPE_FP32 dims: 4 }
output { name: "Y" data_type: TYPE_FP32 dims: 4 }
"""


_CRASH_MODEL = """class TritonPythonModel:
    def execute(self, requests):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
"""


@pytest.fixture(scope="package")
def encoder_served(tmp_path_factory):
    """examples/encoder.py exported (input_ids and attention_mask: [batch, sequence]; its
    model_warmup holds the lengths the export verified) and served by the real Triton
    beside a copy without model_warmup ("bare"), the example model (fixed dims),
    "pair": the encoder's two inputs, checked as a careful model checks them (sequences of
    different lengths are refused, INVALID_ARG: HTTP 400), and "crash", a model that fails
    on every request whatever it holds (HTTP 500, as a model crashing does)."""
    from google.protobuf import text_format

    from tritonkit.model_config import read_config

    repo = tmp_path_factory.mktemp("encoder") / "repo"
    shutil.copytree(EXAMPLE_REPOSITORY, repo, ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    assert run_cli("export", ROOT / "examples" / "encoder.py:build", "--name", "enc",
                   "--repository", repo) == 0
    shutil.copytree(repo / "enc", repo / "bare")
    config = read_config(repo / "bare" / "config.pbtxt")
    config.name = "bare"
    config.ClearField("model_warmup")
    (repo / "bare" / "config.pbtxt").write_text(text_format.MessageToString(config))
    (repo / "pair" / "1").mkdir(parents=True)
    (repo / "pair" / "config.pbtxt").write_text(_PAIR_CONFIG)
    (repo / "pair" / "1" / "model.py").write_text(_PAIR_MODEL)
    (repo / "crash" / "1").mkdir(parents=True)
    (repo / "crash" / "config.pbtxt").write_text(_CRASH_CONFIG)
    (repo / "crash" / "1" / "model.py").write_text(_CRASH_MODEL)
    deployment = deploy_local(repo, http_port=0, grpc_port=0, metrics_port=0, timeout=120, warmup=False)
    yield deployment
    down(repo)


def _loadtest_model(deployment, model, *args) -> int:
    return run_cli("loadtest", "--repository", deployment.repository, "--model", model,
                   "--warmup-s", "0.2", "--concurrency", "1", "--duration", "0.5", *args)
