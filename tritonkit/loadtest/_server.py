"""Watching the server during a run: model load/unload events, liveness, latency statistics.

A background thread polls the model-repository index (with the deployment's secret
header; without it, falls back to each model's public readiness) and the model's
inference statistics. Triton resets a model's statistics when it is reloaded, so the
watcher keeps a running base and its totals stay monotonic across reloads.

A poll does not always see a reload happen: while Triton loads a model (measured on
2.51.0: an unload followed at once by a load), every HTTP endpoint — index, readiness,
statistics — blocks until the load is done and then answers READY. The statistics
restarting from zero still tell: the model was out between the last answer before and
the first answer after, and the watcher records that span as an outage.

A poll sees a change only after it happened: a model recorded leaving READY at one poll
may have left just after the one before, and a poll that blocks while the model loads
says READY only once it is answered. Each state change it records carries both ends
(``after_ns``, ``by_ns``), so the timeline can name a window cut by the outage before
the watcher saw it begin.

A server told to stop (``tritonkit down``, SIGINT or SIGTERM) drains first: measured on
2.51.0, it refuses every new HTTP connection at once, yet answers on the ones already
open — liveness, readiness, the index (every model READY) and inference alike — until
they close or its exit timeout ends. A poll on the watcher's kept-alive connection sees
nothing, so the watcher also opens a fresh connection now and then: refused while the
kept one answers, the server is shutting down (a "draining" event). A load generator whose
connection was reset gets only refusals from then on.
"""

from __future__ import annotations

import threading
import time
import urllib.error
from dataclasses import asdict, dataclass
from typing import Callable

from tritonkit.client import Endpoint, open_direct, triton_message

_STAT_FIELDS = ("success", "queue", "compute_input", "compute_infer", "compute_output")
_DOWN_AFTER = 3      # consecutive failed polls before the server counts as gone
_DRAINING_AFTER = 2  # consecutive fresh connections refused (the kept one answering) before it drains
POLL_INTERVAL_S = 0.05   # how often the watcher asks the server for its models' states


def _timed_out(exc: BaseException) -> bool:
    """A poll that got no answer in time: the server is there but busy."""
    return isinstance(exc, TimeoutError) or "timed out" in str(exc).lower()


def _restricted(exc: BaseException) -> bool:
    """Triton refuses the endpoint to a client without the deployment's secret header."""
    return "restricted" in triton_message(exc).lower()


def served_nothing_since_load(endpoint: Endpoint, model: str) -> bool:
    """Whether ``model`` has served no request since it was loaded (a restart, a reload):
    every version's counts are what its config's ``model_warmup`` alone explains, or 0
    (``tritonkit.warmup.never_served``; an exported model right after its load shows 5
    executions, 61 inferences). Its next request is then its cold start. False when that
    cannot be told (statistics restricted, or not answered)."""
    from tritonkit.warmup import never_served, served_counts

    client = endpoint.http(connection_timeout=2.0, network_timeout=2.0)
    try:
        counts = served_counts(client, endpoint, model)
        config = client.get_model_config(model, headers=dict(endpoint.repository_headers) or None)
    except Exception:       # restricted, or the model is out: no claim either way
        return False
    finally:
        client.close()      # an open connection holds a stopping Triton for its exit timeout
    return never_served(counts, config)


@dataclass(frozen=True)
class ServerEvent:
    """Something the server did during the run, at ``t_ns`` (perf_counter_ns)."""

    t_ns: int
    kind: str        # "state" (a model changed state) | "down" (server stopped answering) | "up"
                     # | "draining" (it refuses new connections, answers open ones: shutting down)
                     # | "serving" (a version READY at the first poll: no change, a fact to start from)
    model: str = ""
    version: str = ""
    state: str = ""  # READY, LOADING, UNLOADING, UNAVAILABLE, ...
    previous: str = ""
    reason: str = ""
    # A state change happened after ``after_ns`` (the last poll that still saw ``previous``,
    # sent then) and by ``by_ns`` (when the poll that saw it was answered); None: unknown.
    after_ns: int | None = None
    by_ns: int | None = None

    def as_dict(self, t0_ns: int) -> dict:
        data = asdict(self)
        for name in ("t", "after", "by"):
            at = data.pop(f"{name}_ns")
            data[f"{name}_s"] = None if at is None else round((at - t0_ns) / 1e9, 3)
        return data


@dataclass(frozen=True)
class StatsSnapshot:
    """Cumulative server-side counts and nanoseconds for one model (monotonic across reloads)."""

    count: int = 0
    ns: tuple[int, ...] = (0,) * len(_STAT_FIELDS)
    inferences: int = 0        # samples inferred (a batch of 8 counts 8)
    executions: int = 0        # model executions (a batch of 8 counts 1)

    def minus(self, other: "StatsSnapshot") -> "StatsSnapshot":
        return StatsSnapshot(self.count - other.count, tuple(a - b for a, b in zip(self.ns, other.ns)),
                             self.inferences - other.inferences, self.executions - other.executions)

    def plus(self, other: "StatsSnapshot") -> "StatsSnapshot":
        return StatsSnapshot(self.count + other.count, tuple(a + b for a, b in zip(self.ns, other.ns)),
                             self.inferences + other.inferences, self.executions + other.executions)

    def mean_batch(self) -> float | None:
        """Samples per model execution: how large the batches Triton formed were."""
        return self.inferences / self.executions if self.executions > 0 else None

    def split_ms(self) -> dict[str, float] | None:
        """Mean milliseconds per successful request: total, queue, compute input/infer/output."""
        if self.count <= 0:
            return None
        names = ("request", "queue", "compute_input", "compute_infer", "compute_output")
        return {name: ns / self.count / 1e6 for name, ns in zip(names, self.ns)}


class Liveness:
    """Whether the server is there, from consecutive failed polls.

    ``_DOWN_AFTER`` polls in a row that fail (a timeout is a busy server, not a failure)
    while liveness does not answer either: the server is gone, a "down" event. Polls
    that fail while liveness still answers keep it up, and every later failure asks
    again, so a real death after them is still caught. The first "down" is when the run
    ends (``down_at_ns``, kept even if the server answers again: the load stopped there);
    an "up" follows only a "down".
    """

    def __init__(self) -> None:
        self.failures = 0
        self.down = False
        self.down_at_ns: int | None = None
        self.answered_ns: int | None = None     # the last poll that answered

    def answered(self, now_ns: int) -> list[ServerEvent]:
        self.failures = 0
        self.answered_ns = now_ns
        if not self.down:
            return []
        self.down = False
        return [ServerEvent(now_ns, "up")]

    def failed(self, now_ns: int, alive: Callable[[], bool]) -> list[ServerEvent]:
        self.failures += 1
        if self.down or self.failures < _DOWN_AFTER or alive():
            return []
        self.down = True
        if self.down_at_ns is None:
            self.down_at_ns = now_ns
        # it stopped answering after the last poll that answered, and by now
        return [ServerEvent(now_ns, "down", after_ns=self.answered_ns, by_ns=now_ns)]


class Draining:
    """Whether the server is shutting down, from fresh connections while the kept one answers.

    ``_DRAINING_AFTER`` fresh connections in a row refused or reset (a timeout is a busy
    host, no evidence either way): a "draining" event, when the first of them was opened,
    bounded by the last fresh connection that answered and the answer of the one that
    confirmed it. Said once: a server that drains does not come back from it.
    """

    def __init__(self) -> None:
        self.refused: list[int] = []          # when the fresh connections refused in a row were opened
        self.answered_ns: int | None = None   # when the last fresh connection that answered was opened
        self.draining = False

    def probed(self, opened_ns: int, outcome: bool | None, done_ns: int) -> list[ServerEvent]:
        """``outcome``: True answered, False refused or reset, None timed out."""
        if self.draining or outcome is None:
            return []
        if outcome:
            self.refused, self.answered_ns = [], opened_ns
            return []
        self.refused.append(opened_ns)
        if len(self.refused) < _DRAINING_AFTER:
            return []
        self.draining = True
        return [ServerEvent(self.refused[0], "draining", reason="it refuses new connections, "
                            "answering only those already open", after_ns=self.answered_ns,
                            by_ns=done_ns)]


def _fresh_connection(http_url: str, timeout_s: float = 2.0) -> tuple[int, bool | None, int]:
    """(opened at, whether a new HTTP connection to ``http_url`` got an answer — None: it
    timed out —, done at), perf_counter_ns. Any HTTP answer counts: a refusal is of the
    connection, not of the request. Through ``open_direct``, as ``client.health`` polls:
    past any proxy, on a connection closed at once."""
    opened = time.perf_counter_ns()
    try:
        with open_direct(f"http://{http_url.removeprefix('http://')}/v2/health/live",
                         timeout=timeout_s) as response:
            response.read()
        outcome: bool | None = True
    except urllib.error.HTTPError as exc:   # answered, if not with 200
        exc.close()
        outcome = True
    except Exception as exc:            # refused, reset, closed without an answer, timed out
        outcome = None if _timed_out(exc) else False
    return opened, outcome, time.perf_counter_ns()


class ServerWatcher:
    """Polls the server in a thread; ``events``, ``down_at_ns`` and ``stats()`` are its findings."""

    def __init__(self, endpoint: Endpoint, model: str, *, interval_s: float = POLL_INTERVAL_S,
                 stats_every: int = 2, on_down: Callable[[], None] | None = None) -> None:
        self._endpoint = endpoint
        self._model = model
        self._interval = interval_s
        self._stats_every = stats_every
        self._on_down = on_down
        # A tritonclient client is not thread-safe, and its gevent pool belongs to the thread
        # that made it: the polling thread makes its own, callers use this one.
        self._client = None
        self._caller_client = endpoint.http(connection_timeout=2.0, network_timeout=2.0)
        self._started = threading.Event()
        self._current_keys: list[tuple[str, str]] = []
        self._headers = dict(endpoint.repository_headers)
        self._use_index = bool(self._headers)
        self._states: dict[tuple[str, str], str] = {}
        self._states_seen_ns: int | None = None     # when the last states poll that answered was sent
        self._base = StatsSnapshot()
        self._last = StatsSnapshot()
        self._last_answer_ns: int | None = None     # when the last statistics poll answered
        self._poll_lock = threading.Lock()
        self._stats_readable = True
        self._outage_open = False                   # statistics say the model is out
        self._stats_outage = False                  # ... and only they saw it
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tritonkit-watcher", daemon=True)
        self.events: list[ServerEvent] = []
        self._liveness = Liveness()
        self._drain = Draining()
        self.index_used = self._use_index

    @property
    def down_at_ns(self) -> int | None:
        """When the server first stopped answering (the run ends there), or None."""
        return self._liveness.down_at_ns

    def start(self) -> "ServerWatcher":
        self._thread.start()
        self._started.wait(timeout=10)
        return self

    def stop(self, abandon_at: float | None = None) -> None:
        """Stop polling; once more for the last figures, unless the run is being abandoned
        (``abandon_at``, a ``time.monotonic`` deadline: wait no longer, ask nothing more)."""
        self._halt.set()
        if abandon_at is not None:
            self._thread.join(timeout=max(0.0, abandon_at - time.monotonic()))
            self._caller_client.close()
            return
        self._thread.join(timeout=5)
        if self.down_at_ns is None:
            try:
                self._client = self._caller_client
                self._poll_states()
                self._poll_stats(self._caller_client)
            except Exception:  # the server went away at the very end: keep what was seen
                pass
        # Triton waits for open HTTP connections when it stops (up to its exit timeout).
        self._caller_client.close()

    def stats(self) -> StatsSnapshot:
        """Cumulative statistics now (polls once more; falls back to the last seen)."""
        if self.down_at_ns is None:
            try:
                self._poll_stats(self._caller_client)
            except Exception:
                pass
        with self._lock:
            return self._base.plus(self._last)

    def _loop(self) -> None:
        client = self._client = self._endpoint.http(connection_timeout=2.0, network_timeout=2.0)
        try:
            self._watch()
        finally:
            client.close()          # in this thread: its gevent pool belongs here

    def _watch(self) -> None:
        try:
            self._poll_states(initial=True)
            self._poll_stats(self._client)
        except Exception:  # the loop below notices a server that is not there
            pass
        self._started.set()
        tick = 0
        while not self._halt.wait(self._interval):
            tick += 1
            try:
                self._poll_states()
                if tick % self._stats_every == 0:
                    self._poll_stats(self._client)
                self.events += self._liveness.answered(time.perf_counter_ns())
                if tick % self._stats_every == 0:     # the kept connection answers: a fresh one?
                    self.events += self._drain.probed(*_fresh_connection(self._endpoint.http_url))
            except Exception as exc:  # refused, reset, timeout: tritonclient wraps them variously
                if _timed_out(exc):
                    continue          # busy (Triton blocks while it loads a model), not gone
                first = self.down_at_ns is None
                self.events += self._liveness.failed(time.perf_counter_ns(), self._alive)
                if first and self.down_at_ns is not None and self._on_down:
                    self._on_down()

    def _alive(self) -> bool:
        try:
            return bool(self._client.is_server_live())  # type: ignore[union-attr]
        except Exception as exc:
            return _timed_out(exc)

    def _poll_states(self, initial: bool = False) -> None:
        now = time.perf_counter_ns()
        current = self._current_states()
        # a change seen now happened after the last poll that answered, and by this answer
        bounds = {"after_ns": self._states_seen_ns, "by_ns": time.perf_counter_ns()}
        self._states_seen_ns = now
        serving = {model for (model, _), (state, _) in current.items() if state == "READY"}
        for (model, version), (state, reason) in current.items():
            previous = self._states.get((model, version), "")
            if initial and state == "READY":
                self.events.append(ServerEvent(now, "serving", model, version, state))
            if state != previous:
                self._states[(model, version)] = state
                if not initial or self._out_at_start(model, state, reason, serving):
                    self.events.append(ServerEvent(now, "state", model, version, state, previous, reason,
                                                   **bounds))
        # A model that vanished from the index (or stopped being ready) changed state too.
        seen = set(self._current_keys)
        for key, previous in list(self._states.items()):
            if key not in seen and previous != "UNAVAILABLE":
                self._states[key] = "UNAVAILABLE"
                if not initial:
                    self.events.append(ServerEvent(now, "state", key[0], key[1], "UNAVAILABLE", previous,
                                                   **bounds))

    def _out_at_start(self, model: str, state: str, reason: str, serving: set[str]) -> bool:
        """At the first poll: whether a state is an outage already under way (the tested
        model with no version READY, or any model loading or unloading), which then runs
        from the watcher's start. Another model merely not loaded is no outage of anyone's,
        nor is a version retired by a roll to the next (UNAVAILABLE, "unloaded", while
        another version serves)."""
        if state in ("LOADING", "UNLOADING"):
            return True
        return model == self._model and state != "READY" and model not in serving

    def _current_states(self) -> dict[tuple[str, str], tuple[str, str]]:
        if self._use_index:
            try:
                index = self._client.get_model_repository_index(headers=self._headers)
            except Exception as exc:
                if not _restricted(exc):
                    raise
                self._use_index = self.index_used = False  # wrong or no secret: public readiness only
            else:
                states = {(e["name"], e.get("version", "")): (e.get("state", ""), e.get("reason", ""))
                          for e in index if e.get("state")}
                self._current_keys = list(states)
                return states
        ready = self._client.is_model_ready(self._model)
        states = {(self._model, ""): ("READY" if ready else "UNAVAILABLE", "")}
        self._current_keys = list(states)
        return states

    def _poll_stats(self, client) -> None:
        """One statistics poll. Polls from the watcher and from ``stats()`` are serialized, so
        answers are taken in the order they were asked for."""
        from tritonclient.utils import InferenceServerException

        if not self._stats_readable:
            return
        with self._poll_lock:
            try:
                stats = client.get_inference_statistics(self._model, headers=self._headers or None)
            except InferenceServerException as exc:
                message = triton_message(exc).lower()
                if _restricted(exc):
                    # Never readable: no split, and no outage inferred from it. (A model not
                    # available yet, at the first poll, is read once it is.)
                    self._stats_readable = False
                elif self._last_answer_ns is not None and ("not available" in message
                                                           or "unknown model" in message):
                    # The server answered that the model is (being) unloaded.
                    self._rebase(StatsSnapshot(), time.perf_counter_ns(), available=False)
                return
            total = StatsSnapshot()
            for entry in stats.get("model_stats", []):
                inference = entry.get("inference_stats", {})
                total = total.plus(StatsSnapshot(
                    int(inference.get("success", {}).get("count", 0)),
                    tuple(int(inference.get(name, {}).get("ns", 0)) for name in _STAT_FIELDS),
                    int(entry.get("inference_count", 0)), int(entry.get("execution_count", 0))))
            self._rebase(total, time.perf_counter_ns(), available=True)

    def _rebase(self, current: StatsSnapshot, answered_ns: int, available: bool) -> None:
        with self._lock:
            restarted = current.count < self._last.count
            if restarted:  # reloaded: statistics restarted from zero
                self._base = self._base.plus(self._last)
            self._last = current
        if self._started.is_set() and self._last_answer_ns is not None:
            if restarted or not available:
                self._out_since(self._last_answer_ns, answered_ns)
            if available and self._outage_open:
                self._back_at(self._last_answer_ns, answered_ns)
        self._last_answer_ns = answered_ns

    def _out_since(self, before_ns: int, answered_ns: int) -> None:
        """The statistics say the model left READY after ``before_ns`` (the last answer before)
        and by ``answered_ns``."""
        if self._outage_open:
            return
        self._outage_open = True
        seen = any(e.model == self._model and e.state != "READY" and e.t_ns >= before_ns
                   for e in self.events if e.kind == "state")
        if not seen:  # the index and readiness polls missed it (they block during a load)
            self._stats_outage = True
            self.events.append(ServerEvent(before_ns, "state", self._model, "", "UNAVAILABLE", "READY",
                                           "statistics restarted: the model was reloaded",
                                           after_ns=before_ns, by_ns=answered_ns))

    def _back_at(self, before_ns: int, answered_ns: int) -> None:
        """Statistics answer again: the model is READY by ``answered_ns`` (after ``before_ns``,
        the last answer before)."""
        self._outage_open = False
        if self._stats_outage:
            self._stats_outage = False
            self.events.append(ServerEvent(answered_ns, "state", self._model, "", "READY", "UNAVAILABLE",
                                           "statistics restarted: the model was reloaded",
                                           after_ns=before_ns, by_ns=answered_ns))
