"""Triton's own metrics: its Prometheus endpoint (``http://host:8002/metrics``), parsed.

Triton's ``nv_inference_*`` counters are cumulative per model and version; what a
person reads is their change between two scrapes: requests and inferences per
second, inferences per execution (the batch the scheduler actually formed), and the
queue and compute time per request. ``nv_gpu_*`` gauges appear only on a GPU server.

A counter that went down means the server restarted between the two scrapes (Triton
keeps a model's counters across an unload and a reload): as Prometheus' ``increase()``
does, the counters are then taken as counted from zero, all of a model's together, so
no rate mixes the old server's figures with the new one's.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field, fields

from prometheus_client.parser import text_string_to_metric_families

from tritonkit.errors import ServerError

DEFAULT_METRICS_PORT = 8002


@dataclass(frozen=True)
class ModelCounters:
    """Triton's cumulative counters for one model (all versions summed)."""

    request_success: float = 0.0
    request_failure: float = 0.0
    inference_count: float = 0.0
    exec_count: float = 0.0
    request_duration_us: float = 0.0
    queue_duration_us: float = 0.0
    compute_input_duration_us: float = 0.0
    compute_infer_duration_us: float = 0.0
    compute_output_duration_us: float = 0.0
    pending_request_count: float = 0.0      # a gauge: requests waiting right now

    def __add__(self, other: "ModelCounters") -> "ModelCounters":
        return ModelCounters(**{f.name: getattr(self, f.name) + getattr(other, f.name)
                                for f in fields(self)})


# Triton metric family -> ModelCounters field (every field has one).
_COUNTERS = {f"nv_inference_{f.name}": f.name for f in fields(ModelCounters)}
_COUNTERS["nv_inference_count"] = _COUNTERS.pop("nv_inference_inference_count")


@dataclass(frozen=True)
class TritonMetrics:
    """One scrape: counters per model, Triton's GPU gauges per GPU uuid, at a time."""

    at: float
    models: dict[str, ModelCounters]
    gpus: dict[str, dict[str, float]] = field(default_factory=dict)

    def total(self) -> ModelCounters:
        result = ModelCounters()
        for counters in self.models.values():
            result = result + counters
        return result


@dataclass(frozen=True)
class ModelRates:
    """What changed between two scrapes; times are averages per request in µs."""

    requests_per_s: float
    inferences_per_s: float
    executions_per_s: float
    failures: float
    avg_batch: float | None              # inferences per execution
    queue_us: float | None               # queue time per request
    compute_us: float | None             # input + infer + output time per request
    compute_input_us: float | None
    pending: float


def parse_metrics(text: str, at: float = 0.0) -> TritonMetrics:
    """Parse Triton's Prometheus text exposition into per-model counters and GPU gauges."""
    models: dict[str, dict[str, float]] = {}
    gpus: dict[str, dict[str, float]] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise ServerError(f"Triton's metrics endpoint sent text that is not Prometheus ({exc})",
                          hint="point --metrics-port/--url at Triton's metrics port (8002)") from None
    for family in families:
        target = _COUNTERS.get(family.name)
        for sample in family.samples:
            if target and "model" in sample.labels:
                row = models.setdefault(sample.labels["model"], {})
                row[target] = row.get(target, 0.0) + float(sample.value)
            elif family.name.startswith("nv_gpu_") or family.name.startswith("nv_energy_"):
                uuid = sample.labels.get("gpu_uuid", "")
                gpus.setdefault(uuid, {})[family.name] = float(sample.value)
    return TritonMetrics(at=at, models={m: ModelCounters(**v) for m, v in sorted(models.items())},
                         gpus=gpus)


_GAUGES = ("pending_request_count",)


def increase(before: ModelCounters, after: ModelCounters) -> ModelCounters:
    """What the counters counted between two scrapes; gauges keep their later value.

    If any counter went down the server restarted in between: everything ``after``
    holds was counted since then (one decision for all counters: a field-by-field
    floor at zero mixed two servers' figures into one interval)."""
    names = [f.name for f in fields(ModelCounters) if f.name not in _GAUGES]
    if any(getattr(after, n) < getattr(before, n) for n in names):
        return after
    return ModelCounters(**{n: getattr(after, n) - getattr(before, n) for n in names},
                         **{n: getattr(after, n) for n in _GAUGES})


def rates(before: ModelCounters, after: ModelCounters, seconds: float) -> ModelRates:
    """The change between two scrapes ``seconds`` apart (over a restart: since the restart)."""
    return rates_of(increase(before, after), seconds)


def rates_of(counted: ModelCounters, seconds: float) -> ModelRates:
    """Rates and per-request times from what was counted in ``seconds``."""
    delta = asdict(counted)
    seconds = max(seconds, 1e-9)
    requests = delta["request_success"]
    compute = (delta["compute_input_duration_us"] + delta["compute_infer_duration_us"]
               + delta["compute_output_duration_us"])
    return ModelRates(
        requests_per_s=requests / seconds,
        inferences_per_s=delta["inference_count"] / seconds,
        executions_per_s=delta["exec_count"] / seconds,
        failures=delta["request_failure"],
        avg_batch=delta["inference_count"] / delta["exec_count"] if delta["exec_count"] else None,
        queue_us=delta["queue_duration_us"] / requests if requests else None,
        compute_us=compute / requests if requests else None,
        compute_input_us=delta["compute_input_duration_us"] / requests if requests else None,
        pending=counted.pending_request_count,
    )


def normalize_metrics_url(address: str) -> str:
    """``host:port`` or a full URL -> ``http://host:port/metrics``."""
    url = address if "://" in address else f"http://{address}"
    if url.rstrip("/").count("/") == 2:  # no path given
        url = url.rstrip("/") + "/metrics"
    return url


def metrics_url_for(http_url: str, metrics_port: int = DEFAULT_METRICS_PORT) -> str:
    """The metrics URL on the same host as Triton's HTTP address ``host:port``."""
    host = http_url.removeprefix("http://").rsplit(":", 1)[0]
    return f"http://{host}:{metrics_port}/metrics"


def scrape(url: str, at: float, timeout: float = 5.0) -> TritonMetrics:
    """Fetch and parse Triton's metrics; ServerError naming the URL if it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            text = response.read().decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ServerError(f"Triton's metrics endpoint {url} did not answer ({reason})",
                          hint="check the server is up and that the port is its --metrics-port "
                               "(8002 by default)") from None
    return parse_metrics(text, at=at)


def resolve_metrics_url(repository=None, url: str | None = None,
                        metrics_port: int = DEFAULT_METRICS_PORT) -> str | None:
    """Triton's metrics URL: the deployment's in ``repository``, or ``--url``'s host on
    ``metrics_port``; None when neither is given (GPU-only monitoring)."""
    if url:
        return metrics_url_for(url, metrics_port)
    if repository is None:
        return None
    from tritonkit.server.state import load_deployment

    return load_deployment(repository).metrics_url
