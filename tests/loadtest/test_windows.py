"""`tritonkit loadtest` timeline windows: each window's QPS, p99 and boundaries, what counts as
no answer, and windows flagged for errors."""

from __future__ import annotations

import pytest

from tests.loadtest.conftest import MS, S, _failed_in_second, _level_from, _some_failed_in_second
from tritonkit import report
from tritonkit.errors import EXIT_SLA_MISS
from tritonkit.loadtest import LoadSpec, LoadTestResult, ServerEvent, cold_start_windows


def test_a_windows_qps_counts_answered_requests_as_the_levels_qps_does():
    # second 0: 8 answers and 2 errors; second 1: 10 answers
    records = [(i * 100 * MS, MS, "HTTP 500: boom" if i in (3, 7) else None) for i in range(20)]
    level = _level_from(records)
    assert level.qps == 9.0
    assert [w.qps for w in level.timeline] == [8.0, 10.0]
    assert [w.errors for w in level.timeline] == [2, 0]


def test_a_p99_leaves_no_more_than_one_request_in_a_hundred_above_it_however_few_were_sent():
    """Nearest rank, rounded up: of 60 requests 1 % is 0.6 of one, so none may be above the
    p99 — the one cold request is the p99 (rounded to the nearest rank it was the second
    slowest, and an SLA on p99 passed with 1 request in 60 over it). Of 100, the 99th."""
    few = [(i * 10 * MS, MS, None) for i in range(59)] + [(600 * MS, 500 * MS, None)]
    level = _level_from(few, duration_s=1, window_s=1)
    assert level.latency_ms["p99"] == pytest.approx(500, rel=0.01)
    assert level.timeline[0].p99_ms == pytest.approx(500, rel=0.01)
    verdict = report.judge(LoadTestResult(spec=LoadSpec(model="m", concurrency=(1,)), server="s",
                                          request="r", levels=[level]), report.Sla(p99_ms=100))
    assert verdict.exit_code == EXIT_SLA_MISS
    hundred = [(i * 5 * MS, (1 + i // 99) * MS, None) for i in range(99)] + [(990 * MS, 500 * MS, None)]
    assert _level_from(hundred, duration_s=1, window_s=1).latency_ms["p99"] == pytest.approx(1, rel=0.01)


def test_the_mean_latency_is_the_mean_of_the_latencies_timed_not_of_their_buckets():
    """1.001 ms, 2.001 ms ... 10.001 ms: HdrHistogram's own mean takes each bucket's middle
    value; the mean is the requests', exact to the microsecond they are timed in. An
    open-loop level's send lag is averaged the same way."""
    records = [(i * 100 * MS, (i + 1) * MS + 1_000, None) for i in range(10)]
    assert _level_from(records, duration_s=1).latency_ms["mean"] == pytest.approx(5.501, abs=1e-9)
    assert _level_from(records, mode="open", duration_s=1).send_lag_ms["mean"] == pytest.approx(0.001)


def test_a_request_sent_just_before_a_window_boundary_is_in_the_window_before_it():
    """2.01 s windows: 2.01 * 1e9 is 2009999999.9999998, which truncated put the boundary
    1 ns early, and the last nanosecond's request in the next window."""
    records = [(2_010_000_000 - 1, MS, None), (2_010_000_000, MS, None)]
    level = _level_from(records, duration_s=4.02, window_s=2.01)
    assert [(w.start_s, w.ok) for w in level.timeline] == [(0.0, 1), (2.01, 1)]


def test_a_request_sent_in_the_warm_up_and_answered_in_the_measurement_counts_in_its_first_window():
    """Closed loop, the server stalled from 0.1 s before the start until 1.4 s into it: the
    request it held is the stall's only trace, since nothing else was sent meanwhile. It
    overlaps the measurement, as one sent before the end and answered after it does (both
    are in the latencies); one answered within the warm-up is not. The counts (QPS) take
    only what was sent inside the span: a level must not gain what was in flight at its start."""
    records = [(-200 * MS, 50 * MS, None),                     # warm-up, answered in the warm-up
               (-100 * MS, 1_500 * MS, None),                  # warm-up, waited through the stall
               *[(1_400 * MS + i * 100 * MS, MS, None) for i in range(5)],
               (1_950 * MS, 400 * MS, None)]                   # answered after the end
    level = _level_from(records)
    assert level.histogram.get_total_count() == 7
    assert level.latency_ms["max"] == pytest.approx(1_500, rel=0.001)
    assert level.ok == 6 and level.qps == 3.0                   # 6 sent in the 2 s measured
    assert [w.ok for w in level.timeline] == [0, 6]
    assert level.timeline[0].max_ms == pytest.approx(1_500, rel=0.001)


def test_requests_that_got_no_answer_count_in_the_latencies_and_error_answers_do_not():
    """An error budget lets 1.5 % of requests time out at 30 s: they are the p99, so the
    SLA on it sees them. So are requests still out when the run gave up on them. A 400 in
    1 ms is the model refusing its input, not a latency: an error, out of the percentiles."""
    answered = [(i * MS, MS, None) for i in range(975)]
    timed_out = [(1_000 * MS + i * MS, 30 * S, TimeoutError("timed out")) for i in range(10)]
    refused = [(1_100 * MS + i * MS, MS, "HTTP 400: bad input") for i in range(20)]
    level = _level_from(answered + timed_out + refused, given_up=[1_500 * MS] * 5, back_at=32 * S,
                        timeout_s=30.0)
    assert level.error_count == 35 and level.ok == 975
    assert level.histogram.get_total_count() == 975 + 10 + 5
    assert level.latency_ms["p99"] >= 30_000
    verdict = report.judge(LoadTestResult(spec=LoadSpec(model="m", concurrency=(1,)), server="s",
                                          request="r", levels=[level]),
                           report.Sla(p99_ms=100, max_error_rate=0.05))
    assert verdict.exit_code == EXIT_SLA_MISS
    assert verdict.reasons[0].startswith("concurrency 1: p99 30")


def test_a_latency_longer_than_a_minute_is_measured_not_clipped():
    # --request-timeout 120: an answer 90 s after its request counts as 90 s
    level = _level_from([(0, 90 * S, None), (MS, MS, None)], timeout_s=120.0)
    assert level.latency_ms["max"] == pytest.approx(90_000, rel=0.001)


def test_requests_given_up_on_are_no_answer_and_an_error_answer_is_one():
    """A window whose only request timed out in it got nothing back: a stall. One whose
    request was refused at once (HTTP 400) got an answer, if not a good one."""
    timed_out = _level_from([(i * 100 * MS, MS, None) for i in range(10)]
                            + [(1_000 * MS, 500 * MS, TimeoutError("timed out"))]
                            + [(3_000 * MS + i * 100 * MS, MS, None) for i in range(10)],
                            mode="open", duration_s=4, timeout_s=0.5)
    assert [w.stall for w in timed_out.timeline] == [False, True, False, False]
    assert timed_out.timeline[1].waiting_ms == pytest.approx(500)
    refused = _level_from([(i * 100 * MS, MS, None) for i in range(10)]
                          + [(1_000 * MS, MS, "HTTP 400: bad input")]
                          + [(3_000 * MS + i * 100 * MS, MS, None) for i in range(10)],
                          mode="open", duration_s=4)
    assert not any(w.stall for w in refused.timeline) and refused.timeline[1].came_back == 1


def test_a_window_in_which_every_request_failed_is_flagged_and_named_after_the_outage_it_overlaps():
    """A 404 in a millisecond while a model reloads leaves a window with no latency and
    answers coming back: neither a spike by latency nor a stall, yet the outage itself."""
    at = lambda s: int(s * 1e9)     # noqa: E731
    reload = [ServerEvent(at(2.9), "state", "mlp", "1", "UNLOADING", "READY"),
              ServerEvent(at(4.1), "state", "mlp", "1", "READY", "LOADING")]
    spike, = cold_start_windows(_failed_in_second(3), reload, 0, 1.0)
    assert (spike.window, spike.failed, spike.errors, spike.stall, spike.cold_start) == (3, True, 40, False, True)
    assert spike.cause == ("cold start: model 'mlp' version 1 reloaded, not READY 2.90–4.10 s; "
                           "every request failed (40 errors)")
    assert spike.p99_ms is None and spike.events
    alone, = cold_start_windows(_failed_in_second(3), [], 0, 1.0)
    assert alone.failed and not alone.cold_start
    assert alone.cause == "errors: every request failed (40 errors); no server event explains it"


def test_a_window_in_which_some_requests_failed_is_an_error_window_named_after_the_outage_it_overlaps():
    """A reload in the middle of a window: 30 % of its requests fail in a millisecond, the
    rest are answered as fast as ever. Its latency is ordinary, yet it is the outage."""
    at = lambda s: int(s * 1e9)     # noqa: E731
    reload = [ServerEvent(at(3.4), "state", "mlp", "1", "UNLOADING", "READY"),
              ServerEvent(at(3.7), "state", "mlp", "1", "READY", "LOADING")]
    spike, = cold_start_windows(_some_failed_in_second(3, ok=28, errors=12), reload, 0, 1.0)
    assert (spike.window, spike.partly_failed, spike.failed, spike.errors, spike.cold_start) == (
        3, True, False, 12, True)
    assert spike.cause == ("cold start: model 'mlp' version 1 reloaded, not READY 3.40–3.70 s; "
                           "12 of 40 requests failed (30%)")
    assert spike.p99_ms == 1.0 and spike.events
    alone, = cold_start_windows(_some_failed_in_second(3, ok=28, errors=12), [], 0, 1.0)
    assert alone.partly_failed and not alone.cold_start
    assert alone.cause == "errors: 12 of 40 requests failed (30%); no server event explains it"
    # most failed, a few answered: an error window too, not judged by those few's latency
    most, = cold_start_windows(_some_failed_in_second(3, ok=5, errors=40), [], 0, 1.0)
    assert most.partly_failed and most.cause.startswith("errors: 40 of 45 requests failed (89%)")
    nearly, = cold_start_windows(_some_failed_in_second(3, ok=2, errors=2816), [], 0, 1.0)
    assert nearly.cause.startswith("errors: 2816 of 2818 requests failed (99.9%)")     # never 100 %


def test_a_stray_error_below_the_share_flags_no_window():
    """A server's rare stray error is in the level's error count; flagging every window
    that holds one would bury the outages among them."""
    timeline = _some_failed_in_second(3, ok=1000, errors=10)       # 1 %
    assert cold_start_windows(timeline, [], 0, 1.0) == [] and not timeline[3].partly_failed
    timeline = _some_failed_in_second(3, ok=950, errors=50)        # 5 %: the share, flagged
    assert [s.window for s in cold_start_windows(timeline, [], 0, 1.0)] == [3]


def test_arrivals_never_sent_count_in_no_window_error_share():
    """Arrivals the load generator fell behind on are its own failing: they neither flag a
    window nor dilute or swell the share of the requests that reached the server."""
    behind = _some_failed_in_second(3, ok=28, errors=12, not_sent=12)     # every error: never sent
    assert cold_start_windows(behind, [], 0, 1.0) == [] and behind[3].error_share == 0.0
    mixed = _some_failed_in_second(3, ok=28, errors=12, not_sent=10)      # 2 server errors of 30
    spike, = cold_start_windows(mixed, [], 0, 1.0)
    assert spike.partly_failed and spike.errors == 2
    assert spike.cause == "errors: 2 of 30 requests failed (7%); no server event explains it"


def test_arrivals_the_generator_never_sent_make_no_error_window_of_the_servers():
    """'Not sent: the load generator fell behind' is the run's failing: a window holding only
    those blames no server, and one that also holds server errors counts only those."""
    behind = _failed_in_second(3)
    behind[3].not_sent = 40                           # all 40 errors: arrivals never sent
    behind[3].came_back = 0
    behind[3].waiting_ms = None                       # nothing went out, nothing was waited on
    assert cold_start_windows(behind, [], 0, 1.0) == []
    mixed = _failed_in_second(3)
    mixed[3].not_sent = 15                            # 25 sent, every one an error answer
    spike, = cold_start_windows(mixed, [], 0, 1.0)
    assert spike.failed and spike.errors == 25
    assert spike.cause == "errors: every request failed (25 errors); no server event explains it"
