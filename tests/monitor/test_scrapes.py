"""`tritonkit monitor` scraping Triton: through an HTTP proxy setting, answers cut off, a
server too slow to answer, a wrong address."""

from __future__ import annotations

import http.client
import time

import pytest

from tests.conftest import http_peer, run_cli, unused_port
from tests.monitor.conftest import LIMITS, TRITON_2_51_METRICS, _fake_pynvml, _versions
from tritonkit.errors import ServerError
from tritonkit.monitor.triton_metrics import parse_metrics
from tritonkit.monitor.watch import Monitor


@pytest.mark.server
def test_an_http_proxy_in_the_environment_does_not_stand_between_monitor_and_triton(
        failing_server, monkeypatch):
    """A proxy set for the internet (http_proxy, as on corporate and CI hosts) is not asked
    for Triton's ports, as tritonclient does not ask it: the metrics are scraped and the
    ensemble told apart. Through urllib's proxy support the scrape failed, blaming the
    server, and the ensemble counted twice."""
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")    # nothing listens there
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monitor = Monitor(None, failing_server.metrics_url, LIMITS, http_url=failing_server.http_url)
    snapshot = monitor.snapshot()
    assert {"example", "flaky", "pipeline"} <= set(snapshot.triton.models)
    assert not [note for note in snapshot.notes if "ensemble" in note]
    lifetime = {name: c.request_success for name, c in snapshot.triton.models.items()}
    assert snapshot.triton_totals.request_success == lifetime["example"] + lifetime["flaky"]


def test_a_wrong_metrics_address_is_named(capsys, tmp_path):
    port = unused_port("127.0.0.1")
    assert run_cli("monitor", "--url", "127.0.0.1:1", "--metrics-port", port, "--once") == 1
    assert f"http://127.0.0.1:{port}/metrics did not answer" in capsys.readouterr().err


class _Answer:
    """What urlopen returns: a response whose body is ``text``, or whose read fails with
    ``error`` (the server going away mid-response)."""

    def __init__(self, text: str = "", error: Exception | None = None) -> None:
        self.text, self.error = text, error

    def __enter__(self): return self
    def __exit__(self, *exc): pass

    def read(self, amt: int | None = None) -> bytes:
        if self.error:
            raise self.error
        return self.text.encode()


def _answering(monkeypatch, *answers) -> None:
    """urlopen answering each scrape in turn: an _Answer, or an exception it raises; no
    HTTP port answers (which models are ensembles is not known)."""
    import urllib.error

    queue = iter(answers)

    def urlopen(url, timeout):
        if not url.endswith("/metrics"):
            raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
        answer = next(queue)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr("tritonkit.client.open_direct", urlopen)


@pytest.mark.parametrize("cut", [
    _Answer(error=http.client.IncompleteRead(b"# TYPE nv_inference_count counter\n", 900)),
    http.client.BadStatusLine(""),
    http.client.RemoteDisconnected("Remote end closed connection without response")],
    ids=["IncompleteRead", "BadStatusLine", "RemoteDisconnected"])
def test_a_server_restarting_mid_response_is_a_scrape_that_failed(monkeypatch, cut):
    from tritonkit.monitor.triton_metrics import scrape

    _answering(monkeypatch, cut)
    with pytest.raises(ServerError, match="http://h:8002/metrics did not answer"):
        scrape("http://h:8002/metrics", at=0)


def test_a_recording_goes_on_through_a_scrape_cut_off_mid_response(monkeypatch, capsys):
    """The second scrape is cut off; those after it answer. The run's span leaves room for
    a busy host (the slots a slow sample runs past are skipped: 0.1 s at 0.05 s slots
    held one sample on a busy host)."""
    cut = http.client.IncompleteRead(b"# TYPE nv_inference_count counter\n", 900)
    _answering(monkeypatch, _Answer(TRITON_2_51_METRICS), _Answer(error=cut),
               *[_Answer(TRITON_2_51_METRICS)] * 20)
    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml", lambda: _fake_pynvml())
    assert run_cli("monitor", "--url", "127.0.0.1:8000", "--interval", "0.25",
                   "--duration", "2") == 0
    out = capsys.readouterr()
    assert "internal error" not in out.err
    assert "Triton: Triton's metrics endpoint" in out.out and "IncompleteRead" in out.out
    assert out.out.count("GPUs at ") >= 3                  # samples after the cut-off one


def test_a_server_too_slow_to_answer_once_is_asked_again_later_not_never(monkeypatch):
    """A monitor starts under load: one config request past its timeout made the check give
    up for the whole session, and an ensemble loaded later was counted twice for hours. The
    address is asked again after a pause, and meanwhile a sample waits no timeout at all."""
    import http.server

    from tritonkit.monitor.triton_metrics import EnsembleCheck

    answered = []

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if not answered:
                answered.append("stalled")
                time.sleep(0.6)                  # past the client's timeout
            body = b'{"platform": "ensemble"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    with http_peer(Slow) as address:
        check = EnsembleCheck(address, timeout=0.2)
        metrics = parse_metrics(_versions({"1": 5}))
        left, note = check.left_out(metrics)
        assert left == frozenset() and "did not answer" in note and "asked again" in note
        started = time.monotonic()
        assert check.left_out(metrics)[0] == frozenset()       # waiting: not asked
        assert time.monotonic() - started < 0.1
        monkeypatch.setattr(EnsembleCheck, "ASK_AGAIN_S", 0.0)
        check._ask_again_at = 0.0                               # the pause is over
        check.timeout = 10.0                # the answer now comes at once; a busy host's "at once"
        left, note = check.left_out(metrics)
        assert left == frozenset({("example", "1")}) and note is None
