"""`tritonkit loadtest` spikes and cold starts: slow windows flagged, and named after the
model reloads and server outages the watcher saw."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_REPOSITORY
from tests.loadtest.conftest import (
    _At, _Frozen, _failed_in_second, _loadtest, _run_with, _some_failed_in_second, _timeline)
from tritonkit import report
from tritonkit.client import Endpoint
from tritonkit.deploy import deploy_local, down
from tritonkit.loadtest import (
    ERROR_WINDOW_SHARE, LoadSpec, ServerEvent, Window, cold_start_windows, run_loadtest,
    spike_windows)


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


# timing: its windows (0.25 s) must fall around an outage made on the real clock; on a busy
# host (a 140 ms stall in the first window of a full run) they did not.
@pytest.mark.timing
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


# timing: its windows (0.25 s) must fall around an outage made on the real clock; on a busy
# host (a 140 ms stall in the first window of a full run) they did not.
@pytest.mark.timing
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
    # the window the unload cut through (sent 50 ms into it; Triton refuses new requests
    # from then on, however long the unload itself takes on a busy host), some requests
    # answered, some not: named after the outage, even though it ended before the polling
    # watcher saw the unload (a window the load cuts is the same, but when the model was
    # READY again is not known here)
    unloading = 4.0 - at.left_at(span["unloading"])
    [cut] = [w for w in level.timeline if w.start_s + 0.01 <= unloading < w.start_s + 0.25]
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
        # Triton counts a request once it has released it, just after its response: the last
        # one's count can trail the answer by a moment (19 of 20 read once, at once)
        deadline = time.monotonic() + 5.0
        while (answered := watcher.stats().count) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
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
