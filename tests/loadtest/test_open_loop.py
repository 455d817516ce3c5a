"""`tritonkit loadtest` open loop: arrivals leave on time; late sends, saturation and
arrivals held back are counted on the right account (server or load generator)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tests.loadtest.conftest import MS, S, _level_from, _result
from tritonkit import report
from tritonkit.client import Endpoint
from tritonkit.loadtest import LoadSpec, LoadTestResult, open_loop_schedule, run_loadtest


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


def _one_slot_at_100_per_s(clock: _Clock, send, warmup_s: float = 0.0):
    """1 s of arrivals every 10 ms (after ``warmup_s`` of them), from one slot; the raw
    records, in ms from the warm-up's start, by arrival, and the level's summary."""
    from types import SimpleNamespace

    from tritonkit.loadtest._worker import HELD_BACK, WorkerPlan, _drive, _Records

    plan = WorkerPlan(index=0, protocol="http", url="-", template=None, slots=1,
                      offsets_ns=(open_loop_schedule(100, 1.0 + warmup_s, "constant") * S).round()
                      .astype(np.int64),
                      warmup_ns=round(warmup_s * S), duration_ns=S, window_ns=S, timeout_s=30.0)
    rec = _Records()
    _drive(plan, [send], 0, rec, [0], SimpleNamespace(value=0), clock=clock, sleep=clock.sleep)
    due = [o // MS for o in rec.origins]
    return SimpleNamespace(
        waited=[d for d, w in zip(due, rec.waited) if w],
        held_back=[d for d, c in zip(due, rec.codes) if c == HELD_BACK],
        failed=[d for d, c in zip(due, rec.codes) if c > 0],
        answered=[d for d, c in zip(due, rec.codes) if c == 0],
        latency_ms={d: lat / MS for d, lat in zip(due, rec.latencies)},
        summary=rec.summary(plan, t0=0))


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


@pytest.mark.parametrize("warmup_s", [0.0, 0.5, 2.0])
def test_an_overloaded_level_measures_its_own_arrivals_however_long_its_warm_up(warmup_s):
    """100 arrivals/s to a server that answers one in 25 ms (40/s). The warm-up's arrivals
    it had not sent by the start were sent in the measurement and took its slot: at a
    warm-up of 2 s the level measured 0 requests/s and the run said no request succeeded."""
    clock = _Clock()

    def send() -> None:
        clock.now += 25 * MS
    run = _one_slot_at_100_per_s(clock, send, warmup_s)
    start_ms = round(warmup_s * 1000)
    measured = [d for d in run.answered if d >= start_ms]
    # from the start, one answer per 25 ms, the oldest of the measurement's arrivals first
    assert len(measured) in (40, 41) and measured[:3] == [start_ms, start_ms + 10, start_ms + 20]
    assert run.summary["ok"] == len(measured) and run.failed == []
    # the rest were due while the slot was out: the server's saturation, in the latencies
    assert run.held_back == list(range(measured[-1] + 10, start_ms + 1000, 10))
    assert run.latency_ms[measured[-1]] > 500          # each answer later than the last


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


def _sending_at(clock: _Clock, sent_at: list[int], frozen_ms: tuple[int, int] | None = None):
    """The stand-in server, noting when each request is sent."""
    serve = _served_by(clock, frozen_ms)

    def send() -> None:
        sent_at.append(clock.now)
        serve()
    return send


def test_a_slot_back_before_its_next_arrival_and_stalled_past_the_end_held_nothing_back():
    """The slot came back at 1 ms; the host then stalled it for seconds, past the end and
    the catch-up second: the arrivals from 10 ms on found it free, the load generator's
    failing, not the server's saturation."""
    from tritonkit.loadtest._worker import _Slots

    slots = _Slots(1)                                    # times in ms here
    assert not slots.took(0, 0)
    slots.sent(0, 0, now=0)
    slots.back(0, 1)
    slots.past_end(0, 3_000, due=10)
    assert slots.unsent_waited(3_000) == (3_000, None)


def test_a_load_generator_that_overslept_the_end_catches_up_on_the_arrivals_it_was_late_for():
    """CI's host stalled a worker across the end: the arrival after the one it sent late
    was 'not sent: the load generator fell behind', an error, and the run exited 4, where
    the same stall a moment earlier was lateness in the latencies."""
    clock, sent_at = _Clock(), []
    clock.oversleep = {500 * MS: 1200 * MS}              # asleep for the arrival due at 500 ms
    run = _one_slot_at_100_per_s(clock, _sending_at(clock, sent_at))
    late = [t // MS for t in sent_at if t >= S]
    assert late == list(range(1200, 1250))               # the one it took, then the 49 after it
    assert run.failed == [] and run.waited == [] and run.held_back == []   # not the server's doing
    assert run.latency_ms[500] == 701                    # from when each was due: its lateness shows
    assert run.latency_ms[990] == 1249 + 1 - 990
    assert len(run.latency_ms) == 100


def test_a_load_generator_still_behind_a_second_after_the_end_leaves_the_rest_as_its_errors():
    clock, sent_at = _Clock(), []
    clock.oversleep = {500 * MS: 2100 * MS}
    run = _one_slot_at_100_per_s(clock, _sending_at(clock, sent_at))
    assert [t // MS for t in sent_at if t >= S] == [2100]    # the one it took, and no more
    assert run.latency_ms[500] == 1601 and run.held_back == []
    # every arrival after it: "not sent: the load generator fell behind"
    assert run.failed == list(range(510, 1000, 10))


def test_after_the_end_a_slot_stops_at_the_first_arrival_the_server_held_back():
    """The arrival due at 700 ms is sent at 715 (the worker overslept) to a server frozen
    until past the end: the one due at 710 fell due before that send, the worker's own
    lateness, and is sent after the end; those due while the slot was out were the
    server's saturation, counted, never sent."""
    clock, sent_at = _Clock(), []
    clock.oversleep = {700 * MS: 715 * MS}
    run = _one_slot_at_100_per_s(clock, _sending_at(clock, sent_at, (715, 1300)))
    assert [t // MS for t in sent_at if t >= S] == [1301]    # the arrival due at 710 ms
    assert run.failed == [] and run.latency_ms[710] == 1302 - 710
    assert run.held_back == list(range(720, 1000, 10))


def test_a_sleep_that_ends_a_hair_past_the_end_sends_its_arrival_and_is_no_error():
    """CI's host woke a worker 0.2 ms after the end for the last arrival: it counted as
    'the load generator fell behind', an error, and the run exited 4."""
    clock = _Clock()
    clock.oversleep = {990 * MS: S + 200_000}            # the last arrival's sleep ends at 1000.2 ms
    run = _one_slot_at_100_per_s(clock, _served_by(clock))
    assert run.failed == [] and run.held_back == []
    assert len(run.latency_ms) == 100
    assert run.latency_ms[990] == pytest.approx(11.2)    # 10.2 ms late + 1 ms served


def test_after_the_end_no_slot_sends_what_the_server_held_back_once_one_stopped_at_it():
    """Two slots (greenlets) out on a server frozen past the end, every arrival since due
    while both were out: the one back first stops at the arrival the server held back; the
    one back after it then finds no slot out beside it, yet sends none of them either —
    they are the server's saturation, not the load generator's lateness."""
    from types import SimpleNamespace

    import gevent

    from tritonkit.loadtest._worker import HELD_BACK, WorkerPlan, _drive, _Records

    # Arrivals 50 ms apart: 10 ms apart, a host that held the second greenlet back 10 ms
    # let the third arrival fall due before both slots were out (a slot free, not held back).
    t0 = time.perf_counter_ns() + 50 * MS
    end = t0 + 600 * MS
    frozen = iter([end + 50 * MS, end + 100 * MS])         # the first two sends' answers
    sent_at: list[int] = []

    def send() -> None:
        sent_at.append(time.perf_counter_ns())
        until = next(frozen, None)
        gevent.sleep(((until - time.perf_counter_ns()) / 1e9) if until else 0.001)

    plan = WorkerPlan(index=0, protocol="http", url="-", template=None, slots=2,
                      offsets_ns=(open_loop_schedule(20, 0.6, "constant") * S).round().astype(np.int64),
                      warmup_ns=0, duration_ns=600 * MS, window_ns=S, timeout_s=30.0)
    rec = _Records()
    _drive(plan, [send, send], t0, rec, [0], SimpleNamespace(value=0))
    assert len(sent_at) == 2 and all(t < end for t in sent_at)        # nothing after the end
    assert rec.codes.count(HELD_BACK) == 10 and not [c for c in rec.codes if c > 0]


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
    at 400 us a request) moves both: measured before and after, the larger taken. On a VM
    whose idle core is costly to wake, that yardstick shrinks when the cores are never idle
    (28-35 us a request beside other tests, 73-116 alone, the open loop 200-280 either way):
    a second one, host-free, is the time between sends, which spinning through its last
    millisecond takes most of. The test fails when both say spinning."""
    endpoint = Endpoint.from_deployment(served)

    def closed_cpu_us() -> float:
        return run_loadtest(endpoint, LoadSpec(model="example", concurrency=(1,), duration_s=1,
                                               warmup_s=0.3, workers=1)).levels[0].client_cpu_us

    rate = 600.0
    before = closed_cpu_us()
    level = run_loadtest(endpoint, LoadSpec(model="example", rates=(rate,), arrivals="constant",
                                            duration_s=2, warmup_s=0.3, workers=1,
                                            max_in_flight=32)).levels[0]
    closed = max(before, closed_cpu_us())
    assert level.error_count == 0 and level.ok == level.sent > 1000
    ratio = level.client_cpu_us / closed
    between_us = 1e6 / rate
    assert ratio < 6 or level.client_cpu_us < between_us / 2, (
        f"{level.client_cpu_us:.0f} µs of CPU an open-loop request against {closed:.0f} closed "
        f"({ratio:.1f}x), and {between_us:.0f} µs between sends")
    assert level.send_lag_ms["p50"] < 0.3                # on time: gevent's own sleeps are 1 ms late
