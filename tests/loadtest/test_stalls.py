"""`tritonkit loadtest` against a server that stops answering: stalls, timeouts, late
answers and the arrivals it held back."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.loadtest.conftest import (
    MS, _At, _Frozen, _level_from, _run_with, _stalled_then_idle, _timeline)
from tritonkit import report
from tritonkit.errors import EXIT_SLA_MISS
from tritonkit.loadtest import LoadSpec, ServerEvent, Window, cold_start_windows


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
