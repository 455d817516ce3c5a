"""One load-generating process: virtual users (closed loop) or arrival slots (open loop).

Each virtual user (closed loop) or arrival slot (open loop) has a kept-alive connection of
its own (HTTP/1.1, or HTTP/2 for gRPC). A worker with one user runs it in a thread on a
blocking socket — gevent's hub adds about 60 µs to every request, so a lone user does
without it; several users run as gevent greenlets on gevent's sockets. The hot loop only
appends a few integers per request; histograms are built once the run is over, so
recording costs nothing while the clock runs.

Protocol with the parent, over a Pipe: worker sends ("ready", None) or ("failed", why);
parent sends the start time t0 (``time.perf_counter_ns``, the same monotonic clock in
every process); worker sends ("done", summary). A worker kept by a pool
(``pooled_worker_main``) is sent each plan over the same pipe before that, and after its
summary waits for the next plan, until the pipe closes. A parent that gives up closes its end: a
worker waiting for t0 reads the end of the pipe and leaves at once. Ctrl-C is the
parent's to handle: workers ignore SIGINT (the terminal sends it to all of them) from
their start — they start with it blocked and ignore it before they let it through — and
stop on the shared ``stop`` flag; one
blocked in a request is killed when the parent stops waiting (about 2 s). A parent that
ends without a word (SIGKILL, a crash) takes its workers with it: each leaves the moment
it is gone.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from tritonkit.loadtest._inputs import RequestTemplate
from tritonkit.loadtest._sequences import LiveSequence, SequencePlan
from tritonkit.loadtest._transport import Send, error_kind, grpc_sender, http_sender
from tritonkit.server.local import raise_open_files_limit

LOWEST_US, DIGITS = 1, 3
# prctl(2): how late the kernel may end this process's sleeps (50 µs unless asked)
_PR_SET_TIMERSLACK, _TIMER_SLACK_NS = 29, 1_000
_PR_SET_PDEATHSIG = 1                # prctl(2): a signal for when the parent dies
_ORPHANED_EXIT = 87                 # the parent was gone: no one reads this code, or the figures


@dataclass(frozen=True)
class WorkerPlan:
    """What one worker process does (picklable: it is sent to the worker process)."""

    index: int
    protocol: str                       # "http" | "grpc"
    url: str                            # host:port for that protocol
    template: RequestTemplate
    slots: int                          # closed: virtual users; open: most requests in flight
    offsets_ns: np.ndarray | None       # open loop: this worker's send times from t0
    warmup_ns: int
    duration_ns: int
    window_ns: int
    timeout_s: float
    grace_s: float = 31.0               # wait this long for answers after the end (timeout + margin)
    sequences: SequencePlan | None = None   # a stateful model's: each slot sends whole sequences

    @property
    def highest_us(self) -> int:
        """The histograms' ceiling: twice the longest latency this worker can record (a
        request due at the start, answered or given up on ``grace_s`` after the end), so a
        long ``--request-timeout`` or a server that held arrivals back for minutes is
        measured, never clipped."""
        return 2 * ((self.warmup_ns + self.duration_ns) // 1000 + round(self.grace_s * 1e6))


def worker_main(plan: WorkerPlan, conn: Any, done: Any, stop: Any) -> None:
    """Entry point of a worker process: one plan, then it ends."""
    _prepare(open_loop=plan.offsets_ns is not None, cooperative=_cooperative(plan))
    _run_plan(plan, conn, done, stop)
    conn.close()


def pooled_worker_main(kind: tuple[bool, bool], conn: Any, done: Any, stop: Any) -> None:
    """Entry point of a worker kept by a ``WorkerPool``: plan after plan from the pipe,
    each run as ``worker_main`` runs its one, until the parent closes its end. ``kind``:
    (open loop, cooperative), what the process is set up for once (gevent's loop and
    the timer slack are chosen before the first plan), so every plan it takes is one a
    fresh worker would have run the same way."""
    _prepare(*kind)
    while True:
        try:
            plan = conn.recv()
        except (EOFError, OSError):     # the pool is closed, or the parent gave up
            return
        _run_plan(plan, conn, done, stop)


def _prepare(open_loop: bool, cooperative: bool) -> None:
    """What a worker process sets once, before its first plan."""
    # Started with SIGINT blocked (one pressed since is pending): ignored, then let through.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _leave_with_the_parent()
    raise_open_files_limit()        # the parent checked the plan against the hard limit
    if open_loop:
        _precise_sleeps(cooperative)


def _run_plan(plan: WorkerPlan, conn: Any, done: Any, stop: Any) -> None:
    """One plan: connections opened, "ready", the start time awaited, the load driven,
    the connections closed, the summary sent."""
    try:
        senders = _senders(plan)
    except _NotOpened as exc:  # a bad URL, a refused connection, a missing library: the parent says so
        _tell(conn, ("failed", str(exc)))
        return
    try:
        if not _tell(conn, ("ready", None)):
            return
        try:
            t0 = conn.recv()
        except (EOFError, OSError):     # the parent gave up before the start
            return
        records = _Records()
        cpu_start = time.process_time()
        _drive(plan, senders, t0, records, done, stop)
        cpu_s = time.process_time() - cpu_start
    finally:
        _close(senders)             # every connection, before the figures: none outlives the run
    summary = records.summary(plan, t0)
    # CPU this process spent driving the load (warm-up included): what a request costs the client.
    summary.update(cpu_s=cpu_s)
    _tell(conn, ("done", summary))


def worker_kind(plan: WorkerPlan) -> tuple[bool, bool]:
    """What a process must be set up for to run ``plan``: (open loop, cooperative)."""
    return plan.offsets_ns is not None, _cooperative(plan)


def _leave_with_the_parent() -> None:
    """This process ends the moment its parent does, however the parent ended (SIGKILL
    included): no one is left to read its figures, and a load generator no one watches
    must not go on loading the server until its level ends.

    Linux's parent-death signal (prctl PR_SET_PDEATHSIG) does it at no cost to the
    requests; a thread waiting on the parent's sentinel instead made an open-loop request
    cost 6-7x a closed-loop one's CPU, against 3x without it. Where prctl is not there, a
    parent that dies by a signal leaves its workers to end with their level.

    A worker forked from a fork server is that server's child: the server ends the moment
    the load-test process does, and the worker with it. The server watches a pipe whose
    writing end only the load-test process holds once each worker has closed the copy
    multiprocessing hands it (``_forget_the_servers_pipe``)."""
    parent = multiprocessing.parent_process()
    if parent is None:          # not a worker process (a test calling this in-process)
        return
    if _forget_the_servers_pipe():
        # Ours knows its pid from its start; one the calling program started itself (no
        # preload of ours) is this process's parent now.
        server = sys.modules.get("tritonkit.loadtest._forkserver")
        parent_pid = getattr(server, "SERVER_PID", None) or os.getppid()
    else:
        parent_pid = parent.pid
    try:
        import ctypes

        if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL,
                                                    0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:      # the parent died before the signal was asked for
        os._exit(_ORPHANED_EXIT)


def _forget_the_servers_pipe() -> bool:
    """Close this process's copy of the pipe end whose closing tells multiprocessing's
    fork server that the process it serves has ended (each process it forks is handed
    one): while a worker held it, a load-test process killed outright left the server,
    and so its workers, running. Whether this process is a fork server's child."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is None:
        return False
    os.close(fd)
    server._forkserver_alive_fd = None
    return True


def _tell(conn: Any, message: tuple) -> bool:
    """Send to the parent; False if it has stopped listening (it gave up, or was interrupted)."""
    try:
        conn.send(message)
        return True
    except OSError:
        return False


def _precise_sleeps(cooperative: bool) -> None:
    """Open loop: a sleep until a scheduled send ends within microseconds of it, and costs
    no CPU while it lasts (the latency runs from when the send was due: a late wake-up is
    in every one of them).

    gevent's default loop waits in epoll, whose timeout is whole milliseconds: its sleeps
    end up to 1 ms late (a median 400 µs at 800 requests/s), and yield-spinning through
    the last millisecond instead took ~480 µs of CPU a request, from the server it
    measures. libev's select backend times its wait in microseconds (70 µs late, 235 µs
    of CPU a request; some 10-30 µs more than epoll with a worker's 64 sockets). The
    kernel lets a sleep end up to 50 µs late (timer slack); a worker asks for 1 µs.
    Called before the hub exists (it is made with the first cooperative socket).
    """
    if cooperative:
        from gevent import config

        config.libev_backend = "select"
    if sys.platform == "linux":
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_TIMERSLACK, _TIMER_SLACK_NS, 0, 0, 0)


def _cooperative(plan: WorkerPlan) -> bool:
    """Several users in this process share it through gevent."""
    return plan.slots > 1


class _NotOpened(Exception):
    """A slot's connection could not be opened; those opened before it are closed."""


def _senders(plan: WorkerPlan) -> list[Send]:
    """One send per slot, each on a connection of its own."""
    make = http_sender if plan.protocol == "http" else grpc_sender
    senders: list[Send] = []
    for slot in range(plan.slots):
        try:
            senders.append(make(plan.url, plan.template, plan.timeout_s,
                                cooperative=_cooperative(plan)))
        except Exception as exc:
            _close(senders)
            raise _NotOpened(f"connection {slot + 1} of its {plan.slots} to {plan.url} did not "
                             f"open ({error_kind(exc)})") from None
    return senders


def _close(senders: list[Send]) -> None:
    for send in senders:
        send.__self__.close()       # type: ignore[attr-defined]


class _Records:
    """Raw per-request records: origin (ns), latency (ns), outcome code.

    Code 0 is an answer; a positive code an error kind; ``HELD_BACK`` an open-loop
    arrival never sent because every slot was waiting on the server: not an error of
    the request, and its latency (at least the time it waited) counts like an answer's.
    A request that got no answer within its timeout is an error whose latency counts
    too (the time it was given up on, a lower bound): a server that leaves 1 % of its
    requests hanging has a p99 of the timeout. An error *answer* (HTTP 404, gRPC
    NOT_FOUND, in a millisecond) is not a latency of the model's: it is left out.
    """

    def __init__(self) -> None:
        self.origins: list[int] = []
        self.latencies: list[int] = []
        self.codes: list[int] = []
        self.lags: list[int] = []          # open loop: actual send minus scheduled send
        self.waited: list[bool] = []       # open loop: it fell due while every slot was on the server
        self.kinds: dict[str, int] = {}
        self.unanswered: set[int] = set()  # the codes of errors that got no answer in time
        self.sequences: dict[str, int] | None = None   # a stateful model's: what became of them

    def code(self, exc: BaseException) -> int:
        return self.kind_code(error_kind(exc), unanswered=isinstance(exc, TimeoutError))

    def kind_code(self, kind: str, unanswered: bool = False) -> int:
        code = self.kinds.setdefault(kind, len(self.kinds) + 1)
        if unanswered:
            self.unanswered.add(code)
        return code

    def summary(self, plan: WorkerPlan, t0: int) -> dict[str, Any]:
        """Histograms (HdrHistogram, encoded) of the measured period, total and per window."""
        start = t0 + plan.warmup_ns
        all_codes = np.asarray(self.codes, dtype=np.int64)
        never = all_codes == HELD_BACK
        if NOT_SENT in self.kinds:
            never |= all_codes == self.kinds[NOT_SENT]
        origins = np.asarray(self.origins, dtype=np.int64) - start
        latencies_ns = np.asarray(self.latencies, dtype=np.int64)
        left = ~never                               # requests that went to the server
        # when each left: its origin, and an open-loop one (due at its origin) its lag later
        sent_at = origins + (np.asarray(self.lags, dtype=np.int64) if self.lags else 0)
        came_back, waiting = _returns(sent_at[left], (origins + latencies_ns)[left],
                                      ~np.isin(all_codes[left], list(self.unanswered)), plan)
        # A request counts if it overlaps the measured span: one sent before the end counts
        # however late its answer, and so one sent during the warm-up that is answered
        # after the start (it waited through a stall, say) counts, in the first window.
        # The latencies see it; the counts (QPS, errors, the rate achieved) see only what
        # was sent inside the span, or each level would gain the requests in flight at its
        # start (concurrency / duration more QPS than the server gave).
        keep = (origins < plan.duration_ns) & ((origins >= 0) | (origins + latencies_ns > 0))
        origins, codes = origins[keep], all_codes[keep]
        counted = origins >= 0
        latencies = np.maximum(latencies_ns[keep] // 1000, LOWEST_US)
        names = {code: kind for kind, code in self.kinds.items()}
        ok = (codes == 0) & counted
        failed = (codes > 0) & counted
        # arrivals the generator itself failed to send: errors of the run, not the server's
        unsent = never[keep] & failed
        # what the latency percentiles see: answers, held-back arrivals, requests never answered
        timed = (codes == 0) | (codes == HELD_BACK) | np.isin(codes, list(self.unanswered))
        windows = {}
        window_of = np.maximum(origins, 0) // plan.window_ns
        for window in np.unique(window_of):
            here = window_of == window
            windows[int(window)] = {
                "ok": int(np.count_nonzero(here & ok)),
                "errors": int(np.count_nonzero(here & failed)),
                "not_sent": int(np.count_nonzero(here & unsent)),
                "hist": _encode(latencies[here & timed], plan.highest_us),
            }
        summary = {
            "sent": int(np.count_nonzero(counted)),
            "not_sent": int(np.count_nonzero(never[keep] & counted)),
            "ok": int(np.count_nonzero(ok)),
            "errors": {names[int(c)]: int(n) for c, n in zip(*np.unique(codes[failed], return_counts=True))},
            "hist": _encode(latencies[timed], plan.highest_us),
            # the histogram's values summed, for the mean (HdrHistogram's walks every bucket)
            "sum_us": _clamped_sum(latencies[timed], plan.highest_us),
            "highest_us": plan.highest_us,
            "windows": windows,
            # per window, by when things happened rather than when requests were sent
            "came_back": came_back.tolist(),
            "waiting_us": (waiting // 1000).tolist(),
            "lag_hist": None,
            "lag_sum_us": 0,
            "saturated": 0,
            # requests that left (warm-up included, as the CPU is): what the client's CPU went on
            "sent_all": int(np.count_nonzero(~never)),
            "sequences": self.sequences,
        }
        if self.lags:
            lags = np.asarray(self.lags, dtype=np.int64)[keep]
            lags_us = np.maximum(lags // 1000, LOWEST_US)
            summary["lag_hist"] = _encode(lags_us, plan.highest_us)
            summary["lag_sum_us"] = _clamped_sum(lags_us, plan.highest_us)
            summary["saturated"] = int(np.count_nonzero(np.asarray(self.waited, dtype=bool)[keep] & counted))
        return summary


def _returns(sent: np.ndarray, finish: np.ndarray, answered: np.ndarray,
             plan: WorkerPlan) -> tuple[np.ndarray, np.ndarray]:
    """Per window of the measurement: how many requests came back in it (an answer, or an
    error answer), and the longest any request had been out without one by its end — one
    still out then, or given up on within it (0: none was out). A window where requests
    were out and none came back is a stall; one where none was out, idle.

    ``sent`` and ``finish`` (ns from the start) of the requests that went to the server,
    warm-up included (a stall that began in it reaches into the measurement);
    ``answered``: whether each came back, as opposed to being given up on at ``finish``.
    """
    n = -(-plan.duration_ns // plan.window_ns)
    ends = np.minimum(np.arange(1, n + 1, dtype=np.int64) * plan.window_ns, plan.duration_ns)
    inside = (finish >= 0) & (finish < plan.duration_ns)
    came_back = np.bincount(finish[answered & inside] // plan.window_ns, minlength=n)
    waiting = np.zeros(n, dtype=np.int64)
    if len(sent):
        order = np.argsort(sent, kind="stable")
        sent, finish = sent[order], finish[order]
        # The oldest request out at each end is the first sent whose finish is at or after
        # it: where the running maximum of the finishes (in the order sent) first reaches it.
        first = np.searchsorted(np.maximum.accumulate(finish), ends)
        out = first < len(sent)
        out[out] = sent[first[out]] < ends[out]
        waiting[out] = ends[out] - sent[first[out]]
        given_up = ~answered[order] & (finish >= 0) & (finish < plan.duration_ns)
        np.maximum.at(waiting, finish[given_up] // plan.window_ns, (finish - sent)[given_up])
    return came_back, waiting


def _clamped_sum(values_us: np.ndarray, highest_us: int) -> int:
    """The sum of what ``_encode`` records: each value, at most ``highest_us``."""
    return int(np.minimum(values_us, highest_us).sum())


def _encode(values_us: np.ndarray, highest_us: int) -> str | None:
    from hdrh.histogram import HdrHistogram

    if not len(values_us):
        return None
    hist = HdrHistogram(LOWEST_US, highest_us, DIGITS)
    # (over the ceiling only if this process was itself stopped for longer than the run)
    values, counts = np.unique(np.minimum(values_us, highest_us), return_counts=True)
    for value, count in zip(values.tolist(), counts.tolist()):
        hist.record_value(value, count)
    return hist.encode().decode("ascii")


class _Slots:
    """Which slots are out, and whether an open-loop arrival fell due while every one was.

    The bookkeeping only, no clock of its own: ``_drive`` says when a slot takes an
    arrival, sends and comes back. A slot is *busy* from a send until it comes back with
    no arrival yet due; one that comes back to an arrival already due stays busy (it
    catches up). An arrival that fell due while every slot was busy found no slot to send
    it: the server held it back (saturation). One that fell due while a slot was free but
    not sending — the load generator was not scheduled in time — is late on the client's
    account, never the server's. Closed loop (``arrivals`` False): which slots are out, no more.
    """

    def __init__(self, slots: int, arrivals: bool = True) -> None:
        self.slots = slots
        self._arrivals = arrivals
        self.out: dict[int, int] = {}           # slot -> when its unanswered request was due
        self._busy_since: dict[int, int] = {}   # slot -> when its current busy spell began
        self._freed = [0] * slots               # when each slot last came back...
        self._all_busy_since: list[int | None] = [None] * slots   # ...and since when all were busy then
        self._first_after_end: tuple[int, int | None] | None = None

    def took(self, slot: int, due: int) -> bool:
        """The slot, free, took the arrival due at ``due``: whether it fell due while every
        slot was busy (else it is sent on time, or late on the client's account)."""
        if due >= self._freed[slot]:            # not due yet when the slot came back: it waits
            self._busy_since.pop(slot, None)
            return False
        since = self._all_busy_since[slot]
        return since is not None and due >= since

    def sent(self, slot: int, due: int, now: int) -> None:
        self.out[slot] = due
        if self._arrivals:
            self._busy_since.setdefault(slot, now)

    def back(self, slot: int, finish: int) -> None:
        if self._arrivals:
            self._all_busy_since[slot] = self._all_busy_now()
            self._freed[slot] = finish
        del self.out[slot]

    def past_end(self, slot: int, now: int, due: int | None = None) -> None:
        """The slot, free at ``now`` after the end, stops before the arrival due at ``due``;
        the first one to stop is when the arrivals never sent stopped waiting. One that
        overslept past the end was out only from its late send, and one that came back
        before ``due`` was free when it fell due: the arrivals before it found it free, not
        the server's doing."""
        if self._first_after_end is None:
            busy = slot in self._busy_since and (due is None or due < self._freed[slot])
            self._first_after_end = (now, self._all_busy_since[slot] if busy else None)

    @property
    def ended(self) -> bool:
        """Whether a slot has stopped after the end."""
        return self._first_after_end is not None

    def unsent_waited(self, now: int) -> tuple[int, int | None]:
        """For the arrivals never sent: until when they waited, and since when every slot
        had been busy by then (None: not all were); those due since then were held back."""
        return self._first_after_end or (now, self._all_busy_now())

    def _all_busy_now(self) -> int | None:
        """Since when every slot has been busy, if every one is out now."""
        all_out = len(self.out) == self.slots and self._busy_since     # (none kept: closed loop)
        return max(self._busy_since.values()) if all_out else None


def _drive(plan: WorkerPlan, senders: list[Send], t0: int, rec: _Records, done: Any, stop: Any,
           clock=time.perf_counter_ns, sleep=time.sleep) -> None:
    """Send as the plan says from ``t0`` to the end, recording every request in ``rec``.

    ``clock`` (ns) and ``sleep`` (s) are a test's to control, with one slot (a thread);
    several share the process through gevent, on its clock.
    """
    index = plan.index
    measured_from = t0 + plan.warmup_ns
    end = measured_from + plan.duration_ns
    open_loop = plan.offsets_ns is not None
    slots = _Slots(plan.slots, arrivals=open_loop)
    origins, latencies, codes, lags = rec.origins.append, rec.latencies.append, rec.codes.append, rec.lags.append
    waits = rec.waited.append
    cooperative = _cooperative(plan)

    if cooperative:
        import gevent

        def wait_until(when: int) -> None:
            # libev times a sleep from the loop's last wake-up, so one may end early: sleep again
            while (delta := when - clock()) > 0:
                gevent.sleep(delta / 1e9)
    else:
        def wait_until(when: int) -> None:
            delta = when - clock()
            if delta > 0:
                sleep(delta / 1e9)

    # Open loop: the arrivals, shared by the slots (each taken once). Closed loop: none.
    arrivals = iter((t0 + plan.offsets_ns).tolist()) if open_loop else None
    taken: dict[int, int] = {}              # slot -> arrival it waits to send
    left: list[int] = []                    # arrivals taken after the end, never sent
    closed = [False]                        # past the deadline: what is still out was counted
    # A request is counted as answered by its user or given up on at the deadline, never
    # both: a user (a thread, when it is alone) records its answer, and the deadline
    # closes the count, each holding this lock. (Greenlets never switch while holding it.)
    counting = threading.Lock()
    live = [LiveSequence(plan.sequences, slot) for slot in range(plan.slots)] if plan.sequences else None

    def user(slot: int) -> None:
        requests(slot)
        sequence = live[slot] if live else None
        # A sequence still open when the run ends is ended by one more request (not
        # counted): none is left holding a sequence slot of the server's until it idles
        # out. A stopped run (the server went away, or Ctrl-C) sends nothing more.
        if sequence is not None and sequence.open and not stop.value and not closed[0]:
            try:
                senders[slot](sequence.close())
                sequence.answered(True)
            except Exception:
                sequence.answered(False)

    def pause(seconds: float) -> None:
        """Wait ``seconds`` (never past the end), leaving as soon as the run stops."""
        until = min(clock() + round(seconds * 1e9), end)
        while not stop.value and not closed[0] and clock() < until:
            wait_until(min(until, clock() + _PAUSE_STEP_NS))

    def requests(slot: int) -> None:
        send = senders[slot]
        sequence = live[slot] if live else None
        waited = False
        backoff = _BACKOFF_FIRST_S
        while not stop.value and not closed[0]:
            if arrivals is None:            # closed loop: the next request leaves at once
                due = clock()
                if due >= end:
                    return
            else:                           # open loop: when the schedule says
                now = clock()
                due = next(arrivals, None)
                # The warm-up's arrivals still unsent as the measurement starts waited for a
                # server that held every slot: they are dropped, as the warm-up is not
                # measured. Sent, they would take the measurement's slots from its own
                # arrivals (an overloaded level then measured none of its own: 0 QPS).
                while due is not None and due < measured_from <= now:
                    due = next(arrivals, None)
                if now >= end:
                    # After the end a slot still sends the arrivals of the span it was late
                    # for on its own account (not scheduled in time), its lateness in each
                    # one's lag and latency, as before the end (a host's stall of a few ms
                    # across the end was an error, and the run exited 4). The slots stop
                    # at the first arrival the server held back (every one, once one has:
                    # the rest are held too), and _CATCH_UP_NS after the end: what is left
                    # is counted, never sent.
                    if (due is None or due >= end or slots.ended or now - end > _CATCH_UP_NS
                            or slots.took(slot, due)):
                        if due is not None:
                            left.append(due)
                        slots.past_end(slot, now, due)
                        return
                    waited = False
                elif due is None:
                    return
                else:
                    waited = slots.took(slot, due)
                taken[slot] = due
                wait_until(due)
                if stop.value:
                    return
            start = clock()
            with counting:
                if closed[0]:
                    return
                taken.pop(slot, None)
                slots.sent(slot, due, start)
            failure = None
            try:
                if sequence is None:
                    send()
                else:
                    send(sequence.next())
            except Exception as exc:
                failure = exc
            finish = clock()
            if sequence is not None:
                sequence.answered(failure is None)
            with counting:
                if closed[0]:               # given up on at the deadline: counted already
                    return
                slots.back(slot, finish)
                # Open loop, free of coordinated omission: latency runs from when the request was due.
                origins(due)
                latencies(finish - due)
                codes(0 if failure is None else rec.code(failure))
                if open_loop:
                    lags(start - due)
                    waits(waited)
                done[index] += 1
            # Closed loop: a user whose server is gone (refused, reset) tries again after a
            # back-off, each try one error, not thousands a second until the watcher says it
            # is gone. (Open loop's arrivals fail one each, as scheduled.)
            if isinstance(failure, ConnectionError) and not open_loop:
                pause(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)
            elif failure is None:
                backoff = _BACKOFF_FIRST_S

    wait_until(t0)
    deadline_s = max(0.0, (end - clock()) / 1e9) + plan.grace_s
    if cooperative:
        greenlets = [gevent.spawn(user, slot) for slot in range(plan.slots)]
        gevent.joinall(greenlets, timeout=deadline_s)
        with counting:
            closed[0] = True
        gevent.killall(greenlets, block=False)
    else:
        # Threads, a lone user included: the join's deadline bounds a hung request the same
        # way (the thread is left to its socket timeout; its late answer is dropped).
        threads = [threading.Thread(target=user, args=(slot,), daemon=True) for slot in range(plan.slots)]
        for thread in threads:
            thread.start()
        finish_by = time.monotonic() + deadline_s
        for thread in threads:
            thread.join(timeout=max(0.0, finish_by - time.monotonic()))
        with counting:
            closed[0] = True
    now = clock()
    if live:
        rec.sequences = {"completed": sum(q.completed for q in live),
                         "ended_at_the_end": sum(q.cut_short for q in live),
                         "left_open": sum(q.open + q.failed_ends for q in live)}
    back_at, held_since = slots.unsent_waited(now)
    _give_up_on(slots.out, rec, plan, now)
    if arrivals is not None and not stop.value:     # a stopped run sends nothing more, by design
        _never_sent([*left, *taken.values(), *arrivals], end, rec, back_at, held_since)


# A closed-loop user's back-off after its connection failed (refused, reset): doubled at
# each failure, from the first to the most; checked for the run's end every step.
_BACKOFF_FIRST_S, _BACKOFF_MAX_S = 0.05, 1.0
_PAUSE_STEP_NS = 50_000_000
# How long after the end a slot may go on sending the arrivals it was late for.
_CATCH_UP_NS = 1_000_000_000

NOT_SENT = "not sent: the load generator fell behind its schedule (add --workers or --max-in-flight)"
HELD_BACK = -1


def _never_sent(due: list[int], end: int, rec: _Records, back_at: int, held_since: int | None) -> None:
    """Arrivals of the measured span that were never sent are counted, never vanish.

    Those that fell due since ``held_since`` (every slot was busy from then until the
    first came back after the end, ``back_at``) were held back by the server: each waited
    at least until then, and that wait is its latency. The others found a slot free that
    did not send them: the load generator fell behind, an error.
    """
    for origin in due:
        if origin < end:
            held = held_since is not None and origin >= held_since
            rec.origins.append(origin)
            rec.latencies.append(max(0, back_at - origin))
            rec.codes.append(HELD_BACK if held else rec.kind_code(NOT_SENT))
            rec.lags.append(max(0, back_at - origin))
            rec.waited.append(held)


def _give_up_on(inflight: dict[int, int], rec: _Records, plan: WorkerPlan, now: int) -> None:
    """Requests still unanswered past their own timeout count as errors, never vanish (and,
    as any request left without an answer, in the latencies)."""
    code = rec.kind_code(f"no answer within the {plan.timeout_s:g} s request timeout", unanswered=True)
    for origin in list(inflight.values()):
        rec.origins.append(origin)
        rec.latencies.append(now - origin)
        rec.codes.append(code)
        if plan.offsets_ns is not None:
            rec.lags.append(0)
            rec.waited.append(False)
    inflight.clear()
