"""`tritonkit monitor`: failed requests per second beside their lifetime count, and what the
real Triton counts as a failure."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest

from tests.conftest import run_cli
from tests.monitor.conftest import (
    LIMITS, _fake_pynvml, _infer_failing, _served, _settled, _triton_rows, triton_exposition)
from tritonkit.monitor.triton_metrics import parse_metrics
from tritonkit.monitor.watch import Monitor


def _scraped_every(monkeypatch, seconds: float, *texts: str) -> None:
    """Triton's metrics endpoint answering these texts, one per scrape, ``seconds`` apart
    by the scrapes' own times (what a rate's interval is read from), however fast the
    test runs."""
    answers = enumerate(texts)

    def scrape(url, at):
        k, text = next(answers)
        return parse_metrics(text, at=k * seconds)

    monkeypatch.setattr(sys.modules["tritonkit.monitor.watch"], "scrape", scrape)


@pytest.mark.slow
def test_the_triton_table_shows_failures_per_second_beside_their_lifetime_count(
        monkeypatch, capsys):
    """Someone paged for errors needs the failures of now: resnet's 30 in the last 10 s
    are 3.0 a second, whatever it failed before; bert, failing nothing, reads 0.0."""
    before = {("resnet", "1", ""): replace(_served(1000), request_failure=500),
              ("bert", "1", ""): _served(70)}
    after = {("resnet", "1", ""): replace(_served(1200), request_failure=530),
             ("bert", "1", ""): _served(90)}
    _scraped_every(monkeypatch, 10, triton_exposition(before), triton_exposition(after))
    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml", lambda: _fake_pynvml())
    assert run_cli("monitor", "--url", "127.0.0.1:8000", "--interval", "1", "--duration", "1") == 0
    out = capsys.readouterr().out
    first = {r["model"]: (r["fail"], r["fail/s"]) for r in _triton_rows(out)[:2]}
    assert first == {"resnet": ("500", "—"), "bert": ("0", "—")}    # no interval yet
    second = {r["model"]: r for r in _triton_rows(out)[2:]}
    resnet, bert = second["resnet"], second["bert"]
    assert (resnet["fail"], resnet["fail/s"], resnet["req/s"]) == ("530", "3.0", "20.0")
    assert (bert["fail"], bert["fail/s"]) == ("0", "0.0")
    assert "counts since load; rates and means since the last sample" in " ".join(out.split())


@pytest.mark.slow
def test_one_failure_in_a_minutes_interval_does_not_read_as_no_failures(monkeypatch, capsys):
    before = {("resnet", "1", ""): replace(_served(1000), request_failure=8)}
    after = {("resnet", "1", ""): replace(_served(4000), request_failure=9)}
    _scraped_every(monkeypatch, 60, triton_exposition(before), triton_exposition(after))
    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml", lambda: _fake_pynvml())
    assert run_cli("monitor", "--url", "127.0.0.1:8000", "--interval", "1", "--duration", "1") == 0
    (_, resnet) = _triton_rows(capsys.readouterr().out)
    assert resnet["fail/s"] == "0.017"                       # 1 / 60 s, not 0.0


@pytest.mark.server
def test_failures_on_the_real_triton_are_shown_per_second_between_two_samples(failing_server):
    monitor = Monitor(None, failing_server.metrics_url, LIMITS)
    first = monitor.snapshot()
    failed_before = first.triton.models["flaky"].request_failure
    assert _infer_failing(failing_server, "flaky", -9, count=3) == 3
    _settled(failing_server, {("flaky", "request_failure"): failed_before + 3})
    second = monitor.snapshot()
    seconds = second.triton.at - first.triton.at
    assert second.triton.models["flaky"].request_failure == failed_before + 3
    assert second.model_rates["flaky"].failures_per_s == pytest.approx(3 / seconds)
    assert second.model_rates["example"].failures_per_s == 0


@pytest.mark.server
def test_triton_counts_no_failure_for_a_bad_input_nor_a_python_models_error_response(
        failing_server):
    """What fail/s cannot show (said in triton_metrics' docstring): a request refused for
    its shape never reaches a model, and a python model's error response counts as a
    success (server#7713): 0 failures a second is no proof that clients see none."""
    before = _settled(failing_server, {})
    assert _infer_failing(failing_server, "flaky", 1, count=2, width=5) == 2     # HTTP 400
    assert _infer_failing(failing_server, "flaky", -7, count=3) == 3             # HTTP 500
    after = _settled(failing_server, {
        ("flaky", "request_success"): before.models["flaky"].request_success + 3})
    assert after.models["flaky"].request_failure == before.models["flaky"].request_failure
    assert after.models["flaky"].request_success == before.models["flaky"].request_success + 3
