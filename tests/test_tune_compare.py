"""tune's interleaved comparison measures each side at its own load under the SLA, found
again each round, so the ratio it reports is the one an independent perf_analyzer climb
(concurrency 1, 2, 4, ... until the p99 passes the limit; the highest throughput that met
it) re-measures. Against configs whose throughput and p99 at each concurrency the test
sets, so the right answer is known."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from tritonkit.report import Sla
from tritonkit.tune import _run
from tritonkit.tune._run import BARE, SERVED, Trial, TuneResult
from tritonkit.tune._search import CLOSED, OPEN, Found, Probe, throughput_at_sla
from tritonkit.tune._space import Candidate

SLA_MS = 10.0


def curve(per_user: float, capacity: float, base_ms: float, ms_per_user: float):
    """A config: closed loop at c carries min(c x per_user, capacity) requests/s, its p99
    base_ms + c x ms_per_user."""
    return lambda c: (min(c * per_user, capacity), base_ms + c * ms_per_user)


# Batching pays at low load (more per user) but its p99 passes 10 ms above 8 users; the
# plain config carries more where its p99 still meets the limit, at 16 to 29 users.
BATCHED = curve(per_user=900, capacity=4000, base_ms=2.0, ms_per_user=0.9)
PLAIN = curve(per_user=600, capacity=5000, base_ms=1.0, ms_per_user=0.3)


class Configs:
    """The server as the comparison sees it: a config swapped in, then measured."""

    def __init__(self, curves: dict) -> None:
        self.curves, self.point = curves, None
        self.measured: list[tuple[Candidate, float]] = []

    def swap(self, point) -> float:
        self.point = point
        return 0.0

    def measure(self, mode: str, level: float) -> Probe:
        assert mode == CLOSED
        self.measured.append((self.point, level))
        qps, p99 = self.curves[self.point](level)
        return Probe(CLOSED, level, qps, p99 / 2, p99)


def perf_analyzer_climb(config) -> float:
    """bench/bench_tune.py's climb: 1, 2, 4, ... until the p99 passes the limit."""
    best, level = 0.0, 1
    while level <= 256:
        qps, p99 = config(level)
        if p99 > SLA_MS:
            break
        best, level = max(best, qps), level * 2
    return best


def measure_of(config):
    return lambda mode, level: Probe(mode, level, *config(level)[:1], None, config(level)[1])


def test_a_side_whose_load_under_the_sla_moved_up_is_measured_there():
    """The search found 7 users for the plain config; it meets the limit at 28: the
    doubling climbs to the last concurrency that meets it, and stops at the first miss."""
    at = throughput_at_sla(measure_of(PLAIN), SLA_MS, start=7)
    assert at.concurrency == 28 and at.qps == 5000
    assert [p.level for p in at.probes] == [7, 14, 28, 56]


def test_a_side_that_no_longer_meets_the_sla_where_it_did_is_measured_lower():
    at = throughput_at_sla(measure_of(BATCHED), SLA_MS, start=16)
    assert at.concurrency == 8 and at.qps == pytest.approx(4000)
    assert [p.level for p in at.probes] == [16, 8]


def test_the_figure_is_the_highest_throughput_that_met_the_sla_as_perf_analyzer_takes_it():
    """Past its capacity a config carries less (contention): the figure is the best of the
    concurrencies that met the limit, not the one at the highest."""
    sagging = lambda c: (3000 - abs(c - 4) * 200, 1.0 + c * 0.5)  # noqa: E731
    at = throughput_at_sla(measure_of(sagging), SLA_MS, start=4)
    assert at.concurrency == 16 and at.qps == 3000
    assert throughput_at_sla(measure_of(lambda c: (100.0, 50.0)), SLA_MS, start=4).qps == 0.0


def test_the_comparison_reports_the_ratio_a_perf_analyzer_climb_measures(monkeypatch):
    """The miss bench_tune saw: measured at the concurrencies the search found (8 and 7),
    batching looked 0.95x of the plain config; each side climbed to its own load under
    the SLA, it is 0.80x, and so tune says now."""
    best, served, bare = Candidate(instance_count=2), Candidate(instance_count=1), Candidate(bare=True)
    configs = Configs({best: BATCHED, served: PLAIN, bare: PLAIN})
    found = lambda c: Found(concurrency=c, judged=Probe(OPEN, 1000.0, 1000.0, 1.0, 2.0))  # noqa: E731
    trials = [Trial(point=served, role=SERVED, found=found(7)), Trial(point=bare, role=BARE, found=found(7)),
              Trial(point=best, found=found(8))]
    result = TuneResult(model="m", server="-", sla=Sla(p99_ms=SLA_MS), space=None, trials=trials,
                        best=trials[2], budget_s=600.0)
    monkeypatch.setattr(_run, "candidate_config", lambda served_config, point: point)
    clock = iter(range(0, 10_000)).__next__
    _run._compare(result, configs, None, result.sla, 256, clock, 0, {"name": ""}, lambda *_: None)
    expected = perf_analyzer_climb(BATCHED) / perf_analyzer_climb(PLAIN)
    assert expected == pytest.approx(0.8)
    for comparison in result.comparisons:
        assert comparison.interval.ratio == pytest.approx(expected)
        assert comparison.winner_concurrency[-1] == 8 and comparison.baseline_concurrency[-1] == 28
    # ...and the served config stays: the best is not shown to beat it
    assert result.winner is trials[0]


def test_the_comparison_takes_no_more_than_its_share_of_the_budget(monkeypatch):
    """The search ended 50 s into a 300 s budget: the comparison's rounds stop within its
    third of the budget (100 s), not at the budget's end. Each probe takes 5 s here, and
    the host's noise keeps the interval from getting precise."""
    now = [50.0]
    noise = itertools.cycle([1.0, 0.5, 1.4, 0.7, 1.2, 0.9, 0.6])

    class Timed(Configs):
        def measure(self, mode: str, level: float) -> Probe:
            now[0] += 5.0
            probe = super().measure(mode, level)
            return dataclasses.replace(probe, qps=probe.qps * next(noise))

    best, served = Candidate(instance_count=2), Candidate(instance_count=1)
    found = lambda c: Found(concurrency=c, judged=Probe(OPEN, 1000.0, 1000.0, 1.0, 2.0))  # noqa: E731
    trials = [Trial(point=served, role=SERVED, found=found(16)), Trial(point=best, found=found(8))]
    result = TuneResult(model="m", server="-", sla=Sla(p99_ms=SLA_MS), space=None, trials=trials,
                        best=trials[1], budget_s=300.0)
    monkeypatch.setattr(_run, "candidate_config", lambda served_config, point: point)
    _run._compare(result, Timed({best: BATCHED, served: PLAIN}), None, result.sla, 256,
                  lambda: now[0], 0, {"name": ""}, lambda *_: None)
    rounds = len(result.comparisons[0].winner_runs)
    assert rounds >= _run.MIN_ROUNDS and now[0] - 50 <= 300 * _run.COMPARE_SHARE
    assert now[0] + (now[0] - 50) / rounds < 300       # another round would have fit the budget
