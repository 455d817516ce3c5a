"""`tritonkit loadtest`: when requests are sent, what counts as a spike and a cold start, the
SLA verdict and its exit code — and on the real local Triton that all of it holds."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import EXAMPLE_REPOSITORY, ROOT, default_signals, run_cli
from tritonkit import report
from tritonkit.client import Endpoint
from tritonkit.deploy import deploy_local, down
from tritonkit.errors import (
    EXIT_ERROR, EXIT_RUN_ERRORS, EXIT_SLA_MISS, EXIT_USAGE, LoadTestError, UsageError)
from tritonkit.loadtest import (
    ERROR_WINDOW_SHARE, LevelResult, LoadSpec, LoadTestResult, ServerEvent, Window, closed_loop,
    cold_start_windows, open_loop_schedule, run_loadtest, spike_windows, split_schedule)

# -- when requests are sent (no server) -------------------------------------------------


@pytest.mark.parametrize("url, expected", [
    ("127.0.0.1:8000", ("127.0.0.1", 8000)),
    ("http://localhost:9000", ("localhost", 9000)),
    ("[::1]:8000", ("::1", 8000)),
    ("http://[fe80::2]:8001", ("fe80::2", 8001)),
    ("triton.internal", ("triton.internal", 80)),
])
def test_an_http_url_names_its_host_and_port_ipv6_included(url, expected):
    from tritonkit.loadtest._transport import split_host_port

    assert split_host_port(url) == expected


@pytest.mark.parametrize("url, why", [
    ("https://triton.internal:8000", "only plain http"),
    ("triton.internal:8000/v2", "without a path"),
    ("http://:8000", "no host"),
])
def test_a_url_we_would_not_load_as_named_is_refused(url, why):
    from tritonkit.loadtest._transport import split_host_port

    with pytest.raises(ValueError, match=why):
        split_host_port(url)
    with pytest.raises(ValueError, match="the port too"):
        split_host_port("triton.internal", default_port=None)


def test_closed_loop_spreads_virtual_users_evenly_over_workers():
    assert closed_loop(10, 4) == [3, 3, 2, 2]
    assert closed_loop(2, 8) == [1, 1]          # no idle worker processes
    assert sum(closed_loop(33, 2)) == 33


def test_constant_arrivals_are_exactly_one_over_rate_apart():
    times = open_loop_schedule(200, 2.0, "constant")
    assert len(times) == 400
    np.testing.assert_allclose(np.diff(times), 1 / 200)


def test_poisson_arrivals_offer_the_exact_rate_with_exponential_gaps():
    times = open_loop_schedule(1000, 5.0, "poisson", seed=1)
    gaps = np.diff(times)
    assert len(times) == 5000 and np.all(gaps >= 0) and times[-1] < 5.0
    assert gaps.mean() == pytest.approx(1 / 1000, rel=0.05)
    assert gaps.std() == pytest.approx(gaps.mean(), rel=0.1)     # exponential: std == mean
    assert not np.array_equal(times, open_loop_schedule(1000, 5.0, "poisson", seed=2))


def test_a_schedule_is_dealt_round_robin_so_each_worker_keeps_the_rhythm():
    parts = split_schedule(np.arange(10.0), 3)
    assert [p.tolist() for p in parts] == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]


def test_a_load_spec_needs_exactly_one_of_concurrency_and_rate():
    with pytest.raises(UsageError, match="exactly one"):
        LoadSpec(model="m")
    with pytest.raises(UsageError, match="exactly one"):
        LoadSpec(model="m", concurrency=(1,), rates=(10.0,))
    with pytest.raises(UsageError, match="arrivals"):
        LoadSpec(model="m", rates=(10.0,), arrivals="bursty")


# -- spikes and cold starts (no server) ---------------------------------------------------

def _timeline(p99s: list[float], maxes: list[float] | None = None) -> list[Window]:
    maxes = maxes or [p * 1.2 for p in p99s]
    return [Window(index=i, start_s=float(i), ok=100, errors=0, qps=100.0, p50_ms=p / 2,
                   p99_ms=p, max_ms=m) for i, (p, m) in enumerate(zip(p99s, maxes))]


def test_a_window_whose_p99_stands_far_above_the_typical_window_is_a_spike():
    timeline = _timeline([1.0, 1.1, 0.9, 9.0, 1.0])
    assert [w.index for w in spike_windows(timeline)] == [3]


def test_one_very_slow_request_flags_its_window_even_when_the_p99_hides_it():
    timeline = _timeline([1.0, 1.0, 1.0, 1.0], maxes=[1.2, 1.3, 40.0, 1.2])
    assert [w.index for w in spike_windows(timeline)] == [2]


def test_small_absolute_wobbles_are_not_spikes():
    # 3x a 0.2 ms p99 is still under the 2 ms floor: not worth anyone's attention
    assert spike_windows(_timeline([0.2, 0.2, 0.7, 0.2])) == []


def test_a_spike_during_a_model_reload_is_named_a_cold_start():
    start = 1_000_000_000
    events = [ServerEvent(start + int(2.2e9), "state", "mlp", "1", "UNLOADING", "READY"),
              ServerEvent(start + int(3.4e9), "state", "mlp", "1", "READY", "LOADING")]
    spikes = cold_start_windows(_timeline([1.0, 1.0, 1.0, 30.0, 1.0, 1.0]), events, start, 1.0)
    assert len(spikes) == 1 and spikes[0].window == 3 and spikes[0].cold_start
    assert "cold start: model 'mlp' version 1 reloaded" in spikes[0].cause


def test_a_lone_slow_request_counts_when_a_reload_explains_it_or_it_is_extreme():
    start = 0
    timeline = _timeline([1.0] * 6, maxes=[1.2, 9.0, 1.2, 1.2, 30.0, 1.2])
    reload = [ServerEvent(int(0.5e9), "state", "mlp", "1", "LOADING", "READY"),
              ServerEvent(int(1.2e9), "state", "mlp", "1", "READY", "LOADING")]
    assert [s.window for s in cold_start_windows(timeline, reload, start, 1.0)] == [1, 4]
    # the same 9x request with nothing to explain it is scheduler noise, not a spike
    assert [s.window for s in cold_start_windows(_timeline([1.0] * 6, maxes=[1.2, 9.0, 1.2, 1.2, 30.0, 1.2]),
                                                 [], start, 1.0)] == [4]


def test_one_reload_seen_by_the_index_and_by_the_statistics_is_one_outage_named_whole():
    """The index names the version and sees 2.2-3.4 s; the statistics restarting say the
    model was out from the last answer before (2.0 s) to the first after (3.6 s)."""
    from tritonkit.loadtest._timeline import model_outages

    start, at = 0, lambda s: int(s * 1e9)
    events = [ServerEvent(at(2.0), "state", "mlp", "", "UNAVAILABLE", "READY", "statistics restarted"),
              ServerEvent(at(2.2), "state", "mlp", "1", "UNLOADING", "READY"),
              ServerEvent(at(3.4), "state", "mlp", "1", "READY", "LOADING"),
              ServerEvent(at(3.6), "state", "mlp", "", "READY", "UNAVAILABLE", "statistics restarted")]
    assert model_outages(events, start) == [("mlp", "1", 2.0, 3.6)]
    spikes = cold_start_windows(_timeline([1.0, 1.0, 30.0, 30.0, 1.0, 1.0]), events, start, 1.0)
    assert [s.window for s in spikes] == [2, 3] and all(s.cold_start for s in spikes)
    assert spikes[0].cause == "cold start: model 'mlp' version 1 reloaded, not READY 2.00–3.60 s"


def test_outages_of_one_model_apart_in_time_stay_apart():
    from tritonkit.loadtest._timeline import model_outages

    at = lambda s: int(s * 1e9)     # noqa: E731
    events = [ServerEvent(at(1.0), "state", "mlp", "1", "UNLOADING", "READY"),
              ServerEvent(at(1.5), "state", "mlp", "1", "READY", "LOADING"),
              ServerEvent(at(1.2), "state", "cnn", "1", "UNLOADING", "READY"),
              ServerEvent(at(4.0), "state", "mlp", "1", "UNLOADING", "READY")]
    assert model_outages(events, 0) == [("mlp", "1", 1.0, 1.5), ("cnn", "1", 1.2, None),
                                        ("mlp", "1", 4.0, None)]


def test_a_request_sent_before_an_outage_began_and_held_by_it_is_explained_by_it():
    """Windows hold the requests sent in them. One sent at the end of second 2 waited 1.5 s
    for a reload that began at 3.1 s: the outage explains its window too. A request of
    30 ms in second 1 was back long before the reload: nothing explains it."""
    at = lambda s: int(s * 1e9)     # noqa: E731
    timeline = _timeline([1.0] * 6, maxes=[1.2, 30.0, 1_500.0, 40.0, 1.2, 1.2])
    reload = [ServerEvent(at(3.1), "state", "mlp", "1", "UNLOADING", "READY"),
              ServerEvent(at(4.3), "state", "mlp", "1", "READY", "LOADING")]
    spikes = {s.window: s for s in cold_start_windows(timeline, reload, 0, 1.0)}
    assert sorted(spikes) == [1, 2, 3]
    assert spikes[2].cold_start and spikes[3].cold_start
    assert not spikes[1].cold_start and spikes[1].cause == "a latency spike no server event explains"


def test_a_cold_start_lists_the_events_of_its_own_reload_not_every_reload_of_the_model():
    at = lambda s: int(s * 1e9)     # noqa: E731
    reloads = [ServerEvent(at(t), "state", "mlp", "1", state, previous)
               for t, state, previous in ((1.1, "UNLOADING", "READY"), (1.4, "READY", "LOADING"),
                                          (6.1, "UNLOADING", "READY"), (6.5, "READY", "LOADING"))]
    spikes = cold_start_windows(_timeline([1.0, 30.0, 1.0, 1.0, 1.0, 1.0, 30.0, 1.0]), reloads, 0, 1.0)
    assert [s.window for s in spikes] == [1, 6] and all(s.cold_start for s in spikes)
    assert [[e["t_s"] for e in s.events] for s in spikes] == [[1.1, 1.4], [6.1, 6.5]]


def test_another_model_unloaded_for_good_explains_only_the_spikes_near_its_unload():
    """On a shared server 'cnn' is unloaded at 1.0 s and stays away while 'mlp' is tested:
    the spike at 1 s may be its doing, the one at 7 s is not, and the lone 9x request at
    5 s stays the scheduler noise it is. 'mlp' itself gone for good explains all after it."""
    at = lambda s: int(s * 1e9)     # noqa: E731
    timeline = lambda: _timeline([1.0, 30.0, 1.0, 1.0, 1.0, 1.0, 1.0, 30.0],   # noqa: E731
                                 maxes=[1.2, 36.0, 1.2, 1.2, 1.2, 9.0, 1.2, 36.0])
    gone = [ServerEvent(at(1.0), "state", "cnn", "1", "UNAVAILABLE", "READY", "unloaded")]
    spikes = cold_start_windows(timeline(), gone, 0, 1.0, model="mlp")
    assert [(s.window, s.cause) for s in spikes] == [
        (1, "model 'cnn' version 1 unavailable from 1.00 s"), (7, "a latency spike no server event explains")]
    ours = [ServerEvent(at(1.0), "state", "mlp", "1", "UNAVAILABLE", "READY", "unloaded")]
    assert [s.window for s in cold_start_windows(timeline(), ours, 0, 1.0, model="mlp")] == [1, 5, 7]


def test_a_spike_with_no_server_event_near_it_is_not_blamed_on_a_cold_start():
    start = 0
    events = [ServerEvent(int(0.1e9), "state", "mlp", "1", "READY", "LOADING")]
    spikes = cold_start_windows(_timeline([1.0, 1.0, 1.0, 1.0, 30.0]), events, start, 1.0)
    assert len(spikes) == 1 and not spikes[0].cold_start
    assert spikes[0].cause == "a latency spike no server event explains"


# -- whether the server is there (no server) -----------------------------------------------

def _kinds(events) -> list[str]:
    return [e.kind for e in events]


def test_polls_that_keep_failing_while_the_server_is_live_still_catch_its_later_death():
    from tritonkit.loadtest._server import Liveness

    liveness, t = Liveness(), iter(range(10**6))
    for _ in range(6):                       # the index fails, liveness answers: still up
        assert liveness.failed(next(t), alive=lambda: True) == []
    died = liveness.failed(next(t), alive=lambda: False)
    assert _kinds(died) == ["down"] and liveness.down_at_ns == died[0].t_ns


def test_a_server_that_answers_again_is_up_only_after_it_was_down():
    from tritonkit.loadtest._server import Liveness

    liveness = Liveness()
    for now in range(5):
        liveness.failed(now, alive=lambda: True)
    assert liveness.answered(5) == []        # never declared down: nothing came back
    for now in range(6, 9):
        liveness.failed(now, alive=lambda: False)
    assert _kinds(liveness.answered(9)) == ["up"]


def test_a_level_ends_where_the_server_first_went_away_even_if_it_comes_back():
    from tritonkit.loadtest._server import Liveness

    liveness = Liveness()
    events = [e for now in range(3) for e in liveness.failed(now, alive=lambda: False)]
    events += liveness.answered(10)
    events += [e for now in range(11, 14) for e in liveness.failed(now, alive=lambda: False)]
    assert _kinds(events) == ["down", "up", "down"]
    assert liveness.down_at_ns == 2          # the load stopped at the first: the level is cut there


# -- what a level counts (no server) ---------------------------------------------------------

MS, S = 1_000_000, 1_000_000_000


def _level_from(records, *, mode="closed", cpu_s=0.0, never_sent=(), held_back=False, back_at=0,
                given_up=(), timeout_s=1.0, duration_s=2, window_s=1):
    """A level merged from one worker's raw records: (origin ns, latency ns, None for an
    answer, else the error's kind or the exception the send raised); ``duration_s`` (2)
    measured from 0 in ``window_s`` (1) windows, after a warm-up (negative origins); ``given_up``:
    origins still out at ``back_at``."""
    from tritonkit.loadtest._run import _merge, _plans, plan_slots
    from tritonkit.loadtest._server import StatsSnapshot
    from tritonkit.loadtest._worker import _give_up_on, _never_sent, _Records

    common = dict(model="m", duration_s=duration_s, warmup_s=0, window_s=window_s, timeout_s=timeout_s)
    spec = LoadSpec(concurrency=(1,), **common) if mode == "closed" else LoadSpec(rates=(10.0,), **common)
    level = spec.levels()[0]
    plan, = _plans(spec, None, "-", level, plan_slots(spec, level))
    rec = _Records()
    for origin, latency, kind in records:
        rec.origins.append(origin)
        rec.latencies.append(latency)
        rec.codes.append(0 if kind is None else rec.code(kind) if isinstance(kind, BaseException)
                         else rec.kind_code(kind))
        if mode == "open":
            rec.lags.append(0)
            rec.waited.append(False)
    _never_sent(list(never_sent), duration_s * S, rec, back_at, held_since=0 if held_back else None)
    _give_up_on(dict(enumerate(given_up)), rec, plan, back_at)
    summary = rec.summary(plan, t0=0) | {"cpu_s": cpu_s}
    return _merge(spec, 1 if mode == "closed" else 10.0, [summary], [], None, StatsSnapshot(), 0,
                  1 if mode == "open" else None)


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


def test_a_request_sent_just_before_a_window_boundary_is_in_the_window_before_it():
    """2.01 s windows: 2.01 * 1e9 is 2009999999.9999998, which truncated put the boundary
    1 ns early, and the last nanosecond's request in the next window."""
    records = [(2_010_000_000 - 1, MS, None), (2_010_000_000, MS, None)]
    level = _level_from(records, duration_s=4.02, window_s=2.01)
    assert [(w.start_s, w.ok) for w in level.timeline] == [(0.0, 1), (2.01, 1)]


def test_arrivals_the_server_held_back_are_latency_not_errors_and_cost_the_client_nothing():
    answered = [(i * 100 * MS, MS, None) for i in range(10)]                  # 1 ms each
    held = [1_500 * MS, 1_600 * MS, 1_700 * MS]          # due, never sent; the slot came back at 4 s
    level = _level_from(answered, mode="open", cpu_s=0.001, never_sent=held, held_back=True,
                        back_at=4 * S)
    assert level.error_count == 0 and level.ok == 10 and level.saturated == 3
    assert level.histogram.get_total_count() == 13
    assert level.latency_ms["max"] == pytest.approx(2_500, rel=0.01)    # at least 4 s - 1.5 s
    assert level.achieved_rate == 5.0                    # 10 sent in 2 s of the 13 due
    assert level.client_cpu_us == pytest.approx(100)    # 1 ms over the 10 that were sent


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


def _stalled_then_idle():
    """Open loop, 6 s: answers in 1 ms in second 0; one request due at 1.0 s that the server
    held until 3.5 s, nothing else due until 5 s; answers again in second 5."""
    return _level_from([*[(i * 100 * MS, MS, None) for i in range(10)],
                        (1_000 * MS, 2_500 * MS, None),
                        *[(5_000 * MS + i * 100 * MS, MS, None) for i in range(10)]],
                       mode="open", duration_s=6)


def test_a_window_where_requests_were_out_and_none_came_back_is_a_stall_and_one_with_none_out_is_idle():
    level = _stalled_then_idle()
    by_index = {w.index: w for w in level.timeline}
    assert [w.index for w in level.timeline if w.stall] == [1, 2]
    assert [w.index for w in level.timeline if w.spike] == [1, 2]
    # second 2: no request was sent in it, so no latency, yet one was out all through it
    assert by_index[2].p99_ms is None and by_index[2].came_back == 0
    assert by_index[2].waiting_ms == pytest.approx(2_000)     # out since 1.0 s at its end
    assert by_index[3].came_back == 1 and not by_index[3].stall   # the held request came back
    # second 4: nothing due and nothing out: idle, not a stall
    assert by_index[4].came_back == 0 and by_index[4].waiting_ms is None and not by_index[4].spike
    stalls = [s for s in level.spikes if s.stall]
    assert [s.window for s in stalls] == [1, 2] and not any(s.cold_start for s in stalls)
    assert stalls[1].p99_ms is None and stalls[1].waiting_ms == pytest.approx(2_000)
    assert stalls[1].cause.startswith("stall: nothing came back while requests were out (the oldest for 2.00 s)")


def test_a_stall_that_began_in_the_warm_up_reaches_into_the_first_windows():
    """Closed loop: the request sent 0.5 s before the start came back 1.7 s into the
    measurement; nothing else was sent meanwhile."""
    level = _level_from([(-500 * MS, 2_200 * MS, None), *[(1_700 * MS + i * 100 * MS, MS, None) for i in range(23)]],
                        duration_s=4)
    assert [w.stall for w in level.timeline] == [True, False, False, False]
    assert level.timeline[0].waiting_ms == pytest.approx(1_500)


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


def test_a_model_slower_than_a_window_leaves_windows_without_answers_that_are_no_stall():
    """Closed loop: a model that takes 1.5 s a request leaves every other 1 s window with
    nothing back. That is its normal pace, not a stall."""
    records = [(i * 1_500 * MS, 1_500 * MS, None) for i in range(4)]
    level = _level_from(records, duration_s=6)
    assert [w.came_back for w in level.timeline][:4] == [0, 1, 0, 1]
    assert not any(w.stall or w.spike for w in level.timeline)


def test_a_stall_during_a_model_outage_is_named_a_cold_start():
    at = lambda s: int(s * 1e9)     # noqa: E731
    timeline = _timeline([1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    timeline[3] = Window(index=3, start_s=3.0, ok=0, errors=0, qps=0.0, p50_ms=None, p99_ms=None,
                         max_ms=None, came_back=0, waiting_ms=900.0)
    reload = [ServerEvent(at(2.9), "state", "mlp", "1", "UNLOADING", "READY"),
              ServerEvent(at(4.1), "state", "mlp", "1", "READY", "LOADING")]
    spike, = cold_start_windows(timeline, reload, 0, 1.0)
    assert spike.window == 3 and spike.stall and spike.cold_start
    assert spike.cause == ("cold start: model 'mlp' version 1 reloaded, not READY 2.90–4.10 s; "
                           "nothing came back while requests were out (the oldest for 0.90 s)")
    alone, = cold_start_windows(timeline, [], 0, 1.0)
    assert alone.stall and not alone.cold_start and alone.cause.startswith("stall: ")


def _failed_in_second(second: int, errors: int = 40) -> list[Window]:
    """Six windows at 1 ms, the one at ``second`` every request an error answer (no latency)."""
    timeline = _timeline([1.0] * 6)
    timeline[second] = Window(index=second, start_s=float(second), ok=0, errors=errors, qps=0.0,
                              p50_ms=None, p99_ms=None, max_ms=None, came_back=errors, waiting_ms=0.5)
    return timeline


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


def _some_failed_in_second(second: int, ok: int, errors: int, not_sent: int = 0) -> list[Window]:
    """Six windows at 1 ms, the one at ``second`` with ``errors`` among its requests, its
    latency (the answered ones') as ordinary as the others'."""
    timeline = _timeline([1.0] * 6)
    timeline[second] = Window(index=second, start_s=float(second), ok=ok, errors=errors,
                              not_sent=not_sent, qps=float(ok), p50_ms=0.5, p99_ms=1.0, max_ms=1.2,
                              came_back=ok + errors - not_sent, waiting_ms=0.5)
    return timeline


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


def _window_that(kind: str, index: int) -> Window:
    """A flagged one-second window at ``index``: a spike (30 ms, its slowest back 36 ms after
    its end), a stall, one whose every request failed, or one whose requests partly failed."""
    if kind == "spike":
        return Window(index=index, start_s=float(index), ok=100, errors=0, qps=100.0, p50_ms=15.0,
                      p99_ms=30.0, max_ms=36.0, came_back=100, waiting_ms=0.5)
    if kind == "stall":
        return Window(index=index, start_s=float(index), ok=0, errors=0, qps=0.0, p50_ms=None,
                      p99_ms=None, max_ms=None, came_back=0, waiting_ms=900.0)
    return (_failed_in_second(index) if kind == "failed" else
            _some_failed_in_second(index, ok=28, errors=12))[index]


@pytest.mark.parametrize("kind", ["spike", "stall", "failed", "partly failed"])
@pytest.mark.parametrize("unload_seen_at, last_seen_ready_at", [(3.2, 2.95), (3.04, None)])
def test_a_window_that_ended_before_the_watcher_saw_the_outage_begin_is_named_after_it(
        kind, unload_seen_at, last_seen_ready_at):
    """The watcher polls: it saw 'mlp' READY at 2.95 s, and unloading only at its next poll,
    3.2 s (a slow one). The window of second 2, whose requests failed, stalled or were slow,
    ended before that, yet the unload may have come first: the outage names it. The same
    window in second 1, long before the model was last seen READY, stays unexplained. An
    event the watcher did not bound is taken within one poll interval (50 ms) of its time."""
    at = lambda s: int(s * 1e9)     # noqa: E731
    polls = {} if last_seen_ready_at is None else {"after_ns": at(last_seen_ready_at),
                                                  "by_ns": at(unload_seen_at + 0.01)}
    reload = [ServerEvent(at(unload_seen_at), "state", "mlp", "1", "UNLOADING", "READY", **polls),
              ServerEvent(at(3.6), "state", "mlp", "1", "READY", "LOADING")]
    timeline = _timeline([1.0] * 6)
    timeline[1], timeline[2] = _window_that(kind, 1), _window_that(kind, 2)
    spikes = {s.window: s for s in cold_start_windows(timeline, reload, 0, 1.0)}
    assert sorted(spikes) == [1, 2]
    assert spikes[2].cold_start and spikes[2].cause.startswith(
        f"cold start: model 'mlp' version 1 reloaded, not READY {unload_seen_at:.2f}–3.60 s"), spikes[2]
    assert [(e["t_s"], e["after_s"]) for e in spikes[2].events] == [(unload_seen_at, last_seen_ready_at),
                                                                     (3.6, None)]
    assert not spikes[1].cold_start and "no server event explains" in spikes[1].cause


def test_a_window_after_a_load_the_watcher_saw_end_only_when_its_blocked_poll_answered_is_named_after_it():
    """The poll sent at 1.0 s blocked while 'mlp' loaded and answered READY at 2.8 s: the
    outage may have lasted until then, so the slow window of second 3 is its cold start.
    The one of second 5, beyond the reach after that, is not."""
    at = lambda s: int(s * 1e9)     # noqa: E731
    reload = [ServerEvent(at(0.9), "state", "mlp", "1", "UNLOADING", "READY", after_ns=at(0.85), by_ns=at(0.91)),
              ServerEvent(at(1.0), "state", "mlp", "1", "READY", "LOADING", after_ns=at(0.9), by_ns=at(2.8))]
    timeline = _timeline([1.0] * 7)
    timeline[3], timeline[5] = _window_that("spike", 3), _window_that("spike", 5)
    spikes = {s.window: s for s in cold_start_windows(timeline, reload, 0, 1.0)}
    assert sorted(spikes) == [3, 5]
    assert spikes[3].cold_start
    assert spikes[3].cause == ("cold start: model 'mlp' version 1 reloaded, not READY from 0.90 s, "
                               "READY again between 0.90 and 2.80 s")
    assert not spikes[5].cold_start and spikes[5].cause == "a latency spike no server event explains"


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


def _closed_result(timeline: list[Window], ok: int, errors: dict[str, int]) -> LoadTestResult:
    """A 6-second closed-loop level of ``timeline`` (1 s windows), its spikes marked."""
    spikes = cold_start_windows(timeline, [], 0, 1.0)
    level = LevelResult(mode="closed", level=2, workers=1, duration_s=6, sent=ok + sum(errors.values()),
                        ok=ok, errors=errors, qps=ok / 6, infer_per_s=ok / 6, latency_ms={"p99": 1.0},
                        timeline=timeline, spikes=spikes, events=[], server_split_ms=None)
    return LoadTestResult(spec=LoadSpec(model="m", concurrency=(2,), duration_s=6, window_s=1),
                          server="s", request="r", levels=[level])


def _cells(row: str) -> list[str]:
    """A table row's cells: two spaces or more part the columns (a cause has single ones)."""
    return re.split(r"\s{2,}", row.strip())


def test_an_error_window_is_in_the_json_the_csv_the_spikes_table_the_warnings_and_the_plot(tmp_path,
                                                                                          monkeypatch):
    import matplotlib.pyplot as plt
    from rich.console import Console

    result = _closed_result(_failed_in_second(2), ok=500, errors={"HTTP 400: unknown model": 40})
    verdict = report.judge(result, report.Sla(max_error_rate=0.5))
    assert "concurrency 2 at 2 s: errors: every request failed (40 errors); no server event " \
           "explains it (typical p99 1.00 ms)" in verdict.warnings
    report.write_json(tmp_path / "run.json", result, verdict)
    saved = json.loads((tmp_path / "run.json").read_text())["levels"][0]
    assert [w["failed"] for w in saved["timeline"]] == [False, False, True, False, False, False]
    assert [(s["window"], s["failed"], s["errors"], s["stall"]) for s in saved["spikes"]] == [(2, True, 40, False)]
    rows = list(csv.DictReader(io.StringIO(report.timeline_csv(result))))
    assert list(rows[0])[-3:] == ["stall", "failed", "partly_failed"]   # after the columns files had before
    assert [(r["failed"], r["spike"], r["errors"]) for r in rows[1:4]] == [
        ("0", "0", "0"), ("1", "1", "40"), ("0", "0", "0")]
    console = Console(width=250, record=True)
    console.print(report.spikes_table(result))
    text = console.export_text()
    assert text.startswith("spikes, stalls and error windows")
    # what an error window is, which the table's title said, its page says
    assert "every request failed, or 5 % or more" in " ".join(
        (ROOT / "docs" / "commands" / "loadtest.md").read_text().split())
    row, = [_cells(line) for line in text.splitlines() if "every request failed (40" in line]
    assert row[1:3] == ["2", "-"]
    kept = []
    monkeypatch.setattr(plt, "close", kept.append)
    report.write_plot(tmp_path / "run.png", result)
    shaded = [p for p in kept[0].axes[0].patches if p.get_label() == "errors (every request failed)"]
    assert [(p.get_x(), p.get_x() + p.get_width()) for p in shaded] == [(2.0, 3.0)]


def test_a_partly_failed_window_is_in_the_json_the_csv_the_spikes_table_the_warnings_and_the_plot(
        tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    from rich.console import Console

    result = _closed_result(_some_failed_in_second(2, ok=28, errors=12), ok=528,
                            errors={"HTTP 404: unknown model": 12})
    verdict = report.judge(result, report.Sla(max_error_rate=0.5))
    assert ("concurrency 2 at 2 s: errors: 12 of 40 requests failed (30%); no server event "
            "explains it (p99 1.00 ms, max 1.20 ms, typical p99 1.00 ms)") in verdict.warnings
    report.write_json(tmp_path / "run.json", result, verdict)
    saved = json.loads((tmp_path / "run.json").read_text())["levels"][0]
    assert [w["partly_failed"] for w in saved["timeline"]] == [False, False, True, False, False, False]
    assert [(s["window"], s["partly_failed"], s["failed"], s["errors"]) for s in saved["spikes"]] == [
        (2, True, False, 12)]
    rows = list(csv.DictReader(io.StringIO(report.timeline_csv(result))))
    assert [(r["partly_failed"], r["failed"], r["spike"], r["errors"]) for r in rows[1:4]] == [
        ("0", "0", "0", "0"), ("1", "0", "1", "12"), ("0", "0", "0", "0")]
    console = Console(width=250, record=True)
    console.print(report.spikes_table(result))
    row, = [_cells(line) for line in console.export_text().splitlines()
            if "12 of 40 requests failed" in line]
    assert row[1:3] == ["2", "1.00"]
    kept = []
    monkeypatch.setattr(plt, "close", kept.append)
    report.write_plot(tmp_path / "run.png", result)
    shaded = [p for p in kept[0].axes[0].patches
              if p.get_label() == "errors (5% or more of requests failed)"]
    assert [(p.get_x(), p.get_x() + p.get_width()) for p in shaded] == [(2.0, 3.0)]


@pytest.mark.slow
def test_a_stall_is_in_the_json_the_csv_the_spikes_table_the_warnings_and_the_plot(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    from rich.console import Console

    level = _stalled_then_idle()
    result = LoadTestResult(spec=LoadSpec(model="m", rates=(10.0,), duration_s=6, window_s=1), server="s",
                            request="r", levels=[level])
    verdict = report.judge(result, report.Sla())
    stalls = [w for w in verdict.warnings if re.match(r"rate 10/s at \d s: stall: nothing came back", w)]
    assert [re.search(r" at (\d) s: ", w)[1] for w in stalls] == ["1", "2"]
    assert "(p99 2500" in stalls[0] and "(typical p99 1.00 ms)" in stalls[1]    # second 2 sent nothing
    report.write_json(tmp_path / "run.json", result, verdict)
    saved = json.loads((tmp_path / "run.json").read_text())["levels"][0]
    assert [w["stall"] for w in saved["timeline"]] == [False, True, True, False, False, False]
    assert saved["timeline"][4]["waiting_ms"] is None and saved["timeline"][2]["waiting_ms"] == 2000
    assert [(s["window"], s["stall"], s["p99_ms"] is None) for s in saved["spikes"]] == [
        (1, True, False), (2, True, True)]            # (second 1 has the held request's latency)
    rows = list(csv.DictReader(io.StringIO(report.timeline_csv(result))))
    assert [(r["stall"], r["came_back"], r["waiting_ms"]) for r in rows[1:5]] == [
        ("1", "0", "1000.000"), ("1", "0", "2000.000"), ("0", "1", ""), ("0", "0", "")]
    console = Console(width=250, record=True)
    console.print(report.spikes_table(result))
    rows = [_cells(line) for line in console.export_text().splitlines()
            if "stall: nothing came back" in line]
    assert [(at, p99 == "-", cause.startswith("stall: ")) for _, at, p99, _, _, cause in rows] == [
        ("1", False, True), ("2", True, True)]
    # the plot: the stalled seconds shaded, and the latency line broken where no latency was
    kept = []
    monkeypatch.setattr(plt, "close", kept.append)
    report.write_plot(tmp_path / "run.png", result)
    top = kept[0].axes[0]
    shaded = [p for p in top.patches if p.get_label() == "stall (none came back)"]
    assert [(p.get_x(), p.get_x() + p.get_width()) for p in shaded] == [(1.0, 3.0)]
    p99_line = next(line for line in top.get_lines() if line.get_label() == "rate 10/s p99")
    assert np.isnan(p99_line.get_ydata()).tolist() == [False, False, True, True, True, False]


def test_arrivals_the_load_generator_never_sent_with_slots_free_are_its_errors():
    level = _level_from([(0, MS, None)], mode="open", never_sent=[S], held_back=False, back_at=S)
    assert level.saturated == 0 and list(level.errors) == [
        "not sent: the load generator fell behind its schedule (add --workers or --max-in-flight)"]


# -- whose doing a late arrival was: the server's or the load generator's (no server) ---------
#
# One arrival slot, driven on a controlled clock: it moves only when the worker sleeps (by
# exactly what it asked, or more: a load generator that was not scheduled in time) and
# when a stand-in server answers (1 ms, or once it is no longer frozen).

class _Clock:
    def __init__(self) -> None:
        self.now = 0
        self.oversleep: dict[int, int] = {}     # a sleep due to end at one time ends at another

    def __call__(self) -> int:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += round(seconds * 1e9)
        self.now = self.oversleep.pop(self.now, self.now)


def _served_by(clock: _Clock, frozen_ms: tuple[int, int] | None = None):
    """A stand-in server: 1 ms per request; one that arrives while it is frozen waits for the thaw."""
    def send() -> None:
        if frozen_ms and frozen_ms[0] * MS <= clock.now < frozen_ms[1] * MS:
            clock.now = frozen_ms[1] * MS
        clock.now += MS
    return send


def _one_slot_at_100_per_s(clock: _Clock, send):
    """1 s of arrivals every 10 ms, from one slot; the raw records, in ms, by arrival."""
    from types import SimpleNamespace

    from tritonkit.loadtest._worker import HELD_BACK, WorkerPlan, _drive, _Records

    plan = WorkerPlan(index=0, protocol="http", url="-", template=None, slots=1,
                      offsets_ns=(open_loop_schedule(100, 1.0, "constant") * S).round().astype(np.int64),
                      warmup_ns=0, duration_ns=S, window_ns=S, timeout_s=30.0)
    rec = _Records()
    _drive(plan, [send], 0, rec, [0], SimpleNamespace(value=0), clock=clock, sleep=clock.sleep)
    due = [o // MS for o in rec.origins]
    return SimpleNamespace(
        waited=[d for d, w in zip(due, rec.waited) if w],
        held_back=[d for d, c in zip(due, rec.codes) if c == HELD_BACK],
        failed=[d for d, c in zip(due, rec.codes) if c > 0],
        latency_ms={d: lat / MS for d, lat in zip(due, rec.latencies)})


@pytest.mark.slow
def test_a_request_answered_as_the_grace_deadline_passes_is_counted_once(monkeypatch):
    """A lone user runs in a thread. Its request comes back just before the deadline, and
    the worker gives up on what is still out just as it records the answer: the request
    is counted once, as answered, never also as given up on. (The interleaving is forced:
    the answer waits for the give-up to start, which waits for the answer's bookkeeping.)"""
    from types import SimpleNamespace

    from tritonkit.loadtest._worker import WorkerPlan, _drive, _Records, _Slots

    giving_up, back_done = threading.Event(), threading.Event()
    main = threading.current_thread()
    back = _Slots.back

    def back_when_the_give_up_began(self, slot, finish):
        giving_up.wait(1.0)
        back(self, slot, finish)
        back_done.set()

    class Origins(list):
        def append(self, origin):
            if threading.current_thread() is main:      # the worker giving up on a request
                giving_up.set()
                back_done.wait(1.0)
            super().append(origin)

    monkeypatch.setattr(_Slots, "back", back_when_the_give_up_began)
    plan = WorkerPlan(index=0, protocol="http", url="-", template=None, slots=1, offsets_ns=None,
                      warmup_ns=0, duration_ns=50 * MS, window_ns=50 * MS, timeout_s=1.0, grace_s=0.3)
    rec = _Records()
    rec.origins = Origins()
    sends = []

    def send():                     # back 0.25 s after it left: the deadline is 0.35 s
        sends.append(time.sleep(0.25))

    _drive(plan, [send], time.perf_counter_ns(), rec, [0], SimpleNamespace(value=0))
    assert len(sends) == 1
    assert rec.codes == [0] and len(rec.origins) == len(rec.latencies) == 1


def test_arrivals_due_while_the_one_slot_waited_on_a_frozen_server_are_its_saturation():
    clock = _Clock()
    run = _one_slot_at_100_per_s(clock, _served_by(clock, frozen_ms=(300, 500)))
    # due in the freeze, then while the slot caught up on them (1 ms each): 310 ... 520
    assert run.waited == list(range(310, 530, 10))
    assert run.failed == [] and run.held_back == []      # all sent, late
    assert run.latency_ms[310] == 192                    # from when it was due: 502 - 310


def test_arrivals_due_after_a_server_frozen_across_the_end_are_held_back_never_sent():
    clock = _Clock()
    run = _one_slot_at_100_per_s(clock, _served_by(clock, frozen_ms=(500, 1600)))
    assert run.held_back == list(range(510, 1000, 10)) == run.waited
    assert run.failed == []
    assert run.latency_ms[510] == 1091                   # it waited until the slot came back: 1601 ms


def test_a_load_generator_that_overslept_with_its_slot_free_is_late_on_its_own_account():
    clock = _Clock()
    clock.oversleep = {500 * MS: 700 * MS}               # its sleep until 500 ms ended at 700 ms
    run = _one_slot_at_100_per_s(clock, _served_by(clock))
    # 510 ... 690 fell due while the slot was free, asleep: not the server's doing. Only
    # those due once it was out again, catching up, found every slot busy.
    assert run.waited == [700, 710, 720]
    assert run.failed == [] and run.latency_ms[510] == 192   # all sent, the wait in their latency


def test_with_two_slots_only_arrivals_due_once_both_were_out_are_the_servers_saturation():
    from tritonkit.loadtest._worker import _Slots

    slots = _Slots(2)                                    # times in ms here
    assert not slots.took(0, 0)
    slots.sent(0, 0, now=0)                              # slot 0 is out until 500
    for due in range(10, 200, 10):                       # slot 1 answers the others in 1 ms
        assert not slots.took(1, due)
        slots.sent(1, due, now=due)
        slots.back(1, due + 1)
    assert not slots.took(1, 200)
    slots.sent(1, 200, now=200)                          # now slot 1 is out too, until 600
    slots.back(0, 500)
    assert slots.took(0, 210)                            # due once both were out: held back
    slots.sent(0, 210, now=500)
    slots.back(0, 501)
    assert slots.took(0, 220)                            # and so on while slot 1 is still out


def test_a_load_generator_that_overslept_the_end_sends_the_arrival_it_took_late_and_nothing_after():
    clock = _Clock()
    clock.oversleep = {500 * MS: 1200 * MS}              # asleep for the arrival due at 500 ms
    serve, sent_at = _served_by(clock), []

    def send() -> None:
        sent_at.append(clock.now)
        serve()

    run = _one_slot_at_100_per_s(clock, send)
    assert [t for t in sent_at if t >= S] == [1200 * MS]     # the one it took, and no more
    assert run.latency_ms[500] == 701                    # from when it was due: its lateness shows
    assert run.waited == [] and run.held_back == []      # its slot was free: not the server's doing
    # every arrival after it: "not sent: the load generator fell behind"
    assert run.failed == list(range(510, 1000, 10))


def test_a_sleep_that_ends_a_hair_past_the_end_sends_its_arrival_and_is_no_error():
    """CI's host woke a worker 0.2 ms after the end for the last arrival: it counted as
    'the load generator fell behind', an error, and the run exited 4."""
    clock = _Clock()
    clock.oversleep = {990 * MS: S + 200_000}            # the last arrival's sleep ends at 1000.2 ms
    run = _one_slot_at_100_per_s(clock, _served_by(clock))
    assert run.failed == [] and run.held_back == []
    assert len(run.latency_ms) == 100
    assert run.latency_ms[990] == pytest.approx(11.2)    # 10.2 ms late + 1 ms served


# -- the verdict (no server) -----------------------------------------------------------------

def _result(p99=5.0, qps=100.0, sent=1000, errors=None, ended_early=None) -> LoadTestResult:
    errors = errors or {}
    level = LevelResult(
        mode="closed", level=4, workers=1, duration_s=10, sent=sent, ok=sent - sum(errors.values()),
        errors=errors, qps=qps, infer_per_s=qps, latency_ms={"p50": p99 / 3, "p99": p99},
        timeline=[], spikes=[], events=[], server_split_ms=None, ended_early=ended_early)
    return LoadTestResult(spec=LoadSpec(model="m", concurrency=(4,)), server="s", request="r",
                          levels=[level])


def test_an_sla_that_holds_exits_zero():
    verdict = report.judge(_result(p99=5.0, qps=100.0), report.Sla(p99_ms=10, min_qps=50))
    assert verdict.outcome == report.PASS and verdict.exit_code == 0
    assert [c.passed for c in verdict.checks] == [True, True]


def test_a_p99_over_the_limit_is_an_sla_miss_with_its_own_exit_code():
    verdict = report.judge(_result(p99=25.0), report.Sla(p99_ms=10))
    assert verdict.exit_code == EXIT_SLA_MISS
    assert verdict.reasons == ("concurrency 4: p99 25.00 ms > 10.00 ms",)


def test_too_few_queries_per_second_is_an_sla_miss():
    assert report.judge(_result(qps=40.0), report.Sla(min_qps=50)).exit_code == EXIT_SLA_MISS


def test_failed_requests_without_an_error_budget_are_run_errors_not_a_pass():
    verdict = report.judge(_result(errors={"HTTP 500: boom": 3}), report.Sla(p99_ms=10))
    assert verdict.exit_code == EXIT_RUN_ERRORS
    assert "3 of 1000 requests failed (most: 3x HTTP 500: boom)" in verdict.reasons[0]


def test_failed_requests_within_the_error_budget_pass_and_beyond_it_are_run_errors():
    result = _result(errors={"timeout": 5})                     # 0.5 % of 1000
    assert report.judge(result, report.Sla(max_error_rate=0.01)).exit_code == 0
    beyond = report.judge(result, report.Sla(p99_ms=10, max_error_rate=0.001))
    assert beyond.exit_code == EXIT_RUN_ERRORS                  # exit 4, as with no budget: not a miss
    assert beyond.reasons == ("concurrency 4: 5 of 1000 requests failed (most: 5x timeout), "
                              "more than the 0.1000% allowed",)
    assert [c.describe() for c in beyond.checks if not c.passed] == [
        "concurrency 4: error rate 0.5000% > 0.1000%: more requests failed than the budget allows "
        "(a run error, exit 4)"]


def test_an_error_budget_of_zero_is_the_same_as_none():
    result = _result(errors={"timeout": 1})
    assert (report.judge(result, report.Sla(max_error_rate=0)).exit_code
            == report.judge(result, report.Sla()).exit_code == EXIT_RUN_ERRORS)
    assert report.judge(_result(), report.Sla(max_error_rate=0)).exit_code == 0


def test_a_run_cut_short_by_the_server_is_a_run_error_whatever_the_latency():
    verdict = report.judge(_result(ended_early="the server stopped answering 2.0 s into it"),
                           report.Sla(p99_ms=1000))
    assert verdict.exit_code == EXIT_RUN_ERRORS and "stopped answering" in verdict.reasons[0]


def test_a_level_where_every_request_failed_still_writes_strict_json(tmp_path):
    result = _result(sent=40, errors={"[request id: <id_unknown>] bad input [/x]": 40})
    result.levels[0].latency_ms = {}
    verdict = report.judge(result, report.Sla(p99_ms=10))
    assert verdict.exit_code == EXIT_RUN_ERRORS
    assert verdict.checks[0].measured is None and not verdict.checks[0].passed
    report.write_json(tmp_path / "failed.json", result, verdict)
    text = (tmp_path / "failed.json").read_text()
    assert "Infinity" not in text and "NaN" not in text
    assert json.loads(text)["verdict"]["checks"][0]["measured"] is None


def test_the_servers_words_are_printed_as_they_are_not_as_markup():
    from rich.console import Console

    kind = "[request id: <id_unknown>] unexpected shape [/bold]"
    result = _result(sent=10, errors={kind: 10})
    console = Console(record=True, width=200)
    report.print_report(console, result, report.judge(result, report.Sla()))
    assert "[request id: <id_unknown>] unexpected shape [/bold]" in console.export_text()


def test_a_level_that_measured_nothing_is_not_a_pass():
    verdict = report.judge(_result(sent=0), report.Sla(max_error_rate=0.5))
    assert verdict.exit_code == EXIT_RUN_ERRORS and "no request was sent" in verdict.reasons[0]


def test_open_loop_sends_that_left_late_are_warned_about():
    result = _result()
    result.levels[0].send_lag_ms = {"p50": 0.1, "p99": 12.0}
    assert any("left late" in w for w in report.judge(result, report.Sla()).warnings)


def _saturated_result(workers: int, per_worker: int, client_cpu_us: float) -> LoadTestResult:
    """Open loop at 1000/s, 900/s sent: 30 arrivals found their process's slots all out."""
    result = _result()
    level = result.levels[0]
    level.mode, level.level, level.workers = "open", 1000.0, workers
    level.offered_rate, level.achieved_rate = 1000.0, 900.0
    level.max_in_flight, level.saturated, level.client_cpu_us = workers * per_worker, 30, client_cpu_us
    return result


def test_a_saturated_server_is_named_with_the_requests_each_process_may_have_in_flight():
    warnings = report.judge(_saturated_result(workers=4, per_worker=64, client_cpu_us=50), report.Sla()).warnings
    assert warnings == (
        "rate 1000/s: the server was saturated: 30 requests fell due while all 64 requests their "
        "load-generating process (one of 4) may have in flight waited on it, and left late or never; "
        "sent 900.0 requests/s of the 1000 offered; the wait is in their latencies (--max-in-flight "
        "allows more per process)",)
    alone = report.judge(_saturated_result(workers=1, per_worker=1, client_cpu_us=50), report.Sla()).warnings
    assert "while all 1 requests the load generator may have in flight waited on it" in alone[0]


def test_a_saturated_server_with_a_client_short_of_cpu_still_advises_more_workers():
    # 4 ms of CPU per request at 900/s over 4 processes: 90 % of a core each
    warnings = report.judge(_saturated_result(workers=4, per_worker=64, client_cpu_us=4000),
                            report.Sla()).warnings
    assert "the server was saturated" in warnings[0]
    assert warnings[1] == ("rate 1000/s: the load generator was short of CPU too (90% of a core per "
                           "process; add --workers)")


def test_an_error_rate_is_a_fraction():
    with pytest.raises(UsageError, match="fraction"):
        report.Sla(max_error_rate=5)


@pytest.mark.parametrize("flag, value", [("--sla-p99-ms", "nan"), ("--sla-p99-ms", "inf"),
                                         ("--sla-min-qps", "nan"), ("--sla-min-qps", "inf")])
def test_an_sla_limit_that_is_not_a_finite_number_is_refused(flag, value, capsys):
    # nan passes every comparison as false and inf can never be met: neither is a limit
    assert run_cli("loadtest", "--model", "m", "--rate", "5", flag, value) == EXIT_USAGE
    assert f"error: {flag} takes a finite number" in capsys.readouterr().err


# -- on the real local Triton ----------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The example repository served by the real embedded Triton for this module's tests."""
    repo = tmp_path_factory.mktemp("loadtest") / "repo"
    shutil.copytree(EXAMPLE_REPOSITORY, repo, ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    deployment = deploy_local(repo, http_port=0, grpc_port=0, metrics_port=0, timeout=120)
    yield deployment
    down(repo)


class _At:
    """A progress callback that runs ``action`` once, in a thread, ``second`` s into the measurement.

    It fires when the run's progress says so, late by however long a busy machine takes:
    ``left_at(t)`` says how many seconds of the level were left at ``time.perf_counter()`` t.
    """

    def __init__(self, second: float, warmup_s: float, action) -> None:
        self.when, self.action, self.thread = warmup_s + second, action, None

    def __call__(self, label, elapsed_s, total_s, done) -> None:
        if self.thread is None and elapsed_s >= self.when:
            self._left = (time.perf_counter(), total_s - elapsed_s)
            self.thread = threading.Thread(target=self.action)
            self.thread.start()

    def left_at(self, t: float) -> float:
        fired_at, left = self._left
        return left - (t - fired_at)

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()

    @property
    def ran(self) -> bool:
        return self.thread is not None


def _loadtest(deployment, *args) -> int:
    return run_cli("loadtest", "--repository", deployment.repository, "--model", "example",
                   "--warmup-s", "0.3", *args)


@pytest.mark.server
def test_a_generous_sla_passes_and_every_output_file_holds_the_run(served, tmp_path, capsys):
    import socket
    from datetime import datetime, timedelta, timezone

    from tritonkit import __version__

    out = tmp_path / "out"
    began = datetime.now(timezone.utc).replace(microsecond=0)
    code = _loadtest(served, "--concurrency", "1,4", "--duration", "2", "--sla-p99-ms", "1000",
                     "--sla-min-qps", "10", "--json", out / "run.json", "--csv", out / "run.csv",
                     "--plot", out / "run.png")
    assert code == 0
    said = capsys.readouterr().out.splitlines()
    assert [line for line in said if line.startswith("wrote ")] == [
        f"wrote {out / 'run.json'}", f"wrote {out / 'run.csv'}", f"wrote {out / 'run.png'}"]
    data = json.loads((out / "run.json").read_text())
    started = datetime.fromisoformat(data["started_at"])          # ISO 8601, UTC
    assert started.utcoffset() == timedelta(0) and began <= started <= began + timedelta(seconds=5)
    assert (data["tritonkit_version"], data["host"]) == (__version__, socket.gethostname())
    assert (data["server_version"], data["model_version"]) == ("2.51.0", "1")
    assert data["verdict"]["outcome"] == "pass" and data["verdict"]["exit_code"] == 0
    assert [lv["label"] for lv in data["levels"]] == ["concurrency 1", "concurrency 4"]
    for lv in data["levels"]:
        lat = lv["latency_ms"]
        assert lv["ok"] == lv["sent"] > 50 and lv["errors"] == {}
        assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p99.9"] <= lat["max"]
        assert lv["server_split_ms"]["compute_infer"] > 0       # Triton's own statistics
        assert lv["hdr_histogram"] and lv["client_cpu_us"] > 0
        assert lv["server_batch"] == pytest.approx(1.0)   # the example model does not batch
    rows = list(csv.DictReader((out / "run.csv").open()))
    assert {r["level"] for r in rows} == {"concurrency 1", "concurrency 4"}
    assert sum(int(r["ok"]) for r in rows) == sum(lv["ok"] for lv in data["levels"])
    assert (out / "run.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.server
def test_an_sla_that_cannot_be_met_exits_with_the_sla_code(served, tmp_path):
    code = _loadtest(served, "--concurrency", "2", "--duration", "1", "--sla-p99-ms", "0.001",
                     "--json", tmp_path / "miss.json")
    assert code == EXIT_SLA_MISS
    verdict = json.loads((tmp_path / "miss.json").read_text())["verdict"]
    assert verdict["outcome"] == "sla-miss" and "p99" in verdict["reasons"][0]


@pytest.mark.timing
@pytest.mark.server
def test_open_loop_rates_are_honoured_within_a_few_percent(served):
    endpoint = Endpoint.from_deployment(served)
    spec = LoadSpec(model="example", rates=(150.0, 400.0), arrivals="constant", duration_s=3,
                    warmup_s=0.3)
    result = run_loadtest(endpoint, spec)
    for lv, rate in zip(result.levels, (150.0, 400.0)):
        assert lv.error_count == 0
        assert lv.qps == pytest.approx(rate, rel=0.03)              # answered, per second
        assert lv.achieved_rate == pytest.approx(rate, rel=0.03)    # actually sent, per second
        assert lv.send_lag_ms["p50"] < 5.0          # requests leave when they are due


@pytest.mark.timing
@pytest.mark.server
def test_open_loop_sends_leave_on_time_without_a_core_spinning_for_them(served):
    """Several arrival slots share one process; a send is due every 1.7 ms. The worker
    sleeps until each, on microsecond timers. Yield-spinning through the last millisecond
    before every send costs that millisecond of CPU a request whatever the host: 8-11x
    the CPU of a closed-loop request here, against 2.6-3.5x asleep. The closed loop on
    the same server is the yardstick, so a slower host (CI's, or this one on a busy day,
    at 400 us a request) moves both."""
    endpoint = Endpoint.from_deployment(served)
    closed = run_loadtest(endpoint, LoadSpec(model="example", concurrency=(1,), duration_s=1,
                                             warmup_s=0.3, workers=1)).levels[0]
    level = run_loadtest(endpoint, LoadSpec(model="example", rates=(600.0,), arrivals="constant",
                                            duration_s=2, warmup_s=0.3, workers=1,
                                            max_in_flight=32)).levels[0]
    assert level.error_count == 0 and level.ok == level.sent > 1000
    ratio = level.client_cpu_us / closed.client_cpu_us
    assert ratio < 6, (f"{level.client_cpu_us:.0f} µs of CPU an open-loop request against "
                       f"{closed.client_cpu_us:.0f} closed: {ratio:.1f}x")
    assert level.send_lag_ms["p50"] < 0.3                # on time: gevent's own sleeps are 1 ms late


@pytest.mark.server
@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("cooperative", [False, True])
def test_a_sender_keeps_one_connection_alive_across_requests(served, protocol, cooperative):
    from tritonkit.loadtest import request_template
    from tritonkit.loadtest._transport import RequestFailed, grpc_sender, http_sender

    make, url = (http_sender, served.http_url) if protocol == "http" else (grpc_sender, served.grpc_url)
    template = request_template(Endpoint.from_deployment(served), "example")
    send = make(url, template, 5.0, cooperative=cooperative)
    first = send.__self__._sock.getsockname()
    for _ in range(20):
        send()
    assert send.__self__._sock.getsockname() == first     # the same local port: never reconnected
    wrong = make(url, template.__class__(model="nope", inputs=template.inputs, outputs=(), batch_size=1), 5.0)
    refused = wrong.__self__._sock.getsockname()
    for _ in range(2):                      # an error answer is a whole answer: the connection goes on
        with pytest.raises(RequestFailed, match="HTTP 400|HTTP 404" if protocol == "http" else
                           "^gRPC NOT_FOUND: .*'nope'"):
            wrong()
    assert wrong.__self__._sock.getsockname() == refused
    send.__self__.close()
    wrong.__self__.close()


@pytest.mark.server
def test_a_grpc_request_larger_than_the_servers_window_goes_in_pieces_and_the_call_goes_on(served):
    """HTTP/2 flow control: 1.3 MB is far over the 64 KiB connection window a server grants
    before its first WINDOW_UPDATE. Triton reads all of it (its answer names the full
    shape) and refuses the shape; the connection takes the next big call too."""
    from tritonkit.loadtest import request_template
    from tritonkit.loadtest._transport import RequestFailed, grpc_sender

    template = request_template(Endpoint.from_deployment(served), "example")
    big = template.__class__(model="example", outputs=(), batch_size=8,
                             inputs=(("INPUT__0", "FP32", np.ones((8, 40_000), np.float32)),))
    send = grpc_sender(served.grpc_url, big, 10.0)
    first = send.__self__._sock.getsockname()
    for _ in range(2):
        with pytest.raises(RequestFailed, match="^gRPC INVALID_ARGUMENT: .*40000"):
            send()
    assert send.__self__._sock.getsockname() == first     # the same connection, twice
    good = grpc_sender(served.grpc_url, template, 5.0)
    for _ in range(3):
        good()
    send.__self__.close()
    good.__self__.close()


@pytest.mark.server
def test_grpc_loads_the_same_model_with_several_users_in_one_process(served):
    result = run_loadtest(Endpoint.from_deployment(served),
                          LoadSpec(model="example", concurrency=(3,), protocol="grpc", workers=1,
                                   duration_s=1.5, warmup_s=0.3))
    level = result.levels[0]
    assert result.server == served.grpc_url
    assert level.workers == 1
    assert level.ok > 50 and level.error_count == 0
    assert level.server_split_ms["request"] > 0          # Triton counted what we sent


class _Frozen:
    """An action that stops the server process for ``seconds`` (it answers nothing meanwhile);
    ``began``: when it did (``time.perf_counter``)."""

    def __init__(self, deployment, seconds: float) -> None:
        self.pid, self.seconds, self.began = deployment.pid, seconds, None

    def __call__(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)
        self.began = time.perf_counter()
        try:
            time.sleep(self.seconds)
        finally:
            os.kill(self.pid, signal.SIGCONT)


def _run_with(deployment, spec: LoadSpec, at: _At) -> LoadTestResult:
    try:
        return run_loadtest(Endpoint.from_deployment(deployment), spec, progress=at)
    finally:
        at.join()
        os.kill(deployment.pid, signal.SIGCONT)


@pytest.mark.timing
@pytest.mark.server
def test_open_loop_latency_counts_the_time_a_stalled_server_made_requests_wait(served):
    """Coordinated omission: with one request allowed in flight, the ~100 requests that fall
    due during a 0.5 s stall can only leave after it, and are then answered in ~1 ms each.
    Timed from when they left, the p95 would be ~1 ms; timed from when they were due, it
    shows the stall."""
    stall = _At(1.0, 0.3, _Frozen(served, 0.5))
    result = _run_with(served, LoadSpec(model="example", rates=(200.0,), arrivals="constant",
                                        duration_s=3, warmup_s=0.3, workers=1, max_in_flight=1), stall)
    assert stall.ran
    level = result.levels[0]
    assert level.error_count == 0
    assert level.send_lag_ms["p95"] > 50            # they left late: the one slot was out...
    assert level.latency_ms["p95"] > 100            # ...and that wait is in their latency
    assert level.latency_ms["max"] > 400
    assert any(w.spike for w in level.timeline)
    assert level.saturated >= 50                    # the server's doing, not the client's
    warnings = report.judge(result, report.Sla()).warnings
    assert any("the server was saturated" in w for w in warnings), warnings
    assert not any("add --workers" in w for w in warnings), warnings


@pytest.mark.server
def test_an_answer_that_comes_after_the_end_counts_if_it_comes_within_its_request_timeout(served):
    """A slow but healthy server is not a failing one: the request out when the measurement
    ends is waited for until its own timeout (30 s here), not for a few seconds."""
    stall = _At(0.7, 0.3, _Frozen(served, 6.0))     # from 0.3 s before the end to 5.7 s after
    result = _run_with(served, LoadSpec(model="example", concurrency=(1,), duration_s=1.0,
                                        warmup_s=0.3, timeout_s=30.0), stall)
    level = result.levels[0]
    assert level.error_count == 0, level.errors
    assert level.latency_ms["max"] > 5500           # the answer that came ~6 s later is in


@pytest.mark.server
def test_a_stall_that_began_in_the_warm_up_shows_in_the_measurement(served):
    """Closed loop: the server stops answering 0.4 s before the measurement starts, for
    1.5 s. The requests it held were sent in the warm-up; nothing else is sent until they
    are answered, so they are the stall's only trace: they count, in the first window."""
    freeze = _Frozen(served, 1.5)
    stall = _At(-0.4, 0.8, freeze)
    result = _run_with(served, LoadSpec(model="example", concurrency=(2,), duration_s=2.5,
                                        warmup_s=0.8), stall)
    level = result.levels[0]
    # when it began is measured, not assumed: a busy machine starts the stall late
    before_start_s = stall.left_at(freeze.began) - 2.5
    assert 0 < before_start_s < 1.0, f"the stall began {before_start_s:.2f} s before the start"
    assert level.error_count == 0, level.errors
    assert level.latency_ms["max"] > 1000 * (1.5 - before_start_s) - 50
    assert level.timeline[0].spike and level.timeline[0].max_ms == level.latency_ms["max"]


@pytest.mark.server
def test_windows_in_which_a_frozen_server_answered_nothing_are_flagged_as_stalls(served, tmp_path):
    """Closed loop, the server stopped for 1.5 s: no request is sent during it (each user
    waits on its own), so the windows inside it have no latency of their own. Every one
    is a stall, in the spikes, the JSON and the CSV; the windows well before it are not."""
    freeze = _Frozen(served, 1.5)
    stall = _At(1.0, 0.3, freeze)
    result = _run_with(served, LoadSpec(model="example", concurrency=(2,), duration_s=3.5, warmup_s=0.3,
                                        window_s=0.25), stall)
    level = result.levels[0]
    began = 3.5 - stall.left_at(freeze.began)      # measured: a busy machine starts it late
    assert 0.5 < began < 1.75, f"the stall began {began:.2f} s into the measurement"
    inside = [w for w in level.timeline if began + 0.05 <= w.start_s and w.start_s + 0.25 <= began + 1.45]
    assert len(inside) >= 3
    assert all(w.stall and w.spike and w.came_back == 0 for w in inside), inside
    assert any(w.p99_ms is None for w in inside)   # the windows that sent nothing at all
    assert not any(w.stall for w in level.timeline if w.start_s + 0.25 <= began - 0.1)
    assert {w.index for w in inside} <= {s.window for s in level.spikes if s.stall}
    assert level.error_count == 0
    report.write_json(tmp_path / "run.json", result, report.judge(result, report.Sla()))
    saved = json.loads((tmp_path / "run.json").read_text())["levels"][0]
    assert all(saved["timeline"][w.index]["stall"] for w in inside)
    rows = list(csv.DictReader(io.StringIO(report.timeline_csv(result))))
    assert all(rows[w.index]["stall"] == "1" for w in inside)


@pytest.mark.server
def test_a_request_that_timed_out_counts_in_the_latencies_at_its_timeout(served):
    """The server stops answering for 1.2 s with a 0.5 s request timeout: the requests
    that timed out are errors, and in the latencies (at 0.5 s) too."""
    stall = _At(0.5, 0.3, _Frozen(served, 1.2))
    result = _run_with(served, LoadSpec(model="example", concurrency=(1,), duration_s=2.5, warmup_s=0.3,
                                        timeout_s=0.5), stall)
    level = result.levels[0]
    assert level.error_count >= 1 and all("timed out" in kind for kind in level.errors), level.errors
    # every answer and every timeout, and at most the one request in flight at the start
    # (in the latencies, not the counts)
    assert 0 <= level.histogram.get_total_count() - (level.ok + level.error_count) <= 1
    assert level.latency_ms["max"] >= 495


@pytest.mark.timing
@pytest.mark.server
def test_arrivals_a_stalled_server_held_back_count_as_its_latency_not_as_client_errors(served):
    """Open loop, the server stalled across the end: the arrivals of the level's last ~0.5 s
    found the one in-flight slot waiting on it and were never sent. They are the server's
    latency (at least until the slot came back), so the SLA sees them; they are not the load
    generator falling behind."""
    freeze = _Frozen(served, 6.0)
    stall = _At(0.5, 0.3, freeze)
    result = _run_with(served, LoadSpec(model="example", rates=(200.0,), arrivals="constant",
                                        duration_s=1.0, warmup_s=0.3, workers=1, max_in_flight=1), stall)
    level = result.levels[0]
    assert level.error_count == 0, level.errors
    # all that fell due from the stall to the end (the first of them was sent, and stuck);
    # when that was is measured, not assumed: a busy machine starts the stall late
    stalled_s = stall.left_at(freeze.began)
    assert stalled_s > 0.2, f"the stall began only {stalled_s:.2f} s before the end"
    assert level.saturated >= 0.9 * 200 * stalled_s - 2, (level.saturated, stalled_s)
    assert level.latency_ms["p90"] > 5000           # each waited ~5-6 s for the slot
    verdict = report.judge(result, report.Sla(p99_ms=100))
    assert verdict.exit_code == EXIT_SLA_MISS       # the server missed the SLA; the run did not fail
    assert any("the server was saturated" in w and "while all 1 requests the load generator may have in "
               "flight" in w for w in verdict.warnings), verdict.warnings
    assert not any("add --workers" in w for w in verdict.warnings), verdict.warnings


@pytest.mark.timing
@pytest.mark.server
def test_a_model_reloaded_mid_run_shows_as_a_flagged_cold_start_spike(served, tmp_path):
    endpoint = Endpoint.from_deployment(served)

    def bounce():
        client = endpoint.http()
        client.unload_model("example", headers=endpoint.repository_headers)
        client.load_model("example", headers=endpoint.repository_headers)

    reload = _At(1.5, 0.3, bounce)
    try:
        result = run_loadtest(endpoint, LoadSpec(model="example", concurrency=(2,), duration_s=5,
                                                 warmup_s=0.3), progress=reload)
    finally:
        reload.join()
    assert reload.ran
    level = result.levels[0]
    cold = [s for s in level.spikes if s.cold_start]
    assert cold, f"no cold-start spike among {level.spikes} (events {level.events})"
    assert "cold start: model 'example'" in cold[0].cause
    assert 1.0 <= cold[0].start_s <= 3.0
    assert level.outages and level.outages[0]["from_s"] <= cold[0].start_s + 1.0
    verdict = report.judge(result, report.Sla(p99_ms=1000, max_error_rate=0.9))
    assert any("cold start" in w for w in verdict.warnings)
    report.write_json(tmp_path / "cold.json", result, verdict)
    saved = json.loads((tmp_path / "cold.json").read_text())
    assert any(s["cold_start"] for s in saved["levels"][0]["spikes"])


@pytest.mark.server
def test_the_first_request_after_a_restart_is_reported_as_its_cold_start_though_no_level_counts_it(
        served, tmp_path, capsys):
    """After a restart (here: unload and load) the model's first request is its cold start
    (~20 ms against a p50 under 1 ms here) — and it is the check tritonkit sends before the
    first level, which no level counts: a run right after a restart looked warm. Said as a
    warning, in the JSON; a model that had run already is not called cold."""
    endpoint = Endpoint.from_deployment(served)
    client = endpoint.http()
    try:
        client.unload_model("example", headers=endpoint.repository_headers)
        client.load_model("example", headers=endpoint.repository_headers)
    finally:
        client.close()
    out = tmp_path / "cold.json"
    assert _loadtest(served, "--concurrency", "1", "--duration", "0.5", "--warmup-s", "0",
                     "--json", out) == 0
    said = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert (data["cold_first_request_ms"] or 0) > 0
    assert any("first request since its load" in w for w in data["verdict"]["warnings"])
    assert "cold start: model 'example': first request since its load" in " ".join(said.split())
    warm = tmp_path / "warm.json"
    assert _loadtest(served, "--concurrency", "1", "--duration", "0.5", "--json", warm) == 0
    data = json.loads(warm.read_text())
    assert data["cold_first_request_ms"] is None
    assert not any("first request since its load" in w for w in data["verdict"]["warnings"])


@pytest.mark.server
def test_a_stall_while_the_model_was_out_is_named_after_the_outage(served):
    """The model is unloaded (its requests fail at once), the server then stops for 1 s,
    and the model is loaded again: the windows of the stop get nothing back, and the
    watcher's outage, on the same clock, names them (a cold start, or the model
    unavailable if the load outlasts the run)."""
    endpoint = Endpoint.from_deployment(served)
    freeze = _Frozen(served, 1.0)

    def outage():
        client = endpoint.http()            # (in this thread: its gevent pool belongs to it)
        client.unload_model("example", headers=endpoint.repository_headers)
        time.sleep(0.3)                     # the watcher polls the index every 50 ms
        freeze()
        client.load_model("example", headers=endpoint.repository_headers)

    at = _At(1.0, 0.3, outage)
    result = _run_with(served, LoadSpec(model="example", concurrency=(2,), duration_s=4.0, warmup_s=0.3,
                                        window_s=0.25), at)
    level = result.levels[0]
    began = 4.0 - at.left_at(freeze.began)
    inside = [w for w in level.timeline if began + 0.05 <= w.start_s and w.start_s + 0.25 <= began + 0.95]
    assert len(inside) >= 2, (began, level.timeline)
    spikes = {s.window: s for s in level.spikes}
    assert all(w.stall for w in inside), (began, level.timeline, level.events)
    assert all(re.match(r"(cold start: )?model 'example' version 1 (reloaded|unavailable)", spikes[w.index].cause)
               and "nothing came back" in spikes[w.index].cause and spikes[w.index].events
               for w in inside), [spikes.get(w.index) for w in inside]
    assert level.outages and level.outages[0]["from_s"] < began


@pytest.mark.server
def test_windows_in_which_every_request_failed_while_the_model_was_out_are_flagged_with_the_outage(served):
    """Unloaded for 1.2 s, the model's requests come back at once as errors (HTTP 400):
    those windows have no latency and are no stall, yet they are the outage itself."""
    endpoint = Endpoint.from_deployment(served)
    span = {}

    def outage():
        client = endpoint.http()            # (in this thread: its gevent pool belongs to it)
        now = 4.0 - at.left_at(time.perf_counter())
        time.sleep((now // 0.25 + 1) * 0.25 + 0.05 - now)   # the unload cuts a window at 50 ms
        span["unloading"] = time.perf_counter()
        client.unload_model("example", headers=endpoint.repository_headers)
        span["out"] = time.perf_counter()
        time.sleep(1.2)
        span["back"] = time.perf_counter()
        client.load_model("example", headers=endpoint.repository_headers)

    at = _At(1.0, 0.3, outage)
    result = _run_with(served, LoadSpec(model="example", concurrency=(2,), duration_s=4.0, warmup_s=0.3,
                                        window_s=0.25), at)
    level = result.levels[0]
    out, back = 4.0 - at.left_at(span["out"]), 4.0 - at.left_at(span["back"])
    inside = [w for w in level.timeline if out + 0.05 <= w.start_s and w.start_s + 0.25 <= back]
    assert len(inside) >= 3, (out, back, level.timeline)
    assert all(w.ok == 0 and w.errors and w.p99_ms is None and not w.stall for w in inside), inside
    spikes = {s.window: s for s in level.spikes}
    assert [w.index for w in inside if w.index in spikes] == [w.index for w in inside], level.spikes
    assert all(w.failed and spikes[w.index].failed and spikes[w.index].events
               and re.match(r"(cold start: )?model 'example' version 1 (reloaded|unavailable)",
                            spikes[w.index].cause)
               and "every request failed" in spikes[w.index].cause for w in inside), \
        [spikes.get(w.index) for w in inside]
    # the window the unload cut through, some requests answered, some not: named after the
    # outage, even though it ended before the polling watcher saw the unload (a window the
    # load cuts is the same, but when the model was READY again is not known here)
    unloading = 4.0 - at.left_at(span["unloading"])
    [cut] = [w for w in level.timeline if w.start_s + 0.01 <= unloading and out <= w.start_s + 0.23]
    assert cut.ok and cut.error_share >= ERROR_WINDOW_SHARE and cut.partly_failed, cut
    assert cut.index in spikes and re.match(r"(cold start: )?model 'example' version 1 "
                                            r"(reloaded|unavailable)", spikes[cut.index].cause), \
        (cut, level.spikes, level.events)


@pytest.mark.server
def test_a_model_out_when_the_watch_begins_is_an_outage_from_then_and_read_once_it_is_back(served):
    """The model is unloaded when the server watcher starts, and loaded 0.3 s later: its
    outage runs from the watcher's first poll (not from nowhere to the load), and its
    statistics, unavailable at that poll, are read once it is back."""
    from tritonkit.loadtest import ServerWatcher, request_template
    from tritonkit.loadtest._timeline import model_outages
    from tritonkit.loadtest._transport import http_sender

    endpoint = Endpoint.from_deployment(served)
    client = endpoint.http()
    client.unload_model("example", headers=endpoint.repository_headers)
    try:
        began = time.perf_counter_ns()
        watcher = ServerWatcher(endpoint, "example").start()        # returns after its first poll
        polled = (time.perf_counter_ns() - began) / 1e9
        time.sleep(0.3)
        client.load_model("example", headers=endpoint.repository_headers)
        send = http_sender(served.http_url, request_template(endpoint, "example"), 5.0)
        for _ in range(20):
            send()
        send.__self__.close()
        answered = watcher.stats().count
        watcher.stop()
    finally:
        client.load_model("example", headers=endpoint.repository_headers)     # a no-op once loaded
        client.close()
    (model, version, left, ready), = model_outages(watcher.events, began)
    assert (model, version) == ("example", "1")
    # from the first poll (however long a busy host took to make it), not from the load
    assert left <= polled and ready > polled + 0.3, (left, polled, ready)
    # the watcher bounds when the load finished: after the last poll that saw the model out,
    # by the answer of the one that saw it READY
    back = [e for e in watcher.events if e.kind == "state" and e.state == "READY"]
    assert back and all(e.after_ns < e.t_ns <= e.by_ns for e in back), back
    assert answered == 20


@pytest.mark.server
def test_real_input_data_is_sent_and_a_wrong_input_name_is_refused(served, tmp_path, capsys):
    from tritonkit.loadtest import request_template

    data = tmp_path / "inputs.json"
    data.write_text(json.dumps({"INPUT__0": [1.0, 2.0, 3.0, 4.0]}))      # one sample
    template = request_template(Endpoint.from_deployment(served), "example", batch_size=3, input_data=data)
    (name, datatype, array), = template.inputs
    assert (name, datatype, array.shape) == ("INPUT__0", "FP32", (3, 4))   # repeated to the batch
    assert array[2].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert _loadtest(served, "--concurrency", "1", "--duration", "0.5", "--batch-size", "3",
                     "--input-data", data) == 0

    data.write_text(json.dumps({"pixels": [1.0]}))
    assert _loadtest(served, "--concurrency", "1", "--duration", "0.5", "--input-data", data) == EXIT_USAGE
    assert "names inputs the model does not have: pixels" in capsys.readouterr().err


@pytest.mark.server
def test_a_perf_analyzer_input_data_file_is_read_as_perf_analyzer_reads_it(served, tmp_path, capsys):
    """perf_analyzer's --input-data JSON, {"data": [{NAME: values}]}: one sample's values
    flat in row-major order (or {"content", "shape"}), taken in the model's shape — not
    refused as an input named "data" the model does not have. It lists requests to send
    in turn; we send one again and again, so a file of several is refused with the fix."""
    from tritonkit.loadtest import request_template

    endpoint = Endpoint.from_deployment(served)
    data = tmp_path / "pa.json"
    for value in ([1.0, 2.0, 3.0, 4.0], {"content": [1, 2, 3, 4], "shape": [4]}):
        data.write_text(json.dumps({"data": [{"INPUT__0": value}]}))
        template = request_template(endpoint, "example", batch_size=3, input_data=data)
        (name, datatype, array), = template.inputs
        assert (name, datatype, array.shape) == ("INPUT__0", "FP32", (3, 4))
        assert array[2].tolist() == [1.0, 2.0, 3.0, 4.0]

    data.write_text(json.dumps({"data": [{"INPUT__0": [1, 2, 3]}]}))
    with pytest.raises(UsageError, match="INPUT__0 holds 3 values; a sample of 4 takes 4"):
        request_template(endpoint, "example", input_data=data)
    data.write_text(json.dumps({"data": [{"INPUT__0": [1, 2, 3, 4]}, {"INPUT__0": [4, 3, 2, 1]}]}))
    assert _loadtest(served, "--concurrency", "1", "--duration", "0.5", "--input-data", data) == EXIT_USAGE
    first, hint = capsys.readouterr().err.splitlines()[:2]
    assert "holds 2 perf_analyzer requests" in first and "jq '{data: [.data[0]]}'" in hint


def _object_array_npz(path: Path) -> None:
    np.savez(path, INPUT__0=np.array([{"pixels": 1}], dtype=object))


@pytest.mark.server
@pytest.mark.parametrize("name, content, says", [
    ("ragged.json", b'{"INPUT__0": [[1, 2, 3, 4], [1, 2]]}', "input data for INPUT__0 in .* is ragged"),
    ("words.json", b'{"INPUT__0": ["a", "b", "c", "d"]}', "input data for INPUT__0 cannot be read as FP32"),
    ("latin1.json", b'{"INPUT__0": [1, 2, 3, 4], "caf\xe9": 1}', "is not UTF-8 text"),
    ("corrupt.npz", b"PK\x03\x04 not really a zip archive", "is not a readable .npz archive"),
    ("objects.npz", _object_array_npz, "input data for INPUT__0 in .* cannot be read"),
    ("short.json", b'{"INPUT__0": [1, 2]}', r"INPUT__0 has shape \[2\]; one sample of INPUT__0 has shape \[4\]$"),
    ("folder", None, "input data file .* is a folder"),
    ("inputs.txt", b"1 2 3 4", "input data file .* must be .npz or .json"),
    ("broken.json", b'{"INPUT__0": [1, 2', "input data file .* is not valid JSON"),
    ("list.json", b"[[1, 2, 3, 4]]", "input data file .* must hold an object"),
], ids=["ragged rows", "strings for a number", "not UTF-8", "corrupt npz", "object array npz",
        "wrong sample shape", "a folder", "neither npz nor json", "broken json", "not an object"])
def test_input_data_the_model_cannot_take_is_a_usage_error_that_names_it(served, tmp_path, capsys,
                                                                         name, content, says):
    path = tmp_path / name
    if content is None:
        path.mkdir()
    else:
        content(path) if callable(content) else path.write_bytes(content)
    code = _loadtest(served, "--concurrency", "1", "--duration", "0.5", "--input-data", path)
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    first, hint = err.splitlines()[:2]
    assert re.search(f"^error: .*{says}", first), err
    assert hint.startswith("hint: ") and "internal error" not in err and "Traceback" not in err


@pytest.mark.server
def test_input_data_of_another_batch_or_not_there_is_refused_with_what_to_give(served, tmp_path, capsys):
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps({"INPUT__0": [[1, 2, 3, 4]] * 3}))
    assert _loadtest(served, "--concurrency", "1", "--duration", "0.5", "--batch-size", "2",
                     "--input-data", rows) == EXIT_USAGE
    assert capsys.readouterr().err.splitlines() == [
        "error: input data for INPUT__0 has batch 3, not --batch-size 2",
        "hint: give INPUT__0 2 rows, or one sample without the batch axis (it is repeated to the "
        "batch), or pass --batch-size 3"]
    assert _loadtest(served, "--concurrency", "1", "--duration", "0.5", "--input-data",
                     tmp_path / "missing.npz") == EXIT_USAGE
    assert capsys.readouterr().err.splitlines()[1] == \
        "hint: check the path: an .npz or .json file with an array per input"
    from tritonkit.loadtest import request_template

    with pytest.raises(UsageError, match=r"--batch-size must be >= 1 \(got 0\)") as refused:
        request_template(Endpoint.from_deployment(served), "example", batch_size=0)
    assert refused.value.hint == "e.g. --batch-size 1"


@pytest.mark.parametrize("args, says", [
    (["--sla-p99-ms", "0"], "hint: e.g. --sla-p99-ms 20"),
    (["--sla-min-qps", "-1"], "hint: e.g. --sla-min-qps 500; leave it out for no minimum"),
])
def test_an_sla_limit_out_of_range_is_refused_with_a_hint(capsys, args, says):
    assert run_cli("loadtest", "--model", "m", "--rate", "5", *args) == EXIT_USAGE
    assert capsys.readouterr().err.splitlines()[1] == says


def test_a_spec_with_no_time_to_measure_is_refused_with_a_hint():
    with pytest.raises(UsageError, match=r"--duration \(0\) and --window-s \(1\) must be > 0") as refused:
        LoadSpec(model="m", concurrency=(1,), duration_s=0)
    assert refused.value.hint == "e.g. --duration 10 --window-s 1 --warmup-s 1"


# -- dynamic dimensions: --shape ------------------------------------------------------------


_PAIR_CONFIG = """name: "pair"
backend: "python"
max_batch_size: 8
input { name: "input_ids" data_type: TYPE_INT64 dims: -1 }
input { name: "attention_mask" data_type: TYPE_INT64 dims: -1 }
output { name: "hidden" data_type: TYPE_FP32 dims: -1 }
"""

_PAIR_MODEL = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            ids = pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy()
            mask = pb_utils.get_input_tensor_by_name(request, "attention_mask").as_numpy()
            if ids.shape != mask.shape:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    f"input_ids {list(ids.shape)} and attention_mask {list(mask.shape)} must "
                    "share their sequence length", pb_utils.TritonError.INVALID_ARG)))
                continue
            if ids.shape[1] > 256:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    f"sequences longer than 256 are not supported (got {ids.shape[1]})",
                    pb_utils.TritonError.UNKNOWN)))
                continue
            hidden = (ids * mask).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("hidden", hidden)]))
        return responses
"""


_CRASH_CONFIG = """name: "crash"
backend: "python"
max_batch_size: 0
input { name: "X" data_type: TYPE_FP32 dims: 4 }
output { name: "Y" data_type: TYPE_FP32 dims: 4 }
"""

_CRASH_MODEL = """class TritonPythonModel:
    def execute(self, requests):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
"""


@pytest.fixture(scope="module")
def encoder_served(tmp_path_factory):
    """examples/encoder.py exported (input_ids and attention_mask: [batch, sequence]; its
    model_warmup holds the lengths the export verified) and served by the real Triton
    beside a copy without model_warmup ("bare"), the example model (fixed dims),
    "pair": the encoder's two inputs, checked as a careful model checks them (sequences of
    different lengths are refused, INVALID_ARG: HTTP 400), and "crash", a model that fails
    on every request whatever it holds (HTTP 500, as a model crashing does)."""
    from google.protobuf import text_format

    from tritonkit.model_config import read_config

    repo = tmp_path_factory.mktemp("encoder") / "repo"
    shutil.copytree(EXAMPLE_REPOSITORY, repo, ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    assert run_cli("export", ROOT / "examples" / "encoder.py:build", "--name", "enc",
                   "--repository", repo) == 0
    shutil.copytree(repo / "enc", repo / "bare")
    config = read_config(repo / "bare" / "config.pbtxt")
    config.name = "bare"
    config.ClearField("model_warmup")
    (repo / "bare" / "config.pbtxt").write_text(text_format.MessageToString(config))
    (repo / "pair" / "1").mkdir(parents=True)
    (repo / "pair" / "config.pbtxt").write_text(_PAIR_CONFIG)
    (repo / "pair" / "1" / "model.py").write_text(_PAIR_MODEL)
    (repo / "crash" / "1").mkdir(parents=True)
    (repo / "crash" / "config.pbtxt").write_text(_CRASH_CONFIG)
    (repo / "crash" / "1" / "model.py").write_text(_CRASH_MODEL)
    deployment = deploy_local(repo, http_port=0, grpc_port=0, metrics_port=0, timeout=120, warmup=False)
    yield deployment
    down(repo)


def _loadtest_model(deployment, model, *args) -> int:
    return run_cli("loadtest", "--repository", deployment.repository, "--model", model,
                   "--warmup-s", "0.2", "--concurrency", "1", "--duration", "0.5", *args)


@pytest.mark.server
def test_a_dynamic_dimension_no_flag_sizes_is_refused_with_the_flags_its_warm_up_verified(
        encoder_served, capsys):
    """Sent at size 1 it would judge an encoder's SLA at sequence length 1 (perf_analyzer
    refuses too); the hint spells the flags, at the lengths the export verified."""
    assert _loadtest_model(encoder_served, "enc") == EXIT_USAGE
    err = capsys.readouterr().err
    first, hint = err.splitlines()[:2]
    assert first == ("error: model 'enc' has inputs of dynamic size that neither --shape nor "
                     "--input-data gives: input_ids [-1], attention_mask [-1] without the batch axis")
    assert hint.startswith("hint: pass --shape input_ids:18 --shape attention_mask:18 (")
    assert "it also warms 6, 12" in hint

    assert _loadtest_model(encoder_served, "enc", "--shape", "input_ids:12") == EXIT_USAGE
    assert "gives: attention_mask [-1]" in capsys.readouterr().err     # each input its own

    assert _loadtest_model(encoder_served, "bare") == EXIT_USAGE     # nothing to suggest
    assert ("hint: pass --shape input_ids:N --shape attention_mask:N, N the size your clients send"
            in capsys.readouterr().err)


@pytest.mark.server
def test_shape_sizes_the_dynamic_dimension_in_every_request_the_header_and_the_json(
        encoder_served, tmp_path, capsys):
    from tritonkit.loadtest import request_template

    template = request_template(Endpoint.from_deployment(encoder_served), "enc", batch_size=2,
                                shapes={"input_ids": [12], "attention_mask": [12]})
    assert [(name, data.shape) for name, _, data in template.inputs] == [
        ("input_ids", (2, 12)), ("attention_mask", (2, 12))]

    code = _loadtest_model(encoder_served, "enc", "--shape", "input_ids:12", "--shape",
                           "attention_mask:12", "--json", tmp_path / "run.json")
    out = capsys.readouterr().out
    assert code == 0
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["request"] == "input_ids INT64[1, 12], attention_mask INT64[1, 12]"
    assert data["spec"]["shapes"] == {"input_ids": [12], "attention_mask": [12]}
    assert data["levels"][0]["ok"] > 0 and data["levels"][0]["errors"] == {}
    header = " ".join(out.split())          # the table's title, however the terminal wraps it
    assert "(input_ids INT64[1, 12], attention_mask INT64[1, 12])" in header


@pytest.mark.server
def test_real_data_sizes_a_dynamic_dimension_as_a_shape_would(encoder_served, tmp_path):
    from tritonkit.loadtest import request_template

    data = tmp_path / "ids.json"
    data.write_text(json.dumps({"input_ids": list(range(9))}))
    template = request_template(Endpoint.from_deployment(encoder_served), "enc", input_data=data,
                                shapes={"attention_mask": [9]})
    assert [data.shape for _, _, data in template.inputs] == [(1, 9), (1, 9)]


@pytest.mark.server
@pytest.mark.parametrize("model, shapes, says", [
    ("enc", ["ids:12", "attention_mask:12"], "--shape names inputs the model does not have: ids"),
    ("enc", ["input_ids:12,2", "attention_mask:12"],
     r"--shape input_ids:12,2 gives 2 dims; input input_ids has 1 without the batch axis"),
    ("enc", ["input_ids:0", "attention_mask:12"], "--shape input_ids:0: every dim of input input_ids"),
    ("enc", ["input_ids:-3", "attention_mask:12"], "--shape input_ids:-3: every dim of input input_ids"),
    ("example", ["INPUT__0:5"], "--shape INPUT__0:5 sets dim 0 of input INPUT__0 to 5; the model "
                                "fixes it at 4"),
], ids=["unknown input", "dim count", "zero dim", "negative dim", "fixed dim"])
def test_a_shape_the_model_cannot_take_is_a_usage_error_that_names_the_input(
        encoder_served, capsys, model, shapes, says):
    code = _loadtest_model(encoder_served, model, *[a for s in shapes for a in ("--shape", s)])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert err.startswith(f"error: {says}"), err
    assert err.splitlines()[1].startswith("hint: ") and "Traceback" not in err


def _requests_seen(deployment, model: str) -> int:
    """The requests the server has seen for ``model``, answered or failed (a python-backend
    model's error response counts as a success in Triton's statistics)."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(deployment.http_url)
    try:
        stats = client.get_inference_statistics(model)["model_stats"]
    finally:
        client.close()
    return sum(int(m["inference_stats"][k]["count"]) for m in stats for k in ("success", "fail"))


@pytest.mark.server
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_shapes_the_model_refuses_are_a_usage_error_before_the_run_in_the_servers_words(
        encoder_served, capsys, protocol):
    """Two inputs that share a dynamic axis, given two sizes: the server refuses the first
    request (HTTP 400, gRPC INVALID_ARGUMENT), so nothing is measured — one line naming the
    model, what was sent and the server's words, exit 2; the run never starts."""
    before = _requests_seen(encoder_served, "pair")
    code = _loadtest_model(encoder_served, "pair", "--protocol", protocol, "--duration", "30",
                           "--shape", "input_ids:128", "--shape", "attention_mask:64")
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    word = "HTTP 400" if protocol == "http" else "gRPC INVALID_ARGUMENT"
    first, hint = err.splitlines()[:2]
    assert first == ("error: model 'pair' (input_ids INT64[1, 128], attention_mask INT64[1, 64]) "
                     f"refused the request: {word}: input_ids [1, 128] and attention_mask [1, 64] "
                     "must share their sequence length")
    assert hint.startswith("hint: send what the model takes: check --shape and --input-data")
    assert "Traceback" not in err and len(err.splitlines()) == 2
    assert _requests_seen(encoder_served, "pair") - before == 1      # the probe alone: no level ran


@pytest.mark.server
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_one_answer_of_the_server_is_read_alike_over_http_and_grpc(encoder_served, capsys, protocol):
    """A model's UNKNOWN error is an HTTP 400 from Triton's HTTP endpoint, as an invalid
    argument is: over gRPC the same answer (UNKNOWN) is the same usage error, exit 2, not a
    run error."""
    code = _loadtest_model(encoder_served, "pair", "--protocol", protocol, "--duration", "30",
                           "--shape", "input_ids:300", "--shape", "attention_mask:300")
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    word = "HTTP 400" if protocol == "http" else "gRPC UNKNOWN"
    assert err.splitlines()[0].endswith(
        f"refused the request: {word}: sequences longer than 256 are not supported (got 300)"), err


@pytest.mark.server
def test_inputs_onnx_runtime_cannot_run_are_a_usage_error_with_the_sizes_the_model_was_warmed_at(
        encoder_served, capsys):
    """The encoder itself does not check its inputs: ONNX Runtime fails on two sizes for one
    axis (the local target's python-backend adapter answers HTTP 500 with its words). The
    input is wrong, nothing was measured: a usage error (exit 2), ONNX Runtime's reason
    without its source location, and the sizes the export verified and warmed."""
    before = _requests_seen(encoder_served, "enc")
    code = _loadtest_model(encoder_served, "enc", "--shape", "input_ids:12", "--shape", "attention_mask:6")
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    first, hint = err.splitlines()
    # ONNX Runtime's reason depends on the node the exporter made of the mask (an Add that
    # broadcasts, a Reshape): its words with both sizes, never where in its source it failed.
    said = re.fullmatch(re.escape("error: model 'enc' (input_ids INT64[1, 12], attention_mask INT64[1, 6]) "
                                  "refused the request: HTTP 500: ONNX Runtime FAIL in ")
                        + r"\w+ node '[^']+': (?P<reason>[^\n]+)", first)
    assert said, first
    assert re.search(r"\b6\b", said["reason"]) and re.search(r"\b12\b", said["reason"]), first
    assert "onnxruntime_src" not in first and "was false" not in first and ".cc:" not in first
    assert hint == ("hint: its model_warmup warms it at --shape input_ids:18 --shape attention_mask:18, "
                    "also at 6, 12 (a tritonkit export's: the sizes it verified); check --shape and "
                    "--input-data (inputs that share a dynamic axis take the same size) and --batch-size")
    assert _requests_seen(encoder_served, "enc") - before == 1      # the probe alone: no level ran


@pytest.mark.parametrize("flag, says", [
    ("input_ids", "--shape input_ids is not NAME:D1,D2,..."),
    ("input_ids:12,x", "--shape input_ids:12,x is not NAME:D1,D2,..."),
    (":12", "--shape :12 is not NAME:D1,D2,..."),
])
def test_a_shape_flag_that_is_not_name_and_dims_is_refused_before_reaching_the_server(
        capsys, flag, says):
    assert run_cli("loadtest", "--url", "127.0.0.1:1", "--model", "m", "-c", "1",
                   "--shape", flag) == EXIT_USAGE
    assert capsys.readouterr().err.startswith(f"error: {says}")


def test_a_shape_given_twice_is_refused_and_a_name_may_hold_a_colon():
    from tritonkit.loadtest import parse_shapes

    assert parse_shapes(["x:0:3,4"]) == (("x:0", (3, 4)),)       # a TensorFlow tensor name
    with pytest.raises(UsageError, match="gives input x twice"):
        parse_shapes(["x:3", "x:4"])


@pytest.mark.server
def test_statistics_the_client_may_not_read_never_fake_an_outage(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE_REPOSITORY, repo, ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    settings = tmp_path / "server.toml"
    shipped = (EXAMPLE_REPOSITORY.parent / "configs" / "server.toml").read_text()
    restricted = re.sub(r"(?m)^categories = \[.*\]$", 'categories = ["model-repository", "statistics"]',
                        shipped)
    assert restricted != shipped
    settings.write_text(restricted)
    deployment = deploy_local(repo, http_port=0, grpc_port=0, metrics_port=0, timeout=120,
                              server_config=settings, warmup=False)
    try:
        # reached by address alone: no secret, so statistics answer "restricted"
        result = run_loadtest(Endpoint(http_url=deployment.http_url),
                              LoadSpec(model="example", concurrency=(1,), duration_s=1.5, warmup_s=0.3))
    finally:
        down(repo)
    # nothing of ours kept a connection open: the server stopped without its exit timeout
    assert "Exit timeout expired" not in Path(deployment.log_path).read_text()
    level = result.levels[0]
    assert level.ok > 50 and level.error_count == 0
    assert level.server_split_ms is None and level.server_batch is None
    assert level.outages == [] and not any(s.cold_start for s in level.spikes)


@pytest.mark.server
def test_existing_output_files_are_not_overwritten_without_force(served, tmp_path, capsys):
    target = tmp_path / "keep.json"
    target.write_text("mine")
    code = _loadtest(served, "--concurrency", "1", "--duration", "0.5", "--json", target)
    assert code == EXIT_USAGE and target.read_text() == "mine"
    assert "--force" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--json", "--csv", "--plot"])
def test_an_output_file_that_could_not_be_written_is_refused_before_the_run(tmp_path, capsys, flag):
    from tritonkit.server.local import free_port

    (tmp_path / "taken").write_text("a file, where a folder would have to be")
    target = tmp_path / "taken" / "out" / ("run.png" if flag == "--plot" else "run.x")
    # no server at this address either: the paths are checked before anything is run
    code = run_cli("loadtest", "--url", f"127.0.0.1:{free_port()}", "--model", "example",
                   "--concurrency", "1", flag, target)
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert err.startswith(f"error: cannot write {flag} file {target}")


@pytest.mark.server
def test_a_file_that_fails_to_write_after_the_run_keeps_the_report_and_the_verdict(served, tmp_path,
                                                                                capsys, monkeypatch):
    import errno

    def disk_full(path, *args):     # the path passed the check before the run; the disk filled up
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(report, "write_json", disk_full)
    out = tmp_path / "out" / "run.json"
    code = _loadtest(served, "--concurrency", "1", "--duration", "1", "--sla-p99-ms", "0.001",
                     "--json", out, "--csv", tmp_path / "run.csv")
    captured = capsys.readouterr()
    assert code == EXIT_SLA_MISS                        # the verdict, not a usage error
    assert "SLA missed" in captured.out                 # the report was printed
    assert (tmp_path / "run.csv").read_text().startswith("level,")   # the other file was written
    assert [line for line in captured.out.splitlines() if line.startswith("wrote ")] == [
        f"wrote {tmp_path / 'run.csv'}"]                               # and only it is said written
    assert [line for line in captured.err.splitlines() if "run.json" in line] == [
        f"error: could not write {out}: No space left on device"]


def test_a_plot_of_a_run_where_nothing_succeeded_draws_no_empty_legend(tmp_path):
    import warnings

    result = _result(sent=40, errors={"HTTP 400: bad input": 40})
    result.levels[0].latency_ms = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # matplotlib: "No artists with labels found"
        report.write_plot(tmp_path / "failed.png", result)
    assert (tmp_path / "failed.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.server
def test_an_unknown_model_is_one_clear_line(served, capsys):
    code = run_cli("loadtest", "--repository", served.repository, "--model", "nope",
                   "--concurrency", "1", "--duration", "0.5")
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert err.startswith(f"error: the server at {served.http_url} has no model 'nope' (its models: example")
    assert "hint: check the name given to --model" in err and "Traceback" not in err


@pytest.mark.server
def test_a_model_added_after_the_deploy_is_told_to_redeploy_and_one_unloaded_to_warm_up(served, capsys):
    """The local server serves the mirror made at the deploy: a model exported into the folder
    since is not in its repository, and `warmup --model` could not load it either."""
    repo = Path(served.repository)
    shutil.copytree(repo / "example", repo / "cnn", ignore=shutil.ignore_patterns("__pycache__"))
    try:
        assert run_cli("loadtest", "-r", repo, "-m", "cnn", "-c", "1") == EXIT_USAGE
    finally:
        shutil.rmtree(repo / "cnn")
    assert capsys.readouterr().err.splitlines() == [
        f"error: model 'cnn' is in {repo} but was added after the deploy: the server at "
        f"{served.http_url} does not know it",
        f"hint: redeploy: tritonkit down -r {repo} && tritonkit deploy -r {repo} --http-port "
        f"{served.http_port} --grpc-port {served.grpc_port} --metrics-port {served.metrics_port}"]

    endpoint = Endpoint.from_deployment(served)
    client = endpoint.http()
    client.unload_model("example", headers=endpoint.repository_headers)
    try:
        assert run_cli("loadtest", "-r", repo, "-m", "example", "-c", "1") == EXIT_USAGE
    finally:
        client.load_model("example", headers=endpoint.repository_headers)
        client.close()
    first, hint = capsys.readouterr().err.splitlines()[:2]
    assert first.startswith("error: model 'example' is not loaded on the server")
    assert hint == f"hint: load it: tritonkit warmup --repository {repo} --model example"


def test_no_server_is_one_clear_line_and_an_error_exit(capsys):
    from tritonkit.server.local import free_port

    code = run_cli("loadtest", "--url", f"127.0.0.1:{free_port()}", "--model", "example",
                   "--concurrency", "1", "--duration", "0.5")
    err = capsys.readouterr().err
    assert code == EXIT_ERROR and err.startswith("error: could not read model 'example'")
    assert "internal error" not in err and "Traceback" not in err and "hint: is a Triton server" in err


@pytest.mark.server
def test_a_grpc_port_no_server_answers_is_a_run_that_could_not_start_not_one_whose_requests_failed(
        served, capsys):
    """The model is read over HTTP; the gRPC address is only tried by the first request. No
    server there is exit 1, as no server on the HTTP port is: exit 4 says requests failed."""
    from tritonkit.server.local import free_port

    code = run_cli("loadtest", "--url", served.http_url, "--grpc-url", f"127.0.0.1:{free_port()}",
                   "--protocol", "grpc", "--model", "example", "--concurrency", "1", "--duration", "0.5")
    err = capsys.readouterr().err
    assert code == EXIT_ERROR, err
    assert err.startswith("error: could not reach 127.0.0.1:") and "Traceback" not in err


def test_bad_flags_are_usage_errors(capsys):
    assert run_cli("loadtest", "--model", "m", "--concurrency", "1,x") == EXIT_USAGE
    assert "comma-separated" in capsys.readouterr().err
    assert run_cli("loadtest", "--model", "m", "--concurrency", "1", "--rate", "5") == EXIT_USAGE
    assert run_cli("loadtest", "--model", "m", "--rate", "5", "--sla-max-error-rate", "3") == EXIT_USAGE
    assert run_cli("loadtest", "--model", "m", "--rate", "inf") == EXIT_USAGE


@pytest.mark.server
def test_a_script_without_a_main_guard_is_told_to_add_one(served, tmp_path):
    """Workers are spawned: each imports the main script again, and an unguarded one calls
    the load test there. The worker leaves at once; the script is told why, not that a
    worker died (exit code None)."""
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from tritonkit.client import Endpoint\n"
        "from tritonkit.loadtest import LoadSpec, run_loadtest\n"
        f"run_loadtest(Endpoint(http_url={served.http_url!r}),\n"
        "             LoadSpec(model='example', concurrency=(1,), duration_s=0.5, warmup_s=0))\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("tritonkit.errors.UsageError: a load-test worker ran the main script's "
                           "load test again: put the call under `if __name__ == \"__main__\":`"), done.stderr
    assert "RuntimeError" not in done.stderr        # the worker's own failure, a page long, is gone


def test_starting_workers_leaves_the_process_environment_alone(monkeypatch):
    """A child another thread starts meanwhile (a tritonserver, a CLI run in a subprocess)
    must not inherit a load-test worker's mark, nor two load tests at once remove each
    other's: a worker knows itself by its process name, never by os.environ."""
    import multiprocessing.context

    from tritonkit.loadtest._run import _run_level

    seen = []

    def start(self):
        seen.append(dict(os.environ))
        raise OSError("no worker started in this test")

    monkeypatch.setattr(multiprocessing.context.SpawnProcess, "start", start)
    spec = LoadSpec(model="m", concurrency=(1,), duration_s=0.5, warmup_s=0)
    before = dict(os.environ)
    with pytest.raises(OSError, match="no worker started"):
        _run_level(Endpoint(http_url="-"), "-", spec, None, 1, [1], None)
    assert seen == [before] and dict(os.environ) == before


@pytest.mark.server
def test_a_worker_that_cannot_start_stops_the_ready_ones_at_once(served, monkeypatch):
    """The workers that did start wait for their start time; they are let go at once, not
    each after a timeout."""
    import multiprocessing
    from dataclasses import replace

    from tritonkit.loadtest import _run
    from tritonkit.server.local import free_port

    plans, wait_ready = _run._plans, _run._wait_ready
    failed_at = []

    def last_one_unreachable(*args):
        made = plans(*args)
        return [*made[:-1], replace(made[-1], url=f"127.0.0.1:{free_port()}")]

    def noting_the_failure(*args):
        try:
            wait_ready(*args)
        finally:
            failed_at.append(time.monotonic())

    monkeypatch.setattr(_run, "_plans", last_one_unreachable)
    monkeypatch.setattr(_run, "_wait_ready", noting_the_failure)
    with pytest.raises(LoadTestError, match="worker 3 could not start"):
        run_loadtest(Endpoint.from_deployment(served),
                     LoadSpec(model="example", concurrency=(4,), workers=4, duration_s=1, warmup_s=0))
    # timed from the failure, not from the spawn (seconds of imports on a busy machine):
    # three ready workers kept 5 s each took 15 s; stopping them takes well under a second
    # (8 s: a busy 2-core host's start of the clean-up, not a worker's timeout)
    assert time.monotonic() - failed_at[0] < 8
    assert multiprocessing.active_children() == []


def _answered(client) -> int:
    stats = client.get_inference_statistics("example")["model_stats"]
    return sum(int(m["inference_stats"]["success"]["count"]) for m in stats)


def _loadtest_process(deployment, *args) -> subprocess.Popen:
    """`tritonkit loadtest` in a process group of its own, as a terminal would run it."""
    return subprocess.Popen(
        [sys.executable, "-m", "tritonkit", "loadtest", "--repository", str(deployment.repository),
         "--model", "example", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=default_signals)


def _interrupted(run: subprocess.Popen) -> tuple[float, str]:
    """Ctrl-C as a terminal sends it (to the whole process group): seconds until the run
    ended, and what it wrote on stderr."""
    pressed = time.monotonic()
    os.killpg(run.pid, signal.SIGINT)
    _, err = run.communicate(timeout=60)
    return time.monotonic() - pressed, err


@pytest.mark.server
def test_ctrl_c_ends_a_run_whose_requests_stall_in_seconds_without_a_traceback(served):
    """Every worker is blocked in a request the frozen server will not answer for 30 s
    (the request timeout): Ctrl-C does not wait for them."""
    client = Endpoint.from_deployment(served).http()
    run = _loadtest_process(served, "--concurrency", "3", "--workers", "3", "--duration", "60",
                            "--warmup-s", "0")
    try:
        before, deadline = _answered(client), time.monotonic() + 30
        while _answered(client) < before + 300 and time.monotonic() < deadline:   # workers loading
            time.sleep(0.2)
        os.kill(served.pid, signal.SIGSTOP)
        time.sleep(0.5)                          # every request now out waits on the server
        took, err = _interrupted(run)
    finally:
        os.kill(served.pid, signal.SIGCONT)
        if run.poll() is None:
            run.kill()
        client.close()
    assert run.returncode == 130
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines() == ["error: interrupted"], err      # the CLI's one line
    assert took < 6, f"Ctrl-C took {took:.1f} s"      # it was 15 s and more: 5 s per worker


def _workers_of(pid: int) -> list[int]:
    """The spawned load-test workers among a process's children."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    workers = []
    for child in children:
        try:
            if b"multiprocessing.spawn" in Path(f"/proc/{child}/cmdline").read_bytes():
                workers.append(int(child))
        except FileNotFoundError:
            pass
    return workers


@pytest.mark.server
def test_ctrl_c_while_the_workers_are_still_starting_prints_no_traceback(served):
    """A worker starts for a second or more (imports): one interrupted then is the
    parent's to report, once, not a KeyboardInterrupt traceback from each worker."""
    run = _loadtest_process(served, "--concurrency", "3", "--workers", "3", "--duration", "60")
    try:
        deadline = time.monotonic() + 30
        while len(_workers_of(run.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(_workers_of(run.pid)) == 3, "the workers did not start"
        time.sleep(0.1)                          # all three started; none imported all it needs
        took, err = _interrupted(run)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines() == ["error: interrupted"], err      # the CLI's one line
    assert took < 6, f"Ctrl-C took {took:.1f} s"


@pytest.mark.server
def test_a_server_that_dies_mid_run_ends_it_with_what_was_measured(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE_REPOSITORY, repo, ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    deployment = deploy_local(repo, http_port=0, grpc_port=0, metrics_port=0, timeout=120,
                              warmup=False)
    # The server's whole process group: a stub orphaned by killing the server alone would
    # outlive the test.
    kill = _At(1.5, 0.3, lambda: os.killpg(deployment.pid, signal.SIGKILL))
    try:
        result = run_loadtest(Endpoint.from_deployment(deployment),
                              LoadSpec(model="example", concurrency=(2,), duration_s=8, warmup_s=0.3),
                              progress=kill)
    finally:
        kill.join()
        down(repo)
    assert kill.ran
    level = result.levels[0]
    assert "server gone at t=" in result.ended_early
    assert level.ok > 50                                  # what was measured is kept
    assert 1.0 < level.duration_s < 8
    verdict = report.judge(result, report.Sla(p99_ms=1000))
    assert verdict.exit_code == EXIT_RUN_ERRORS and "stopped answering" in verdict.reasons[0]
    report.write_json(tmp_path / "died.json", result, verdict)
    assert json.loads((tmp_path / "died.json").read_text())["levels"][0]["ended_early"]


# -- the benchmarks -----------------------------------------------------------------------------

def _stand_in_perf_analyzer(tmp_path, monkeypatch, says: str, code: int):
    """A stand-in for the perf_analyzer binary (the real one cannot be made to fail on
    demand): it writes one row of figures, prints ``says`` on stderr and exits ``code``."""
    from bench import perf_analyzer

    columns = ("Concurrency,Inferences/Second,Client Send,Client Recv,p50 latency,p90 latency,"
               "p95 latency,p99 latency")
    tool = tmp_path / "perf_analyzer"
    tool.write_text("#!/bin/sh\nwhile [ \"$1\" != -f ]; do shift; done\n"
                    f"printf '{columns}\\n1,2000,10,20,400,450,480,900\\n' > \"$2\"\n"
                    f"echo '{says}' >&2\nexit {code}\n")
    tool.chmod(0o755)
    monkeypatch.setattr(perf_analyzer, "perf_analyzer_binary", lambda: tool)
    monkeypatch.setattr(perf_analyzer, "_library_dir", lambda: tmp_path)
    return perf_analyzer


def test_perf_analyzer_that_exits_non_zero_after_writing_figures_gives_a_result_marked_unstable(
        tmp_path, monkeypatch):
    """perf_analyzer's exit status is kept with the figures it wrote: the benchmarks mark
    such rounds, never take them for a stable measurement."""
    import warnings

    perf_analyzer = _stand_in_perf_analyzer(tmp_path, monkeypatch, code=2, says=(
        "Failed to obtain stable measurement within 10 measurement windows for concurrency 1."))
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        result = perf_analyzer.run_perf_analyzer("127.0.0.1:1", "m", 1)
    assert result.throughput == 2000.0 and result.returncode == 2 and not result.stable
    assert result.failure == "no stable window"
    assert not [w for w in warned if issubclass(w.category, ResourceWarning)]   # its CSV was closed


def test_perf_analyzer_that_fails_for_another_reason_says_what_it_printed_last(tmp_path, monkeypatch):
    perf_analyzer = _stand_in_perf_analyzer(tmp_path, monkeypatch, code=99,
                                            says="error: failed to get model metadata: m")
    result = perf_analyzer.run_perf_analyzer("127.0.0.1:1", "m", 1)
    assert not result.stable
    assert result.failure == "exit 99: error: failed to get model metadata: m"


def test_perf_analyzer_that_found_no_stable_window_and_wrote_nothing_is_asked_again_with_longer_windows(
        tmp_path, monkeypatch):
    """perf_analyzer that finds no stable window sometimes writes no figures at all (a
    6-minute benchmark then died at its last level): it is run once more with windows twice
    as long, its own advice; a second run that writes nothing still fails, saying both."""
    from bench import perf_analyzer

    columns = "Concurrency,Inferences/Second,p50 latency,p90 latency,p95 latency,p99 latency"
    tool = tmp_path / "perf_analyzer"
    tool.write_text(
        "#!/bin/sh\necho \"$@\" >> \"$(dirname \"$0\")/calls\"\n"
        "interval=; out=\n"
        "while [ $# -gt 0 ]; do case \"$1\" in -p) interval=$2;; -f) out=$2;; esac; shift; done\n"
        "if [ \"$interval\" -ge 6000 ] && [ ! -e \"$(dirname \"$0\")/never\" ]; then\n"
        f"  printf '{columns}\\n1,2000,400,450,480,900\\n' > \"$out\"; exit 0; fi\n"
        "echo 'Failed to obtain stable measurement within 10 measurement windows for concurrency 1.'\n"
        "exit 2\n")
    tool.chmod(0o755)
    monkeypatch.setattr(perf_analyzer, "perf_analyzer_binary", lambda: tool)
    monkeypatch.setattr(perf_analyzer, "_library_dir", lambda: tmp_path)

    result = perf_analyzer.run_perf_analyzer("127.0.0.1:1", "m", 1, interval_ms=3000)
    assert result.stable and result.throughput == 2000.0
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 2 and "-p 3000" in calls[0] and "-p 6000" in calls[1]

    (tmp_path / "never").touch()
    with pytest.raises(RuntimeError, match="stable measurement.*also with 6000 ms windows"):
        perf_analyzer.run_perf_analyzer("127.0.0.1:1", "m", 1, interval_ms=3000)


def test_a_perf_analyzer_library_link_left_dangling_is_pointed_anew(tmp_path, monkeypatch):
    import tempfile

    from bench import perf_analyzer

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    links = tmp_path / "tritonkit-perf-analyzer-libs"
    links.mkdir()
    (links / "libb64.so.0d").symlink_to(tmp_path / "an-older-wheel" / "libb64-0123.so.0d")
    assert perf_analyzer._library_dir() == links
    for name in ("libb64.so.0d", "libcudart.so.12"):
        assert (links / name).exists(), f"{name} still dangles"


@pytest.mark.slow
def test_a_benchmarks_json_lands_whole_in_a_folder_that_did_not_exist(tmp_path):
    target = tmp_path / "new" / "folder" / "bench_export.json"
    runs = tmp_path / "runs"                # every run's own copy: here, not in the checkout's out/
    done = subprocess.run([sys.executable, str(EXAMPLE_REPOSITORY.parent / "bench" / "bench_export.py"),
                           "--models", "mlp", "--iterations", "2", "--warmup", "1", "--threads", "1",
                           "--json", str(target)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRITONKIT_BENCH_RUNS": str(runs)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert [(row["model"], row["batch"]) for row in json.loads(target.read_text())["results"]] == [
        ("mlp", 1), ("mlp", 32)]
    assert [p.name for p in target.parent.iterdir()] == ["bench_export.json"]   # no temporary left
    [kept] = runs.iterdir()
    assert json.loads(kept.read_text())["results"] == json.loads(target.read_text())["results"]


@pytest.mark.parametrize("args,says", [
    (("--rate", "1e9"), "more than one level may schedule"),
    (("--concurrency", "100000"), "more than one load generator holds"),
    (("--concurrency", "1", "--duration", "inf"), "--duration inf is not a time of at most 3600 s"),
    (("--concurrency", "1", "--request-timeout", "1e10"), "--request-timeout 1e+10 is not a time"),
    (("--concurrency", "1", "--duration", "3000", "--window-s", "1"), "more than 1000 timeline windows"),
    (("--rate", "10", "--workers", "500"), "--workers 500 is more than 64 processes"),
    (("--rate", "10", "--max-in-flight", "5000"), "more than one load generator holds"),
])
def test_a_load_no_single_load_generator_can_hold_is_refused_at_once(tmp_path, capsys, args, says):
    """At once and as bad input (exit 2): not minutes of building a schedule or starting
    sockets, then a run error that blames the server."""
    from tritonkit.server.local import free_port

    started = time.monotonic()
    code = run_cli("loadtest", "--url", f"127.0.0.1:{free_port()}", "--model", "m", *args)
    assert code == EXIT_USAGE
    assert says in capsys.readouterr().err
    assert time.monotonic() - started < 2


def test_two_outputs_on_one_path_are_refused_before_the_run(tmp_path, capsys):
    from tritonkit.server.local import free_port

    same = tmp_path / "same.json"
    code = run_cli("loadtest", "--url", f"127.0.0.1:{free_port()}", "--model", "m",
                   "--concurrency", "1", "--json", same, "--csv", same)
    assert code == EXIT_USAGE
    assert "--json and --csv name the same file" in capsys.readouterr().err
    assert not same.exists()


def test_a_version_retired_by_a_roll_to_the_next_is_no_outage():
    """Triton keeps a retired version in its index as UNAVAILABLE ("unloaded"): while
    another version serves, the model is not out, at the first poll or later."""
    from tritonkit.loadtest._timeline import model_outages

    at = lambda s: int(s * 1e9)     # noqa: E731
    rolled = [ServerEvent(at(1.0), "state", "mlp", "2", "LOADING", ""),
              ServerEvent(at(1.4), "state", "mlp", "2", "READY", "LOADING"),
              ServerEvent(at(1.5), "state", "mlp", "1", "UNAVAILABLE", "READY", "unloaded")]
    assert model_outages(rolled, 0) == [("mlp", "2", 1.0, 1.4)]      # v2's load, nothing open
    # v1 out, then v2 (a new version) READY: the model serves again, the outage ends there
    swapped = [ServerEvent(at(1.0), "state", "mlp", "1", "UNAVAILABLE", "READY"),
               ServerEvent(at(2.0), "state", "mlp", "2", "READY", "LOADING")]
    assert model_outages(swapped, 0) == [("mlp", "1, 2", 1.0, 2.0)]
    # both versions serving since before the run (the first poll says so): retiring one is
    # no outage either, though the other sends no READY event during the run
    both = [ServerEvent(at(-0.5), "serving", "mlp", "1", "READY"),
            ServerEvent(at(-0.5), "serving", "mlp", "2", "READY"),
            ServerEvent(at(5.0), "state", "mlp", "1", "UNAVAILABLE", "READY", "unloaded")]
    assert model_outages(both, 0) == []


@pytest.mark.server
def test_a_version_retired_before_the_run_is_not_an_outage_for_the_whole_run(served):
    """After a roll from version 1 to 2 the index lists 1 as UNAVAILABLE: the watcher's
    first poll must not open an outage that never ends (every spike would be named after it)."""
    import shutil as sh

    from tritonkit.loadtest import ServerWatcher
    from tritonkit.loadtest._timeline import model_outages

    served_repo = Path(served.extra["served_repository"])
    endpoint = Endpoint.from_deployment(served)
    client = endpoint.http()
    sh.copytree(served_repo / "example" / "1", served_repo / "example" / "2")
    try:
        client.load_model("example", headers=endpoint.repository_headers)
        retired = {"name": "example", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
        deadline = time.monotonic() + 10
        while retired not in client.get_model_repository_index(
                headers=endpoint.repository_headers) and time.monotonic() < deadline:
            time.sleep(0.05)                                  # version 1 is still UNLOADING
        assert retired in client.get_model_repository_index(headers=endpoint.repository_headers)
        began = time.perf_counter_ns()
        watcher = ServerWatcher(endpoint, "example").start()
        time.sleep(0.3)
        watcher.stop()
        assert [(e.kind, e.version) for e in watcher.events if e.kind == "serving"] == [("serving", "2")]
    finally:                        # the module's server as it was: version 1 alone
        sh.rmtree(served_repo / "example" / "2")
        client.load_model("example", headers=endpoint.repository_headers)
        client.close()
    assert model_outages(watcher.events, began) == []


def test_more_connections_per_worker_than_the_open_files_limit_is_refused_up_front(monkeypatch,
                                                                                    capsys):
    """A worker raises its soft limit to the hard one; past that it could not start
    ("Too many open files"), a run error that blamed nothing the user could see."""
    import resource

    from tritonkit.server.local import free_port

    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 1024))
    code = run_cli("loadtest", "--url", f"127.0.0.1:{free_port()}", "--model", "m",
                   "--concurrency", "2100", "--workers", "2")
    assert code == EXIT_USAGE
    assert "a worker would hold 1050 connections; this host allows a process 1024 open files" \
        in capsys.readouterr().err


@pytest.mark.server
def test_a_level_runs_the_workers_its_limits_were_checked_for(served, monkeypatch):
    """The CPUs this process may use can change while a run prepares (a benchmark pins it):
    the workers checked against the limits up front are the workers that run."""
    cpus = iter([{0}])
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: next(cpus, {0, 1, 2, 3}))
    result = run_loadtest(Endpoint.from_deployment(served),
                          LoadSpec(model="example", concurrency=(4,), duration_s=0.5, warmup_s=0))
    assert result.levels[0].workers == 1        # four users in the one worker planned
    assert result.levels[0].ok > 0


def test_in_flight_over_the_workers_the_cpus_give_is_refused_up_front(monkeypatch, capsys):
    """--max-in-flight is per worker; without --workers the CPUs decide how many."""
    import os

    from tritonkit.server.local import free_port

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    code = run_cli("loadtest", "--url", f"127.0.0.1:{free_port()}", "--model", "m",
                   "--rate", "20000", "--max-in-flight", "4000")
    assert code == EXIT_USAGE
    assert "4 workers x 4000 requests in flight at rate 20000/s is more than one load " \
        "generator holds" in capsys.readouterr().err


# -- stateful models: sequences ------------------------------------------------------------


def test_every_live_sequence_has_an_id_no_other_has_across_workers_and_in_range():
    """Slot g of S numbers its n-th sequence g + S*n from the level's start: IDs never
    repeat among the slots of every worker, however many sequences each runs."""
    from tritonkit.loadtest._sequences import Sequencing, plan_sequences

    model = Sequencing(string_ids=False, id_limit=2**63, batcher_slots=4)
    plans = plan_sequences(model, [3, 2, 2], 5, 0.0, None, seed=1)
    ids = [plan.sequence_id(slot, n) for plan, slots in zip(plans, [3, 2, 2])
           for slot in range(slots) for n in range(50)]
    assert len(set(ids)) == len(ids) == 7 * 50
    # the second quarter of what the CORRID input holds: warm-up takes the upper half
    assert all(2**61 <= i < 2**62 for i in ids)
    # a level of its own draws another start: its IDs are not the last level's
    assert plan_sequences(model, [3, 2, 2], 5, 0.0, None, seed=1)[0].sequence_id(0, 0) != ids[0]


def test_a_32_bit_or_string_corrid_input_gets_ids_it_holds():
    from tritonkit.loadtest._sequences import plan_sequences, sequencing

    def corrid(data_type: str) -> dict:
        return {"max_batch_size": 4, "instance_group": [{"count": 2}], "sequence_batching": {
            "control_input": [{"name": "CORRID", "control": [
                {"kind": "CONTROL_SEQUENCE_CORRID", "data_type": data_type}]}]}}

    int32 = sequencing(corrid("TYPE_INT32"))
    assert int32.id_limit == 2**31 and int32.batcher_slots == 8 and not int32.string_ids
    assert 2**29 <= plan_sequences(int32, [1], 5, 0.0, None, 0)[0].sequence_id(0, 0) < 2**30
    text = sequencing(corrid("TYPE_STRING"))
    first, second = (plan_sequences(text, [2], 5, 0.0, None, 0)[0].sequence_id(s, 0) for s in (0, 1))
    assert first.startswith("tritonkit-loadtest-") and first != second
    assert sequencing({"max_batch_size": 4}) is None


def test_a_sequence_id_range_is_used_from_its_start_and_must_hold_every_live_sequence():
    from tritonkit.loadtest._sequences import Sequencing, parse_id_range, plan_sequences

    model = Sequencing(string_ids=False, id_limit=2**63, batcher_slots=4)
    plan, = plan_sequences(model, [2], 5, 0.0, parse_id_range("100:104"), seed=0)
    assert [plan.sequence_id(slot, n) for n in range(3) for slot in range(2)] == [100, 101, 102, 103, 100, 101]
    with pytest.raises(UsageError, match="holds 2 IDs for 3 sequences live at once"):
        plan_sequences(model, [3], 5, 0.0, parse_id_range("100:102"), seed=0)
    with pytest.raises(UsageError, match="past what the model's CORRID input holds"):
        plan_sequences(Sequencing(False, 2**31, 1), [1], 5, 0.0, (1, 2**32), seed=0)
    for text in ("0:5", "9:9", "a:b"):
        with pytest.raises(UsageError, match="is not START"):
            parse_id_range(text)
    assert parse_id_range("7") == (7, None)


def test_a_live_sequence_says_start_on_its_first_request_and_end_on_its_last():
    from tritonkit.loadtest._sequences import LiveSequence, Sequencing, plan_sequences

    plan, = plan_sequences(Sequencing(False, 2**63, 1), [1], 3, 0.0, (10, 1000), seed=0)
    live = LiveSequence(plan, 0)
    steps = []
    for _ in range(7):
        steps.append(live.next())
        live.answered(True)
    assert steps == [(10, True, False), (10, False, False), (10, False, True),
                     (11, True, False), (11, False, False), (11, False, True), (12, True, False)]
    assert live.open and live.completed == 2
    assert live.close() == (12, False, True)     # the run is over: one more request ends it
    live.answered(True)
    assert not live.open and live.completed == 3 and live.cut_short == 1
    live.next(), live.answered(True), live.next(), live.answered(True)
    live.close()                                 # the one left to send anyway: not cut short
    assert live.cut_short == 1


def test_sequence_lengths_vary_within_the_variation_and_a_failed_end_may_leave_one_open():
    from tritonkit.loadtest._sequences import LiveSequence, Sequencing, plan_sequences

    plan, = plan_sequences(Sequencing(False, 2**63, 1), [1], 20, 20.0, None, seed=3)
    live, lengths, length = LiveSequence(plan, 0), [], 0
    for _ in range(2000):
        _, start, end = live.next()
        length = 1 if start else length + 1
        if end:
            lengths.append(length)
        live.answered(True)
    assert min(lengths) == 16 and max(lengths) == 24       # 20 +/- 20 %, perf_analyzer's
    live.close()
    live.answered(False)
    assert live.failed_ends == 1 and not live.open


class _RecordingSocket:
    """A socket that keeps what is sent and answers every request with an empty 200."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.sent.append(data)

    def recv(self, size: int) -> bytes:
        return b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"

    def close(self) -> None:
        pass


@pytest.mark.parametrize("sequence_id", [2**61 + 5, "tritonkit-loadtest-ab-7"])
def test_an_http_sequence_request_carries_its_id_and_flags_in_its_json_header(monkeypatch, sequence_id):
    from tritonkit.loadtest import _transport
    from tritonkit.loadtest._inputs import RequestTemplate
    from tritonkit.loadtest._sequences import Sequencing

    sock = _RecordingSocket()
    monkeypatch.setattr(_transport, "open_socket", lambda *args: sock)
    template = RequestTemplate(model="acc", inputs=(("INPUT", "FP32", np.ones((1, 3), np.float32)),),
                               outputs=("SUM",), batch_size=1,
                               sequencing=Sequencing(isinstance(sequence_id, str), 2**63, 1))
    send = _transport.http_sender("127.0.0.1:1", template, 1.0)
    for step in ((sequence_id, True, False), (sequence_id, False, True)):
        send(step)
        head, _, body = sock.sent[-1].partition(b"\r\n\r\n")
        headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
        assert int(headers["Content-Length"]) == len(body)
        header = json.loads(body[:int(headers["Inference-Header-Content-Length"])])
        assert header["parameters"] == {"sequence_id": sequence_id, "sequence_start": step[1],
                                        "sequence_end": step[2]}
        assert body[int(headers["Inference-Header-Content-Length"]):] == np.ones(3, np.float32).tobytes()


@pytest.mark.parametrize("sequence_id", [2**61 + 5, "tritonkit-loadtest-ab-7"])
def test_a_grpc_sequence_request_is_the_request_with_its_sequence_parameters_merged_in(sequence_id):
    from tritonclient.grpc import service_pb2

    from tritonkit.loadtest._transport import _sequence_parameters

    base = service_pb2.ModelInferRequest(model_name="acc", raw_input_contents=[b"\x00" * 12])
    merged = service_pb2.ModelInferRequest.FromString(
        base.SerializeToString() + _sequence_parameters((sequence_id, False, True)))
    assert merged.model_name == "acc" and merged.raw_input_contents == [b"\x00" * 12]
    param = merged.parameters["sequence_id"]
    assert (param.string_param if isinstance(sequence_id, str) else param.int64_param) == sequence_id
    assert not merged.parameters["sequence_start"].bool_param and merged.parameters["sequence_end"].bool_param


def test_sequence_flags_out_of_range_are_refused_with_a_hint():
    with pytest.raises(UsageError, match="--sequence-length takes"):
        LoadSpec(model="m", concurrency=(1,), sequence_length=0)
    with pytest.raises(UsageError, match="--sequence-length-variation is a percentage"):
        LoadSpec(model="m", concurrency=(1,), sequence_length_variation=150)
    with pytest.raises(UsageError, match="--num-of-sequences is for open loop"):
        LoadSpec(model="m", concurrency=(1,), num_sequences=4)


def _stateful_level(live: int, batcher_slots: int, left_open: int = 0) -> LoadTestResult:
    result = _result()
    result.levels[0].sequences = {"length": 20, "variation_pct": 20.0, "live": live,
                                  "batcher_slots": batcher_slots, "completed": 40,
                                  "ended_at_the_end": 2, "left_open": left_open}
    return result


def test_more_live_sequences_than_the_sequence_batcher_runs_is_a_warning_and_so_is_one_left_open(tmp_path):
    assert not report.judge(_stateful_level(4, 4), report.Sla()).warnings
    queued = report.judge(_stateful_level(8, 4), report.Sla())
    assert any("8 sequences live at once, more than the 4 the model's sequence batcher runs"
               in w for w in queued.warnings)
    left = report.judge(_stateful_level(4, 4, left_open=3), report.Sla())
    assert any("3 sequences may be left open" in w for w in left.warnings)
    report.write_json(tmp_path / "run.json", _stateful_level(4, 4), queued)
    level = json.loads((tmp_path / "run.json").read_text())["levels"][0]
    assert level["sequences"]["completed"] == 40 and level["sequences"]["length"] == 20


# An accumulator, as a stateful model is driven by Triton's sequence batcher: the running
# sum of INPUT per correlation ID. It refuses a request of a sequence it never saw start
# and a START of an ID still open (two live sequences sharing an ID), and logs each START
# and each END with the sequence's length, so a test sees what the server saw.
_ACCUMULATOR_CONFIG = """name: "accumulator"
backend: "python"
max_batch_size: 2
input { name: "INPUT" data_type: TYPE_FP32 dims: 1 }
output { name: "SUM" data_type: TYPE_FP32 dims: 1 }
instance_group { count: 1 kind: KIND_CPU }
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  control_input { name: "START" control { kind: CONTROL_SEQUENCE_START fp32_false_true: [0, 1] } }
  control_input { name: "END" control { kind: CONTROL_SEQUENCE_END fp32_false_true: [0, 1] } }
  control_input { name: "READY" control { kind: CONTROL_SEQUENCE_READY fp32_false_true: [0, 1] } }
  control_input { name: "CORRID" control { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } }
}
"""

_ACCUMULATOR_MODEL = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums, self.lengths = {}, {}
        self.log = open(LOG, "a", buffering=1)

    def execute(self, requests):
        responses = []
        for r in requests:
            def control(name):
                return pb_utils.get_input_tensor_by_name(r, name).as_numpy().ravel()[0]
            x = pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy()
            if not control("READY"):
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", np.zeros_like(x))]))
                continue
            corrid = int(control("CORRID"))
            if control("START"):
                if corrid in self.sums:
                    raise pb_utils.TritonModelException(f"sequence {corrid} started while open")
                self.sums[corrid], self.lengths[corrid] = np.zeros_like(x), 0
                self.log.write(f"S {corrid}\\n")
            elif corrid not in self.sums:
                raise pb_utils.TritonModelException(f"sequence {corrid} never started")
            self.sums[corrid] = self.sums[corrid] + x
            self.lengths[corrid] += 1
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", self.sums[corrid])]))
            if control("END"):
                self.log.write(f"E {corrid} {self.lengths.pop(corrid)}\\n")
                del self.sums[corrid]
        return responses
"""


@pytest.fixture(scope="module")
def stateful_served(tmp_path_factory):
    """The accumulator served by the real Triton (not warmed: its log holds only the load
    test's sequences), beside the example model (stateless)."""
    root = tmp_path_factory.mktemp("stateful")
    repo, log = root / "repo", root / "seen.log"
    shutil.copytree(EXAMPLE_REPOSITORY, repo, ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    (repo / "accumulator" / "1").mkdir(parents=True)
    (repo / "accumulator" / "config.pbtxt").write_text(_ACCUMULATOR_CONFIG)
    (repo / "accumulator" / "1" / "model.py").write_text(_ACCUMULATOR_MODEL.replace("LOG", repr(str(log))))
    deployment = deploy_local(repo, http_port=0, grpc_port=0, metrics_port=0, timeout=120, warmup=False)
    deployment.extra["log"] = log
    yield deployment
    down(repo)


def _sequences_seen(log: Path, since: int) -> tuple[dict[int, int | None], int]:
    """From the model's log after byte ``since``: each correlation ID's length (None: never
    ended), and where the log ends. An ID started twice fails the test."""
    text = log.read_text()
    seen: dict[int, int | None] = {}
    for line in text[since:].splitlines():
        kind, corrid, *length = line.split()
        if kind == "S":
            assert int(corrid) not in seen, f"sequence ID {corrid} used twice"
            seen[int(corrid)] = None
        else:
            assert seen[int(corrid)] is None
            seen[int(corrid)] = int(length[0])
    return seen, len(text)


@pytest.mark.server
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_stateful_model_is_sent_whole_sequences_each_with_an_id_of_its_own(stateful_served, tmp_path,
                                                                             protocol, capsys):
    """Closed loop, three users in two workers on a model whose batcher runs two sequences
    at once: every sequence the server saw started once, with an ID no other had, ran its
    five requests START to END in order (the model refuses any other), and none is left
    open — the ones cut by the end of the run were ended by one more request."""
    log = stateful_served.extra["log"]
    _, since = _sequences_seen(log, 0) if log.exists() else ({}, 0)
    code = run_cli("loadtest", "--repository", stateful_served.repository, "--model", "accumulator",
                   "--protocol", protocol, "--concurrency", "3", "--workers", "2", "--duration", "1",
                   "--warmup-s", "0.2", "--sequence-length", "5", "--sequence-length-variation", "0",
                   "--json", tmp_path / "run.json")
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0, out
    data = json.loads((tmp_path / "run.json").read_text())
    level = data["levels"][0]
    assert level["errors"] == {} and level["ok"] > 0
    seen, _ = _sequences_seen(log, since)
    probe = [i for i, n in seen.items() if n == 1]          # the check before the run: START and END
    assert len(probe) == 1
    assert all(length is not None for length in seen.values())          # none left open
    assert all(2**61 <= i < 2**62 for i in seen)
    lengths = [n for i, n in seen.items() if i not in probe]
    figures = level["sequences"]
    assert figures["live"] == 3 and figures["batcher_slots"] == 2 and figures["left_open"] == 0
    assert figures["completed"] == len(lengths) and lengths.count(5) >= figures["completed"] - 3
    assert figures["ended_at_the_end"] == sum(n < 5 for n in lengths)
    assert any("3 sequences live at once, more than the 2 the model's sequence batcher runs" in w
               for w in data["verdict"]["warnings"])
    assert f"concurrency 3: {figures['completed']} sequences completed" in out


@pytest.mark.timing
@pytest.mark.server
def test_open_loop_sends_each_arrival_on_a_live_sequence_with_no_request_out(stateful_served, tmp_path):
    """perf_analyzer's request rate mode: --num-of-sequences live at once (here over two
    workers), each request of a sequence after the one before it came back."""
    log = stateful_served.extra["log"]
    _, since = _sequences_seen(log, 0) if log.exists() else ({}, 0)
    code = run_cli("loadtest", "--repository", stateful_served.repository, "--model", "accumulator",
                   "--rate", "300", "--num-of-sequences", "3", "--workers", "2", "--duration", "1",
                   "--warmup-s", "0.2", "--sequence-length", "4", "--sequence-length-variation", "0",
                   "--json", tmp_path / "run.json")
    assert code == 0
    level = json.loads((tmp_path / "run.json").read_text())["levels"][0]
    assert level["errors"] == {} and level["max_in_flight"] == 3
    figures = level["sequences"]
    assert figures["live"] == 3 and figures["left_open"] == 0
    seen, _ = _sequences_seen(log, since)
    assert all(length is not None for length in seen.values())
    assert figures["completed"] == len(seen) - 1 >= 300 * 1.2 / 4 - 3


@pytest.mark.server
def test_a_stateful_model_refuses_a_batch_up_front(stateful_served, capsys):
    """Triton's sequence batcher takes batch 1 only: said up front, in one line."""
    assert run_cli("loadtest", "--repository", stateful_served.repository, "--model", "accumulator",
                   "--concurrency", "1", "--batch-size", "2") == EXIT_USAGE
    assert "is stateful (sequence_batching): Triton's sequence batcher takes requests of batch 1 " \
        "only" in capsys.readouterr().err


@pytest.mark.server
def test_sequence_flags_for_a_stateless_model_are_refused(stateful_served, capsys):
    assert run_cli("loadtest", "--repository", stateful_served.repository, "--model", "example",
                   "--concurrency", "1", "--sequence-length", "5") == EXIT_USAGE
    assert "model 'example' is stateless (no sequence_batching): --sequence-length only apply" \
        in capsys.readouterr().err


# -- what a first-time user reads (no server) -------------------------------------------------

def _spread_result(batch_size: int = 1, low_ms: float = 0.3, high_ms: float = 40.0) -> LoadTestResult:
    """A level whose latencies spread from ``low_ms`` to ``high_ms``, its windows' p99s too."""
    from hdrh.histogram import HdrHistogram

    hist = HdrHistogram(1, 60_000_000, 3)
    for us in np.geomspace(low_ms * 1000, high_ms * 1000, 400):
        hist.record_value(int(us))
    timeline = _timeline(list(np.geomspace(low_ms * 2, high_ms, 6)))
    result = _closed_result(timeline, ok=400, errors={})
    result.levels[0].histogram = hist
    result.levels[0].latency_ms = {"p50": (low_ms * high_ms) ** 0.5, "p99": high_ms * 0.95, "max": high_ms}
    result.levels[0].infer_per_s = result.levels[0].qps * batch_size
    result.spec = LoadSpec(model="m", concurrency=(2,), duration_s=6, window_s=1, batch_size=batch_size)
    return result


def _overlapping_tick_labels(fig) -> list[tuple[str, str]]:
    """Pairs of tick labels drawn on one axis whose boxes overlap along it."""
    renderer = fig.canvas.get_renderer()
    pairs = []
    for ax in fig.axes:
        for axis, along in ((ax.xaxis, 0), (ax.yaxis, 1)):
            low, high = sorted(axis.get_view_interval())
            boxes = []
            for label in axis.get_ticklabels(which="both"):
                at = label.get_position()[along]
                if label.get_visible() and label.get_text() and low <= at <= high:
                    extent = label.get_window_extent(renderer)
                    boxes.append(((extent.x0, extent.x1) if along == 0 else (extent.y0, extent.y1),
                                  label.get_text()))
            boxes.sort()
            pairs += [(a[1], b[1]) for a, b in zip(boxes, boxes[1:]) if b[0][0] < a[0][1]]
    return pairs


@pytest.mark.slow
@pytest.mark.parametrize("low_ms, high_ms, labelled", [
    (0.3, 40.0, {"1", "10"}), (0.05, 3000.0, {"0.1", "1", "10", "100", "1000"}),
    (0.6, 1.3, {"0.6", "1"}), (0.65, 0.95, {"0.7", "0.8", "0.9"}),
], ids=["2 decades", "5 decades", "one decade", "within one"])
def test_the_plots_tick_labels_do_not_run_into_each_other(tmp_path, monkeypatch, low_ms, high_ms,
                                                          labelled):
    """The log axes labelled every minor tick: '0.70.80.9' over 2 decades."""
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    report.write_plot(tmp_path / "spread.png", _spread_result(low_ms=low_ms, high_ms=high_ms))
    (fig,) = figures
    assert _overlapping_tick_labels(fig) == []
    low, high = fig.axes[1].get_xlim()
    labels = {t.get_text() for t in fig.axes[1].xaxis.get_ticklabels(which="both")
              if t.get_text() and low <= t.get_position()[0] <= high}
    assert labelled <= labels                       # still labelled, in plain numbers


def test_a_batched_run_shows_inferences_per_second_beside_requests_per_second():
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(report.levels_table(_spread_result(batch_size=4)))
    lines = console.export_text().splitlines()
    assert "infer/s" in next(line for line in lines if "QPS" in line)
    row = next(line for line in lines if "c=2" in line)
    assert "66.7" in row and "266.7" in row             # 400 requests in 6 s, 4 inferences each
    console = Console(record=True, width=200)
    console.print(report.levels_table(_spread_result(batch_size=1)))
    assert "infer/s" not in console.export_text()


def test_sla_min_qps_says_it_counts_requests_not_inferences(capsys):
    assert run_cli("loadtest", "--help") == 0
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", capsys.readouterr().out).split())
    assert "successful requests per second" in text and "a request of --batch-size B carries B" in text


def test_an_sla_line_says_both_numbers_in_one_format():
    verdict = report.judge(_result(p99=25.0, qps=1405.0), report.Sla(p99_ms=10, min_qps=100_000))
    assert [c.describe() for c in verdict.checks] == [
        "concurrency 4: p99 25.00 ms > 10.00 ms",
        "concurrency 4: 1,405.0 QPS < 100,000.0 QPS"]


@pytest.mark.parametrize("args, says", [
    (["--concurrency", "0"], "error: --concurrency 0: each level needs at least 1 request in flight"),
    (["--concurrency", "1,0,-2"], "error: --concurrency 0,-2: each level needs at least 1 request"),
    (["--rate", "0"], "error: --rate 0: each level needs a finite rate above 0 requests per second"),
])
def test_a_level_with_nothing_to_send_names_the_level(capsys, args, says):
    assert run_cli("loadtest", "--model", "m", *args) == EXIT_USAGE
    assert capsys.readouterr().err.startswith(says)


def test_the_json_says_when_where_and_against_what_the_run_ran(tmp_path):
    import socket

    from tritonkit import __version__

    result = _result()
    result.started_at, result.host = "2026-12-04T10:00:00+00:00", socket.gethostname()
    result.server_version, result.model_version = "2.51.0", "3"
    report.write_json(tmp_path / "run.json", result, report.judge(result, report.Sla()))
    data = json.loads((tmp_path / "run.json").read_text())
    assert {k: data[k] for k in ("started_at", "tritonkit_version", "host", "server_version",
                                 "model_version")} == {
        "started_at": "2026-12-04T10:00:00+00:00", "tritonkit_version": __version__,
        "host": socket.gethostname(), "server_version": "2.51.0", "model_version": "3"}
    assert {"model", "server", "request", "spec", "verdict", "levels"} <= set(data)   # kept


def _stale_record(repo: Path) -> None:
    """A local deployment recorded in ``repo`` whose server is gone (its pid is no
    tritonserver: this test process)."""
    from tritonkit.server.local import free_ports
    from tritonkit.server.state import Deployment, new_secret, save_deployment

    repo.mkdir(parents=True, exist_ok=True)
    new_secret(repo)
    http, grpc, metrics = free_ports(3)
    save_deployment(Deployment(target="local", repository=str(repo.resolve()), host="127.0.0.1",
                               http_port=http, grpc_port=grpc, metrics_port=metrics,
                               secret_header="x-tritonkit-secret", models=["mlp"], started_at=0.0,
                               pid=os.getpid(), log_path=str(repo / "missing.log")))


def test_a_recorded_local_server_that_is_gone_is_said_as_warmup_says_it(tmp_path, capsys):
    repo = tmp_path / "repo"
    _stale_record(repo)
    code = run_cli("loadtest", "-r", repo, "-m", "mlp", "-c", "1", "--duration", "0.5")
    err = capsys.readouterr().err
    assert code == EXIT_ERROR, err
    first, hint = err.splitlines()[:2]
    assert first.startswith(f"error: the local server recorded in {repo.resolve()} (pid {os.getpid()}) "
                            "is no longer running")
    assert hint.startswith(f"hint: start it again: tritonkit deploy --repository {repo.resolve()}")


def test_no_server_at_a_url_names_the_url_and_no_placeholder(capsys):
    from tritonkit.server.local import free_port

    url = f"127.0.0.1:{free_port()}"
    assert run_cli("loadtest", "--url", url, "--model", "example", "--concurrency", "1") == EXIT_ERROR
    err = capsys.readouterr().err
    assert f"hint: is a Triton server listening at {url}? check --url" in err
    assert "DIR" not in err and "NAME" not in err


def test_no_answer_from_a_deployments_server_names_its_folder(tmp_path, capsys):
    """A record that is not local (compose): this host cannot tell whether its server runs,
    so the request is tried, and the hint names the folder to deploy again."""
    from tritonkit.server.state import load_deployment, save_deployment

    repo = tmp_path / "repo"
    _stale_record(repo)
    import dataclasses
    save_deployment(dataclasses.replace(load_deployment(repo), target="compose", pid=None))
    assert run_cli("loadtest", "-r", repo, "-m", "mlp", "-c", "1") == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith("error: could not read model 'mlp'")
    assert f"hint: is the server up? start it: tritonkit deploy --repository {repo}" in err
    assert "DIR" not in err


@pytest.mark.parametrize("dims, batches, batch_size, error, hint", [
    ([4], True, 3, "input data for x has shape [2]; one sample of x has shape [4]",
     "give x one sample of shape [4] (repeated to each request's batch of 3, --batch-size 3), or a "
     "batch of 3 samples: shape [3, 4]"),
    ([4], True, 1, "input data for x has shape [2]; one sample of x has shape [4]",
     "give x one sample of shape [4], or a batch of one: shape [1, 4]"),
    ([-1, 4], True, 2, "input data for x has shape [2]; one sample of x has shape [n, 4], where n may "
     "be any size", "give x one sample of shape [n, 4] (repeated to each request's batch of 2, "
     "--batch-size 2), or a batch of 2 samples: shape [2, n, 4]"),
    ([4], False, 1, "input data for x has shape [2]; the model takes x of shape [4] (it does not "
     "batch: no batch axis)", "give x an array of shape [4]"),
], ids=["batch of 3", "batch of 1", "a dynamic dim", "no batching"])
def test_input_data_of_the_wrong_shape_is_told_the_shapes_it_may_have(dims, batches, batch_size, error,
                                                                      hint):
    from tritonkit.loadtest._inputs import _fit

    with pytest.raises(UsageError) as refused:
        _fit(np.zeros(2), "x", "FP32", dims, batches, batch_size)
    assert (str(refused.value), refused.value.hint) == (error, hint)


# -- a run stopped by a signal, or its parent killed -----------------------------------


def _left_in_session(sid: int) -> list[int]:
    """The processes still running of a run started in a session of its own: itself, its
    workers, whatever else it started (not one that has ended, a zombie not yet reaped)."""
    left = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text()
        except OSError:             # ended meanwhile
            continue
        state, _ppid, _pgrp, session = fields[fields.rindex(")") + 2:].split()[:4]
        if int(session) == sid and state != "Z":
            left.append(int(stat.parent.name))
    return left


def _kill_what_is_left(sid: int) -> None:
    """A worker the run left behind (its process group is its session) is the test's to end."""
    try:
        os.killpg(sid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _signalled_mid_run(deployment, signum: int) -> tuple[subprocess.Popen, str, list[int], int]:
    """A run loading the server, sent ``signum`` (the command alone, not its process group,
    as a CI runner stops its job): the run once ended, its stderr, what of it still runs
    10 s later at the most (a worker leaves within a poll; the level had 60 s to run), and
    the requests the server answered in the second after that."""
    client = Endpoint.from_deployment(deployment).http()
    run = _loadtest_process(deployment, "--concurrency", "2", "--workers", "2", "--duration", "60",
                            "--warmup-s", "0")
    try:
        before, deadline = _answered(client), time.monotonic() + 30
        while _answered(client) < before + 300 and time.monotonic() < deadline:
            assert run.poll() is None, run.communicate()
            time.sleep(0.2)
        assert _answered(client) >= before + 300, "the run did not load the server"
        os.kill(run.pid, signum)
        _, err = run.communicate(timeout=30)    # (a worker left holding its stderr keeps it open)
        deadline = time.monotonic() + 10
        while _left_in_session(run.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        left, answered = _left_in_session(run.pid), _answered(client)
        time.sleep(1)
        return run, err, left, _answered(client) - answered
    finally:
        if run.poll() is None:
            run.kill()
        _kill_what_is_left(run.pid)
        client.close()


@pytest.mark.server
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_ends_a_run_as_ctrl_c_does_and_stops_its_workers(served, signum):
    """A CI job cancelled mid-run (its runner sends the command SIGTERM) or a closed
    terminal (SIGHUP) ends the run as Ctrl-C does: one line, exit 128 + the signal, and
    no worker left loading the server until its level would have ended."""
    run, err, left, answered_since = _signalled_mid_run(served, signum)
    assert run.returncode == 128 + signum
    assert "Traceback" not in err, err
    assert err.strip().splitlines() == [f"error: stopped by {signum.name}"], err
    assert left == []
    assert answered_since == 0


@pytest.mark.server
def test_workers_leave_at_once_when_their_parent_is_killed_outright(served):
    """A parent that could clean nothing up (SIGKILL) still leaves nothing loading the
    server: each worker ends as soon as its parent is gone."""
    run, _, left, answered_since = _signalled_mid_run(served, signal.SIGKILL)
    assert run.returncode == -signal.SIGKILL
    assert left == []
    assert answered_since == 0


@pytest.mark.slow
def test_a_sigterm_while_a_worker_starts_comes_once_the_worker_is_counted_and_is_stopped(monkeypatch):
    """A SIGTERM in the middle of starting a worker waits until the run knows of the
    worker: the run then ends as stopped, and the worker with it."""
    import multiprocessing.context

    from tritonkit.errors import Interrupted
    from tritonkit.loadtest._run import _run_level

    start = multiprocessing.context.SpawnProcess.start

    def signalled_while_starting(self):
        start(self)
        os.kill(os.getpid(), signal.SIGTERM)    # the worker runs; its start() has not returned

    def stop(signum, _frame):
        raise Interrupted(signum)

    monkeypatch.setattr(multiprocessing.context.SpawnProcess, "start", signalled_while_starting)
    spec = LoadSpec(model="m", concurrency=(1,), duration_s=0.5, warmup_s=0)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises(Interrupted) as stopped:
            _run_level(Endpoint(http_url="-"), "-", spec, None, 1, [1], None)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stopped.value.signum == signal.SIGTERM
    assert multiprocessing.active_children() == []


# -- what a run says of sizes never warmed, the server's log, redeploying, outliers ---------


@pytest.mark.server
def test_a_shape_the_model_never_warmed_is_warned_of_before_the_run_and_kept_in_the_json(
        encoder_served, tmp_path, capsys):
    """The encoder's model_warmup sends the lengths its export verified (6, 12, 18): length 24
    was never warmed, so its first requests are cold — said once, before the run, which goes
    on. A warmed length, or a model without model_warmup, says nothing."""
    long = ("--shape", "input_ids:24", "--shape", "attention_mask:24")
    assert _loadtest_model(encoder_served, "enc", *long, "--json", tmp_path / "run.json") == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warned == [
        "warning: model 'enc' was never warmed at the size sent: input input_ids, sent as [1, 24]: "
        "dim 1 at 24 (warmed: 6, 12, 18); input attention_mask, sent as [1, 24]: dim 1 at 24 "
        "(warmed: 6, 12, 18); its first requests at it are cold. Export it with an example at the serving size (so it is "
        "verified and warmed), or add model_warmup entries at that size"]
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["unwarmed"] == [
        {"input": "input_ids", "axis": 1, "size": 24, "warmed": [6, 12, 18], "shape": [1, 24]},
        {"input": "attention_mask", "axis": 1, "size": 24, "warmed": [6, 12, 18], "shape": [1, 24]}]
    assert data["levels"][0]["ok"] > 0

    assert _loadtest_model(encoder_served, "enc", "--shape", "input_ids:12", "--shape",
                           "attention_mask:12", "--json", tmp_path / "warm.json") == 0
    assert "warning:" not in capsys.readouterr().err
    assert json.loads((tmp_path / "warm.json").read_text())["unwarmed"] == []
    assert _loadtest_model(encoder_served, "bare", *long) == 0
    assert "warning:" not in capsys.readouterr().err


def test_each_dynamic_dimension_is_compared_with_the_sizes_model_warmup_sends_for_it():
    """A vision model exported with dynamic height and width, warmed at the sizes its export
    verified, as Triton reports its config (dims as strings): 224x224 is neither height nor
    width it warmed; a warmed height beside an unwarmed width names the width alone."""
    from tritonkit.loadtest._inputs import UnwarmedSize, unwarmed_sizes

    warmup = [{"name": f"batch_1_h_{h}_w_{w}", "batch_size": 1,
               "inputs": {"INPUT__0": {"data_type": "TYPE_FP32", "dims": ["3", str(h), str(w)],
                                       "random_data": True}}}
              for h, w in ((32, 24), (64, 48), (96, 72))]
    dims = {"INPUT__0": [3, -1, -1]}
    assert unwarmed_sizes(dims, {"INPUT__0": [3, 224, 224]}, warmup) == (
        UnwarmedSize("INPUT__0", 1, 224, (32, 64, 96)), UnwarmedSize("INPUT__0", 2, 224, (24, 48, 72)))
    assert unwarmed_sizes(dims, {"INPUT__0": [3, 64, 100]}, warmup) == (
        UnwarmedSize("INPUT__0", 2, 100, (24, 48, 72)),)
    assert unwarmed_sizes(dims, {"INPUT__0": [3, 96, 24]}, warmup) == ()
    assert unwarmed_sizes(dims, {"INPUT__0": [3, 224, 224]}, []) == ()     # nothing warmed: nothing said


@pytest.mark.server
def test_a_first_request_the_model_fails_on_names_the_servers_log_file(encoder_served, capsys):
    code = _loadtest_model(encoder_served, "crash")
    assert code == EXIT_RUN_ERRORS
    hint = capsys.readouterr().err.splitlines()[1]
    assert hint.endswith(f"the server's log says more: {encoder_served.log_path}"), hint
    assert Path(encoder_served.log_path).is_file()


@pytest.mark.slow
def test_the_plot_draws_each_windows_slowest_request_so_a_lone_outlier_shows(tmp_path, monkeypatch):
    """One request of 178 ms among ~7 ms ones: 24x the p99, too few to move a percentile
    or make a spike; only each window's max line shows it."""
    import matplotlib.pyplot as plt

    timeline = [Window(index=i, start_s=float(i), ok=100, errors=0, qps=100.0, p50_ms=5.0, p99_ms=7.4,
                       max_ms=178.0 if i == 3 else 7.9) for i in range(6)]
    result = _closed_result(timeline, ok=600, errors={})
    assert result.levels[0].spikes == []
    kept = []
    monkeypatch.setattr(plt, "close", kept.append)
    report.write_plot(tmp_path / "run.png", result)
    drawn = {line.get_label(): list(line.get_ydata()) for line in kept[0].axes[0].get_lines()}
    assert drawn["concurrency 2 max"] == [7.9, 7.9, 7.9, 178.0, 7.9, 7.9]
    assert max(max(ys) for label, ys in drawn.items() if label != "concurrency 2 max") < 178.0


# -- a probe the model refuses: the user's input (exit 2), or the model's failure (exit 4) --


@pytest.mark.server
@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("ids, mask, why", [
    (300, 300, (128, 300)),             # past the encoder's position table
    (16, 17, (16, 17)),                 # two sizes for the axis the inputs share
], ids=["past the position table", "two sizes"])
def test_a_shape_the_onnx_graph_refuses_is_a_usage_error_in_one_line_and_nothing_more_is_sent(
        encoder_served, capsys, protocol, ids, mask, why):
    """A shape the exported graph cannot run, over either protocol (gRPC: INTERNAL): one line
    with what was sent and ONNX Runtime's reason, a hint with the sizes the export verified
    and warmed, exit 2 — and the run never starts. ``why`` holds the sizes ONNX Runtime's
    reason names (its words depend on the node the exporter made: Add, Reshape …)."""
    before = _requests_seen(encoder_served, "enc")
    code = _loadtest_model(encoder_served, "enc", "--protocol", protocol, "--duration", "30",
                           "--shape", f"input_ids:{ids}", "--shape", f"attention_mask:{mask}")
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    first, hint = err.splitlines()
    word = "HTTP 500" if protocol == "http" else "gRPC INTERNAL"
    assert first.startswith(f"error: model 'enc' (input_ids INT64[1, {ids}], attention_mask "
                            f"INT64[1, {mask}]) refused the request: {word}: ONNX Runtime FAIL in "), first
    said = re.search(r"ONNX Runtime FAIL in \w+ node '[^']+': (?P<reason>.+)$", first)
    assert said, first
    assert all(re.search(rf"\b{size}\b", said["reason"]) for size in why), first
    assert "onnxruntime_src" not in first and "was false" not in first
    assert hint.startswith("hint: its model_warmup warms it at --shape input_ids:18 --shape "
                           "attention_mask:18, also at 6, 12 (a tritonkit export's: the sizes it "
                           "verified); check --shape")
    assert _requests_seen(encoder_served, "enc") - before == 1      # the probe alone


@pytest.mark.server
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_model_that_crashes_on_the_first_request_is_still_a_run_error(encoder_served, capsys, protocol):
    """A model failing on whatever it is sent is not the user's input: exit 4 with the
    server's words, as before."""
    code = _loadtest_model(encoder_served, "crash", "--protocol", protocol)
    err = capsys.readouterr().err
    assert code == EXIT_RUN_ERRORS, err
    word = "HTTP 500" if protocol == "http" else "gRPC INTERNAL"
    first, hint = err.splitlines()[:2]
    assert first.startswith(f"error: the first request to model 'crash' (X FP32[4]) failed: {word}: ")
    assert first.endswith("CUDA error: an illegal memory access was encountered"), first
    assert hint.startswith("hint: check the model's inputs")


@pytest.mark.slow
@pytest.mark.parametrize("said, reads", [
    ("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions for input: input_ids for "
     "the following indices\n index: 1 Got: 300 Expected: 128\n Please fix either the inputs or the model.",
     "ONNX Runtime INVALID_ARGUMENT: Got invalid dimensions for input: input_ids for the following indices"),
    ("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Non-zero status code returned while running Gather "
     "node. Name:'/embed/Gather' Status Message: indices element out of data bounds, idx=300 must be "
     "within the inclusive range [-128,127]",
     "ONNX Runtime INVALID_ARGUMENT in Gather node '/embed/Gather': indices element out of data "
     "bounds, idx=300 must be within the inclusive range [-128,127]"),
    ("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while running MatMul "
     "node. Name:'/mm' Status Message: Failed to allocate memory for requested buffer of size 4194304", None),
    ("[ONNXRuntimeError] : 1 : FAIL : Load model from /m/model.onnx failed: Protobuf parsing failed.", None),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", None),
], ids=["invalid dimensions", "index past a table", "out of memory", "unreadable graph", "no ORT"])
def test_onnx_runtime_refusing_the_inputs_is_told_from_its_other_failures(said, reads):
    from tritonkit.loadtest._inputs import input_refusal

    assert input_refusal(said) == reads
