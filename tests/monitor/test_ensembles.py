"""`tritonkit monitor` of ensembles: their requests counted once in the server totals and whole
in their own row, and said when that cannot be told."""

from __future__ import annotations

import time

import pytest

from tests.conftest import run_cli, unused_port
from tests.monitor.conftest import LIMITS, _infer_failing, _settled, _triton_rows
from tritonkit.monitor.recording import read_monitor_csv
from tritonkit.monitor.watch import Monitor


@pytest.mark.server
def test_triton_counts_an_ensembles_request_in_every_model_it_runs_so_no_total_is_shown(
        failing_server, capsys):
    """Why the Triton table has no total row: 5 requests to an ensemble of one step count
    5 in the ensemble and 5 in the step, and a failed one counts twice in the ensemble and
    once in the step. Summed over models: 10 requests and 3 failures, where clients sent
    6 and saw 1 fail."""
    before = _settled(failing_server, {})
    assert _infer_failing(failing_server, "pipeline", 1, count=5) == 0
    assert _infer_failing(failing_server, "pipeline", -9, count=1) == 1
    expected = {("pipeline", "request_success"): 5, ("flaky", "request_success"): 5,
                ("pipeline", "request_failure"): 2, ("flaky", "request_failure"): 1}
    was = {(model, name): getattr(before.models[model], name) for model, name in expected}
    after = _settled(failing_server, {key: was[key] + n for key, n in expected.items()})
    assert {(model, name): getattr(after.models[model], name) - was[(model, name)]
            for model, name in expected} == expected
    assert run_cli("monitor", "--url", failing_server.http_url,
                   "--metrics-port", failing_server.metrics_port, "--once") == 0
    assert sorted(r["model"] for r in _triton_rows(capsys.readouterr().out)) == [
        "example", "flaky", "pipeline"]


def _pipeline_served(deployment, count: int, before) -> None:
    """Send ``count`` requests to the ensemble "pipeline" and wait until both it and its
    step "flaky" have counted them (from the scrape ``before``)."""
    assert _infer_failing(deployment, "pipeline", 1, count=count) == 0
    _settled(deployment, {(model, "request_success"): before.models[model].request_success + count
                          for model in ("pipeline", "flaky")})


@pytest.mark.server
def test_an_ensembles_requests_count_once_in_the_server_totals_and_whole_in_its_own_row(
        failing_server):
    """The ensemble runs nothing itself: its step's counters are the server's work, so 5
    requests to it are 5 in the totals and in what the GPUs' alerts see served, not 10;
    its own row still says clients sent it 5."""
    monitor = Monitor(None, failing_server.metrics_url, LIMITS, http_url=failing_server.http_url)
    _settled(failing_server, {})
    first = monitor.snapshot()
    lifetime = {name: c.request_success for name, c in first.triton.models.items()}
    assert first.triton_totals.request_success == lifetime["example"] + lifetime["flaky"]
    _pipeline_served(failing_server, 5, first.triton)
    second = monitor.snapshot()
    seconds = second.triton.at - first.triton.at
    assert second.triton_totals.request_success - first.triton_totals.request_success == 5
    assert second.served == 5
    assert second.model_rates["pipeline"].requests_per_s == pytest.approx(5 / seconds)
    assert second.model_rates["flaky"].requests_per_s == pytest.approx(5 / seconds)
    assert not [n for n in first.notes + second.notes if "ensemble" in n]


@pytest.mark.server
def test_the_monitor_csv_counts_an_ensembles_requests_once_in_its_server_totals(
        failing_server, tmp_path):
    """Both ways of naming the server give monitor its HTTP address, which tells the
    ensemble apart: --repository and --url."""
    before = _settled(failing_server, {})
    assert run_cli("monitor", "--repository", failing_server.repository, "--once",
                   "--csv", tmp_path / "before.csv") == 0
    _pipeline_served(failing_server, 5, before)
    assert run_cli("monitor", "--url", failing_server.http_url, "--metrics-port",
                   failing_server.metrics_port, "--once", "--csv", tmp_path / "after.csv") == 0
    (was,), (now,) = (read_monitor_csv(tmp_path / f"{n}.csv") for n in ("before", "after"))
    assert now.triton.request_success - was.triton.request_success == 5
    assert now.triton.inference_count - was.triton.inference_count == 5


@pytest.mark.server
def test_the_config_of_each_model_version_is_asked_once_as_it_appears(failing_server,
                                                                        monkeypatch):
    from tritonkit import client

    asked = []
    urlopen = client.open_direct

    def spied(url, *args, **kwargs):
        asked.extend([url] if url.endswith("/config") else [])
        return urlopen(url, *args, **kwargs)

    monkeypatch.setattr(client, "open_direct", spied)
    monitor = Monitor(None, failing_server.metrics_url, LIMITS, http_url=failing_server.http_url)
    for _ in range(3):
        monitor.snapshot()
    assert sorted(url.split("/v2/models/")[1] for url in asked) == [
        "example/versions/1/config", "flaky/versions/1/config", "pipeline/versions/1/config"]


@pytest.mark.server
@pytest.mark.parametrize("where", ["metrics port", "closed port"])
def test_where_the_http_port_cannot_be_asked_ensembles_count_as_before_and_it_is_said(
        failing_server, where):
    """Watched with only the metrics port reachable (given for the HTTP address, which it
    answers with no model config; or an HTTP port nothing listens on): monitoring goes on,
    the totals count the ensemble's requests again in its step, and a note says so."""
    address = (failing_server.metrics_url.removeprefix("http://").removesuffix("/metrics")
               if where == "metrics port" else f"127.0.0.1:{unused_port()}")
    monitor = Monitor(None, failing_server.metrics_url, LIMITS, http_url=address)
    first = monitor.snapshot()
    _pipeline_served(failing_server, 5, first.triton)
    second = monitor.snapshot()
    assert second.triton_totals.request_success - first.triton_totals.request_success == 10
    (note,) = [n for n in first.notes if "ensembles" in n]
    assert address in note and "again in each model it runs" in note
    assert note in second.notes         # the same words each sample: the CLI says it once


@pytest.mark.server
def test_monitor_watched_through_the_metrics_port_alone_says_once_it_cannot_tell_ensembles(
        failing_server, capsys):
    metrics = failing_server.metrics_url.removeprefix("http://").removesuffix("/metrics")
    assert run_cli("monitor", "--url", metrics, "--metrics-port", failing_server.metrics_port,
                   "--interval", "0.25", "--duration", "1.5") == 0
    out = capsys.readouterr()
    assert out.err.count("could not ask Triton which models are ensembles") == 1
    # three models a sample; seven samples, or fewer (two at least) where a busy host's
    # sample ran past a slot (skipped, not caught up on)
    rows = len(_triton_rows(out.out))
    assert rows % 3 == 0 and 2 * 3 <= rows <= 7 * 3


def _unloaded(client, model: str, headers: dict, within_s: float = 60.0) -> None:
    """Until Triton's index says ``model`` is unloaded: its unload API returns once the
    unload has begun, and a busy host finishes it later (its counters are there till then)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        index = client.get_model_repository_index(headers=headers)
        if any(m["name"] == model and m.get("state") == "UNAVAILABLE" for m in index):
            return
        time.sleep(0.05)
    raise AssertionError(f"{model} not unloaded within {within_s:g} s")


@pytest.mark.server
def test_an_ensemble_unloaded_before_the_monitor_started_is_left_out_once_loaded_again(
        failing_server):
    """Triton answers 404 for an unloaded model's config (and keeps some of its counters):
    it counts nothing while unloaded, and is asked again once its counters move."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(failing_server.http_url)
    headers = failing_server.repository_headers()
    try:
        client.unload_model("pipeline", headers=headers)
        _unloaded(client, "pipeline", headers)
        monitor = Monitor(None, failing_server.metrics_url, LIMITS,
                          http_url=failing_server.http_url)
        unloaded = monitor.snapshot()
        client.load_model("pipeline", headers=headers)
        loaded = monitor.snapshot()
        _pipeline_served(failing_server, 5, loaded.triton)
        served = monitor.snapshot()
    finally:
        client.load_model("pipeline", headers=headers)
        client.close()
    # Triton keeps the unloaded ensemble's failure counters alone: left out, they leave the
    # totals known
    assert unloaded.triton.models["pipeline"].request_success is None
    assert unloaded.triton_totals.request_success == sum(
        unloaded.triton.models[m].request_success for m in ("example", "flaky"))
    assert served.triton_totals.request_success - loaded.triton_totals.request_success == 5
    assert not [n for n in loaded.notes + served.notes if "ensembles" in n]
    assert not [n for n in unloaded.notes if "latency counters" in n]     # nor a wrong cause
