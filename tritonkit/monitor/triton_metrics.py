"""Triton's own metrics: its Prometheus endpoint (``http://host:8002/metrics``), parsed.

Triton's ``nv_inference_*`` counters are cumulative per model and version, and per GPU:
a model instance of kind GPU counts in series labelled with its GPU's ``gpu_uuid``; a CPU
instance, and what the model counts before any instance (its scheduler's pending
requests, cache hits, requests refused), in series without one. What a person reads is
their change between two scrapes: requests and inferences per second, inferences per
execution (the batch the scheduler actually formed), and the queue and compute time per
request. ``nv_gpu_*`` gauges appear only on a GPU server.

The model figures sum a model's GPUs; each GPU's own figures (``gpu_totals``,
``gpu_increase``) sum the series labelled with its uuid, so an idle GPU of a busy server
reads idle and a CPU model's traffic is no GPU's. Triton 2.51 leaves the label off models
loaded at server start (triton-inference-server/server#7479: its GPU metrics start after
them); a scrape with no labelled series at all has no per-GPU figures (None), and its
traffic is only the server's.

A counter that went down means the server restarted between the two scrapes, or the
model was unloaded and loaded again (Triton 2.51 keeps the counters through the unload
and starts them from zero at the next load; a load of a model still loaded keeps them:
measured on the local server). As Prometheus' ``increase()`` does, the counters are then
taken as counted from zero, all of a series' counters together, so no rate mixes the
figures of before with those of after. A model's versions, and each version's GPUs, are
taken apart (``model_increase``): a model update that unloads version 1 and loads
version 2 drops one version's counters and starts another's, which their sum would read
as a small increase, or as a restart (and a restart read on a sum of GPUs counts the
GPUs that did not restart a second time).

What Triton counts as a failure (measured on the local 2.51 server) is less than what
a client sees fail: a request refused for its input (a wrong shape: HTTP 400) is no
model's failure, and a python-backend model's error response counts as a success
(server#7713; an exception raised in ``execute`` counts as a failure). An ensemble
counts each of its failed requests twice (reason OTHER), besides what its failed step
counts.

Triton counts an ensemble's request in the ensemble and again in every step model it
runs (5 requests to an ensemble of one step: 5 in each, measured). The ensemble runs
nothing itself (its scheduler routes tensors between its steps; their counters are the
work), so the server's totals leave ensembles out (``TritonMetrics.without``), told
apart by their model config (``EnsembleCheck``: the metrics carry no such label), while
an ensemble's own figures still say what clients sent it.

A model is named as Triton labels it, ``namespace/model`` where Triton adds a namespace
(``--model-namespacing=true``: two repositories' models of one name are two models,
counted, restarted and shown apart), plain ``model`` where it does not.

A figure Triton does not report is None, never 0: a server started with
``--metrics-config counter_latencies=false`` has no duration counters (their
``*_summary_us`` summaries, when on, give the same sums), and Triton 2.51 then leaves
its request, inference and execution counters and the pending gauge at 0 however much
it serves (triton-inference-server/server#8125). Read as zeros they made a busy server
idle and every request 0 µs long; here requests and times come from the summaries
and batch sizes are unknown, for every series of a model whose counters read 0 while it
served (an idle GPU's series of it reads 0 truly, and is no sign they count), with one
note naming those models.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.parse
from dataclasses import dataclass, field, fields, replace
from itertools import groupby
from operator import itemgetter
from typing import Collection

from prometheus_client.parser import text_string_to_metric_families

from tritonkit import client
from tritonkit.answers import not_http1, not_triton, speaks_http2
from tritonkit.errors import NotTriton, ServerError
from tritonkit.monitor.nvml import GpuSample

DEFAULT_METRICS_PORT = 8002


@dataclass(frozen=True)
class ModelCounters:
    """Triton's cumulative counters of one series, or a sum of them (a model's versions
    and GPUs, a GPU's models); None: not reported."""

    request_success: float | None = 0.0
    request_failure: float | None = 0.0
    inference_count: float | None = 0.0
    exec_count: float | None = 0.0
    request_duration_us: float | None = 0.0
    queue_duration_us: float | None = 0.0
    compute_input_duration_us: float | None = 0.0
    compute_infer_duration_us: float | None = 0.0
    compute_output_duration_us: float | None = 0.0
    pending_request_count: float | None = 0.0      # a gauge: requests waiting right now

    def __add__(self, other: "ModelCounters") -> "ModelCounters":
        return ModelCounters(**{f.name: plus(getattr(self, f.name), getattr(other, f.name))
                                for f in fields(self)})

    @property
    def compute_duration_us(self) -> float | None:
        """Input + infer + output time."""
        return plus(self.compute_input_duration_us, self.compute_infer_duration_us,
                    self.compute_output_duration_us)

    @property
    def served(self) -> float | None:
        """What Triton ran: inferences where it counts them, else successful requests."""
        return self.inference_count if self.inference_count is not None else self.request_success


def plus(*values: float | None) -> float | None:
    """The sum of ``values``; None when any is unknown."""
    return None if any(v is None for v in values) else sum(values)


def ratio(value: float | None, count: float | None) -> float | None:
    """``value / count``; None when either is unknown or nothing was counted."""
    return None if value is None or not count else value / count


# Triton metric family -> ModelCounters field (every field has one).
_COUNTERS = {f"nv_inference_{f.name}": f.name for f in fields(ModelCounters)}
_COUNTERS["nv_inference_count"] = _COUNTERS.pop("nv_inference_inference_count")
# The duration counters' summaries (--metrics-config summary_latencies=true): sums in µs.
_SUMMARIES = {"nv_inference_request_summary_us": "request_duration_us",
              "nv_inference_queue_summary_us": "queue_duration_us",
              "nv_inference_compute_input_summary_us": "compute_input_duration_us",
              "nv_inference_compute_infer_summary_us": "compute_infer_duration_us",
              "nv_inference_compute_output_summary_us": "compute_output_duration_us"}
# Series labels, as Triton's core sets them (triton-inference-server/core,
# src/metric_model_reporter.cc GetMetricLabels, names in src/constants.h): "model",
# "version", "gpu_uuid" for an instance of kind GPU (backend_model_instance.cc passes
# METRIC_REPORTER_ID_CPU, no label, for the others), "namespace" with model namespacing,
# "_<tag>" for metric tags, and "reason" on nv_inference_request_failure.
GPU_LABEL = "gpu_uuid"
NAMESPACE_LABEL = "namespace"
# What Triton 2.51 stops counting (reads 0) when its latency counters are off.
_UNCOUNTED_WITHOUT_LATENCY_COUNTERS = ("request_failure", "inference_count", "exec_count",
                                       "pending_request_count")


@dataclass(frozen=True)
class TritonMetrics:
    """One scrape: counters per model (its versions and GPUs summed), per version (its
    GPUs summed) and per series (``series``: model -> (version, gpu uuid or "") ->
    counters), Triton's GPU gauges per GPU uuid, at a time."""

    at: float
    models: dict[str, ModelCounters]
    gpus: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()     # what this server's metrics cannot tell
    versions: dict[str, dict[str, ModelCounters]] = field(default_factory=dict)
    series: dict[str, dict[tuple[str, str], ModelCounters]] = field(default_factory=dict)

    @property
    def placed(self) -> dict[str, dict[tuple[str, str], ModelCounters]]:
        """The series Triton labels with a GPU: uuid -> (model, version) -> counters."""
        placed: dict[str, dict[tuple[str, str], ModelCounters]] = {}
        for name, by_series in self.series.items():
            for (version, uuid), counters in by_series.items():
                if uuid:
                    placed.setdefault(uuid, {})[(name, version)] = counters
        return placed

    def total(self) -> ModelCounters:
        result = ModelCounters()
        for counters in self.models.values():
            result = result + counters
        return result

    def model_versions(self) -> list[tuple[str, str]]:
        """Every (model, version) this scrape counts; version "" for a model parsed
        without its versions."""
        return [(name, version) for name in self.models
                for version in (self.versions.get(name) or {"": None})]

    def version_counters(self, name: str, version: str) -> ModelCounters:
        """The counters of one of ``model_versions``: the whole model's for version ""."""
        return self.versions.get(name, {}).get(version, self.models[name])

    def without(self, left_out: Collection[tuple[str, str]]) -> "TritonMetrics":
        """This scrape less the (model, version) pairs ``left_out`` (the ensembles, whose
        requests their steps count again); a model left with no version is gone."""
        if not left_out:
            return self
        series = {name: kept for name, by_series in self.series.items()
                  if (kept := {key: c for key, c in by_series.items()
                               if (name, key[0]) not in left_out})}
        versions = {name: kept for name, by_version in self.versions.items()
                    if (kept := {v: c for v, c in by_version.items() if (name, v) not in left_out})}
        models = {}
        for name, counters in self.models.items():
            if name in versions:
                models[name] = sum(versions[name].values(), ModelCounters())
            elif name not in self.versions and (name, "") not in left_out:
                models[name] = counters
        return replace(self, models=models, versions=versions, series=series)

    def gpu_totals(self) -> dict[str, ModelCounters] | None:
        """Each GPU's counters (every model and version Triton runs on it, by its
        ``gpu_uuid`` label); None where Triton labels no series with a GPU."""
        placed = self.placed
        if not placed:
            return None
        return {uuid: _on_gpu(sum(series.values(), ModelCounters()))
                for uuid, series in placed.items()}


def _on_gpu(counters: ModelCounters) -> ModelCounters:
    """A GPU's share of a model's counters: its pending requests are unknown (they wait in
    the model's scheduler, before any GPU, and count in the series without a GPU)."""
    return replace(counters, pending_request_count=None)


@dataclass(frozen=True)
class ModelRates:
    """What changed between two scrapes; times are averages per request in µs."""

    requests_per_s: float | None
    inferences_per_s: float | None
    executions_per_s: float | None
    failures_per_s: float | None         # nv_inference_request_failure, every reason
    avg_batch: float | None              # inferences per execution
    queue_us: float | None               # queue time per request
    compute_us: float | None             # input + infer + output time per request
    compute_input_us: float | None
    pending: float | None


def parse_metrics(text: str, at: float = 0.0) -> TritonMetrics:
    """Parse Triton's Prometheus text exposition into per-model counters and GPU gauges."""
    counters: dict[tuple[str, str, str], dict[str, float]] = {}   # (model, version, gpu): ...
    summaries: dict[tuple[str, str, str], dict[str, float]] = {}
    gpus: dict[str, dict[str, float]] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise ServerError(f"Triton's metrics endpoint sent text that is not Prometheus "
                          f"({_reason(exc)})",
                          hint="point --metrics-port/--url at Triton's metrics port (8002)") from None
    for family in families:
        target = _COUNTERS.get(family.name)
        summary = _SUMMARIES.get(family.name)
        for sample in family.samples:
            model = model_name(sample.labels)
            key = (model, sample.labels.get("version", ""), sample.labels.get(GPU_LABEL, ""))
            if target and model is not None:
                row = counters.setdefault(key, {})
                row[target] = row.get(target, 0.0) + float(sample.value)
            elif summary and model is not None and "quantile" not in sample.labels:
                kind = sample.name.removeprefix(family.name)          # _sum or _count
                row = summaries.setdefault(key, {})
                row[summary + kind] = row.get(summary + kind, 0.0) + float(sample.value)
            elif family.name.startswith("nv_gpu_") or family.name.startswith("nv_energy_"):
                uuid = sample.labels.get(GPU_LABEL, "")
                gpus.setdefault(uuid, {})[family.name] = float(sample.value)
    series: dict[str, dict[tuple[str, str], ModelCounters]] = {}
    causes: dict[str, list[str]] = {}      # what the counters cannot tell -> models
    by_model = groupby(sorted(set(counters) | set(summaries)), key=itemgetter(0))
    for name, keys in by_model:
        read = {key: _model_counters(counters.get(key, {}), summaries.get(key, {}))
                for key in keys}
        # One verdict per model: a series its counters left at 0 while it served (2.51's
        # bug) shows they count nothing on any of its series (an idle one's 0 is no count)
        found = {cause for _, cause in read.values() if cause}
        uncounted = UNCOUNTED in found
        for (_, version, uuid), (counted, cause) in read.items():
            if uncounted and cause == TIMES_FROM_SUMMARIES:
                counted = replace(counted, **dict.fromkeys(_UNCOUNTED_WITHOUT_LATENCY_COUNTERS))
            series.setdefault(name, {})[(version, uuid)] = counted
        for cause in found - ({TIMES_FROM_SUMMARIES} if uncounted else set()):
            causes.setdefault(cause, []).append(name)
    versions: dict[str, dict[str, ModelCounters]] = {}
    for name, by_series in series.items():
        for (version, _), counted in by_series.items():
            by_version = versions.setdefault(name, {})
            by_version[version] = by_version.get(version, ModelCounters()) + counted
    models = {name: sum(by_version.values(), ModelCounters())
              for name, by_version in versions.items()}
    return TritonMetrics(at=at, models=models, gpus=gpus, notes=_notes(causes),
                         versions=versions, series=series)


def model_name(labels: dict[str, str]) -> str | None:
    """A series' model as tritonkit names it: Triton's ``model`` label, as
    ``namespace/model`` where Triton adds a namespace (--model-namespacing=true: one
    name can be two models, from two repositories, each counted apart); None: no model's."""
    model = labels.get("model")
    namespace = labels.get(NAMESPACE_LABEL)
    return model if model is None or namespace is None else f"{namespace}/{model}"


# Why a series' counters tell less than they should.
TIMES_FROM_SUMMARIES = "times from summaries"   # latency counters off; the others count
UNCOUNTED = "uncounted"                         # latency counters off; the others read 0
NO_LATENCIES = "no latencies"                   # latency counters and summaries both off


def _model_counters(counted: dict[str, float], summed: dict[str, float]
                    ) -> tuple[ModelCounters, str | None]:
    """One series' counters: Triton's counters, else its summaries; None where neither.
    With them, why they tell less than they should (None: they tell it all)."""
    values: dict[str, float | None] = {f.name: counted.get(f.name) for f in fields(ModelCounters)}
    if "request_duration_us" in counted:
        return ModelCounters(**values), None
    # The latency counters are off (--metrics-config counter_latencies=false). A model
    # with the response cache has no request summary (Triton's core leaves it out,
    # metric_model_reporter.cc InitializeSummaries): its queue summary, which counts
    # every successful request too (cached ones included), counts them.
    requests = next((summed[name] for name in ("request_duration_us_count",
                                                "queue_duration_us_count") if name in summed), None)
    if requests is None:
        # Triton 2.51 keeps an unloaded ensemble's failure counters alone (measured): no
        # sign of how the server's latencies are counted
        return ModelCounters(**values), NO_LATENCIES if "request_success" in counted else None
    for name in _SUMMARIES.values():
        values[name] = summed.get(name + "_sum")
    # Stuck at 0 while the summary counts is 2.51's bug; a count a request or two behind
    # is a scrape read between the two families, from a Triton whose counters count.
    uncounted = requests > 0 and not values["request_success"]
    values["request_success"] = requests
    if not uncounted:
        return ModelCounters(**values), TIMES_FROM_SUMMARIES
    # Triton served requests its counters did not count: none of them can be trusted
    values.update(dict.fromkeys(_UNCOUNTED_WITHOUT_LATENCY_COUNTERS))
    return ModelCounters(**values), UNCOUNTED


def _notes(causes: dict[str, list[str]]) -> tuple[str, ...]:
    """One note per cause, naming the models where they differ: a model whose counters
    count nothing is named, the others' requests and times come from the same summaries."""
    notes = []
    if UNCOUNTED in causes:
        notes.append("Triton runs with --metrics-config counter_latencies=false: requests and "
                     "times come from its summaries, and batch sizes, failures and pending "
                     f"requests of {', '.join(causes[UNCOUNTED])} are unknown (Triton 2.51 "
                     "leaves those counters at 0)")
    elif TIMES_FROM_SUMMARIES in causes:
        notes.append("Triton runs with --metrics-config counter_latencies=false: queue and "
                     "compute times come from its summaries")
    if NO_LATENCIES in causes:
        notes.append("Triton's latency counters are off (--metrics-config "
                     "counter_latencies=false) and so are its summaries: no queue or compute "
                     "times, and Triton 2.51 then counts no requests either; start it with "
                     "--metrics-config summary_latencies=true")
    return tuple(notes)


_GAUGES = ("pending_request_count",)


def increase(before: ModelCounters, after: ModelCounters) -> ModelCounters:
    """What the counters counted between two scrapes; gauges keep their later value.

    If any counter went down the server restarted in between: everything ``after``
    holds was counted since then (one decision for all counters: a field-by-field
    floor at zero mixed two servers' figures into one interval). A counter either
    scrape lacks is None."""
    names = [f.name for f in fields(ModelCounters) if f.name not in _GAUGES]
    pairs = {n: (getattr(before, n), getattr(after, n)) for n in names}
    if any(old is not None and new is not None and new < old for old, new in pairs.values()):
        return after
    return ModelCounters(**{n: None if old is None or new is None else new - old
                            for n, (old, new) in pairs.items()},
                         **{n: getattr(after, n) for n in _GAUGES})


def model_increase(before: TritonMetrics, after: TritonMetrics, name: str) -> ModelCounters:
    """What model ``name`` counted between two scrapes, version by version and GPU by GPU
    (a series new in ``after`` counted from zero, one gone from it counting nothing more,
    one that fell restarted: a reload that moved one instance restarts its GPU's series
    alone), then summed. A scrape without series or versions (parsed from elsewhere) is
    taken version by version, or whole, as ``increase``."""
    series = after.series.get(name)
    if series and name in before.series:
        was = before.series[name]
        return sum((increase(was.get(key, ModelCounters()), counters)
                    for key, counters in series.items()), ModelCounters())
    now = after.versions.get(name)
    if not now or name not in before.versions:
        return increase(before.models.get(name, ModelCounters()), after.models[name])
    was = before.versions[name]
    return sum((increase(was.get(version, ModelCounters()), counters)
                for version, counters in now.items()), ModelCounters())


def version_increase(before: TritonMetrics, after: TritonMetrics, name: str,
                     version: str) -> ModelCounters:
    """What version ``version`` of model ``name`` counted between two scrapes, GPU by GPU
    as ``model_increase`` takes them; version "" of a model parsed without its versions
    is the whole model."""
    series = {key: c for key, c in after.series.get(name, {}).items() if key[0] == version}
    if series and name in before.series:
        was = before.series[name]
        return sum((increase(was.get(key, ModelCounters()), counters)
                    for key, counters in series.items()), ModelCounters())
    now = after.versions.get(name, {}).get(version)
    if now is None:
        return increase(before.models.get(name, ModelCounters()), after.models[name])
    return increase(before.versions.get(name, {}).get(version, ModelCounters()), now)


def gpu_increase(before: TritonMetrics, after: TritonMetrics) -> dict[str, ModelCounters] | None:
    """What each GPU ran between two scrapes, by Triton's ``gpu_uuid`` label, series by
    series (a model version's series on one GPU: new in ``after``, counted from zero; one
    that fell, restarted), then summed per GPU; None where ``after`` labels no series."""
    if not after.placed:
        return None
    counted = {}
    for uuid, series in after.placed.items():
        was = before.placed.get(uuid, {})
        counted[uuid] = _on_gpu(sum((increase(was.get(key, ModelCounters()), counters)
                                     for key, counters in series.items()), ModelCounters()))
    return counted


def rates(before: ModelCounters, after: ModelCounters, seconds: float) -> ModelRates:
    """The change between two scrapes ``seconds`` apart (over a restart: since the restart)."""
    return rates_of(increase(before, after), seconds)


def rates_of(counted: ModelCounters, seconds: float) -> ModelRates:
    """Rates and per-request times from what was counted in ``seconds``."""
    seconds = max(seconds, 1e-9)
    requests = counted.request_success
    per_second = lambda value: None if value is None else value / seconds  # noqa: E731
    return ModelRates(
        requests_per_s=per_second(requests),
        inferences_per_s=per_second(counted.inference_count),
        executions_per_s=per_second(counted.exec_count),
        failures_per_s=per_second(counted.request_failure),
        avg_batch=ratio(counted.inference_count, counted.exec_count),
        queue_us=ratio(counted.queue_duration_us, requests),
        compute_us=ratio(counted.compute_duration_us, requests),
        compute_input_us=ratio(counted.compute_input_duration_us, requests),
        pending=counted.pending_request_count,
    )


def since_load(counters: ModelCounters) -> ModelRates:
    """The per-request means of a model's cumulative counters: its batch, queue and compute
    time since it loaded. No rates: a rate needs the time between two scrapes."""
    return replace(rates_of(counters, 1.0), requests_per_s=None, inferences_per_s=None,
                   executions_per_s=None, failures_per_s=None)


def server_gpus(metrics: TritonMetrics) -> list[GpuSample]:
    """The server's GPUs as Triton's own gauges report them (nv_gpu_*: utilization 0-1,
    memory in bytes, power in watts), in the order Triton lists them; what Triton does not
    report (temperature, clocks, PCIe) is None. Empty on a server without GPU metrics."""
    samples = []
    for index, (uuid, gauges) in enumerate(metrics.gpus.items()):
        read = gauges.get
        mib = lambda name: None if read(name) is None else read(name) / 2**20  # noqa: E731
        samples.append(GpuSample(
            index=index, name="", uuid=uuid,
            utilization_pct=None if read("nv_gpu_utilization") is None
            else 100.0 * read("nv_gpu_utilization"),
            memory_used_mib=mib("nv_gpu_memory_used_bytes"),
            memory_total_mib=mib("nv_gpu_memory_total_bytes"), temperature_c=None,
            power_w=read("nv_gpu_power_usage"), sm_clock_mhz=None, memory_clock_mhz=None,
            pcie_rx_mb_s=None, pcie_tx_mb_s=None))
    return samples


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


#: The most of one answer the monitor reads: Triton's metrics for hundreds of models, or a
#: model's config, are a few MiB. A peer that sends without end is not read without end.
ANSWER_MAX_BYTES = 64 << 20


def _bounded(response, url: str) -> bytes:
    """The body of ``response``, NotTriton once it passes ``ANSWER_MAX_BYTES``."""
    body = response.read(ANSWER_MAX_BYTES + 1)
    if len(body) > ANSWER_MAX_BYTES:
        raise not_triton(urllib.parse.urlsplit(url).netloc,
                         f"its answer to GET {urllib.parse.urlsplit(url).path} is more than "
                         f"{ANSWER_MAX_BYTES >> 20} MiB")
    return body


def scrape(url: str, at: float, timeout: float = 5.0) -> TritonMetrics:
    """Fetch and parse Triton's metrics; ServerError naming the URL if it does not answer."""
    try:
        with client.open_direct(url, timeout=timeout) as response:
            text = _bounded(response, url).decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:     # an answer, not Triton's metrics endpoint's
        exc.close()
        raise ServerError(f"{url} is not Triton's metrics endpoint: it answered HTTP {exc.code}",
                          hint="point --metrics-port (or the deployment) at Triton's metrics "
                               "port (8002 by default), not its HTTP port") from None
    # A server restarting mid-response gives http.client's own errors (IncompleteRead,
    # BadStatusLine): not OSErrors, and urllib lets them through.
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        if (answer := client.first_answer(exc)) is not None:    # no HTTP/1.x: a gRPC port?
            raise not_http1(urllib.parse.urlsplit(url).netloc, answer, "metrics") from None
        reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
        raise ServerError(f"Triton's metrics endpoint {url} did not answer ({reason})",
                          hint="check the server is up and that the port is its --metrics-port "
                               "(8002 by default)") from None
    return parse_metrics(_triton_exposition(text, url), at=at)


def _triton_exposition(text: str, url: str) -> str:
    """``text`` if it is Triton's metrics: Prometheus text with its ``nv_`` families (every
    Triton 2 lists them, with no model loaded too). Else NotTriton, or a ServerError for an
    answer with nothing in it."""
    server = urllib.parse.urlsplit(url).netloc
    if not text.strip():
        raise ServerError(f"the metrics endpoint {url} answered nothing",
                          hint="point --metrics-port (or the deployment) at Triton's metrics port "
                               "(8002 by default); a Triton started with --allow-metrics=false "
                               "has none")
    try:
        names = {family.name for family in text_string_to_metric_families(text)}
    except ValueError as exc:
        raise not_triton(server, f"its answer to GET {urllib.parse.urlsplit(url).path} is not "
                         f"Prometheus text ({_reason(exc)})") from None
    if not any(name.startswith("nv_") for name in names):
        raise not_triton(server, f"its metrics at {url} hold none of Triton's (nv_*)")
    return text


def _reason(exc: ValueError) -> str:
    """prometheus_client's words for a line it cannot parse, cut short, with the server's
    control characters escaped (never sent to the terminal as they are)."""
    text = str(exc).strip() or "a line it cannot parse"
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= 100 else text[:99] + "…"


class EnsembleCheck:
    """Which model versions of a server are ensembles: asked of Triton's HTTP endpoint
    (``GET /v2/models/<name>/versions/<v>/config``, ``platform: "ensemble"``; no secret
    needed unless the server restricts model-config) once per version, as they appear.

    A version Triton does not serve now (404, or 503 "not at ready state": unloaded, or
    still loading) is left out with them: its counters count nothing while it stays so
    (Triton 2.51 keeps an unloaded ensemble's failure counters alone, which would make
    every total unknown), and it is asked again once they move (loaded again).

    What cannot be asked is counted as any model is, and ``left_out`` says so in a note:
    without an HTTP address (``http_url`` None) nothing is asked, and nothing said. An
    address that answers, but not as Triton's HTTP API (the metrics port given for it), is
    asked no more; one that does not answer (down, or too busy to within ``timeout``: a
    monitor is started under load) is asked again ASK_AGAIN_S later, and meanwhile not at
    all, so a sample waits one timeout at most.
    """

    ASK_AGAIN_S = 30.0

    def __init__(self, http_url: str | None, timeout: float = 2.0) -> None:
        self.http_url = http_url.removeprefix("http://").rstrip("/") if http_url else None
        self.timeout = timeout
        self._ensemble: dict[tuple[str, str], bool] = {}
        self._gone: dict[tuple[str, str], ModelCounters] = {}   # not served, its counters then
        self._untold: set[tuple[str, str]] = set()      # for good (403; not Triton's port)
        self._waiting: set[tuple[str, str]] = set()     # asked again at _ask_again_at
        self._ask_again_at = 0.0                        # time.monotonic()
        self._not_triton = False
        self._failure: str | None = None     # the latest reason one could not be told

    def left_out(self, metrics: TritonMetrics) -> tuple[frozenset[tuple[str, str]], str | None]:
        """The model versions of ``metrics`` to leave out of the server's totals (its
        ensembles, and versions not served now), and a note where some could not be told
        apart (they count as before: an ensemble's requests again in its steps)."""
        pairs = metrics.model_versions()
        if self.http_url is None:
            return frozenset(), None
        for pair in pairs:
            counters = metrics.version_counters(*pair)
            if pair in self._ensemble or pair in self._untold or self._gone.get(pair) == counters:
                continue
            self._gone.pop(pair, None)
            self._waiting.discard(pair)
            self._ask(pair, counters)
        untold = any(pair in self._untold or pair in self._waiting for pair in pairs)
        note = (f"could not ask Triton which models are ensembles ({self._failure}): the "
                "server's totals count every model, an ensemble's requests again in each "
                "model it runs") if untold else None
        return frozenset(p for p in pairs if self._ensemble.get(p) or p in self._gone), note

    def _ask(self, pair: tuple[str, str], counters: ModelCounters) -> None:
        if self._not_triton:
            self._untold.add(pair)
            return
        if time.monotonic() < self._ask_again_at:
            self._waiting.add(pair)
            return
        name, version = pair
        # Triton's model label: a namespaced name's namespace is its repository's path
        quote = lambda text: urllib.parse.quote(text, safe="")  # noqa: E731
        path = (f"/v2/models/{quote(name.rsplit('/', 1)[-1])}"
                + (f"/versions/{quote(version)}" if version else "") + "/config")
        url = f"http://{self.http_url}{path}"
        try:
            with client.open_direct(url, timeout=self.timeout) as response:
                config = json.loads(_bounded(response, url))
            if not isinstance(config, dict):
                raise ValueError(config)
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code in (404, 503):      # no such version, or one not loaded (now)
                self._gone[pair] = counters
                return
            self._untold.add(pair)
            self._failure = self._failure or f"GET {url} answered HTTP {exc.code}"
            return
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            if (answer := client.first_answer(exc)) is not None:     # no HTTP/1.x
                self._not_triton = True
                self._untold.add(pair)
                spoken = "HTTP/2 (gRPC)" if speaks_http2(answer) else "no HTTP/1.x"
                self._failure = (f"{self.http_url} answered {path} in {spoken}: it is not "
                                 "Triton's HTTP port")
                return
            reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
            self._ask_again_at = time.monotonic() + self.ASK_AGAIN_S
            self._waiting.add(pair)
            self._failure = (f"{self.http_url} did not answer ({reason}); asked again in "
                             f"{self.ASK_AGAIN_S:g} s")
            return
        except (ValueError, RecursionError, NotTriton):  # the metrics port answers any path, with no JSON
            self._not_triton = True
            self._untold.add(pair)
            self._failure = (f"{self.http_url} answered {path} with no model config: it is "
                             "not Triton's HTTP port")
            return
        self._ensemble[pair] = config.get("platform") == "ensemble"


def resolve_server_urls(repository=None, url: str | None = None,
                        metrics_port: int = DEFAULT_METRICS_PORT
                        ) -> tuple[str | None, str | None]:
    """Triton's metrics URL and HTTP address (host:port): the deployment's in
    ``repository``, or ``--url`` and its host on ``metrics_port``; None, None when
    neither is given (GPU-only monitoring)."""
    if url:
        url = client.check_address(url.removeprefix("http://"), "--url")
        return metrics_url_for(url, metrics_port), url
    if repository is None:
        return None, None
    from tritonkit.server.state import load_deployment

    deployment = load_deployment(repository)
    return deployment.metrics_url, deployment.http_url
