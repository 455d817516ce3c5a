"""Running a load test: start the workers, start them on one clock, watch the server, merge."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing
from multiprocessing import resource_tracker
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tritonkit.answers import INFER_RESPONSE, expect, not_triton
from tritonkit.client import Endpoint, server_version
from tritonkit.errors import Interrupted, LoadTestError, NotTriton, ServerError, UsageError
from tritonkit.loadtest._deployment import (refuse_crowding_the_server, refuse_gone_server,
                                            server_hint)
from tritonkit.loadtest._inputs import (
    Flags, RequestTemplate, Shapes, check_shapes, input_refusal, request_template, unwarmed_warning)
from tritonkit.loadtest._schedule import ARRIVALS, closed_loop, open_loop_schedule, split_schedule
from tritonkit.loadtest._sequences import (
    DEFAULT_LENGTH, DEFAULT_OPEN_SEQUENCES, DEFAULT_VARIATION_PCT, MAX_LENGTH, SequencePlan,
    plan_sequences, probe_step)
from tritonkit.loadtest._server import (
    ServerEvent, ServerWatcher, StatsSnapshot, served_nothing_since_load)
from tritonkit.loadtest._timeline import Spike, Window, cold_start_windows, model_outages
from tritonkit.loadtest._transport import RequestFailed, grpc_sender, http_sender, infer_answer
from tritonkit.loadtest._pool import MAX_WORKERS, WORKER_NAME, FreshCrew, WorkerPool
from tritonkit.loadtest._worker import DIGITS, LOWEST_US, WorkerPlan

PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
PROTOCOLS = ("http", "grpc")
_START_MARGIN_NS = 100_000_000      # workers get t0 this far ahead, so all start together
_ANSWER_MARGIN_S = 1.0              # after the end, a request gets its own timeout and this much
_READY_TIMEOUT_S = 60.0
# How long the workers have to leave, all together, before they are killed: once their
# summaries are in they only have to exit; an interrupted or failed run waits for nothing
# (a worker blocked in a request would otherwise hold Ctrl-C up until its request timeout).
_EXIT_PATIENCE_S = 5.0
_ABANDON_PATIENCE_S = 2.0
# What one load generator on one host can hold: more is a distributed test. The limits
# turn a typo (--rate 1e9, -c 100000) into a usage error at once, not minutes of
# building a schedule gigabytes long or starting sockets, then a run error blaming the server.
MAX_CONCURRENCY = 4096              # requests in flight: --concurrency, --max-in-flight x workers
MAX_ARRIVALS = 20_000_000           # per level: the open-loop schedule is held in memory
MAX_SECONDS = 86_400.0              # --warmup-s, --request-timeout
MAX_DURATION_S = 3_600.0            # per level: every request's record is held in memory...
MAX_WINDOWS = 1_000                 # ...and a histogram per timeline window (~0.2 MB each)
_SPARE_FILES = 64                   # descriptors a worker needs besides its sockets
_WATCHER_CONNECTIONS = 4            # the server watcher's, beside the workers'
_SPARE_PORTS = 256                  # local ports left to everything else on the host
_PORT_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
_REFUSAL_CHARS = 200                # of the server's reason in a refused probe's one line
# A worker imports the main script again (multiprocessing's spawn and forkserver both do):
# one with no ``if __name__ == "__main__":`` guard calls run_loadtest in it, and says so by
# its exit code. It knows itself by its process name, set before that import: a mark in
# os.environ would be inherited by any child another thread starts meanwhile, and is no
# thread's to change.
_WORKER_NAME = WORKER_NAME
_UNGUARDED_EXIT = 86

# progress(label, elapsed_s, total_s, requests_done)
Progress = Callable[[str, float, float, int], None]


@dataclass(frozen=True)
class LoadSpec:
    """What to run: closed-loop concurrencies or open-loop rates, and how."""

    model: str
    concurrency: tuple[int, ...] = ()
    rates: tuple[float, ...] = ()
    arrivals: str = "poisson"
    duration_s: float = 10.0
    warmup_s: float = 1.0
    batch_size: int = 1
    protocol: str = "http"
    workers: int | None = None          # processes; default from the load and the CPUs
    max_in_flight: int | None = None    # open loop, per worker
    window_s: float = 1.0
    timeout_s: float = 30.0
    input_data: Path | None = None
    # --shape: each input's dims without the batch axis, ``{"input_ids": (128,)}`` or pairs
    shapes: Shapes = ()
    seed: int = 0
    # A stateful model's sequences (see tritonkit.loadtest._sequences); None: perf_analyzer's
    # defaults. Given for a stateless model, they are refused.
    sequence_length: int | None = None
    sequence_length_variation: float | None = None     # percent
    sequence_id_range: tuple[int, int | None] | None = None   # (start, end excluded; None: no end)
    num_sequences: int | None = None                   # open loop: sequences live at once
    flags: Flags = Flags()              # the running command's, as its hints name them

    def __post_init__(self) -> None:
        shapes = tuple((name, tuple(int(d) for d in dims)) for name, dims in dict(self.shapes).items())
        object.__setattr__(self, "shapes", check_shapes(shapes))
        self._check_sequences()
        if bool(self.concurrency) == bool(self.rates):
            raise UsageError("give exactly one of --concurrency or --rate",
                             hint="closed loop: --concurrency 1,8; open loop: --rate 200")
        if low := [c for c in self.concurrency if c < 1]:
            raise UsageError(f"--concurrency {_listed(low)}: each level needs at least 1 request in "
                             "flight", hint="e.g. --concurrency 1,8,32")
        if off := [r for r in self.rates if not 0 < r < math.inf]:
            raise UsageError(f"--rate {_listed(off)}: each level needs a finite rate above 0 "
                             "requests per second", hint="e.g. --rate 50,200")
        if self.arrivals not in ARRIVALS:
            raise UsageError(f"unknown arrivals '{self.arrivals}'", hint=f"use one of: {', '.join(ARRIVALS)}")
        if self.protocol not in PROTOCOLS:
            raise UsageError(f"unknown protocol '{self.protocol}'", hint="use http or grpc")
        if self.duration_s <= 0 or self.warmup_s < 0 or self.window_s <= 0:
            raise UsageError(f"--duration ({self.duration_s:g}) and --window-s ({self.window_s:g}) must "
                             f"be > 0, --warmup-s ({self.warmup_s:g}) >= 0",
                             hint="e.g. --duration 10 --window-s 1 --warmup-s 1")
        for flag, seconds, most in (("--duration", self.duration_s, MAX_DURATION_S),
                                    ("--warmup-s", self.warmup_s, MAX_SECONDS),
                                    ("--window-s", self.window_s, MAX_SECONDS),
                                    ("--request-timeout", self.timeout_s, MAX_SECONDS)):
            if not seconds <= most:
                raise UsageError(f"{flag} {seconds:g} is not a time of at most {most:g} s",
                                 hint=f"give {flag} in seconds, e.g. {flag} 30 (for a longer soak, "
                                      "run levels one after the other)")
        if self.duration_s / self.window_s > MAX_WINDOWS:
            raise UsageError(f"--duration {self.duration_s:g} in windows of {self.window_s:g} s is "
                             f"more than {MAX_WINDOWS} timeline windows",
                             hint=f"raise --window-s to {self.duration_s / MAX_WINDOWS:g} or more")
        if self.workers is not None and self.workers > MAX_WORKERS:
            raise UsageError(f"--workers {self.workers} is more than {MAX_WORKERS} processes",
                             hint="one per CPU is plenty; run several load generators for more")
        in_flight = (self.max_in_flight or 0) * (self.workers or 1)
        if in_flight > MAX_CONCURRENCY:
            raise UsageError(f"--max-in-flight {self.max_in_flight} x {self.workers or 1} worker(s) "
                             f"is more than one load generator holds ({MAX_CONCURRENCY} in flight)",
                             hint="lower --max-in-flight; run several load generators for more")
        if any(c > MAX_CONCURRENCY for c in self.concurrency):
            raise UsageError(f"--concurrency {max(self.concurrency)} is more than one load "
                             f"generator holds ({MAX_CONCURRENCY} requests in flight)",
                             hint="run several tritonkit loadtest processes, on several hosts")
        if few := [r for r in self.rates if r * self.duration_s < 1]:
            raise UsageError(f"--rate {_listed(few)} for {self.duration_s:g} s offers less than "
                             "one request to measure",
                             hint=f"raise --rate to {1 / self.duration_s:.3g} or more, or "
                                  "--duration")
        for rate in self.rates:
            if rate * (self.warmup_s + self.duration_s) > MAX_ARRIVALS:
                raise UsageError(
                    f"--rate {rate:g} for {self.warmup_s + self.duration_s:g} s is "
                    f"{rate * (self.warmup_s + self.duration_s):.3g} requests, more than one "
                    f"level may schedule ({MAX_ARRIVALS:,})",
                    hint="lower --rate or --duration, or run several load generators")

    def _check_sequences(self) -> None:
        if self.sequence_length is not None and not 1 <= self.sequence_length <= MAX_LENGTH:
            raise UsageError(f"--sequence-length takes a number of requests from 1 to {MAX_LENGTH:,} "
                             f"(got {self.sequence_length})", hint=f"e.g. --sequence-length {DEFAULT_LENGTH}")
        variation = self.sequence_length_variation
        if variation is not None and not 0 <= variation <= 100:
            raise UsageError(f"--sequence-length-variation is a percentage from 0 to 100 (got {variation:g})",
                             hint=f"e.g. --sequence-length-variation {DEFAULT_VARIATION_PCT:g}; 0 for "
                                  "sequences all of one length")
        ids = self.sequence_id_range
        if ids is not None and (ids[0] < 1 or (ids[1] is not None and ids[1] <= ids[0])):
            raise UsageError(f"--sequence-id-range {ids[0]}:{ids[1]} is not START[:END] with "
                             "1 <= START < END", hint="e.g. --sequence-id-range 1000:2000 (END excluded)")
        if self.num_sequences is not None:
            if self.concurrency:
                raise UsageError("--num-of-sequences is for open loop (--rate)",
                                 hint="in closed loop each of --concurrency's users runs one sequence "
                                      "at a time: --concurrency is the sequences live at once")
            if not 1 <= self.num_sequences <= MAX_CONCURRENCY:
                raise UsageError(f"--num-of-sequences takes 1 to {MAX_CONCURRENCY} sequences live at "
                                 f"once (got {self.num_sequences})",
                                 hint=f"e.g. --num-of-sequences {DEFAULT_OPEN_SEQUENCES}")

    @property
    def sequence_flags(self) -> list[str]:
        """The flags given that only a stateful model takes."""
        return [flag for flag, value in (("--sequence-length", self.sequence_length),
                                         ("--sequence-length-variation", self.sequence_length_variation),
                                         ("--sequence-id-range", self.sequence_id_range),
                                         ("--num-of-sequences", self.num_sequences)) if value is not None]

    @property
    def mode(self) -> str:
        return "closed" if self.concurrency else "open"

    def levels(self) -> list[float]:
        return list(self.concurrency or self.rates)


def _listed(values: list[float]) -> str:
    """Values as the flag took them: ``0``, ``0,-2``."""
    return ",".join(f"{v:g}" for v in values)


def level_label(mode: str, level: float) -> str:
    """How a level is named: ``concurrency 8`` (closed loop) or ``rate 200/s`` (open loop)."""
    return f"concurrency {level:g}" if mode == "closed" else f"rate {level:g}/s"


@dataclass
class LevelResult:
    """The outcome of one concurrency or rate."""

    mode: str                           # "closed" | "open"
    level: float                        # concurrency, or offered requests/s
    workers: int
    duration_s: float                   # measured span (shorter if the server went away)
    sent: int
    ok: int
    errors: dict[str, int]
    qps: float                          # successful requests per second
    infer_per_s: float                  # qps x batch size
    latency_ms: dict[str, float]        # p50, p90, p95, p99, p99.9, max, mean, min
    timeline: list[Window]
    spikes: list[Spike]
    events: list[dict]
    server_split_ms: dict[str, float] | None
    offered_rate: float | None = None
    achieved_rate: float | None = None  # requests actually sent per second (open loop)
    send_lag_ms: dict[str, float] | None = None
    max_in_flight: int | None = None    # open loop: requests that may be out at once, all workers
    # open loop: arrivals that fell due while every one of those was waiting on the server;
    # they left late, or never (then counted in the latencies as at least the time they waited)
    saturated: int = 0
    ended_early: str | None = None
    client_cpu_us: float | None = None  # client CPU per request sent, all workers together
    server_batch: float | None = None   # samples per model execution: the batches Triton formed
    # spans in which the tested model was not READY: {"from_s", "to_s"} (to_s None: still out)
    outages: list[dict] = field(default_factory=list)
    # A stateful model's: "length", "variation_pct", "live" (sequences at once),
    # "batcher_slots" (what its sequence batcher runs at once), "completed" (END answered,
    # warm-up included), "ended_at_the_end" (cut short by one more request with END after
    # the measurement), "left_open" (stopped runs, or an END that failed). None: stateless.
    sequences: dict | None = None
    histogram: Any = field(default=None, repr=False)   # the merged HdrHistogram

    @property
    def label(self) -> str:
        return level_label(self.mode, self.level)

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    @property
    def error_rate(self) -> float:
        return self.error_count / self.sent if self.sent else 0.0


@dataclass(frozen=True)
class Interruption:
    """A run a signal ended before its last level had finished, as perf_analyzer's Ctrl-C
    does: the levels that finished are its result; the one it cut short is dropped, not
    reported (a measurement cut off at an arbitrary point, its warm-up perhaps not over,
    its slowest requests still out and its workers' records not gathered, is no figure to
    judge or compare), and the levels after it never ran."""

    signum: int
    level: str | None               # the level cut short, as ``level_label`` names it (None:
                                    # the signal came between two levels)
    not_run: tuple[str, ...] = ()   # the levels after it

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name


@dataclass
class LoadTestResult:
    """Every level of one `tritonkit loadtest`, with what was run."""

    spec: LoadSpec
    server: str
    request: str
    levels: list[LevelResult]
    # The model had served no request since its load (a restart; its model_warmup aside):
    # what its first request, the probe before the first level (not counted), took.
    # None: it had served requests before.
    cold_first_request_ms: float | None = None
    # What tells one run from another: when it began (ISO 8601, UTC), the client's host,
    # the server's version and the model version the requests reached (None: not said).
    started_at: str | None = None
    host: str | None = None
    server_version: str | None = None
    model_version: str | None = None
    # Dynamic sizes sent that the model's model_warmup never sent: {"input", "axis", "size",
    # "warmed"} each (``_inputs.UnwarmedSize``); their first requests were cold.
    unwarmed: list[dict] = field(default_factory=list)
    # A signal (Ctrl-C, SIGTERM, SIGHUP) ended the run after one level or more had finished:
    # ``levels`` holds those only. None: every level ran (or the server ended the run).
    interrupted: Interruption | None = None

    @property
    def ended_early(self) -> str | None:
        return next((lv.ended_early for lv in self.levels if lv.ended_early), None)


def default_workers(spec: LoadSpec, level: float) -> int:
    """Enough processes that the client is never the bottleneck, no more than the CPUs we may use."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if spec.workers:
        return spec.workers
    if spec.mode == "closed":
        return max(1, min(int(level), cpus))
    return max(1, min(cpus, math.ceil(level / 1500)))


def run_loadtest(endpoint: Endpoint, spec: LoadSpec, progress: Progress | None = None,
                 repository: Path | None = None,
                 warn: Callable[[str], None] | None = None,
                 pool: WorkerPool | None = None) -> LoadTestResult:
    """Run every level of ``spec`` against the server at ``endpoint``, one after the other.

    ``repository``: the deployment's folder ``endpoint`` was found through (None: an
    address given, ``--url``). A local server it records that is gone is said at once, and
    errors name the folder in the commands that fix them (and its server's log).
    ``warn``: told, before the levels, what the run will measure that its user may not
    mean to (a size the model never warmed: its first requests cold); the run goes on.

    A signal (``Interrupted``, or KeyboardInterrupt) after one level or more had finished
    returns those levels, ``interrupted`` saying which level it cut short (dropped) and
    which never ran; one before any level finished is raised.

    ``pool``: workers kept between runs (``WorkerPool``), for many short runs one after
    the other; None: each level's workers are started for it and end with it."""
    if multiprocessing.current_process().name.startswith(_WORKER_NAME):
        # A worker importing an unguarded script: the parent says why. Ended here, not by
        # SystemExit, which the fork server's child turns into exit code 1.
        os._exit(_UNGUARDED_EXIT)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    refuse_gone_server(repository)
    # Each level's workers, once: the plan checked here is the plan run (the CPUs this
    # process may use can change in between).
    workers = [(level, default_workers(spec, level)) for level in spec.levels()]
    _check_plans(spec, [(level, plan_slots(spec, level, n)) for level, n in workers], repository)
    url = _protocol_url(endpoint, spec)
    template = request_template(endpoint, spec.model, spec.batch_size, spec.input_data, spec.seed,
                                shapes=dict(spec.shapes), repository=repository, flags=spec.flags)
    stateful = template.sequencing is not None
    _check_sequence_flags(spec, template)
    planned = [(level, plan_slots(spec, level, n, stateful)) for level, n in workers]
    if stateful:            # open loop: the live sequences are the slots
        _check_plans(spec, planned, repository)
    # The probe is the model's first request since its load when it has served none (its
    # model_warmup aside): its cold start, which no level would see (each starts after the
    # probe, and its warm-up).
    cold = served_nothing_since_load(endpoint, spec.model)
    probe_ms = _probe(url, spec.protocol, template, spec.timeout_s,
                      probe_step(template.sequencing, spec.sequence_id_range) if stateful else None,
                      hint=server_hint(endpoint, repository, spec.protocol), log=endpoint.log_path)
    # Said once the model took the request (one it refuses is the error, alone), before the levels.
    if template.unwarmed and warn is not None:
        warn(unwarmed_warning(spec.model, template.unwarmed))
    version = server_version(endpoint)
    levels: list[LevelResult] = []
    interrupted = None
    labels = [level_label(spec.mode, level) for level, _ in planned]
    running = None                  # the level whose workers run now
    try:
        for level, slots in planned:
            running = level_label(spec.mode, level)
            result = _run_level(endpoint, url, spec, template, level, slots, progress, pool)
            levels.append(result)
            running = None
            if result.ended_early:
                labels = labels[:len(levels)]       # the rest are not run, and not for a signal
                break
    except (Interrupted, KeyboardInterrupt) as exc:
        if not levels:              # nothing finished: nothing to report
            raise
        interrupted = Interruption(signum=getattr(exc, "signum", signal.SIGINT), level=running,
                                   not_run=tuple(labels[len(levels) + (running is not None):]))
    return LoadTestResult(spec=spec, server=url, request=template.describe(), levels=levels,
                          interrupted=interrupted,
                          cold_first_request_ms=probe_ms if cold else None, started_at=started_at,
                          host=socket.gethostname(), server_version=version,
                          model_version=template.model_version,
                          unwarmed=[u.as_dict() for u in template.unwarmed])


def _check_plans(spec: LoadSpec, planned: list[tuple[float, list[int]]],
                 repository: Path | None = None) -> None:
    """Every level's connections within what one load generator, one process, this host's
    local ports and the server ``repository`` records (a local one's open files) hold."""
    connections = max(sum(slots) for _, slots in planned)
    _check_local_ports(connections, spec.flags)
    refuse_crowding_the_server(repository, connections, spec.flags.load)
    for level, slots in planned:
        if sum(slots) > MAX_CONCURRENCY:     # --max-in-flight times the workers the CPUs gave
            raise UsageError(f"{len(slots)} workers x {max(slots)} requests in flight at "
                             f"{level_label(spec.mode, level)} is more than one load generator "
                             f"holds ({MAX_CONCURRENCY})",
                             hint="lower --max-in-flight or --workers")
        _check_open_files(max(slots))


def _check_local_ports(connections: int, flags: Flags) -> None:
    """Each connection to the one server address takes a local port of its own: more than
    the host's ephemeral range holds is a UsageError now, not connections that fail to open."""
    try:
        low, high = map(int, Path(_PORT_RANGE).read_text().split())
    except (OSError, ValueError):
        return
    ports = high - low + 1
    if connections + _WATCHER_CONNECTIONS + _SPARE_PORTS > ports:
        raise UsageError(f"{connections} connections to one server take as many local ports; "
                         f"this host has {ports} ({low}-{high}, {_PORT_RANGE})",
                         hint=f"lower {flags.load}, or widen the range "
                              "(sysctl net.ipv4.ip_local_port_range)")


def _check_sequence_flags(spec: LoadSpec, template: RequestTemplate) -> None:
    """Sequence flags are a stateful model's; --max-in-flight a stateless one's (a stateful
    model's requests in flight are its live sequences, one request each)."""
    if template.sequencing is None and spec.sequence_flags:
        raise UsageError(f"model '{spec.model}' is stateless (no sequence_batching): "
                         f"{', '.join(spec.sequence_flags)} "
                         f"{'applies' if len(spec.sequence_flags) == 1 else 'apply'} only to a stateful model",
                         hint=f"drop {', '.join(spec.sequence_flags)}")
    if template.sequencing is not None and spec.max_in_flight is not None and spec.mode == "open":
        raise UsageError(f"model '{spec.model}' is stateful (sequence_batching): its requests in flight "
                         "are its live sequences, one request each, not --max-in-flight",
                         hint=f"use --num-of-sequences (default {DEFAULT_OPEN_SEQUENCES})")


def _protocol_url(endpoint: Endpoint, spec: LoadSpec) -> str:
    if spec.protocol == "grpc":
        if not endpoint.grpc_url:
            raise UsageError("no gRPC address known for this server (--url is its HTTP address)",
                             hint=f"{spec.flags.grpc}, or use --protocol http")
        return endpoint.grpc_url
    return endpoint.http_url


def _probe(url: str, protocol: str, template: RequestTemplate, timeout: float,
           step: tuple | None = None, hint: str = "is the server up, on that port?",
           log: str | None = None) -> float:
    """One request before any worker starts (not counted): a request the model cannot take
    fails here, in Triton's words, instead of as every request of the run. Returns its
    latency in ms (the connection made before it). A stateful model's is a whole sequence
    of one request (``step``: its ID, START and END).

    A refusal is the user's to fix, a usage error: Triton's (HTTP 400 or its gRPC codes,
    ``RequestFailed.refused``: the server judged the request itself invalid), or ONNX
    Runtime's of the inputs in a model's failure (``input_refusal``: a shape past what the
    graph takes, which a python backend running it answers with a 500). Its one line is
    the server's first, shortened; its hint the sizes the model was warmed at. Any other
    error answer — the model failing on it (5xx), or gone (404) — is a run error. No answer
    at all is a server error, with ``hint`` (what to check, ``server_hint``). ``log``: the
    server's log file, where known (a recorded local deployment's).
    """
    try:
        send = http_sender(url, template, timeout) if protocol == "http" else grpc_sender(url, template, timeout)
        try:
            began = time.perf_counter_ns()
            if step is None:
                send()
            else:
                send(step)
            took_ms = (time.perf_counter_ns() - began) / 1e6
            if protocol == "http":
                _check_answer(send.__self__.answer(), url, template.model)
            return took_ms
        finally:
            send.__self__.close()           # the probe's own connection
    except NotTriton:
        raise
    except RequestFailed as exc:
        said, _, rest = exc.said.strip().partition("\n")
        if exc.foreign:
            raise not_triton(url, f"it answered an inference request over {protocol} with "
                             f"{_shortened(said, 120)!r}") from None
        sent = f"model '{template.model}' ({template.describe()})"
        refusal = said if exc.refused else input_refusal(said)
        if refusal is not None:
            if not exc.refused:             # the answer's status ("HTTP 500"), then ONNX Runtime's words
                refusal = f"{said.partition(': ')[0]}: {refusal}"
            short = _shortened(refusal, _REFUSAL_CHARS)
            raise UsageError(f"{sent} refused the request: {short}", hint=template.refusal_hint(),
                             detail=(rest.strip() if short == said else exc.said.strip()) or None) from None
        log_says = "the server's log says more" + (f": {log}" if log else "")
        raise LoadTestError(f"the first request to {sent} failed: {said}",
                            hint=f"check the model's inputs ({', '.join(template.flags.request)}); "
                                 f"{log_says}",
                            detail=rest.strip() or None) from None
    except Exception as exc:
        # Nothing was run: a server that cannot be reached (exit 1), as when its model could
        # not be read — not a run whose requests failed (exit 4).
        raise ServerError(f"could not reach {url} over {protocol}: {exc}", hint=hint) from None


def _check_answer(body: bytes, url: str, model: str) -> None:
    """The probe's HTTP answer is Triton's: its JSON header names the model's outputs."""
    request = f"its answer to POST /v2/models/{model}/infer"
    try:
        header = infer_answer(body)
    except ValueError:
        raise not_triton(url, f"{request} does not start with JSON") from None
    expect(header, INFER_RESPONSE, what=request, server=url)


def _shortened(text: str, most: int) -> str:
    """``text`` cut to ``most`` characters, an ellipsis saying so."""
    return text if len(text) <= most else text[:most - 1].rstrip() + "…"


def plan_slots(spec: LoadSpec, level: float, workers: int | None = None,
               stateful: bool = False) -> list[int]:
    """Connections each worker holds at ``level``: its virtual users, or its open-loop slots
    (a stateful model's: its live sequences, ``--num-of-sequences``, spread over the workers).
    ``workers``: ``default_workers(spec, level)`` unless given."""
    workers = workers or default_workers(spec, level)
    if spec.mode == "closed":
        return closed_loop(int(level), workers)
    if stateful:
        return closed_loop(spec.num_sequences or DEFAULT_OPEN_SEQUENCES, workers)
    return [spec.max_in_flight or (64 if spec.protocol == "http" else 32)] * workers


def _check_open_files(sockets: int) -> None:
    """A worker raises its open-files limit to the hard one; more sockets than that allows
    is a usage error now, not a worker failing to start ("Too many open files", exit 4)."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and sockets + _SPARE_FILES > hard:
        raise UsageError(f"a worker would hold {sockets} connections; this host allows a process "
                         f"{hard} open files (ulimit -Hn)",
                         hint="add --workers to spread them, or raise the limit (ulimit -n)")


def _plans(spec: LoadSpec, template: RequestTemplate, url: str, level: float,
           slots: list[int], sequences: list[SequencePlan] | None = None) -> list[WorkerPlan]:
    """Each worker's plan at ``level``; ``slots``: ``plan_slots(spec, level)``;
    ``sequences``: a stateful model's, each worker's."""
    plans = _stateless_plans(spec, template, url, level, slots)
    if sequences:
        plans = [dataclasses.replace(plan, sequences=sequences[plan.index]) for plan in plans]
    return plans


def _stateless_plans(spec: LoadSpec, template: RequestTemplate, url: str, level: float,
                     slots: list[int]) -> list[WorkerPlan]:
    common = dict(protocol=spec.protocol, url=url, template=template,
                  warmup_ns=_ns(spec.warmup_s), duration_ns=_ns(spec.duration_s),
                  window_ns=_ns(spec.window_s), timeout_s=spec.timeout_s,
                  grace_s=spec.timeout_s + _ANSWER_MARGIN_S)
    if spec.mode == "closed":
        return [WorkerPlan(index=i, slots=n, offsets_ns=None, **common) for i, n in enumerate(slots)]
    schedule = open_loop_schedule(level, spec.warmup_s + spec.duration_s, spec.arrivals, spec.seed)
    return [WorkerPlan(index=i, slots=slots[i], offsets_ns=np.rint(part * 1e9).astype("int64"),
                       **common)
            for i, part in enumerate(split_schedule(schedule, len(slots)))]


def _ns(seconds: float) -> int:
    """Seconds as whole nanoseconds, rounded: 2.01 s is 2_010_000_000 ns, where int() of
    2.01 * 1e9 (2009999999.9999998) made it 1 ns short, and a window boundary with it."""
    return round(seconds * 1e9)


def _run_level(endpoint: Endpoint, url: str, spec: LoadSpec, template: RequestTemplate,
               level: float, slots: list[int], progress: Progress | None,
               pool: WorkerPool | None = None) -> LevelResult:
    sequences = _sequence_plans(spec, template, level, slots) if template is not None else None
    plans = _plans(spec, template, url, level, slots, sequences)
    crew = pool.crew(plans, _signals_held) if pool is not None else FreshCrew(plans, _signals_held)
    stop, done, pipes, procs = crew.stop, crew.done, crew.pipes, crew.procs
    watcher: ServerWatcher | None = None
    finished = False
    try:
        crew.start()
        _wait_ready(pipes, procs, spec.flags)
        watcher = ServerWatcher(endpoint, spec.model, on_down=lambda: setattr(stop, "value", 1)).start()
        label = level_label(spec.mode, level)
        total_s = spec.warmup_s + spec.duration_s
        t0 = time.perf_counter_ns() + _START_MARGIN_NS
        start_ns = t0 + _ns(spec.warmup_s)
        before = watcher.stats() if spec.warmup_s == 0 else None
        for pipe in pipes:
            pipe.send(t0)
        summaries: dict[int, dict] = {}
        deadline = time.monotonic() + total_s + spec.timeout_s + 60.0
        while len(summaries) < len(pipes):
            now_ns = time.perf_counter_ns()
            if before is None and now_ns >= start_ns:
                before = watcher.stats()
            if progress:
                progress(label, min(total_s, max(0.0, (now_ns - t0) / 1e9)), total_s, sum(done))
            for i, pipe in enumerate(pipes):
                if i not in summaries and pipe.poll(0.05 / len(pipes)):
                    summaries[i] = _receive(pipe, procs[i])
            for i, proc in enumerate(procs):
                if i not in summaries and not proc.is_alive() and not pipes[i].poll():
                    raise LoadTestError(f"load-test worker {i} died (exit code {proc.exitcode})",
                                        hint="rerun with TRITONKIT_DEBUG=1; check memory")
            if time.monotonic() > deadline:
                raise LoadTestError("load-test workers did not finish in time",
                                    hint="the server may be hung; try a shorter --request-timeout")
        if before is None:
            before = watcher.stats()
        after = watcher.stats()
        finished = True
    finally:
        # One deadline for everything below: an interrupt is answered in seconds, not in
        # a wait per worker.
        give_up_at = time.monotonic() + (_EXIT_PATIENCE_S if finished else _ABANDON_PATIENCE_S)
        stop.value = 1
        crew.let_go(finished)       # a worker still waiting for its start time leaves
        if watcher is not None:       # its thread polls until stopped, whatever went wrong
            watcher.stop(abandon_at=None if finished else give_up_at)
        crew.reap(give_up_at)
    in_flight = sum(plan.slots for plan in plans)
    result = _merge(spec, level, list(summaries.values()), watcher.events, watcher.down_at_ns,
                    after.minus(before), start_ns, in_flight if spec.mode == "open" else None)
    if sequences:
        result.sequences = _sequence_figures(sequences[0], template.sequencing.batcher_slots,
                                             in_flight, list(summaries.values()))
    return result


def _sequence_plans(spec: LoadSpec, template: RequestTemplate, level: float,
                    slots: list[int]) -> list[SequencePlan] | None:
    """A stateful model's sequences at ``level``, each worker's (None: it is stateless)."""
    if template.sequencing is None:
        return None
    variation = spec.sequence_length_variation
    return plan_sequences(template.sequencing, slots, spec.sequence_length or DEFAULT_LENGTH,
                          DEFAULT_VARIATION_PCT if variation is None else variation,
                          spec.sequence_id_range, seed=hash((spec.seed, level)))


def _sequence_figures(plan: SequencePlan, batcher_slots: int, live: int,
                      summaries: list[dict]) -> dict:
    """A stateful level's sequences: as planned, and what became of them in every worker."""
    figures = {"length": plan.length, "variation_pct": round(plan.variation * 100, 6), "live": live,
               "batcher_slots": batcher_slots, "completed": 0, "ended_at_the_end": 0, "left_open": 0}
    for summary in summaries:
        for name, count in (summary.get("sequences") or {}).items():
            figures[name] += count
    return figures


@contextlib.contextmanager
def _signals_held():
    """While a worker starts, Ctrl-C, SIGTERM and SIGHUP wait until it is started and
    counted, then come as they would have: one that cut a start short would leave a worker
    half started (its start data unwritten: a traceback of its own) or running unknown to
    the clean-up. SIGINT is also blocked in the starting thread, so the worker starts with it
    blocked (a signal mask survives fork and exec; a caught handler does not) and ignores it
    before it unblocks it: one pressed while it imports is the parent's alone, no traceback
    of the worker's. Only the main thread may set a handler; elsewhere the signal goes to the
    main thread as it would have, and the worker still starts with SIGINT blocked.
    """
    # A spawn starts multiprocessing's resource tracker first if it is not running, and that
    # start unblocks SIGINT in this thread (it undoes its own block with SIG_UNBLOCK).
    resource_tracker.ensure_running()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    held: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        # (None: a handler not set from Python, which could not be put back; an ignored one
        # stays so)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) not in (None, signal.SIG_IGN):
                previous[sig] = signal.signal(sig, lambda signum, _frame: held.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        # A Ctrl-C pending in this thread comes now, to the handler put back.
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        if held:
            signal.raise_signal(held[0])


def _wait_ready(pipes: list, procs: list, flags: Flags = Flags()) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT_S
    for i, pipe in enumerate(pipes):
        if not pipe.poll(max(0.0, deadline - time.monotonic())):
            raise LoadTestError(f"load-test worker {i} did not start within {_READY_TIMEOUT_S:g} s")
        status, detail = _receive(pipe, procs[i], what="start")
        if status != "ready":
            raise LoadTestError(f"load-test worker {i} could not start: {detail}",
                                hint="a server that takes no more connections (its open-files "
                                     "limit, ulimit -n where it starts, or its listen backlog) "
                                     f"drops the rest: lower {flags.load}")


def _receive(pipe, proc, what: str = "finish") -> Any:
    try:
        message = pipe.recv()
    except EOFError:
        proc.join(timeout=1.0)          # its exit code, which says why
        if proc.exitcode == _UNGUARDED_EXIT:
            raise UsageError("a load-test worker ran the main script's load test again: put the "
                             "call under `if __name__ == \"__main__\":` (each worker process "
                             "imports the main script, as multiprocessing's workers do)",
                             hint="see the example in tritonkit.loadtest's docstring") from None
        raise LoadTestError(f"a load-test worker died before it could {what} "
                            f"(exit code {proc.exitcode})") from None
    if what == "finish":
        return message[1]
    return message


def _new_histogram(highest_us: int):
    from hdrh.histogram import HdrHistogram

    return HdrHistogram(LOWEST_US, highest_us, DIGITS)


def value_at_percentile(hist, percentile: float) -> int:
    """The ``percentile`` of ``hist`` by nearest rank: the smallest recorded value that at
    least ``percentile`` % of the values are at or below, so no more than 100 - percentile %
    lie above it (an SLA on p99 is one on 99 % of the requests).

    HdrHistogram's Python port rounds the rank to the nearest instead of up: the p99 of 60
    requests was the second slowest, one request in 60 (1.7 %) above a "p99" that hid a
    cold start. The rank is taken exactly (99.9 % of 1,000 is 999, not 999.0000000000001).
    """
    total = hist.get_total_count()
    rank = max(1, math.ceil(Fraction(repr(float(percentile))) * total / 100))
    # hdrh takes the value at rank int(p * total / 100 + 0.5): ask for one that rounds to ours
    return hist.get_value_at_percentile(min(100.0, 100.0 * rank / total))


def _latency_ms(hist, sum_us: int) -> dict[str, float]:
    """Percentiles, extremes and mean of ``hist``; the mean from the sum of its values
    (HdrHistogram's own walks every recorded bucket in Python: 20-120 ms a level)."""
    count = hist.get_total_count()
    if not count:
        return {}
    values = {f"p{p:g}": value_at_percentile(hist, p) / 1000 for p in PERCENTILES}
    values.update(max=hist.get_max_value() / 1000, mean=sum_us / count / 1000,
                  min=hist.get_min_value() / 1000)
    return values


def _merge(spec: LoadSpec, level: float, summaries: list[dict], events: list[ServerEvent],
           down_at_ns: int | None, served: StatsSnapshot, start_ns: int,
           max_in_flight: int | None = None) -> LevelResult:
    """One level's result from its workers' summaries, the server's events and statistics."""
    highest_us = max(s["highest_us"] for s in summaries)      # the workers' histograms fit in
    total, lag = _new_histogram(highest_us), _new_histogram(highest_us)
    errors: dict[str, int] = {}
    per_window: dict[int, dict] = {}
    came_back = [sum(back) for back in zip(*(s["came_back"] for s in summaries))]
    waiting_us = [max(wait) for wait in zip(*(s["waiting_us"] for s in summaries))]
    for s in summaries:
        if s["hist"]:
            total.decode_and_add(s["hist"])
        if s["lag_hist"]:
            lag.decode_and_add(s["lag_hist"])
        for kind, n in s["errors"].items():
            errors[kind] = errors.get(kind, 0) + n
        for index, w in s["windows"].items():
            merged = per_window.setdefault(index, {"ok": 0, "errors": 0, "not_sent": 0,
                                                   "hist": _new_histogram(highest_us)})
            merged["ok"] += w["ok"]
            merged["errors"] += w["errors"]
            merged["not_sent"] += w["not_sent"]
            if w["hist"]:
                merged["hist"].decode_and_add(w["hist"])
    span_s = spec.duration_s
    ended_early = None
    if down_at_ns is not None:
        span_s = max(0.0, min(spec.duration_s, (down_at_ns - start_ns) / 1e9))
        ended_early = (f"server gone at t={span_s:.1f} s (it stopped answering then): these "
                       f"figures cover the {span_s:.1f} s before")
    n_windows = max(1, math.ceil(span_s / spec.window_s - 1e-9)) if span_s > 0 else 0
    timeline = []
    for index in range(n_windows):
        w = per_window.get(index, {"ok": 0, "errors": 0, "not_sent": 0,
                                   "hist": _new_histogram(highest_us)})
        hist, width = w["hist"], min(spec.window_s, span_s - index * spec.window_s)
        has = hist.get_total_count() > 0
        timeline.append(Window(
            index=index, start_s=round(index * spec.window_s, 6), ok=w["ok"], errors=w["errors"],
            not_sent=w["not_sent"],
            qps=w["ok"] / width if width > 0 else 0.0,        # answered, as the level's QPS
            p50_ms=value_at_percentile(hist, 50) / 1000 if has else None,
            p99_ms=value_at_percentile(hist, 99) / 1000 if has else None,
            max_ms=hist.get_max_value() / 1000 if has else None,
            came_back=came_back[index] if index < len(came_back) else 0,
            waiting_ms=waiting_us[index] / 1000 if index < len(waiting_us) and waiting_us[index] else None))
    all_outages = model_outages(events, start_ns)
    spikes = cold_start_windows(timeline, events, start_ns, spec.window_s, outages=all_outages, model=spec.model)
    outages = [{"version": version, "from_s": round(left, 3), "to_s": None if ready is None else round(ready, 3)}
               for model, version, left, ready in all_outages if model == spec.model]
    sent = sum(s["sent"] for s in summaries)
    ok = sum(s["ok"] for s in summaries)
    latency = _latency_ms(total, sum(s["sum_us"] for s in summaries))
    sent_all = sum(s["sent_all"] for s in summaries)     # warm-up included, as the CPU is
    split = served.split_ms()
    if split and latency:
        split["client_and_network"] = max(0.0, latency["mean"] - split["request"])
    span = span_s or float("nan")
    return LevelResult(
        mode=spec.mode, level=level, workers=len(summaries), duration_s=span_s, sent=sent, ok=ok,
        errors=dict(sorted(errors.items(), key=lambda kv: -kv[1])),
        qps=ok / span if span_s else 0.0, infer_per_s=ok * spec.batch_size / span if span_s else 0.0,
        latency_ms=latency, timeline=timeline, spikes=spikes,
        events=[e.as_dict(start_ns) for e in events], server_split_ms=split,
        offered_rate=level if spec.mode == "open" else None,
        achieved_rate=(sent - sum(s["not_sent"] for s in summaries)) / span
        if spec.mode == "open" and span_s else None,
        send_lag_ms=(_latency_ms(lag, sum(s["lag_sum_us"] for s in summaries)) or None
                     if spec.mode == "open" else None),
        max_in_flight=max_in_flight, saturated=sum(s["saturated"] for s in summaries),
        client_cpu_us=sum(s["cpu_s"] for s in summaries) / sent_all * 1e6 if sent_all else None,
        ended_early=ended_early, histogram=total, outages=outages, server_batch=served.mean_batch())
