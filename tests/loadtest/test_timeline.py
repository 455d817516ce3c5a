"""What the timeline says of a model's reload, of a server shutting down or gone, and of sizes
never warmed: the outage as long as the clients saw it, the server's own going named."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import default_signals, run_cli
from tritonkit.client import Endpoint
from tritonkit.loadtest import ServerEvent, ServerWatcher, Window, cold_start_windows
from tritonkit.loadtest._inputs import UnwarmedSize, unwarmed_sizes, unwarmed_warning
from tritonkit.loadtest._timeline import model_outages

at = lambda s: int(s * 1e9)     # noqa: E731


def _timeline(n: int) -> list[Window]:
    return [Window(index=i, start_s=float(i), ok=100, errors=0, qps=100.0, p50_ms=0.5, p99_ms=1.0,
                   max_ms=1.2, came_back=100, waiting_ms=0.5) for i in range(n)]


def _failed(index: int, errors: int = 40) -> Window:
    return Window(index=index, start_s=float(index), ok=0, errors=errors, qps=0.0, p50_ms=None,
                  p99_ms=None, max_ms=None, came_back=errors, waiting_ms=0.5)


def _stalled(index: int, waiting_ms: float) -> Window:
    return Window(index=index, start_s=float(index), ok=0, errors=0, qps=0.0, p50_ms=None,
                  p99_ms=None, max_ms=None, came_back=0, waiting_ms=waiting_ms)


# -- a reload: out until the poll Triton held while it loaded was answered -----------------


def test_a_reload_whose_ready_poll_triton_held_is_out_until_that_poll_answered():
    """The walkthrough's reload: 'example' seen UNLOADING at 2.565 s, still out at the poll
    of 3.024 s; the next poll, sent at 3.075 s, blocked while Triton loaded it and answered
    READY at 4.426 s. The window of second 3 held a request 1.4 s; clients were out until
    about 4.4 s, not 3.07: the outage (the plot's band, the JSON's) ends at 4.426, and the
    cause gives the bracket the watcher saw it come back in."""
    events = [ServerEvent(at(2.565), "state", "example", "1", "UNLOADING", "READY",
                          after_ns=at(2.514), by_ns=at(2.565)),
              ServerEvent(at(3.075), "state", "example", "1", "READY", "UNLOADING",
                          after_ns=at(3.024), by_ns=at(4.426))]
    assert model_outages(events, 0) == [("example", "1", 2.565, 4.426)]
    timeline = _timeline(8)
    timeline[3] = Window(index=3, start_s=3.0, ok=1, errors=820, qps=1.0, p50_ms=1401.86,
                         p99_ms=1401.86, max_ms=1401.86, came_back=821, waiting_ms=0.5)
    timeline[4] = _stalled(4, 1_400.0)
    spikes = {s.window: s for s in cold_start_windows(timeline, events, 0, 1.0)}
    assert sorted(spikes) == [3, 4] and all(s.cold_start for s in spikes.values())
    assert spikes[4].cause.startswith("cold start: model 'example' version 1 reloaded, not READY "
                                      "from 2.56 s, READY again between 3.02 and 4.43 s; "), spikes[4]


def test_a_reload_seen_back_at_once_is_said_as_one_span_to_the_answer_that_saw_it_back():
    """A poll not held (the model back within a poll or two) needs no bracket: the span
    runs to when the poll that saw it READY was answered."""
    events = [ServerEvent(at(2.0), "state", "mlp", "1", "UNLOADING", "READY", after_ns=at(1.95), by_ns=at(2.0)),
              ServerEvent(at(2.6), "state", "mlp", "1", "READY", "LOADING", after_ns=at(2.55), by_ns=at(2.64))]
    assert model_outages(events, 0) == [("mlp", "1", 2.0, 2.64)]
    timeline = _timeline(6)
    timeline[2] = _failed(2)
    spike, = cold_start_windows(timeline, events, 0, 1.0)
    assert spike.cause == ("cold start: model 'mlp' version 1 reloaded, not READY 2.00–2.64 s; "
                           "every request failed (40 errors)")


def _once_load_flows(deployed, action, *, requests: int = 300, after_s: float = 1.0):
    """A thread that runs ``action`` once the load test's workers are sending (``requests``
    more answered than when it began) and ``after_s`` more have passed: past the run's
    warm-up and inside its measurement whatever the host's speed, where a fixed delay from
    the test's start lands before the workers on a slow host (they are spawned, each
    importing tritonkit). Its connection is closed first: an open one holds a stopping
    Triton for its exit timeout."""
    def answered(client) -> int:
        stats = client.get_inference_statistics("example")["model_stats"]
        return sum(int(m["inference_stats"]["success"]["count"]) for m in stats)

    def watch() -> None:
        client = Endpoint.from_deployment(deployed).http(network_timeout=10.0)
        try:
            start, deadline = answered(client), time.monotonic() + 60
            while answered(client) < start + requests and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            client.close()
        time.sleep(after_s)
        action()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.server
def test_a_model_reloaded_mid_run_is_out_in_the_report_until_triton_answered_it_ready(deployed, tmp_path):
    """The real Triton may block HTTP while it loads the python model (whether a poll is
    held depends on when it lands): the watcher's READY poll then answers when the load is
    done. The JSON's outage (the plot's band) and every cold start's cause reach that
    answer, not the moment the poll was sent, held or not."""
    endpoint = Endpoint.from_deployment(deployed)
    headers = endpoint.repository_headers

    def reload() -> None:
        client = endpoint.http(network_timeout=60.0)
        try:
            client.unload_model("example", headers=headers)
            time.sleep(0.5)
            client.load_model("example", headers=headers)
        finally:
            client.close()

    timer = _once_load_flows(deployed, reload)
    try:
        run_cli("loadtest", "--repository", deployed.repository, "--model", "example",
                "--concurrency", "2", "--warmup-s", "0.5", "--duration", "7",
                "--json", tmp_path / "run.json")
    finally:
        timer.join()
    level, = json.loads((tmp_path / "run.json").read_text())["levels"]
    back = [e for e in level["events"] if e["kind"] == "state" and e["state"] == "READY"
            and e["previous"] != "READY"]
    assert back, level["events"]
    ready_by = max(e["by_s"] for e in back)
    outage, = level["outages"]
    assert outage["to_s"] == ready_by, (outage, back)
    cold = [s for s in level["spikes"] if s["cold_start"]]
    assert cold, level["spikes"]
    for spike in cold:
        ends = [float(x) for x in re.findall(r"(\d+\.\d\d) s", spike["cause"].split(";")[0])]
        assert ends and ends[-1] == pytest.approx(ready_by, abs=0.006), (spike["cause"], ready_by)


# -- the server going away: stopped answering, or shutting down --------------------------


def test_windows_failing_as_the_server_stops_answering_are_named_after_it():
    """Connections refused from 6.9 s; the watcher's third failed poll (7.05 s) finds it
    gone, after its last answer at 6.95 s. The window of second 6 failed from then: the
    server's going explains it, where it said 'no server event explains it'."""
    events = [ServerEvent(at(7.05), "down", after_ns=at(6.95), by_ns=at(7.05))]
    timeline = _timeline(8)
    timeline[6] = Window(index=6, start_s=6.0, ok=300, errors=1605, qps=300.0, p50_ms=0.5, p99_ms=1.0,
                         max_ms=1.2, came_back=1905, waiting_ms=0.5)
    timeline[7] = _failed(7, 1605)
    spikes = {s.window: s for s in cold_start_windows(timeline, events, 0, 1.0)}
    assert sorted(spikes) == [6, 7]
    assert spikes[7].cause == "server stopped answering at 7.05 s; every request failed (1605 errors)"
    assert spikes[6].cause.startswith("server stopped answering at 7.05 s; 1605 of 1905 requests failed")
    assert not spikes[7].cold_start and [e["kind"] for e in spikes[7].events] == ["down"]
    # long before it, a failed window stays unexplained
    early = _timeline(8)
    early[2] = _failed(2)
    spike, = cold_start_windows(early, events, 0, 1.0)
    assert spike.cause == "errors: every request failed (40 errors); no server event explains it"


def test_windows_failing_while_the_server_drains_are_named_after_its_shutdown():
    """Told to stop at 4 s, Triton refuses every new connection while it answers the open
    ones: a worker whose connection was reset gets only refusals. The watcher saw a fresh
    connection refused at 4.1 s (the last that answered was opened at 4.0 s)."""
    events = [ServerEvent(at(4.1), "draining", reason="it refuses new connections",
                          after_ns=at(4.0), by_ns=at(4.2))]
    timeline = _timeline(10)
    timeline[5], timeline[8] = _failed(5, 1605), _stalled(8, 900.0)
    spikes = {s.window: s for s in cold_start_windows(timeline, events, 0, 1.0)}
    assert sorted(spikes) == [5, 8]
    assert spikes[5].cause == ("server shutting down from 4.10 s (it refused new connections, answering "
                               "only those already open); every request failed (1605 errors)")
    assert spikes[8].cause.startswith("server shutting down from 4.10 s")
    assert [e["kind"] for e in spikes[5].events] == ["draining"]


@pytest.mark.server
def test_the_watcher_sees_a_server_told_to_stop_refuse_new_connections_while_it_answers_open_ones(
        deployed, tmp_path):
    """`tritonkit down` while the watcher holds its kept-alive connection: Triton 2.51
    answers on it — live, ready, the index READY — yet refuses any new connection until
    it closes. The watcher records that as the server shutting down ("draining"), once,
    and not the server gone: it still answers."""
    endpoint = Endpoint.from_deployment(deployed)
    began = time.perf_counter_ns()
    watcher = ServerWatcher(endpoint, "example").start()
    stopping = None
    try:
        time.sleep(0.5)
        told = time.perf_counter_ns()
        stopping = subprocess.Popen([sys.executable, "-m", "tritonkit", "down", "--repository",
                                     str(deployed.repository)], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, preexec_fn=default_signals)
        deadline = time.monotonic() + 20
        while (not any(e.kind == "draining" for e in watcher.events) and stopping.poll() is None
               and time.monotonic() < deadline):
            time.sleep(0.1)
        time.sleep(0.5)
    finally:
        watcher.stop()
        if stopping is not None:
            stopping.wait(timeout=60)
    drained = [e for e in watcher.events if e.kind == "draining"]
    assert len(drained) == 1, watcher.events
    event, = drained
    assert event.after_ns is not None and event.after_ns <= event.t_ns <= event.by_ns
    assert event.t_ns >= told - 0.3e9          # no earlier than it was told (within a poll or so)
    assert event.as_dict(began)["t_s"] > 0.3
    assert watcher.down_at_ns is None          # draining, not gone: it answered on


@pytest.mark.server
def test_a_load_test_through_a_shutdown_keeps_the_drain_in_its_events(deployed, tmp_path):
    """A c=2 load test that runs through a `down`: its kept-alive connections are answered
    to the end (Triton waits for them), so every figure looks clean — yet the JSON's events
    say the server was shutting down, and from when."""
    from tritonkit.deploy import down

    # `down` as the library runs it, in the watching thread: a `tritonkit down` started
    # there took seconds to start on a busy host, and could stop the server after the run
    timer = _once_load_flows(deployed, lambda: down(Path(deployed.repository)))
    try:
        run_cli("loadtest", "--repository", deployed.repository, "--model", "example",
                "--concurrency", "2", "--warmup-s", "0.5", "--duration", "5", "--json", tmp_path / "run.json")
    finally:
        timer.join()
    data = json.loads((tmp_path / "run.json").read_text())
    level, = data["levels"]
    drained = [e for e in level["events"] if e["kind"] == "draining"]
    assert len(drained) == 1, level["events"]
    assert 0 < drained[0]["t_s"] < 5.5
    # and the report says it, though no window was flagged
    assert [w for w in data["verdict"]["warnings"] if "began shutting down" in w]


# -- sizes never warmed: the axis as in the tensor sent ------------------------------------


def test_a_size_never_warmed_is_named_by_its_axis_in_the_tensor_sent_batch_axis_included():
    """--shape input_ids:64 gives the dims without the batch axis; the tensor sent is
    [1, 64]. Its sequence axis is dim 1 of it, and the warning shows the shape, so it
    cannot read as the batch axis; the JSON says the same axis and the shape."""
    warmup = [{"name": f"len_{n}", "batch_size": 1,
               "inputs": {"input_ids": {"data_type": "TYPE_INT64", "dims": [str(n)]}}} for n in (6, 12, 18)]
    found = unwarmed_sizes({"input_ids": [-1]}, {"input_ids": [64]}, warmup, batch_size=1)
    assert found == (UnwarmedSize("input_ids", 1, 64, (6, 12, 18)),)
    assert found[0].as_dict() == {"input": "input_ids", "axis": 1, "size": 64, "warmed": [6, 12, 18],
                                  "shape": [1, 64]}
    assert unwarmed_warning("enc", found).startswith(
        "model 'enc' was never warmed at the size sent: input input_ids, sent as [1, 64]: dim 1 at 64 "
        "(warmed: 6, 12, 18); its first requests at it are cold.")
    # a model that does not batch sends its dims as they are: no axis to add
    alone, = unwarmed_sizes({"x": [3, -1]}, {"x": [3, 64]},
                            [{"inputs": {"x": {"dims": ["3", "32"]}}}])
    assert (alone.axis, alone.shape) == (1, (3, 64))
