"""tune's search and interval logic against a measurement function the test controls: a
server model whose p99 and throughput are known, so the answers are known too."""

from __future__ import annotations

import math
import random

import pytest
from tritonclient.grpc import model_config_pb2 as mc
from google.protobuf import text_format

from tritonkit.profiles import TuneSpace
from tritonkit.tune import (CLOSED, OPEN, Candidate, Found, Probe, coordinate_search, highest_load,
                            interleave, paired_interval, t_quantile)
from tritonkit.tune._space import applicable, candidate_config, served_point


class QueueModel:
    """A server of ``capacity`` requests/s, ``service_ms`` each: closed loop at c carries
    min(c / service, capacity) with p99 growing past the knee; open loop at a rate holds
    the p99 low until the rate nears capacity, then it explodes (queueing)."""

    def __init__(self, capacity: float = 1000.0, service_ms: float = 2.0) -> None:
        self.capacity, self.service_ms = capacity, service_ms
        self.calls: list[tuple[str, float]] = []

    def __call__(self, mode: str, level: float) -> Probe:
        self.calls.append((mode, level))
        if mode == CLOSED:
            qps = min(level * 1000 / self.service_ms, self.capacity)
            p99 = self.service_ms * max(1.0, level * 1000 / self.service_ms / self.capacity) * 1.5
            return Probe(CLOSED, level, qps, p99 / 1.5, p99)
        utilisation = level / self.capacity
        p99 = math.inf if utilisation >= 1 else self.service_ms * 1.5 / (1 - utilisation)
        return Probe(OPEN, level, min(level, self.capacity), self.service_ms,
                     None if math.isinf(p99) else p99)


def test_highest_load_brackets_the_knee_then_judges_in_open_loop():
    server = QueueModel(capacity=1000, service_ms=2.0)     # the knee at concurrency 2
    found = highest_load(server, p99_ms=12.0, start=4)
    # closed loop: p99 = 3 ms x c/2 past the knee, so c = 8 is the last at or under 12 ms
    assert found.concurrency == 8
    # the open-loop judgment at 1000/s (saturated) misses; 700/s (p99 10 ms) meets it:
    # the config's figure is an arrival rate that held
    assert [m for m, _ in server.calls].count(OPEN) == 2
    assert found.judged.mode == OPEN and found.judged.level == pytest.approx(700.0)
    assert found.throughput == pytest.approx(700.0)


def test_open_loop_judged_from_a_share_steps_up_while_the_sla_holds():
    """A later config starts where the earlier ones held (their share of the closed loop's
    throughput): from 500/s, up by 1/0.7 while it meets 12 ms, and no higher than the
    1,000/s the closed loop carried. Open loop holds 12 ms up to 750/s here."""
    server = QueueModel(capacity=1000, service_ms=2.0)
    found = highest_load(server, p99_ms=12.0, start=8, rate_share=0.5)
    rates = [level for mode, level in server.calls if mode == OPEN]
    assert rates == pytest.approx([500.0, 500 / 0.7, 1000.0])      # 714/s met, 1,000/s missed
    assert found.throughput == pytest.approx(500 / 0.7)
    assert found.rate_share == pytest.approx(0.5 / 0.7)


def test_open_loop_judged_from_a_share_that_misses_steps_down_until_it_holds():
    server = QueueModel(capacity=1000, service_ms=2.0)
    found = highest_load(server, p99_ms=12.0, start=8, rate_share=0.9)
    assert [level for mode, level in server.calls if mode == OPEN] == pytest.approx([900.0, 630.0])
    assert found.throughput == pytest.approx(630.0)


def test_open_loop_that_holds_at_the_closed_loops_throughput_goes_no_higher():
    server = QueueModel(capacity=10_000, service_ms=1.0)
    found = highest_load(server, p99_ms=100.0, start=4, most=4, rate_share=0.6)   # 4,000/s
    rates = [level for mode, level in server.calls if mode == OPEN]
    closed = found.at_concurrency.qps
    assert rates[-1] == pytest.approx(closed) and all(r <= closed for r in rates)
    assert found.throughput == pytest.approx(closed) and found.rate_share == pytest.approx(1.0)


def test_a_config_whose_closed_loop_carries_no_more_than_the_best_so_far_is_not_judged():
    """The best config so far held 1,200/s: one whose closed loop carries 1,000/s cannot
    beat it in open loop (never above that), so no open-loop probe is spent on it."""
    server = QueueModel(capacity=1000, service_ms=2.0)
    found = highest_load(server, p99_ms=12.0, start=8, rate_share=0.5, floor=1200.0)
    assert found.concurrency == 8 and all(mode == CLOSED for mode, _ in server.calls)
    assert found.judged is None and found.below == 1200.0 and found.throughput == 0


def test_open_loop_judged_from_below_the_best_so_far_starts_at_it():
    """From a share of 30 % (300/s) with 600/s to beat: judged first at 600/s, which holds,
    then up while it holds; nothing under 600/s is tried."""
    server = QueueModel(capacity=1000, service_ms=2.0)
    found = highest_load(server, p99_ms=12.0, start=8, rate_share=0.3, floor=600.0)
    rates = [level for mode, level in server.calls if mode == OPEN]
    assert rates == pytest.approx([600.0, 600 / 0.7])          # 857/s misses (21 ms)
    assert found.throughput == pytest.approx(600.0) and found.below is None


def test_open_loop_stops_stepping_down_at_the_best_so_far():
    """900/s misses; the next step down, 630/s, would meet, but the best config so far
    held 800/s: this one cannot win, and is left unjudged under 800/s."""
    server = QueueModel(capacity=1000, service_ms=2.0)
    found = highest_load(server, p99_ms=12.0, start=8, rate_share=0.9, floor=800.0)
    assert [level for mode, level in server.calls if mode == OPEN] == pytest.approx([900.0])
    assert found.judged is None and found.below == 800.0


def test_a_probe_that_carried_no_requests_meets_no_sla():
    """A level cut to no time (the server seen gone at its start) has latencies and no
    throughput: a config judged on it would claim the SLA met at 0 requests/s."""
    assert Probe(OPEN, 100.0, 50.0, 1.0, 2.0).meets(5.0)
    assert not Probe(OPEN, 100.0, 0.0, 1.0, 2.0).meets(5.0)
    found = highest_load(lambda mode, level: Probe(mode, level, 0.0 if mode == OPEN else 100.0,
                                                   1.0, 2.0), p99_ms=5.0, start=1, most=1)
    assert found.concurrency == 1 and found.judged is None and found.throughput == 0


def test_highest_load_halves_down_from_a_start_above_the_knee():
    server = QueueModel(capacity=1000, service_ms=2.0)
    found = highest_load(server, p99_ms=4.0, start=32)    # only c <= 2 meets 4 ms
    assert found.concurrency == 2
    closed = [level for mode, level in server.calls if mode == CLOSED]
    assert closed[:4] == [32, 16, 8, 4] and 2 in closed


def test_highest_load_of_a_config_that_never_meets_the_limit():
    server = QueueModel(capacity=1000, service_ms=2.0)     # 3 ms p99 at the least load
    found = highest_load(server, p99_ms=1.0, start=4)
    assert found.concurrency is None and found.judged is None and found.throughput == 0
    assert found.best_p99_ms == pytest.approx(3.0)         # how close it came
    assert all(mode == CLOSED for mode, _ in server.calls)
    assert server.calls[-1] == (CLOSED, 1)


def test_highest_load_stops_at_the_most_concurrency_asked():
    server = QueueModel(capacity=10_000, service_ms=1.0)
    found = highest_load(server, p99_ms=100.0, start=4, most=16)
    assert found.concurrency == 16
    assert max(level for mode, level in server.calls if mode == CLOSED) == 16


def test_highest_load_bisection_ends_when_out_of_time():
    server = QueueModel(capacity=1000, service_ms=2.0)
    found = highest_load(server, p99_ms=12.0, start=4, out_of_time=lambda: True)
    # 4 met, 8 met, 16 missed: no bisection asked, the bracket's low end is the answer
    assert found.concurrency == 8
    assert [level for mode, level in server.calls if mode == CLOSED] == [4, 8, 16]


def _scores(table: dict[tuple, float | None]):
    calls = []

    def evaluate(point: Candidate, to_keep: float):
        calls.append(point)
        return table[(point.instance_count, point.max_batch_size)]
    return evaluate, calls


def test_coordinate_search_walks_one_knob_at_a_time_to_the_best():
    table = {(1, 32): 100.0, (2, 32): 150.0, (3, 32): 140.0,
             (2, 16): 120.0, (2, 64): 180.0, (1, 64): 110.0, (3, 64): 170.0}
    evaluate, calls = _scores(table)
    best = coordinate_search(Candidate(instance_count=1, max_batch_size=32),
                             {"instance_count": (1, 2, 3), "max_batch_size": (16, 32, 64)}, evaluate)
    assert (best.instance_count, best.max_batch_size) == (2, 64)
    assert len(calls) == len(set(calls)), "each point is measured once"


def test_coordinate_search_keeps_the_incumbent_within_the_noise():
    table = {(1, 32): 100.0, (2, 32): 103.0, (3, 32): 104.9}    # under 5 % better: noise
    evaluate, _ = _scores(table)
    best = coordinate_search(Candidate(instance_count=1, max_batch_size=32),
                             {"instance_count": (1, 2, 3)}, evaluate, min_gain=0.05)
    assert best.instance_count == 1


def test_coordinate_search_passes_over_a_config_that_could_not_be_measured():
    table = {(1, 32): 100.0, (2, 32): None, (3, 32): 130.0}
    evaluate, calls = _scores(table)
    best = coordinate_search(Candidate(instance_count=1, max_batch_size=32),
                             {"instance_count": (1, 2, 3)}, evaluate)
    assert best.instance_count == 3
    assert Candidate(instance_count=2, max_batch_size=32) in calls


def test_coordinate_search_stops_when_out_of_time():
    evaluate, calls = _scores({(1, 32): 100.0, (2, 32): 200.0, (3, 32): 300.0})
    left = iter([False, False, True, True])
    coordinate_search(Candidate(instance_count=1, max_batch_size=32),
                      {"instance_count": (1, 2, 3)}, evaluate, out_of_time=lambda: next(left))
    assert len(calls) == 2          # the start, then one point before time ran out


@pytest.mark.parametrize("df,expected", [(1, 12.706), (2, 4.303), (3, 3.182), (5, 2.571),
                                         (10, 2.228), (30, 2.042)])
def test_t_quantile_matches_the_published_table(df, expected):
    assert t_quantile(0.95, df) == pytest.approx(expected, abs=5e-4)


def test_a_clear_gain_has_an_interval_above_one():
    winner = [120.0, 131.0, 118.0, 126.0, 124.0]
    baseline = [100.0, 108.0, 99.0, 104.0, 101.0]      # each pair ran side by side
    interval = paired_interval(winner, baseline)
    assert interval.significant and interval.low > 1.0
    assert interval.low < interval.ratio < interval.high
    assert interval.ratio == pytest.approx(math.exp(sum(math.log(a / b) for a, b in
                                                        zip(winner, baseline)) / 5))
    assert interval.describe().startswith(f"{interval.ratio:.2f}x (95% CI")


def test_noise_around_no_change_is_said_as_no_significant_difference():
    interval = paired_interval([100.0, 95.0, 104.0, 99.0], [98.0, 101.0, 97.0, 103.0])
    assert not interval.significant
    assert interval.describe().startswith("no significant difference")


def test_one_pair_gives_no_interval():
    assert paired_interval([100.0], [90.0]) is None


def test_the_interval_covers_the_true_ratio_at_its_confidence():
    """Runs whose throughput drifts with the machine (shared by both sides of a round) and
    jitters on its own: the interval on paired ratios holds the true 1.15x about 95 % of
    the time, and pairing cancels the drift an unpaired figure would carry."""
    rng = random.Random(20261204)
    true_ratio, trials, covered = 1.15, 2000, 0
    for _ in range(trials):
        winner, baseline = [], []
        for _ in range(6):
            machine = rng.uniform(0.5, 1.5)             # a busy spell hits both runs of a round
            baseline.append(1000 * machine * math.exp(rng.gauss(0, 0.08)))
            winner.append(1000 * true_ratio * machine * math.exp(rng.gauss(0, 0.08)))
        interval = paired_interval(winner, baseline)
        covered += interval.low <= true_ratio <= interval.high
    assert 0.93 <= covered / trials <= 0.97


def test_interleave_alternates_the_order_and_stops_when_precise():
    order = []

    def run(side: str) -> float:
        order.append(side)
        return {"A": 110.0, "B": 100.0, "C": 90.0}[side]     # no noise: precise at once
    figures = interleave(["A", "B", "C"], run, min_rounds=2, max_rounds=10)
    assert order == ["A", "B", "C", "C", "B", "A"]
    assert figures == {"A": [110.0, 110.0], "B": [100.0, 100.0], "C": [90.0, 90.0]}


def test_interleave_stops_at_the_most_rounds_or_when_time_runs_out():
    rng = random.Random(1)

    def noisy(side: str) -> float:
        return rng.uniform(50, 150)
    assert len(interleave(["A", "B"], noisy, min_rounds=2, max_rounds=5)["A"]) == 5
    clock = iter(range(0, 1000, 10))
    left = iter([100, 5])              # asked after the first two rounds, and each after
    figures = interleave(["A", "B"], noisy, min_rounds=2, max_rounds=10,
                         time_left=lambda: next(left), clock=lambda: next(clock))
    assert len(figures["A"]) == 3      # a round takes 10 s: 5 s left holds no fourth


SERVED = """
name: "m"
backend: "python"
max_batch_size: 32
input { name: "x" data_type: TYPE_FP32 dims: 16 }
output { name: "y" data_type: TYPE_FP32 dims: 10 }
dynamic_batching { preferred_batch_size: 32 max_queue_delay_microseconds: 0 }
instance_group { count: 1 kind: KIND_CPU }
parameters { key: "onnx_model" value { string_value: "model.onnx" } }
parameters { key: "tritonkit_reloaded_at" value { string_value: "2026-01-01T00:00:00Z" } }
model_warmup { name: "batch_1" batch_size: 1 inputs { key: "x" value { data_type: TYPE_FP32 dims: 16 random_data: true } } }
model_warmup { name: "batch_32" batch_size: 32 inputs { key: "x" value { data_type: TYPE_FP32 dims: 16 random_data: true } } }
model_warmup { name: "batch_16" batch_size: 16 inputs { key: "x" value { data_type: TYPE_FP32 dims: 16 random_data: true } } }
"""


def _served() -> mc.ModelConfig:
    return text_format.Parse(SERVED, mc.ModelConfig())


def test_a_lower_batch_limit_warms_no_batch_above_it_and_its_own():
    config = candidate_config(_served(), Candidate(max_batch_size=8, instance_count=3,
                                                   intra_op_thread_count=2, max_queue_delay_us=500))
    assert config.max_batch_size == 8
    assert [w.batch_size for w in config.model_warmup] == [1, 8, 2, 4]
    assert [w.name for w in config.model_warmup] == ["batch_1", "batch_8", "batch_2", "batch_4"]
    assert [g.count for g in config.instance_group] == [3]
    assert config.parameters["intra_op_thread_count"].string_value == "2"
    assert config.dynamic_batching.max_queue_delay_microseconds == 500
    # Triton's own fill-in of [max_batch_size] does not survive the change of limit
    assert list(config.dynamic_batching.preferred_batch_size) == []
    assert "tritonkit_reloaded_at" not in config.parameters


def test_preferred_sizes_are_the_warm_up_sizes_and_bare_default_drops_batching():
    config = candidate_config(_served(), Candidate(max_batch_size=64, preferred_batch_size=True))
    assert list(config.dynamic_batching.preferred_batch_size) == [8, 16, 32, 64]
    assert max(w.batch_size for w in config.model_warmup) == 64
    bare = candidate_config(_served(), Candidate(bare=True))
    assert not bare.HasField("dynamic_batching") and not bare.instance_group
    assert bare.max_batch_size == 32


def test_the_served_point_and_the_knobs_a_cpu_copy_has():
    space = TuneSpace(instance_count=(1, 2), max_batch_size=(16, 32), max_queue_delay_us=(0,),
                      intra_op_thread_count=(0, 1), accelerator=("tensorrt", "cuda"))
    wanted, notes = applicable(_served(), space, local=True)
    assert wanted.accelerator == () and any("accelerator" in n for n in notes)
    assert served_point(_served(), wanted) == Candidate(
        instance_count=1, max_batch_size=32, max_queue_delay_us=0, intra_op_thread_count=0)
    unbatched = _served()
    unbatched.max_batch_size = 0
    wanted, notes = applicable(unbatched, space, local=True)
    assert wanted.max_batch_size == () and wanted.instance_count == (1, 2)
    assert any("does not batch" in n for n in notes)


class _Served:
    """The server as tune's search sees it: a config swapped in (or warmed as served),
    then measured; each config a QueueModel."""

    def __init__(self, servers: dict) -> None:
        self.servers, self.point = servers, None

    def swap(self, point) -> float:
        self.point = point
        return 0.0

    def warm(self) -> None:
        self.point = Candidate(instance_count=1)

    def measure(self, mode: str, level: float) -> Probe:
        return self.servers[self.point](mode, level)


SERVED_POINT, TWO, BARE = Candidate(instance_count=1), Candidate(instance_count=2), Candidate(bare=True)


def _searched(monkeypatch, capacity: dict):
    """tune's search (baselines, then the walk over one to two instances) of configs of
    these capacities, p99 <= 12 ms: the result, and its trials by point."""
    from tritonkit.report import Sla
    from tritonkit.tune import _run

    monkeypatch.setattr(_run, "candidate_config", lambda served_config, point: point)
    result = _run.TuneResult(model="m", server="-", sla=Sla(p99_ms=12.0),
                             space=TuneSpace(instance_count=(1, 2)), trials=[], budget_s=1e6)
    servers = {point: QueueModel(capacity=c) for point, c in capacity.items()}
    _run._search(result, _Served(servers), None, SERVED_POINT, result.sla, 256,
                 iter(range(10_000)).__next__, 0, {"name": ""}, lambda *_: None)
    return result, {t.point: t.found for t in result.trials}


def test_the_search_judges_a_point_only_as_high_as_the_best_figure_so_far(monkeypatch):
    """The served config holds 700/s in open loop; two instances carry 600/s at most in
    closed loop (they cannot win): no open-loop probe for them. Triton's bare default, a
    baseline, carries as little, and is judged all the same: its figure is reported."""
    result, found = _searched(monkeypatch, {SERVED_POINT: 1000, TWO: 600, BARE: 600})
    opened = lambda point: [p for p in found[point].probes if p.mode == OPEN]  # noqa: E731
    assert found[SERVED_POINT].throughput == pytest.approx(700.0)
    assert opened(TWO) == [] and found[TWO].below == pytest.approx(700.0)
    assert found[BARE].judged is not None and opened(BARE)
    assert result.best.point == SERVED_POINT


def test_a_point_that_beats_the_served_config_but_not_the_bare_default_is_still_judged(monkeypatch):
    """The bare default (a baseline, outside the space) holds 1,050/s, the served config
    700/s; two instances hold 840/s: enough to be kept by the walk (700/s plus 5 %), so it
    is judged there, not pruned at the bare default's figure."""
    _, found = _searched(monkeypatch, {SERVED_POINT: 1000, TWO: 1200, BARE: 1500})
    assert found[SERVED_POINT].throughput == pytest.approx(700.0)
    assert found[BARE].throughput == pytest.approx(1050.0)
    assert found[TWO].below is None and found[TWO].throughput == pytest.approx(840.0)


def test_a_point_left_unjudged_under_the_figure_it_needed_says_so():
    from tritonkit.tune._report import _unmet

    found = Found(probes=[Probe(CLOSED, 8, 1000.0, 1.0, 4.0)], concurrency=8, below=1200.0)
    assert _unmet(found) == ("met at c=8; not judged under 1,200.0 QPS, what it had to reach to "
                             "be kept or the best: it could not win")
