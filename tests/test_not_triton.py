"""A peer that is not Triton — a web server answering ``{}``, ``[]``, an HTML 404 page, bytes
or nothing to every request, a gRPC server without Triton's service — gets one line
saying it is not Triton (exit 1) from every verb that talks to a server, never an
internal error, and never a wait for a timeout."""

from __future__ import annotations

import http.server
import socketserver
import threading
import time
from concurrent import futures

import pytest

from tests.conftest import error_lines, http_peer, run_cli
from tritonkit.answers import (INFER_RESPONSE, MODEL_CONFIG, MODEL_METADATA,
                               check_server_metadata, expect, mismatch, not_http1)
from tritonkit.errors import EXIT_ERROR, NotTriton

# What the peer answers every request with: (status, body, content type).
ANSWERS = {
    "{}": (200, b"{}", "application/json"),
    "[]": (200, b"[]", "application/json"),
    "null": (200, b"null", "application/json"),
    "html 404": (404, b"<html><body><h1>Not Found</h1></body></html>", "text/html"),
    "html 200": (200, b"<!doctype html><html><body>welcome</body></html>", "text/html"),
    "bytes": (200, b"\x00\xff\x1b[31mgarbage", "application/octet-stream"),
    "nothing": (200, b"", "text/plain"),
}


class _Peer(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    answer = ANSWERS["{}"]

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        status, body, kind = self.answer
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(params=list(ANSWERS))
def peer(request):
    """host:port of a local HTTP server that answers every request the same way."""
    handler = type("Peer", (_Peer,), {"answer": ANSWERS[request.param]})
    with http_peer(handler) as address:
        yield address, request.param


def says_not_triton(capsys, code: int, address: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if not line.startswith("warning: ")]
    assert code == EXIT_ERROR, err
    assert "internal error" not in err and "Traceback" not in err, err
    assert len(lines) == 2 and lines[1].startswith("hint: "), err
    assert lines[0].startswith(f"error: the server at {address} is not Triton"), err
    return lines[0]


def test_warmup_says_a_peer_is_not_triton_at_once(capsys, peer, monkeypatch):
    address, _ = peer
    monkeypatch.setenv("TRITONKIT_REPOSITORY_SECRET", "abc")
    # a timeout far beyond the test's: a wait for it would be the failure
    says_not_triton(capsys, run_cli("warmup", "--url", address, "--timeout", "600"), address)


def test_loadtest_says_a_peer_is_not_triton(capsys, peer):
    address, _ = peer
    code = run_cli("loadtest", "--url", address, "--model", "m", "--concurrency", "1",
                   "--duration", "1", "--warmup-s", "0")
    says_not_triton(capsys, code, address)


def test_tune_says_a_peer_is_not_triton(capsys, peer, monkeypatch):
    address, _ = peer
    monkeypatch.setenv("TRITONKIT_REPOSITORY_SECRET", "abc")
    code = run_cli("tune", "m", "--url", address, "--sla-p99-ms", "50")
    says_not_triton(capsys, code, address)


@pytest.mark.parametrize("verb", [["monitor", "--once"], ["diagnose", "--live", "--duration", "5"]])
def test_monitor_and_diagnose_say_a_metrics_port_is_not_triton(capsys, peer, verb):
    address, answered = peer
    port = address.rpartition(":")[2]
    code = run_cli(*verb, "--url", address, "--metrics-port", port)
    if answered == "nothing":
        err = capsys.readouterr().err
        assert code == EXIT_ERROR
        assert f"error: the metrics endpoint http://{address}/metrics answered nothing" in err
    elif answered == "html 404":
        err = capsys.readouterr().err
        assert code == EXIT_ERROR
        assert (f"error: http://{address}/metrics is not Triton's metrics endpoint: it "
                "answered HTTP 404") in err
    else:
        line = says_not_triton(capsys, code, address)
        assert "\x1b" not in line and "\x00" not in line        # the peer's bytes escaped


def test_a_grpc_port_without_tritons_service_is_not_triton(capsys, deployed):
    """HTTP answered by the real Triton, --grpc-url by a gRPC server that has no service."""
    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        code = run_cli("loadtest", "--url", deployed.http_url, "--grpc-url", f"127.0.0.1:{port}",
                       "--protocol", "grpc", "--model", "example", "--concurrency", "1",
                       "--duration", "1", "--warmup-s", "0")
    finally:
        server.stop(None)
    line = says_not_triton(capsys, code, f"127.0.0.1:{port}")
    assert "UNIMPLEMENTED" in line


def test_the_real_tritons_answers_pass_every_check(deployed):
    """The shapes are Triton 2.51's own: its metadata, config, statistics, index and an
    inference answer, as the checked client reads them."""
    from tritonkit.client import Endpoint, infer_inputs
    from tritonkit.loadtest._run import _check_answer
    from tritonkit.loadtest._inputs import request_template
    from tritonkit.loadtest._transport import http_sender

    endpoint = Endpoint.from_deployment(deployed)
    client = endpoint.http()
    try:
        assert client.get_server_metadata()["name"] == "triton"
        assert client.get_model_metadata("example")["inputs"]
        assert client.get_model_config("example")["name"] == "example"
        assert client.get_inference_statistics("example")["model_stats"]
        assert {e["name"] for e in client.get_model_repository_index(
            headers=endpoint.repository_headers)} >= {"example"}
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready("example")
        import numpy as np
        import tritonclient.http as httpclient

        inputs = infer_inputs(httpclient, [("INPUT__0", "FP32", np.ones((1, 4), np.float32))])
        assert client.infer("example", inputs).as_numpy("OUTPUT__0").shape == (1, 3)
    finally:
        client.close()
    template = request_template(endpoint, "example")
    send = http_sender(deployed.http_url, template, 5.0)
    try:
        send()
        _check_answer(send.__self__.answer(), deployed.http_url, "example")    # binary outputs
    finally:
        send.__self__.close()


@pytest.mark.parametrize("body", [b"{}", b"[]", b"<html></html>", b"", b'{"model_name": 1}'])
def test_an_inference_answer_that_is_not_tritons_is_refused(body):
    from tritonkit.loadtest._run import _check_answer

    with pytest.raises(NotTriton, match="its answer to POST /v2/models/m/infer"):
        _check_answer(body, "127.0.0.1:1", "m")


@pytest.mark.parametrize("metadata,says", [
    ({"name": "mlserver", "version": "1.3.5", "extensions": []}, "it says it is 'mlserver' '1.3.5'"),
    ({"name": "triton", "version": "3.0.0", "extensions": []}, "it says it is Triton '3.0.0'"),
    ({"name": "triton"}, "has no 'version'"),
    ({"name": "triton", "version": 2}, "has version a int 2, not str"),
])
def test_another_server_or_another_major_version_is_refused(metadata, says):
    with pytest.raises(NotTriton, match="not a version tritonkit speaks") as caught:
        check_server_metadata(metadata, "127.0.0.1:1")
    assert says in caught.value.message


def test_a_shape_names_the_first_place_an_answer_differs():
    assert mismatch({"name": "m", "inputs": [{"name": "x", "datatype": "FP32",
                                               "shape": [-1, "x"]}]}, MODEL_METADATA) == \
        "has inputs[0].shape[1] = 'x', not an integer"
    assert mismatch({"name": "m", "max_batch_size": "8"}, MODEL_CONFIG) is None   # gRPC's int64
    assert mismatch({"name": "m", "max_batch_size": True}, MODEL_CONFIG) == \
        "has max_batch_size = True, not an integer"
    assert mismatch({"name": "m", "model_warmup": [{"inputs": {"x": {"dims": "4"}}}]},
                    MODEL_CONFIG) == "has model_warmup[0].inputs.x.dims a str '4', not a list"
    with pytest.raises(NotTriton, match=r"its answer has no 'outputs'"):
        expect({"model_name": "m"}, INFER_RESPONSE, what="its answer", server="h:1")


@pytest.mark.server
def test_warmup_says_a_grpc_port_without_tritons_service_is_not_triton(capsys, tmp_path):
    """A decoupled model is warmed over gRPC streaming: --grpc-url answered by a gRPC
    server that has no service is not Triton, not "a model that refused its input"."""
    import grpc

    from tests.warmup.conftest import DECOUPLED_CONFIG, DECOUPLED_MODEL, _python_model

    repo = tmp_path / "repo"
    _python_model(repo, "streaming", DECOUPLED_CONFIG,
                  DECOUPLED_MODEL.replace("BEFORE", "0").replace("AFTER", "0"))
    assert run_cli("deploy", "--repository", repo, "--http-port", "0", "--grpc-port", "0",
                   "--metrics-port", "0", "--no-warmup", "--timeout", "60") == 0
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        from tritonkit.server.state import load_deployment

        http_url = load_deployment(repo).http_url
        code = run_cli("warmup", "--url", http_url, "--repository", repo, "--grpc-url",
                       f"127.0.0.1:{port}", "--model", "streaming", "--timeout", "60")
    finally:
        server.stop(None)
        run_cli("down", "--repository", repo)
    line = says_not_triton(capsys, code, f"127.0.0.1:{port}")
    assert "its gRPC port has no Triton inference service" in line


# Every verb that takes --url, each asking it first in its own way
VERBS_AT_A_URL = {
    "warmup": ("warmup", "--timeout", "30"),
    "loadtest": ("loadtest", "-m", "example", "-c", "1", "--duration", "1", "--warmup-s", "0"),
    "tune": ("tune", "example", "--sla-p99-ms", "50"),
}


@pytest.mark.parametrize("verb", list(VERBS_AT_A_URL))
def test_tritons_grpc_port_given_as_its_http_port_is_said_at_once(capsys, example_server, verb,
                                                                   monkeypatch):
    address = example_server.grpc_url
    monkeypatch.setenv("TRITONKIT_REPOSITORY_SECRET", "abc")
    started = time.monotonic()
    code = run_cli(*VERBS_AT_A_URL[verb], "--url", address)
    err = capsys.readouterr().err
    assert code == EXIT_ERROR, err
    assert time.monotonic() - started < 10, "the timeout was waited out"
    assert "waiting" not in err and "\x00" not in err and "\\x00" not in err, err
    assert error_lines(err) == [
        f"error: the server at {address} answers HTTP/2 (gRPC), not Triton's HTTP API",
        "hint: --url takes Triton's HTTP port (8000 by default; a deployment's is the HTTP line "
        "tritonkit deploy prints), not its gRPC port (8001)"]


def test_tritons_grpc_port_given_as_its_metrics_port_is_said(capsys, example_server):
    code = run_cli("monitor", "--once", "--url", example_server.http_url,
                   "--metrics-port", example_server.grpc_port)
    err = capsys.readouterr().err
    assert code == EXIT_ERROR, err
    assert error_lines(err)[0] == (f"error: the server at {example_server.grpc_url} answers "
                                   "HTTP/2 (gRPC), not Triton's metrics endpoint"), err
    assert "\x00" not in err, err


class _RawPeer(socketserver.BaseRequestHandler):
    """Answers every connection with the same bytes, whatever it was asked, and hangs up."""

    answer = b""

    def handle(self) -> None:
        self.request.recv(4096)
        self.request.sendall(self.answer)


HTTP2 = "answers HTTP/2 (gRPC), not Triton's HTTP API"
NO_HTTP1 = "is not Triton, or not a version tritonkit speaks: its answer is not HTTP/1.x: "
# What a peer answers every connection with, and what the error says of it
RAW_ANSWERS = {
    "h2 preface": (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", HTTP2),
    "h2 status": (b"HTTP/2 200\r\n\r\n", HTTP2),
    "ssh": (b"SSH-2.0-OpenSSH_9.6\r\n", NO_HTTP1 + "b'SSH-2.0-OpenSSH_9.6\\r\\n'"),
    "bytes": (b"\x1b[31m\x00garbage\r\n", NO_HTTP1 + "b'\\x1b[31m\\x00garbage\\r\\n'"),
}


@pytest.fixture(params=list(RAW_ANSWERS))
def raw_peer(request):
    """host:port of a peer that answers no HTTP/1.x, and what the error should say of it."""
    answer, says = RAW_ANSWERS[request.param]
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0),
                                             type("Peer", (_RawPeer,), {"answer": answer}))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", says
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("verb", list(VERBS_AT_A_URL))
def test_a_peer_that_answers_no_http1_is_said_at_once_its_bytes_escaped(capsys, raw_peer, verb,
                                                                        monkeypatch):
    address, says = raw_peer
    monkeypatch.setenv("TRITONKIT_REPOSITORY_SECRET", "abc")
    code = run_cli(*VERBS_AT_A_URL[verb], "--url", address)
    err = capsys.readouterr().err
    assert code == EXIT_ERROR, err
    assert error_lines(err)[0] == f"error: the server at {address} {says}", err
    assert "\x1b" not in err and "\x00" not in err and "waiting" not in err, err


@pytest.mark.parametrize("answer", [b"\x00\x00\x18\x04\x00\x00\x00\x00\x00\x00\x04",
                                    b"\x00\x00\x00\x04\x01\x00\x00\x00\x00",
                                    b"PRI * HTTP/2.0\r\n", b"HTTP/2.0 200 OK\r\n"])
def test_an_http2_answer_is_named_with_the_port_it_came_from(answer):
    assert not_http1("h:1", answer).message == \
        "the server at h:1 answers HTTP/2 (gRPC), not Triton's HTTP API"
    assert "--metrics-port takes" in not_http1("h:1", answer, "metrics").hint
