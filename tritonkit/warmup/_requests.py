"""Explicit load and warm-up until steady, and the cold-start figures that prove it.

After a (re)start or a reload, the first request to a model pays for set-up that later
requests do not (on the local Triton: ~30 ms against a steady p50 under 1 ms). A user
sees that as P99 jitter. ``load_and_warm`` removes it before traffic arrives:

1. wait until the server is live — retrying with backoff while it restarts, under the
   caller's one deadline;
2. check every name against the server's model repository (this needs the deployment's
   secret header, so a wrong secret is caught before anything is touched);
3. load each model that is not READY (steps before the ensembles that use them). A READY
   model is left alone unless ``reload`` is asked for: Triton reloads a model on every
   load request, which would bring its cold start back;
4. send requests for every batch size and dynamic-shape bucket of the model's config
   until the latency of each shape is steady (``SteadyRule``) or the budget runs out.
   The cold start is paid once per model *instance* (its python-backend stub, its ONNX
   Runtime session: ~30 ms each here). Sequential requests usually take turns over the
   instances, but not always (under load one instance can take two in a row), so each
   shape also gets one burst of as many concurrent requests as the model has instances:
   an instance runs one execution at a time, so unless the dynamic batcher merges them,
   every instance serves one (tritonkit's generated configs also carry ``model_warmup``,
   which Triton runs on every instance at load);
   a stateful model (sequence batching) is sent whole short sequences instead of single
   requests, and a decoupled one is streamed over gRPC (``_Driver``);
5. measure what a user would now see: a fresh client's first request against the p50
   of the requests after it (``cold_start_figures``).

Nothing is ever unloaded. If the server restarts in the middle, every model is warmed
again from the start on the new server (its models are cold again).
"""

from __future__ import annotations

import itertools
import queue
import secrets
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from tritonkit.client import (
    SECRET_ENV,
    Endpoint,
    example_input,
    health,
    resolve_endpoint,
    split_message,
    triton_message,
    wait_until,
)
from tritonkit.errors import ModelLoadError, ServerError, UsageError
from tritonkit.server.local import Deadline, Progress
from tritonkit.server.state import load_deployment

__all__ = [
    "ColdStart",
    "InputRefused",
    "LoadFailed",
    "ModelWarmup",
    "SteadyRule",
    "cold_start_figures",
    "load_and_warm",
    "load_order",
    "model_instances",
    "not_warmable",
    "sequence_ids",
    "sequence_slots",
    "wait_live",
    "warm_up",
    "warmup_shapes",
]

DEFAULT_REQUESTS = 500              # per model, all shapes together
DEFAULT_DYNAMIC_SIZES = (1, 16)     # a -1 dimension with no model_warmup entry to copy
CHECK_REQUESTS = 20                 # requests after a fresh client's first, for its p50
CHECK_CLIENTS = 3                   # fresh clients whose first requests make the "after" figure
SEQUENCE_LENGTH = 3                 # a stateful model's warm-up sequence: start, continue, end
MAX_SEQUENCES_AT_ONCE = 64          # a stateful model's burst: every sequence slot, up to this
MAX_RESTARTS = 3
_BACKOFF_START, _BACKOFF_MAX = 0.05, 1.0


@dataclass(frozen=True)
class SteadyRule:
    """Latency is steady when the last ``window`` requests are each within ``tolerance``
    (a fraction) of their median, and that median is within ``tolerance`` of the median
    of the ``window`` before them: latency has settled, not merely slowed its fall (as
    perf_analyzer asks consecutive measurement windows to agree)."""

    window: int = 5
    tolerance: float = 0.25

    def __post_init__(self) -> None:
        if self.window < 2:
            raise UsageError(f"the steady window must be at least 2 requests (got {self.window})",
                             hint="e.g. --steady-window 5")
        if not 0 < self.tolerance < 10:
            raise UsageError(f"the steady tolerance must be a fraction above 0 (got {self.tolerance})",
                             hint="e.g. --steady-tolerance 0.25 for 25 %")

    def is_steady(self, latencies: Sequence[float]) -> bool:
        if len(latencies) < 2 * self.window:
            return False
        last = latencies[-self.window:]
        median = statistics.median(last)
        if not all(abs(x - median) <= self.tolerance * median for x in last):
            return False
        before = statistics.median(latencies[-2 * self.window:-self.window])
        return abs(before - median) <= self.tolerance * median


@dataclass(frozen=True)
class ColdStart:
    """A fresh client's first request to a model, against the p50 of the requests after it
    (the medians over ``clients`` fresh clients, one after the other).

    The client opens its connection first (a readiness check), so ``first_ms`` holds
    no TCP set-up, then sends its first inference right away. Above the p50 it holds
    the model's cold start, if any is left, and a wake-up that any request after a
    pause pays, on a model warm for hours too (its stub process and caches gone cold:
    ~1x p50 after 50 ms idle and ~2x after 1 s on the local Triton here). One first
    request is one sample; on a busy machine compare medians over several."""

    first_ms: float
    p50_ms: float
    clients: int = 1

    @property
    def ratio(self) -> float:
        return self.first_ms / self.p50_ms if self.p50_ms else float("inf")


@dataclass(frozen=True)
class ModelWarmup:
    """What warming one model took and what it left behind (times in ms, load in s)."""

    model: str
    steady: bool
    requests: int                       # warm-up requests sent, all shapes together
    load_s: float | None = None         # the explicit load request; None: it was READY
    first_ms: float | None = None       # the first warm-up request (the cold one)
    steady_p50_ms: float | None = None  # p50 of the steady window of the first shape
    after: ColdStart | None = None      # a fresh client's first request, after warm-up
    shapes: list[str] = field(default_factory=list)
    note: str = ""
    # The first request was the model's first since it loaded (this call loaded it, or the
    # server had just started): only then is ``first_ms`` a cold start.
    cold: bool = True
    # False: a model warm-up cannot send requests to (decoupled, with no gRPC address known);
    # ``note`` says why.
    warmed: bool = True
    # Each shape's samples in the order sent, its cold first one first (ms; a stateful
    # model's sample is its sequence's mean request): how the cold start decayed.
    series_ms: dict[str, list[float]] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        """The cold first request over the steady p50 (None unless it was cold)."""
        if not self.cold or self.first_ms is None or not self.steady_p50_ms:
            return None
        return self.first_ms / self.steady_p50_ms

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelWarmup":
        """The inverse of ``as_dict`` (a deployment's state keeps its warm-up this way)."""
        fields = {k: v for k, v in data.items() if k != "ratio"}
        after = fields.pop("after", None)
        return cls(**fields, after=None if after is None else ColdStart(
            after["first_ms"], after["p50_ms"], after.get("clients", 1)))

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ratio"] = self.ratio
        data["after"] = None if self.after is None else {
            **asdict(self.after), "ratio": self.after.ratio}
        return data


class _ServerGone(Exception):
    """The server stopped answering (or lost a model) in the middle: start over."""


class LoadFailed(ModelLoadError):
    """A model failed to load; ``results`` are the figures of the others, warmed anyway."""

    def __init__(self, error: ModelLoadError, results: list[ModelWarmup]) -> None:
        hint = error.hint or ""
        if results:
            hint += f"; the other models were warmed: {', '.join(r.model for r in results)}"
        super().__init__(error.message, hint, detail=error.detail)
        self.results = results


class InputRefused(ServerError):
    """A READY model refused a warm-up request built from its config."""


# -- which requests -----------------------------------------------------------------------

def _datatype(config_type: str) -> str:
    name = config_type.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def _buckets(config: dict) -> list[dict[str, list[int]]]:
    """Concrete non-batch dims per input, one dict per dynamic-shape bucket.

    A -1 dimension takes its sizes from the config's ``model_warmup`` entries (one
    bucket per distinct entry), or else from DEFAULT_DYNAMIC_SIZES."""
    inputs = config.get("input", [])
    if not _dynamic(config):
        return [{i["name"]: [int(d) for d in i.get("dims", [])] for i in inputs}]
    return _entry_buckets(config) or [
        {i["name"]: [size if int(d) == -1 else int(d) for d in i.get("dims", [])] for i in inputs}
        for size in DEFAULT_DYNAMIC_SIZES]


def _dynamic(config: dict) -> bool:
    return any(-1 in [int(d) for d in i.get("dims", [])] for i in config.get("input", []))


def _entry_buckets(config: dict) -> list[dict[str, list[int]]]:
    """The buckets the config's ``model_warmup`` entries give every dynamic dimension."""
    buckets: list[dict[str, list[int]]] = []
    for entry in config.get("model_warmup", []):
        listed = entry.get("inputs", {})
        bucket = {}
        for spec in config.get("input", []):
            if spec.get("optional") and spec["name"] not in listed:
                continue             # the entry leaves it out, as a request may
            dims = [int(d) for d in spec.get("dims", [])]
            given = [int(d) for d in listed.get(spec["name"], {}).get("dims", [])]
            if -1 in dims and len(given) == len(dims):
                dims = [g if d == -1 else d for d, g in zip(dims, given)]
            bucket[spec["name"]] = dims
        if all(-1 not in d for d in bucket.values()) and bucket not in buckets:
            buckets.append(bucket)
    return buckets


def guessed_shapes(config: dict) -> bool:
    """Whether the shapes to warm are guesses: a dynamic dimension that no ``model_warmup``
    entry gives a size to takes DEFAULT_DYNAMIC_SIZES, which the model may refuse."""
    return _dynamic(config) and not _entry_buckets(config)


def warmup_shapes(config: dict) -> list[dict[str, tuple[str, list[int]]]]:
    """Every request shape to warm: batch sizes x dynamic-shape buckets, smallest first.

    ``config`` is the model's config as the server reports it (``get_model_config``).
    For ``max_batch_size > 0`` the batch sizes are 1, every preferred batch size of the
    dynamic batcher, every batch size of the config's ``model_warmup`` entries (generated
    configs list the powers of two there and leave the batcher free), and max_batch_size.
    A stateful model's requests are batch 1 only: its sequence batcher refuses any other
    and forms the model's batches from concurrent sequences (warm-up sends bursts of them).
    Each shape maps input name → (datatype, shape).
    """
    max_batch = int(config.get("max_batch_size", 0))
    if max_batch > 0 and "sequence_batching" in config:
        batches: list[int | None] = [1]
    elif max_batch > 0:
        preferred = config.get("dynamic_batching", {}).get("preferred_batch_size", [])
        warmed = [entry.get("batch_size", 0) for entry in config.get("model_warmup", [])]
        sizes = {int(b) for b in (*preferred, *warmed) if 0 < int(b) <= max_batch}
        batches = sorted({1, max_batch, *sizes})
    else:
        batches = [None]
    types = {i["name"]: _datatype(i["data_type"]) for i in config.get("input", [])}
    buckets = sorted(_buckets(config), key=lambda b: sum(int(np.prod(d)) for d in b.values()))
    return [{name: (types[name], ([batch] if batch else []) + dims) for name, dims in bucket.items()}
            for batch in batches for bucket in buckets]


def model_instances(config: dict) -> int:
    """How many instances of the model Triton runs (per GPU listed for KIND_GPU groups)."""
    groups = config.get("instance_group") or [{}]
    return sum(max(1, int(g.get("count", 1))) * max(1, len(g.get("gpus", []))) for g in groups)


def sequence_slots(config: dict) -> int:
    """Sequences a stateful model's sequence batcher runs at once on one instance: the
    oldest strategy's ``max_candidate_sequences`` where set, else ``max_batch_size`` (at
    least 1), as Triton counts its sequence slots."""
    batching = config.get("sequence_batching", {})
    candidates = int(batching.get("oldest", {}).get("max_candidate_sequences", 0) or 0)
    return candidates if candidates > 0 else max(1, int(config.get("max_batch_size", 0)))


def sequence_ids(config: dict) -> Iterator[int | str]:
    """Correlation IDs for a stateful model's warm-up sequences, far from real traffic's.

    Of the type the model's CORRID control input declares (Triton copies the ID into it
    as it is: a string ID for a TYPE_STRING one, a number cut to 32 bits for TYPE_INT32 or
    TYPE_UINT32, which would make a high 64-bit ID look like a small one to the model).
    Numbers count up from a random point in the upper half of that type's positive range
    (below 2**63, since tritonclient's gRPC client sends an ID as int64), where clients that
    count from 1 never get; random, so two warm-ups at once, or one rerun while an aborted
    one's sequence is still held, do not share an ID (a START on an ID in progress ends that
    sequence early)."""
    if _corrid_type(config) == "TYPE_STRING":
        prefix = f"tritonkit-warmup-{secrets.token_hex(6)}-"
        return (f"{prefix}{n}" for n in itertools.count(1))
    top = {"TYPE_INT32": 2**31, "TYPE_UINT32": 2**32}.get(_corrid_type(config), 2**63)
    return itertools.count(top // 2 + secrets.randbelow(top // 4))


def _corrid_type(config: dict) -> str | None:
    for control_input in config.get("sequence_batching", {}).get("control_input", []):
        for control in control_input.get("control", []):
            if control.get("kind") == "CONTROL_SEQUENCE_CORRID":
                return control.get("data_type")
    return None


def _describe(shape: dict[str, tuple[str, list[int]]]) -> str:
    return " ".join(f"{name}:{'x'.join(map(str, dims)) or 'scalar'}"
                    for name, (_, dims) in shape.items())


# -- load order ---------------------------------------------------------------------------

def _ensemble_steps(config: dict) -> list[str]:
    return [s["model_name"] for s in config.get("ensemble_scheduling", {}).get("step", [])]


def load_order(models: Sequence[str], configs: dict[str, dict]) -> list[str]:
    """``models`` with every ensemble's steps (added if missing) before the ensemble."""
    order: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in order:
            return
        if name in visiting:
            raise UsageError(f"ensemble '{name}' is one of its own steps",
                             hint=f"fix ensemble_scheduling in {name}/config.pbtxt")
        visiting.add(name)
        for step in _ensemble_steps(configs.get(name, {})):
            visit(step)
        visiting.discard(name)
        order.append(name)

    for model in models:
        visit(model)
    return order


def _file_config(config_dir: Path | None, name: str) -> dict:
    """A model's config.pbtxt from the folder the server serves, as get_model_config's JSON."""
    if config_dir is None:
        return {}
    path = Path(config_dir) / name / "config.pbtxt"
    if not path.is_file():
        return {}
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    try:
        message = text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
    except text_format.ParseError:
        return {}  # Triton's load will say what is wrong with it
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


# -- talking to the server ----------------------------------------------------------------

def _client(endpoint: Endpoint, deadline: Deadline):
    # Bounded by what is left of the deadline, so no single call outlives it.
    left = max(0.5, deadline.left())
    return endpoint.http(connection_timeout=min(5.0, left), network_timeout=left)


def wait_live(endpoint: Endpoint, deadline: Deadline,
              rediscover: Callable[[], Endpoint] | None = None,
              progress: Progress | None = None,
              server_exited: Callable[[], Exception | None] | None = None) -> Endpoint:
    """Wait until the server is live, backing off between tries, within ``deadline``.

    ``rediscover`` finds the server again on every try (a restarted deployment may have
    new ports or a new secret); the endpoint that answered is returned. ``server_exited``
    (a server this process started) says why it is gone for good: then the wait ends at
    once with that error instead of running out the deadline."""
    started = time.monotonic()

    def check() -> str | None:
        nonlocal endpoint
        if server_exited is not None and (error := server_exited()) is not None:
            raise error
        if progress:
            progress(f"waiting for the server at {endpoint.http_url} to be live")
        if rediscover is not None:
            try:
                endpoint = rediscover()
            except UsageError:
                pass  # between a stop and a start there is no state: keep the last one
        return _why_not_live(endpoint, deadline)

    last = wait_until(check, deadline, _BACKOFF_START, _BACKOFF_MAX)
    if last is not None:
        raise ServerError(
            f"no Triton server answers at {endpoint.http_url} "
            f"(waited {time.monotonic() - started:.1f} s; last: {last})",
            hint="start one: tritonkit deploy --repository DIR, or raise --timeout")
    return endpoint


def _repository_index(client, endpoint: Endpoint) -> dict[str, set[str]]:
    """Model name → the states of its versions (empty: known, never loaded)."""
    from tritonclient.utils import InferenceServerException

    try:
        index = client.get_model_repository_index(headers=endpoint.repository_headers)
    except InferenceServerException as exc:
        if exc.status() == "403":
            if endpoint.repository_headers:
                what, hint = "a wrong secret", (
                    "the secret sent (from --secret-file, " + SECRET_ENV + ", or the "
                    "deployment's record, in that order) is not the server's: pass the server's "
                    "own, or redeploy (tritonkit down, then tritonkit deploy)")
            else:
                what, hint = "no secret", (
                    "pass --repository DIR of the running deployment (its state holds the "
                    f"secret), or the server's secret with --secret-file FILE or {SECRET_ENV}")
            raise UsageError(f"the server at {endpoint.http_url} refused the model-repository "
                             f"API with {what} ({triton_message(exc)})", hint=hint) from None
        raise _ServerGone(triton_message(exc)) from None
    except Exception as exc:
        raise _ServerGone(triton_message(exc)) from None
    states: dict[str, set[str]] = {}
    for entry in index:
        states.setdefault(entry["name"], set())
        if entry.get("state"):
            states[entry["name"]].add(entry["state"])
    return states


def _ready(client, name: str) -> bool:
    try:
        return bool(client.is_model_ready(name))
    except Exception as exc:
        raise _ServerGone(triton_message(exc)) from None


def _load(client, endpoint: Endpoint, name: str, deadline: Deadline) -> float:
    from tritonclient.utils import InferenceServerException

    started = time.perf_counter()
    try:
        client.load_model(name, headers=endpoint.repository_headers)
    except InferenceServerException as exc:
        if exc.status() == "403":
            raise UsageError(f"the server refused to load '{name}': {triton_message(exc)}",
                             hint="pass --repository DIR of the running deployment (its secret)") from None
        if _not_live(endpoint, deadline):
            raise _ServerGone(triton_message(exc)) from None
        message, detail = split_message(triton_message(exc))
        raise ModelLoadError(f"Triton could not load '{name}': {message}",
                             hint="read the server's log (tritonkit deploy prints where it is)",
                             detail=detail) from None
    except Exception as exc:
        if _timed_out(exc):
            raise _out_of_time(f"loading '{name}' did not finish", started) from None
        raise _ServerGone(triton_message(exc)) from None
    return time.perf_counter() - started


def _timed_out(exc: BaseException) -> bool:
    """A client-side timeout: the server took longer than the deadline left, which says
    nothing about whether it is up. By type (tritonclient's sockets raise TimeoutError,
    gevent its Timeout): a model's own error may well say "timed out"."""
    from gevent import Timeout

    return isinstance(exc, (TimeoutError, Timeout))


def _out_of_time(what: str, started: float) -> ServerError:
    return ServerError(
        f"{what} within {time.perf_counter() - started:.1f} s, all that was left of the "
        "timeout (Triton may still be loading or executing it)",
        hint="raise --timeout (a first request on a GPU can build TensorRT engines for "
             "minutes), or read the server's log")


def _infer_failed(exc: Exception, endpoint: Endpoint, name: str, deadline: Deadline,
                  started: float) -> Exception:
    if _timed_out(exc):
        return _out_of_time(f"'{name}' did not answer a warm-up request", started)
    if _not_live(endpoint, deadline) or not _ready_quietly(endpoint, name, deadline):
        return _ServerGone(triton_message(exc))
    message, detail = split_message(triton_message(exc))
    if _status(exc) == "StatusCode.UNAVAILABLE":      # HTTP answers (above), gRPC does not
        return ServerError(
            f"no gRPC answer at {endpoint.grpc_url} for '{name}' ({message}), though the "
            f"server answers HTTP at {endpoint.http_url}",
            hint="a decoupled model is warmed over gRPC streaming: with --url pass --grpc-url "
                 "HOST:PORT of the same server; a deployment's server must have its gRPC port "
                 "open (read its log)", detail=detail)
    return InputRefused(f"a warm-up request to '{name}' failed: {message}",
                        hint="the model is READY but refused an input built from its config",
                        detail=detail)


def _status(exc: Exception) -> str | None:
    status = getattr(exc, "status", None)
    return status() if callable(status) else None


def _not_live(endpoint: Endpoint, deadline: Deadline) -> bool:
    return _why_not_live(endpoint, deadline) is not None


def _why_not_live(endpoint: Endpoint, deadline: Deadline) -> str | None:
    """One liveness poll, bounded by what is left of the deadline (at most 2 s)."""
    return health(endpoint.http_url, timeout=min(2.0, max(0.1, deadline.left())))


def _ready_quietly(endpoint: Endpoint, name: str, deadline: Deadline) -> bool:
    client = _client(endpoint, deadline)
    try:
        return _ready(client, name)
    except _ServerGone:
        return False
    finally:
        client.close()


def cold_start_figures(endpoint: Endpoint, model: str, inputs: list, *,
                       requests: int = CHECK_REQUESTS, clients: int = CHECK_CLIENTS,
                       deadline: Deadline | None = None) -> ColdStart:
    """What users see now: each of ``clients`` fresh clients, one after the other, sends
    its first request and ``requests`` more; the median first against the median p50.

    Each connection is opened first (a readiness check, as clients do), so the first
    figure is the server's cold start, not TCP's. One request is one sample of a noisy
    machine: the median over a few clients is a figure, a single one is not. ``inputs``
    are tritonclient.http InferInputs for a model plain HTTP requests reach; warm-up
    measures stateful and decoupled models the way it warms them."""
    driver = _Driver(endpoint, model, deadline or Deadline(60.0))
    return _cold_start_figures(driver, inputs, requests=requests, clients=clients)


def _cold_start_figures(driver: _Driver, inputs: list, *, requests: int = CHECK_REQUESTS,
                        clients: int = CHECK_CLIENTS) -> ColdStart:
    """``cold_start_figures`` through ``driver``: a stateful model's first request is the
    start of a fresh client's first sequence, its p50 that of the ``requests`` sequences
    after it (each sequence's mean request)."""
    firsts, p50s = [], []
    for _ in range(clients):
        connection = driver.connect()
        try:
            connection.ready(driver.name)
            firsts.append(driver.sample(connection, inputs)[0])
            p50s.append(statistics.median(
                statistics.fmean(driver.sample(connection, inputs)) for _ in range(requests)))
        finally:
            connection.close()
    return ColdStart(first_ms=statistics.median(firsts), p50_ms=statistics.median(p50s),
                     clients=clients)


# -- how warm-up's requests reach a model ---------------------------------------------------

def _sequence_parameters(sequence: tuple | None) -> dict[str, Any]:
    if sequence is None:
        return {}
    sequence_id, start, end = sequence
    return {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end}


class _HttpRequests:
    """Plain request and response over HTTP (one connection per request in flight), each
    call bounded by the deadline's time left when it is made: a connection serves a whole
    shape's steady run, so its own socket timeout, fixed when it opens, would let a request
    that hangs late in the run outlive the deadline by up to that much again."""

    def __init__(self, endpoint: Endpoint, deadline: Deadline, concurrency: int = 1) -> None:
        self.deadline = deadline
        left = max(0.5, deadline.left())
        self.client = endpoint.http(concurrency=concurrency, connection_timeout=min(5.0, left),
                                    network_timeout=left)

    def _bounded(self):
        from gevent import Timeout

        return Timeout(max(0.1, self.deadline.left()), TimeoutError("no answer within the deadline"))

    @staticmethod
    def inputs(shape: dict[str, tuple[str, list[int]]], rng: np.random.Generator) -> list:
        import tritonclient.http as httpclient

        return _filled(httpclient.InferInput, shape, rng)

    def ready(self, name: str) -> bool:
        return _ready(self.client, name)

    def infer(self, name: str, inputs: list, version: str, sequence: tuple | None) -> None:
        with self._bounded():
            self.client.infer(name, inputs, model_version=version,
                              **_sequence_parameters(sequence))

    def infer_all(self, name: str, inputs: list, version: str,
                  sequences: list[tuple | None]) -> None:
        with self._bounded():
            pending = [self.client.async_infer(name, inputs, model_version=version,
                                               **_sequence_parameters(sequence))
                       for sequence in sequences]
            for request in pending:
                request.get_result()

    def close(self) -> None:
        self.client.close()


class _StreamRequests:
    """A decoupled model's requests over one gRPC stream (Triton's HTTP endpoint refuses
    such a model), each until its final response: asked for with
    ``enable_empty_final_response``, Triton flags it ``triton_final_response``, as an empty
    response when the model sends the final flag on its own. The stream ends with the
    deadline's time left when it opens; waits for a response take what is left then."""

    def __init__(self, endpoint: Endpoint, deadline: Deadline, concurrency: int = 1) -> None:
        # ``concurrency`` is _HttpRequests': one stream carries any number in flight.
        self.deadline = deadline
        self.client = endpoint.grpc()
        self.responses: queue.Queue = queue.Queue()
        self.request_ids = itertools.count(1)
        try:
            self.client.start_stream(
                callback=lambda result, error: self.responses.put((result, error)),
                stream_timeout=max(0.5, deadline.left()))
        except BaseException:
            self.client.close()
            raise

    @staticmethod
    def inputs(shape: dict[str, tuple[str, list[int]]], rng: np.random.Generator) -> list:
        import tritonclient.grpc as grpcclient

        return _filled(grpcclient.InferInput, shape, rng)

    def ready(self, name: str) -> bool:
        try:
            return bool(self.client.is_model_ready(
                name, client_timeout=max(0.5, self.deadline.left())))
        except Exception as exc:
            raise _ServerGone(triton_message(exc)) from None

    def infer(self, name: str, inputs: list, version: str, sequence: tuple | None) -> None:
        self.infer_all(name, inputs, version, [sequence])

    def infer_all(self, name: str, inputs: list, version: str,
                  sequences: list[tuple | None]) -> None:
        waiting = set()
        for sequence in sequences:
            request_id = str(next(self.request_ids))
            try:
                self.client.async_stream_infer(name, inputs, model_version=version,
                                               request_id=request_id,
                                               enable_empty_final_response=True,
                                               **_sequence_parameters(sequence))
            except Exception as exc:
                # A stream that broke (no server at that address, say) tells why through
                # the callback; the refusal to send only says that it did. Any other
                # failure to send is its own cause.
                raise self._reported_error() or exc from None
            waiting.add(request_id)
        while waiting:
            result, error = self._next(self.deadline.left())
            if error is not None:
                raise error
            response = result.get_response()
            if response.parameters["triton_final_response"].bool_param:
                waiting.discard(response.id)

    def _next(self, timeout: float) -> tuple[Any, Exception | None]:
        try:
            result, error = self.responses.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError("no final response within the deadline") from None
        if error is not None and _status(error) == "StatusCode.DEADLINE_EXCEEDED":
            return None, TimeoutError(triton_message(error))      # the stream's own end
        return result, error

    def _reported_error(self) -> Exception | None:
        """The error the stream's callback reported (it may lag the stream's end a little)."""
        try:
            while True:
                _, error = self._next(min(1.0, self.deadline.left()))
                if error is not None:
                    return error
        except TimeoutError:
            return None

    def close(self) -> None:
        # Cancels whatever is still in flight (after an error): a graceful stop would wait
        # for it, past the deadline.
        self.client.stop_stream(cancel_requests=True)
        self.client.close()


def _peek(items: Iterator) -> tuple[Any, Iterator]:
    first = next(items)
    return first, itertools.chain([first], items)


def _filled(make_input: Callable, shape: dict[str, tuple[str, list[int]]],
            rng: np.random.Generator) -> list:
    inputs = []
    for name, (datatype, dims) in shape.items():
        tensor = make_input(name, dims, datatype)
        tensor.set_data_from_numpy(example_input(datatype, dims, rng))
        inputs.append(tensor)
    return inputs


@dataclass
class _Driver:
    """How warm-up sends one model its requests, as its config asks: plain HTTP requests;
    over a gRPC stream, each until its final response, for a decoupled model; and for a
    stateful one (sequence batching), each sample a whole sequence of SEQUENCE_LENGTH
    requests, start to end, so that no sequence slot stays held after warm-up. An
    iterative sequence model gets plain requests: Triton gives each one a sequence."""

    endpoint: Endpoint
    name: str
    deadline: Deadline
    decoupled: bool = False
    sequence_ids: Iterator[int | str] | None = None
    first_id: int | str | None = None          # said in the note, to find them in a log

    @classmethod
    def for_model(cls, endpoint: Endpoint, name: str, config: dict,
                  deadline: Deadline) -> _Driver:
        batching = config.get("sequence_batching")
        first = ids = None
        if batching is not None and not batching.get("iterative_sequence"):
            first, ids = _peek(sequence_ids(config))
        return cls(endpoint, name, deadline,
                   decoupled=bool(config.get("model_transaction_policy", {}).get("decoupled")),
                   sequence_ids=ids, first_id=first)

    @property
    def transport(self) -> type[_HttpRequests | _StreamRequests]:
        return _StreamRequests if self.decoupled else _HttpRequests

    @property
    def steps(self) -> int:
        """Requests in one sample."""
        return 1 if self.sequence_ids is None else SEQUENCE_LENGTH

    def connect(self, concurrency: int = 1) -> _HttpRequests | _StreamRequests:
        return self.transport(self.endpoint, self.deadline, concurrency)

    def inputs(self, shape: dict[str, tuple[str, list[int]]], rng: np.random.Generator) -> list:
        return self.transport.inputs(shape, rng)

    def _steps(self, count: int) -> list[list[tuple | None]]:
        """For each step, what each of ``count`` samples sends: no sequence (one step), or
        whole sequences of fresh IDs step by step (a sequence's next request waits for the
        answer to its last, or it could overtake it)."""
        if self.sequence_ids is None:
            return [[None] * count]
        ids = [next(self.sequence_ids) for _ in range(count)]
        last = SEQUENCE_LENGTH - 1
        return [[(i, step == 0, step == last) for i in ids] for step in range(SEQUENCE_LENGTH)]

    def sample(self, connection: _HttpRequests | _StreamRequests, inputs: list,
               version: str = "") -> list[float]:
        """One warm-up sample on ``connection``: each of its requests' latency in ms."""
        latencies = []
        steps = self._steps(1)
        for [sequence] in steps:
            started = time.perf_counter()
            try:
                connection.infer(self.name, inputs, version, sequence)
            except Exception as exc:
                raise self._failed(exc, connection, inputs, version, steps, started) from None
            latencies.append((time.perf_counter() - started) * 1e3)
        return latencies

    def burst(self, inputs: list, count: int, version: str = "") -> int:
        """``count`` samples in flight at once, on a connection of their own; the requests
        sent. An instance runs one execution at a time, so (unless a batcher merges them)
        each of ``count`` instances serves one; a stateful model's concurrent sequences
        fill its sequence slots, and so its batches."""
        connection = self.connect(concurrency=count)
        started = time.perf_counter()
        steps = self._steps(count)
        try:
            for step in steps:
                connection.infer_all(self.name, inputs, version, step)
        except Exception as exc:
            raise self._failed(exc, connection, inputs, version, steps, started) from None
        finally:
            connection.close()
        return count * len(steps)

    def _failed(self, exc: Exception, connection: _HttpRequests | _StreamRequests,
                inputs: list, version: str, steps: list[list[tuple | None]],
                started: float) -> Exception:
        """The error for a failed request; first, when the model refused it mid-sequence,
        the sequences it belonged to are ended (best effort, within the deadline): each
        would otherwise hold its sequence slot until max_sequence_idle_microseconds, and
        warm-up goes on past a refused guessed shape."""
        failure = _infer_failed(exc, self.endpoint, self.name, self.deadline, started)
        if isinstance(failure, InputRefused) and steps[0][0] is not None:
            for sequence_id, _, _ in steps[0]:
                if self.deadline.expired():
                    break
                try:
                    connection.infer(self.name, inputs, version, (sequence_id, False, True))
                except Exception:
                    pass        # ended or not, the refusal is what to report
        return failure

    def describe(self) -> str:
        """How this model was warmed, when not with plain HTTP requests."""
        how = []
        if self.decoupled:
            how.append(f"decoupled: streamed over gRPC at {self.endpoint.grpc_url}, each "
                       "request until its final response")
        if self.sequence_ids is not None:
            how.append(f"stateful: each sample a whole sequence of {SEQUENCE_LENGTH} requests "
                       f"(start, continue, end), correlation IDs from {self.first_id} up")
        return "; ".join(how)


# -- the warm-up --------------------------------------------------------------------------

def load_and_warm(
    endpoint: Endpoint,
    models: Sequence[str] | None = None,
    *,
    requests: int = DEFAULT_REQUESTS,
    deadline: Deadline | None = None,
    rule: SteadyRule = SteadyRule(),
    reload: bool = False,
    config_dir: Path | None = None,
    rediscover: Callable[[], Endpoint] | None = None,
    check: bool = True,
    progress: Progress | None = None,
    server_exited: Callable[[], Exception | None] | None = None,
    fresh: bool = False,
) -> list[ModelWarmup]:
    """Load ``models`` (default: every model in the server's repository) and warm each up.

    ``requests`` bounds the warm-up requests per model, ``deadline`` the whole call
    (waits for the server included). ``config_dir`` is the folder the server reads; it
    gives the ensemble steps of models not loaded yet. ``check`` measures a fresh
    client's first request after the warm-up. ``progress`` is told what is being done
    (waiting, loading, warming which model and shape). A model that never became steady
    comes back with ``steady=False``; a refused load raises ModelLoadError.
    ``server_exited``, for a server the caller started, tells a crash (raised at once,
    with what the server said) from a restart (waited for, then warmed again). ``fresh``
    says the server has just started, so each model's first request is its cold one even
    though this call did not load it (``ModelWarmup.cold``).
    """
    if requests < 1:
        raise UsageError(f"--requests must be at least 1 (got {requests})")
    deadline = deadline or Deadline(120.0)
    restarts = 0
    while True:
        endpoint = wait_live(endpoint, deadline, rediscover, progress, server_exited)
        try:
            results = _load_and_warm_once(endpoint, models, requests=requests, deadline=deadline,
                                          rule=rule, reload=reload and restarts == 0,
                                          config_dir=config_dir, check=check,
                                          fresh=fresh or restarts > 0,
                                          progress=progress or _quiet)
        except _ServerGone as gone:
            if server_exited is not None and (error := server_exited()) is not None:
                raise error from None
            restarts += 1
            if restarts > MAX_RESTARTS or deadline.expired():
                raise ServerError(
                    f"the server at {endpoint.http_url} went away during warm-up "
                    f"{restarts} time(s) (last: {gone})",
                    hint="read the server's log; rerun tritonkit warmup once it is stable") from None
            continue
        if restarts:
            note = f"server restarted {restarts}x during warm-up; warmed again"
            results = [replace(r, note="; ".join(filter(None, [r.note, note]))) for r in results]
        return results


def _quiet(_message: str) -> None:
    pass


def _load_and_warm_once(endpoint: Endpoint, models: Sequence[str] | None, *, requests: int,
                        deadline: Deadline, rule: SteadyRule, reload: bool,
                        config_dir: Path | None, check: bool, fresh: bool,
                        progress: Progress) -> list[ModelWarmup]:
    """One pass on one server. A model that fails to load does not keep the others cold:
    they are loaded and warmed, then the first failure is raised, the figures on it."""
    client = _client(endpoint, deadline)
    try:
        index = _repository_index(client, endpoint)
        names = (list(dict.fromkeys(models)) if models
                 else sorted(n for n in index if not n.startswith(".")))
        unknown = [n for n in names if n not in index]
        if unknown:
            raise UsageError(
                f"no model named {', '.join(repr(n) for n in unknown)} in the server's repository",
                hint=f"models there: {', '.join(sorted(index)) or 'none'}")
        ready = {n for n in index if _ready(client, n)}
        configs = {n: (_server_config(client, n) if n in ready else _file_config(config_dir, n))
                   for n in names}
        order = load_order(names, configs)
        load_s: dict[str, float] = {}
        failed: dict[str, ModelLoadError] = {}
        for name in order:
            if any(step in failed for step in _ensemble_steps(configs.get(name, {}))):
                continue         # Triton would refuse it for the step it lacks
            if name not in ready or reload:
                progress(f"loading {name}")
                try:
                    load_s[name] = _load(client, endpoint, name, deadline)
                except ModelLoadError as error:
                    failed[name] = error
    finally:
        client.close()
    results = []
    for name in order:
        if name in failed or name not in load_s and name not in ready:
            continue
        if deadline.expired():
            results.append(ModelWarmup(model=name, steady=False, requests=0,
                                       load_s=load_s.get(name), note="not reached: out of time"))
            continue
        results.append(_warm_one(endpoint, name, load_s.get(name), requests=requests,
                                 deadline=deadline, rule=rule, check=check,
                                 cold=fresh or name in load_s, progress=progress))
    if failed:
        raise LoadFailed(next(iter(failed.values())), results)
    return results


def _server_config(client, name: str) -> dict:
    try:
        return client.get_model_config(name)
    except Exception as exc:
        raise _ServerGone(triton_message(exc)) from None


def not_warmable(config: dict, grpc: bool = True) -> str:
    """Why warm-up cannot send a model requests, or "" if it can: a decoupled model streams
    over gRPC only, so it needs the server's gRPC address (``grpc``)."""
    if config.get("model_transaction_policy", {}).get("decoupled") and not grpc:
        return ("decoupled model: not warmed (Triton serves it over gRPC streaming only, and "
                "no gRPC address is known: --url gives HTTP; add --grpc-url HOST:PORT)")
    return ""


def _warm_one(endpoint: Endpoint, name: str, load_s: float | None, *, requests: int,
              deadline: Deadline, rule: SteadyRule, check: bool, cold: bool,
              progress: Progress) -> ModelWarmup:
    """Every shape's first request (the cold ones) before any shape's budget is spent, then
    each shape until steady on its share of what is left of ``requests``. A model serving
    several versions (its version_policy) has each version's shapes warmed: each version
    is a model of its own, with its own cold start. A sample is one request, or a stateful
    model's whole sequence: its series holds the sequence's mean request, its first figure
    the first request alone (``_Driver``)."""
    client = _client(endpoint, deadline)
    try:
        config = _server_config(client, name)
        versions = _ready_versions(client, name)
    finally:
        client.close()
    if why := not_warmable(config, grpc=bool(endpoint.grpc_url)):
        return ModelWarmup(model=name, steady=False, requests=0, load_s=load_s, cold=cold,
                           warmed=False, note=why)
    driver = _Driver.for_model(endpoint, name, config, deadline)
    shapes = warmup_shapes(config)
    instances = model_instances(config)
    # A burst reaches every instance; a stateful model's, every sequence slot of each.
    together = (min(instances * sequence_slots(config), MAX_SEQUENCES_AT_ONCE)
                if "sequence_batching" in config else instances)
    rule = replace(rule, window=max(rule.window, instances))  # a window spans them all
    rng = np.random.default_rng(0)
    prepared = [driver.inputs(shape, rng) for shape in shapes]
    targets = [(version, i) for version in (versions if len(versions) > 1 else [""])
               for i in range(len(shapes))]
    labels = [f"v{v} {_describe(shapes[i])}" if v else _describe(shapes[i]) for v, i in targets]
    series: list[list[float]] = [[] for _ in targets]
    firsts: list[float | None] = [None for _ in targets]
    notes: list[str] = []
    sent = 0

    def send(t: int) -> None:
        nonlocal sent
        version, i = targets[t]
        progress(f"warming {name}: shape {t + 1}/{len(targets)} ({labels[t]}), "
                 f"{sent} requests sent")
        latencies = driver.sample(connection, prepared[i], version)
        if firsts[t] is None:
            firsts[t] = latencies[0]
        series[t].append(statistics.fmean(latencies))
        sent += len(latencies)

    usable = []
    for t, (version, i) in enumerate(targets):
        if deadline.expired():
            break
        connection = driver.connect()     # each call bounded by the time left now
        try:
            send(t)
            if together > 1:
                # Each instance (and batch size) has its own cold start: make every one
                # serve this shape.
                sent += driver.burst(prepared[i], together, version)
            usable.append(t)
        except InputRefused as refused:
            if not guessed_shapes(config) or (t == len(targets) - 1 and not usable):
                raise            # not a guess, or no shape at all was taken: the model refuses
            notes.append(f"shape {labels[t]} skipped: refused ({refused}); its size "
                         "for a dynamic dimension was a guess (no model_warmup entry gives one)")
        finally:
            connection.close()
    for position, t in enumerate(usable):
        share = max(0, requests - sent) // (len(usable) - position)
        connection = driver.connect()
        try:
            for _ in range(share // driver.steps):
                if rule.is_steady(series[t]) or deadline.expired():
                    break
                send(t)
        finally:
            connection.close()
        if not rule.is_steady(series[t]):
            why = ("the deadline" if deadline.expired() else
                   f"its share of the requests, {share} of {requests}" if share else
                   f"--requests {requests}: each shape's first requests took them all")
            notes.append(f"not steady within {why} (at {labels[t]})")
    steady = bool(usable) and all(rule.is_steady(series[t]) for t in usable)
    if not usable and not notes:
        notes.append("not reached: out of time")
    first = firsts[usable[0]] if usable else None
    # A p50 only from a steady series: one still holding its cold request would read the
    # cold start as the norm (first / p50 = 1.0 on a model that was cold).
    p50 = (statistics.median(series[usable[0]][-rule.window:])
           if usable and rule.is_steady(series[usable[0]]) else None)
    after = None
    if check and steady:
        progress(f"measuring {name}: a fresh client's first request")
        after = _cold_start_figures(driver, prepared[targets[usable[0]][1]])
    return ModelWarmup(model=name, steady=steady, requests=sent, load_s=load_s, first_ms=first,
                       steady_p50_ms=p50, after=after, shapes=labels,
                       note="; ".join(filter(None, [driver.describe(), *notes])), cold=cold,
                       series_ms={labels[t]: [round(v, 3) for v in series[t]] for t in usable})


def _ready_versions(client, name: str) -> list[str]:
    """The versions of a model the server serves now (its metadata lists the READY ones)."""
    try:
        return [str(v) for v in client.get_model_metadata(name).get("versions", [])]
    except Exception as exc:
        raise _ServerGone(triton_message(exc)) from None


def warm_up(repository: Path | None = None, url: str | None = None,
            models: Sequence[str] | None = None, *, timeout: float = 120.0,
            secret: str | None = None, grpc_url: str | None = None,
            **options: Any) -> list[ModelWarmup]:
    """Find the server (``url``, else the deployment recorded in ``repository``) and
    ``load_and_warm`` it under one deadline of ``timeout`` seconds.

    ``secret`` is the server's restricted-API secret for a server no state here records
    (Kubernetes, say); see ``resolve_endpoint``. ``grpc_url``, with ``url``, is that
    server's gRPC address, which decoupled models are warmed through (a deployment records
    its own). With a deployment, a restart in the middle is followed to its new state
    (ports, secret) and the ensembles' steps are read from the folder the server serves."""
    deadline = Deadline(timeout)
    endpoint = resolve_endpoint(repository=repository, url=url, grpc_url=grpc_url,
                                secret=secret)
    rediscover, config_dir = None, None
    if repository is not None:
        if url is None:
            rediscover = lambda: resolve_endpoint(repository=repository, secret=secret)  # noqa: E731
        try:
            deployment = load_deployment(repository)
            config_dir = Path(deployment.extra.get("served_repository") or deployment.repository)
            # The deployment's own models, not whatever else its repository folder holds.
            models = models or (deployment.models if url is None else None)
        except UsageError:
            config_dir = Path(repository)
    return load_and_warm(endpoint, models, deadline=deadline, rediscover=rediscover,
                         config_dir=config_dir, **options)
