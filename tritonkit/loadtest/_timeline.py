"""The per-window timeline of a run, its latency spikes, and the ones a model load explains.

A window is a spike when its tail stands far above the run's typical window: its p99
above ``factor`` times the median window p99, or a single request slower than
``max_factor`` times that median (one cold request among a thousand does not move a
p99, yet it is exactly what a user behind it waits for). A window's latencies are those
of the requests sent in it, so a server that stops answering leaves the windows after
its stall with none: such a window is a **stall** when requests were out and none came
back in it, the oldest out longer than ``max_factor`` times that median — flagged like
a spike — and merely idle when nothing was out (an open loop between arrivals). A window
in which requests were sent and every one failed (an HTTP 404 or gRPC NOT_FOUND in a
millisecond while a model reloads) has no latency either and is no stall — things came
back: it is an **error window**, flagged like a stall. So is one in which some of the
requests failed, ``ERROR_WINDOW_SHARE`` of those that reached the server or more (a reload
in the middle of the window), its latency however ordinary: errors are no scheduler
noise, yet a level's error count does not say when they came. A spike that overlaps a model's
outage (from leaving READY until ``reach_s`` after it is READY again) is named a cold
start — the outage as long as it may have been: the watcher polls, so it sees a model
leave only after the poll that last saw it READY, and back only when the poll that saw
it READY was answered (Triton may hold that poll while it loads, as it holds the clients'
requests: a wide bracket is said as one, "READY again between A and B s"). A spike while
the server itself stopped answering, or was shutting down (refusing new connections),
is named after that instead. A lone slow request that no outage explains is reported only beyond
``SPIKE_LONE_MAX_FACTOR``: a busy host's scheduler makes single 8x outliers every few
seconds, and a report that cries wolf on each gets ignored. A stall is no lone request:
nothing at all came back for it; nor is an error window: its requests failed.
Arrivals the load generator never sent are its own failing, not the server's: they make
no error window and count in no share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tritonkit.loadtest._server import POLL_INTERVAL_S, ServerEvent

SPIKE_FACTOR = 3.0
SPIKE_MAX_FACTOR = 8.0
SPIKE_FLOOR_MS = 2.0       # never flag a window less than this much above typical
SPIKE_LONE_MAX_FACTOR = 25.0   # a single slow request with no server event to explain it
# The cause of a spike that shows nothing but its latency, with no server event near it
LONE_SPIKE = "a latency spike no server event explains"
COLD_START_REACH_S = 1.5
# A model seen READY again within this long of the last poll that saw it out is said to be
# back at that poll's answer; a wider bracket (a poll Triton held while it loaded) is said
# as one: "READY again between A and B s".
READY_BRACKET_S = 0.25
# The share of a window's requests (of those that reached the server) that failing flags
# it: a reload 50 ms into a 1 s window, not a server's rare stray error in every window.
ERROR_WINDOW_SHARE = 0.05


@dataclass
class Window:
    """One window of the timeline; times in seconds from the start of the measurement."""

    index: int
    start_s: float
    ok: int
    errors: int
    qps: float
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    spike: bool = False
    cause: str = ""           # "cold start: ..." when tied to a model load, else ""
    came_back: int = 0        # requests that came back in it (answers, error answers), when they did
    # the longest a request had been out without an answer by its end (None: none was out)
    waiting_ms: float | None = None
    stall: bool = False       # requests were out, none came back (a spike too)
    failed: bool = False      # requests were sent in it and every one failed (a spike too)
    # of ``errors``, arrivals the load generator fell behind on and never sent: the run's
    # failing, not the server's, so they make no error window
    not_sent: int = 0
    # some requests that reached the server failed, ERROR_WINDOW_SHARE of them or more, and
    # some were answered (a spike too; every one failed: ``failed``)
    partly_failed: bool = False

    @property
    def server_errors(self) -> int:
        """The errors of requests that reached the server."""
        return self.errors - self.not_sent

    @property
    def error_share(self) -> float:
        """The share of the requests that reached the server that failed (0: none did)."""
        reached = self.ok + self.server_errors
        return self.server_errors / reached if reached else 0.0


@dataclass(frozen=True)
class Spike:
    """A flagged window and why it stands out."""

    window: int
    start_s: float
    p99_ms: float | None       # None: no request sent in the window got a latency (a stall)
    max_ms: float | None
    typical_p99_ms: float
    cold_start: bool
    cause: str
    events: tuple[dict, ...] = field(default_factory=tuple)
    stall: bool = False        # requests were out and none came back in the window
    waiting_ms: float | None = None
    failed: bool = False       # every request sent in the window failed (an error window)
    errors: int = 0            # how many failed in it, when ``failed`` or ``partly_failed``
    partly_failed: bool = False    # some failed, ERROR_WINDOW_SHARE of them or more (an error window)


def typical_p99_ms(timeline: list[Window]) -> float | None:
    """The median of the windows' p99 (windows with answers only)."""
    values = [w.p99_ms for w in timeline if w.p99_ms is not None]
    return float(np.median(values)) if values else None


def spike_windows(timeline: list[Window], factor: float = SPIKE_FACTOR,
                  max_factor: float = SPIKE_MAX_FACTOR, floor_ms: float = SPIKE_FLOOR_MS,
                  error_share: float = ERROR_WINDOW_SHARE) -> list[Window]:
    """Mark and return the windows whose tail stands far above the run's typical window,
    the stalls: requests out, none back, the oldest out as long as a spike's slowest, and
    the error windows: requests sent, every one failed, or ``error_share`` of them or more."""
    typical = typical_p99_ms(timeline)
    slowest = max(max_factor * (typical or 0.0), (typical or 0.0) + floor_ms)
    flagged = []
    for window in timeline:
        window.stall = (not window.came_back and window.waiting_ms is not None
                        and window.waiting_ms > slowest)
        high_p99 = high_max = False
        if window.p99_ms is not None and typical is not None:
            high_p99 = window.p99_ms > max(factor * typical, typical + floor_ms)
            high_max = window.max_ms > slowest
        window.failed = window.server_errors > 0 and not window.ok
        window.partly_failed = (window.server_errors > 0 and window.ok > 0
                                and window.error_share >= error_share)
        window.spike = high_p99 or high_max or window.stall or window.failed or window.partly_failed
        if window.spike:
            flagged.append(window)
    return flagged


Outage = tuple[str, str, float, float | None]     # model, version, left READY at, READY again by


def model_outages(events: list[ServerEvent], start_ns: int) -> list[Outage]:
    """(model, version, left READY at, READY again by or None) in seconds from ``start_ns``.

    A model that became READY without having been seen leaving it (a fresh load) has
    an outage that starts at its first non-READY state, or at its READY event. It ends
    when the poll that saw it READY was answered (``by_ns``, else the poll's time): Triton
    blocks HTTP while it loads a model, so that poll, sent just after the last one that
    saw it out, answers when the load is done — and so do the clients' requests. The
    outages of one model that overlap are one (see ``_merged``).
    """
    outages = []
    open_since: dict[tuple[str, str], float] = {}
    ready: dict[str, set[str]] = {}                  # model -> versions READY now
    # In time order: an outage inferred from statistics is recorded after the fact.
    for event in sorted(events, key=lambda e: e.t_ns):
        if event.kind == "serving":              # READY before the run: a version to count on
            ready.setdefault(event.model, set()).add(event.version)
            continue
        if event.kind != "state":
            continue
        key, at = (event.model, event.version), (event.t_ns - start_ns) / 1e9
        serving = ready.setdefault(event.model, set())
        if event.state != "READY":
            serving.discard(event.version)
            # A version leaving while another serves (a roll retiring it) is no outage;
            # statistics restarting (no version) always is: the model was reloaded.
            if not (event.version and serving - {event.version, ""}):
                open_since.setdefault(key, at)
        elif event.previous != "READY":
            serving.add(event.version)
            back = at if event.by_ns is None else max(at, (event.by_ns - start_ns) / 1e9)
            # Any version READY again: the model serves, whichever version left (the
            # statistics' own outage, no version, ends with their own event).
            for other in [k for k in open_since
                          if k[0] == event.model and k != key and k[1] and event.version]:
                outages.append((*other, open_since.pop(other), back))
            outages.append((*key, open_since.pop(key, at), back))
        else:
            serving.add(event.version)
    outages.extend((*key, since, None) for key, since in open_since.items())
    return _merged(sorted(outages, key=lambda o: o[2]))


def _merged(outages: list[Outage]) -> list[Outage]:
    """Overlapping outages of one model as one, from the first to leave to the last back.

    One outage is often seen twice: the index names its version, and the statistics
    restarting (or the readiness poll) infer it without one, over a slightly different
    span. Named apart, a spike took the cause of whichever began last. The versions
    seen are kept, joined ("1", or "1, 2" when two went out together).
    """
    merged: list[Outage] = []
    for model, version, left, ready in outages:      # by when they began
        same = next((i for i, o in enumerate(merged) if o[0] == model and (o[3] is None or left <= o[3])), None)
        if same is None:
            merged.append((model, version, left, ready))
            continue
        _, versions, began, back = merged[same]
        names = ", ".join(sorted({v for v in (*versions.split(", "), version) if v}))
        merged[same] = (model, names, began, None if back is None or ready is None else max(back, ready))
    return merged


def cold_start_windows(timeline: list[Window], events: list[ServerEvent], start_ns: int,
                       window_s: float, reach_s: float = COLD_START_REACH_S,
                       outages: list[Outage] | None = None, model: str | None = None,
                       poll_s: float = POLL_INTERVAL_S) -> list[Spike]:
    """Every spike, each tied to the model (re)load that explains it if one does.

    ``events`` come from the server watcher; ``start_ns`` is the measurement's start on
    the same clock. A spike whose requests were out during a model's outage — from leaving
    READY to ``reach_s`` after it is READY again — is a cold start: its slow requests either
    waited for the load or were the first ones the fresh instance served. A window holds
    the requests sent in it, so they were out from its start until its slowest came back,
    ``max_ms`` after its end at the latest. ``outages``: ``model_outages(events, start_ns)``
    when the caller has it already. ``model``, the one under test: another model that
    leaves for good (unloaded on a shared server) explains only what is near its leaving,
    not every spike after it; one that comes back may be a step of the tested ensemble.
    An outage counts from when it may have begun to when it may have ended (see
    ``_possible_span``; ``poll_s``: the watcher's interval, for events it did not bound).
    """
    typical = typical_p99_ms(timeline) or 0.0
    end_s = timeline[-1].start_s + window_s if timeline else 0.0
    if outages is None:
        outages = model_outages(events, start_ns)
    spans = [_possible_span(o, events, start_ns, poll_s) for o in outages]

    def until(outage: Outage, span: tuple[float, float, float | None]) -> float:
        _, left_by, back_by = span
        if back_by is not None:
            return back_by
        return end_s if model is None or outage[0] == model else left_by

    gone = _server_gone(events, start_ns, poll_s)
    spikes = []
    for window in spike_windows(timeline):
        lo, hi = window.start_s, window.start_s + window_s + (window.max_ms or 0.0) / 1000
        near = [o for o, span in zip(outages, spans) if span[0] < hi and lo <= until(o, span) + reach_s]
        server = [(e, began) for e, began, back in gone if began < hi and (back is None or lo <= back + reach_s)]
        lone = (not window.stall and not window.failed and not window.partly_failed
                and window.p99_ms <= max(SPIKE_FACTOR * typical, typical + SPIKE_FLOOR_MS))
        if lone and not near and not server and window.max_ms <= SPIKE_LONE_MAX_FACTOR * typical:
            window.spike = False
            continue
        # what the window shows besides its latency (which may tell nothing): a stall, else
        # its errors (requests that all timed out are both: nothing came back)
        seen, kind = "", ""
        if window.stall:
            seen, kind = (f"nothing came back while requests were out (the oldest for "
                          f"{window.waiting_ms / 1000:.2f} s)"), "stall"
        elif window.failed:
            seen, kind = f"every request failed ({window.server_errors} errors)", "errors"
        elif window.partly_failed:
            seen, kind = (f"{window.server_errors} of {window.ok + window.server_errors} requests "
                          f"failed ({_percent(window.error_share)})"), "errors"
        if server:              # the server itself going away explains more than a model's outage
            event, _ = server[-1]
            at = (event.t_ns - start_ns) / 1e9
            window.cause = (f"server shutting down from {at:.2f} s (it refused new connections, "
                            "answering only those already open)" if event.kind == "draining"
                            else f"server stopped answering at {at:.2f} s")
            window.cause += f"; {seen}" if seen else ""
        elif near:
            name, version, left, ready = near[-1]
            what = f"model '{name}'{' version ' + version if version else ''}"
            if ready is None:
                window.cause = f"{what} unavailable from {left:.2f} s"
            else:
                back_after = _back_after(near[-1], events, start_ns)
                window.cause = (f"cold start: {what} reloaded, not READY {left:.2f}–{ready:.2f} s"
                                if ready - back_after <= READY_BRACKET_S else
                                f"cold start: {what} reloaded, not READY from {left:.2f} s, READY "
                                f"again between {back_after:.2f} and {ready:.2f} s")
            window.cause += f"; {seen}" if seen else ""
        else:
            window.cause = f"{kind}: {seen}; no server event explains it" if seen else ""
        spikes.append(Spike(
            window=window.index, start_s=window.start_s, p99_ms=window.p99_ms,
            max_ms=window.max_ms, typical_p99_ms=typical,
            cold_start=not server and bool(near) and near[-1][3] is not None,
            cause=window.cause or LONE_SPIKE,
            events=tuple(e.as_dict(start_ns) for e in events
                         if any(e is s for s, _ in server) or
                         e.kind == "state" and not server and any(_during(e, o, start_ns) for o in near)),
            stall=window.stall, waiting_ms=window.waiting_ms if window.stall else None,
            failed=window.failed, partly_failed=window.partly_failed,
            errors=window.server_errors if window.failed or window.partly_failed else 0))
    return spikes


def _back_after(outage: Outage, events: list[ServerEvent], start_ns: int) -> float:
    """When ``outage``'s model was last seen still out before the poll that saw it READY
    again (the start of the bracket whose end is the outage's end)."""
    _, _, left, ready = outage
    latest = left
    for event in events:
        at = (event.t_ns - start_ns) / 1e9
        if (event.kind == "state" and event.state == "READY" and event.previous != "READY"
                and _during(event, outage, start_ns)):
            latest = max(latest, at if event.after_ns is None else (event.after_ns - start_ns) / 1e9)
    return min(latest, ready)


def _server_gone(events: list[ServerEvent], start_ns: int,
                 poll_s: float) -> list[tuple[ServerEvent, float, float | None]]:
    """(event, may have begun at, answering again by or None) for each time the server
    stopped answering ("down") or began shutting down ("draining"), in seconds from
    ``start_ns``; it began after the last poll that saw it answer (``after_ns``)."""
    gone = []
    for event in sorted(events, key=lambda e: e.t_ns):
        at = (event.t_ns - start_ns) / 1e9
        if event.kind in ("down", "draining"):
            began = at - poll_s if event.after_ns is None else (event.after_ns - start_ns) / 1e9
            gone.append((event, began, None))
        elif event.kind == "up":            # back after a "down" (a draining server never is)
            gone = [(e, began, at if back is None and e.kind == "down" else back)
                    for e, began, back in gone]
    return gone


def _percent(share: float) -> str:
    """A share below 1 as a percentage that never reads 100 %: 2 answered of 2,818 is 99.9 %."""
    return f"{share:.0%}" if share < 0.995 else f"{math.floor(share * 1000) / 10:g}%"


def _possible_span(outage: Outage, events: list[ServerEvent], start_ns: int,
                   poll_s: float) -> tuple[float, float, float | None]:
    """(may have begun at, may have begun by, may have ended by or None) for ``outage``, in
    seconds from ``start_ns``: its recorded span widened by the polls that saw its events.

    The watcher records a change at the poll that saw it: the model may have left READY
    just after the poll before (a window whose requests failed may end before the
    recorded start), and a poll that blocks while the model loads says READY only when
    it is answered. An event the watcher did not bound is taken within ``poll_s``.
    """
    def bounds(event: ServerEvent) -> tuple[float, float]:
        at = (event.t_ns - start_ns) / 1e9
        return (at - poll_s if event.after_ns is None else (event.after_ns - start_ns) / 1e9,
                at + poll_s if event.by_ns is None else (event.by_ns - start_ns) / 1e9)

    _, _, left, ready = outage
    own = [(e, bounds(e)) for e in events if e.kind == "state" and _during(e, outage, start_ns)]
    began = min((lo for _, (lo, _) in own), default=left)
    began_by = max((hi for e, (_, hi) in own if (e.t_ns - start_ns) / 1e9 == left), default=left)
    return began, began_by, None if ready is None else max((hi for _, (_, hi) in own), default=ready)


def _during(event: ServerEvent, outage: Outage, start_ns: int) -> bool:
    """Whether ``event`` is one of ``outage``'s own: its model's, from leaving READY to back."""
    model, _, left, ready = outage
    at = (event.t_ns - start_ns) / 1e9
    return event.model == model and left <= at and (ready is None or at <= ready)
