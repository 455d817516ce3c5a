"""The search, apart from any server: a config's highest load that meets the SLA, and the
walk over the space that picks the next config to try.

Both take the measurement as a function, so they run the same against the real server and
against a controlled one in the tests.

Per config (``highest_load``): closed loop first, a bracketing search over concurrency —
double (or halve) from a start until the p99 crosses the limit, then bisect — which finds
the load's knee in a few short runs; then the SLA is judged in **open loop** (latency timed
from each scheduled send): closed loop hides queueing (a client waits for its answer before
it sends again), and an SLA is a promise about arrivals. The config's figure is the
throughput at the highest open-loop rate that met it. The first config's rate starts at
what its concurrency carried, stepping down until it holds; a later one's starts at the
share of that throughput the configs before it held (open loop holds a like share from one
config to the next: a fifth to a third here), stepping down after a miss or up while it
holds — two or three probes rather than four to six.

Over the space (``coordinate_search``): from the served config, one knob at a time, each
of its values tried with the others held; a change is kept only when it beats the config
it would replace by ``min_gain`` (smaller differences are the machine's noise, not the
knob's), and passes repeat until one keeps nothing or the time is spent."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from tritonkit.tune._space import KNOBS, Candidate

CLOSED, OPEN = "closed", "open"


@dataclass(frozen=True)
class Probe:
    """One measurement at one load: ``level`` is a concurrency (closed) or a rate (open)."""

    mode: str
    level: float
    qps: float
    p50_ms: float | None
    p99_ms: float | None
    behind: int = 0                     # open loop: arrivals the load generator sent late or never
    batch: float | None = None          # samples per execution: the batches Triton formed
    queue_ms: float | None = None       # Triton's queue and compute time per request
    compute_ms: float | None = None

    def meets(self, p99_ms: float) -> bool:
        """Its p99 within the limit, every arrival sent on time, and requests carried: a
        probe that measured no throughput (its span cut to nothing) shows no SLA met."""
        return (self.behind == 0 and self.qps > 0 and self.p99_ms is not None
                and self.p99_ms <= p99_ms)


#: (mode, level) -> Probe
Measure = Callable[[str, float], Probe]


@dataclass
class Found:
    """A config's highest load that met the p99 limit, and every probe on the way."""

    probes: list[Probe] = field(default_factory=list)
    concurrency: int | None = None      # the highest closed-loop concurrency that met it
    judged: Probe | None = None         # the open-loop probe at the highest rate that met it
    below: float | None = None          # not judged under this rate: it could not win there

    @property
    def throughput(self) -> float:
        """Requests/s at the highest open-loop rate that met the limit (0: none did)."""
        return self.judged.qps if self.judged else 0.0

    @property
    def at_concurrency(self) -> Probe | None:
        return next((p for p in self.probes if p.mode == CLOSED and p.level == self.concurrency), None)

    @property
    def rate_share(self) -> float | None:
        """The open-loop rate that met the SLA as a share of the closed loop's throughput
        at ``concurrency``: where the next config's open-loop judgment starts."""
        closed = self.at_concurrency
        if self.judged is None or closed is None or closed.qps <= 0:
            return None
        return self.judged.level / closed.qps

    @property
    def best_p99_ms(self) -> float | None:
        """The lowest p99 measured at any load: how close a config that never met it came."""
        values = [p.p99_ms for p in self.probes if p.p99_ms is not None]
        return min(values) if values else None


def highest_load(measure: Measure, p99_ms: float, *, start: int = 4, most: int = 256,
                 resolution: float = 0.5, rate_step: float = 0.7, rate_tries: int = 6,
                 rate_share: float = 1.0, floor: float = 0.0,
                 out_of_time: Callable[[], bool] = lambda: False) -> Found:
    """Bracket the highest concurrency whose p99 meets ``p99_ms`` (``highest_concurrency``),
    then judge the SLA in open loop, ``rate_tries`` probes at most: from ``rate_share`` of
    the throughput that concurrency carried, the rate times ``rate_step`` after each miss
    until one meets it, or divided by it after each that met (never above that throughput)
    until one misses; the figure is the highest rate that met it.

    ``floor``: the figure a config must reach to matter (to be kept, or to be the best so
    far). No rate under it is tried, the first one not under it: where a config held to
    less would meet the SLA is not worth the probes (``Found.below``)."""
    found = Found()
    found.concurrency = highest_concurrency(measure, p99_ms, found.probes, start=start, most=most,
                                            resolution=resolution, out_of_time=out_of_time)
    if found.concurrency is None:
        return found                    # not even one request at a time meets it
    top = found.at_concurrency.qps
    if top <= floor:                    # the closed loop carries no more: open loop cannot either
        found.below = floor
        return found
    rate = max(floor, top * min(1.0, max(rate_share, rate_step ** rate_tries)))
    rising: bool | None = None          # stepping up (a rate met), down (one missed), or not yet
    for _ in range(rate_tries):
        if rate <= 0:
            break
        if rate < floor:
            found.below = floor
            break
        probe = measure(OPEN, rate)
        found.probes.append(probe)
        if probe.meets(p99_ms):
            found.judged = probe
            if rising is False or rate >= top:
                break                   # down to a rate that holds, or up to the closed loop's
            rising, rate = True, min(top, rate / rate_step)
        elif rising:
            break                       # the step above the highest that held
        else:
            rising, rate = False, rate * rate_step
    return found


def highest_concurrency(measure: Measure, p99_ms: float, probes: list[Probe], *, start: int,
                        most: int, resolution: float,
                        out_of_time: Callable[[], bool] = lambda: False) -> int | None:
    """The highest closed-loop concurrency whose p99 meets ``p99_ms`` (None: not even 1),
    each probe added to ``probes``: doubling (or halving) from ``start``, at most
    ``most``, then bisecting until the bracket is within ``resolution`` of its low end or
    ``out_of_time()``."""

    def closed(level: int) -> bool:
        probe = measure(CLOSED, level)
        probes.append(probe)
        return probe.meets(p99_ms)

    level = max(1, min(start, most))
    low: int | None = None
    high: int | None = None
    if closed(level):
        low = level
        while low < most:
            level = min(most, low * 2)
            if not closed(level):
                high = level
                break
            low = level
    else:
        high = level
        while high > 1:
            level = high // 2
            if closed(level):
                low = level
                break
            high = level
    if low is None:
        return None
    while (high is not None and high - low > 1 and high > low * (1 + resolution)
           and not out_of_time()):
        middle = (low + high) // 2
        if closed(middle):
            low = middle
        else:
            high = middle
    return low


@dataclass(frozen=True)
class AtSla:
    """A config's closed-loop throughput under the p99 limit, re-found: the highest
    throughput of the probes that met it, at the highest concurrency that did."""

    qps: float                          # 0: no probe met the limit
    concurrency: int | None
    probes: tuple[Probe, ...]


def throughput_at_sla(measure: Measure, p99_ms: float, *, start: int, most: int = 256) -> AtSla:
    """The throughput ``measure``'s config carries under ``p99_ms``, judged as
    perf_analyzer's climb judges it (the highest throughput among the concurrencies whose
    p99 met the limit, climbing until one does not), from ``start`` — where the config met
    it last — rather than from 1: the concurrency doubled until the p99 passes the limit,
    or halved until it meets it, so a config whose load at the SLA moved since the last
    look is measured at its own, in two probes or three where it did not."""
    probes: list[Probe] = []
    level = highest_concurrency(measure, p99_ms, probes, start=start, most=most, resolution=1.0)
    met = [p.qps for p in probes if p.meets(p99_ms)]
    return AtSla(qps=max(met, default=0.0), concurrency=level, probes=tuple(probes))


#: (Candidate, the score it must beat to be kept) -> its score (higher is better), or None
#: when it could not be measured
Evaluate = Callable[[Candidate, float], "float | None"]


def coordinate_search(start: Candidate, values: dict[str, Iterable], evaluate: Evaluate, *,
                      min_gain: float = 0.05, out_of_time: Callable[[], bool] = lambda: False,
                      ) -> Candidate:
    """The best point found from ``start``, one knob at a time (``values``: each knob's
    values to try, in ``KNOBS`` order). ``evaluate`` is called once per point, with the
    score it must beat to be kept (0 for the start); the caller keeps the figures. A point
    it cannot measure (None) is passed over. A change is kept when its score beats the
    current point's by more than ``min_gain`` (a fraction)."""
    scores: dict[Candidate, float | None] = {}

    def score(point: Candidate) -> float | None:
        if point not in scores:
            scores[point] = evaluate(point, max(0.0, best * (1 + min_gain)) if best is not None else 0.0)
        return scores[point]

    current, best = start, None
    best = score(current)
    changed = True
    while changed and not out_of_time():
        changed = False
        for knob in (k for k in KNOBS if k in values):
            for value in values[knob]:
                point = current.with_knob(knob, value)
                if point == current:
                    continue
                if out_of_time():
                    return current
                got = score(point)
                if got is None:
                    continue
                if best is None or got > best * (1 + min_gain):
                    current, best, changed = point, got, True
    return current
