"""`monitor` reads a peer's answer with a bound: a metrics endpoint that sends without end
is named as not Triton once it passed 64 MiB (the second adversarial pass saw the monitor
grow until "internal error: MemoryError"), and a model config nested thousands deep is
an answer that is not Triton's, not an internal RecursionError."""

from __future__ import annotations

import socket
import threading

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.timeout(120)


class Peer:
    """A loopback HTTP/1.1 peer: GET /metrics is ``metrics`` (bytes, or None for a chunked
    answer that never ends); any other path answers ``other``."""

    def __init__(self, metrics: bytes | None, other: bytes = b"{}") -> None:
        self.metrics, self.other = metrics, other
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += conn.recv(65536) or b"\r\n\r\n"
                path = request.split(b" ")[1] if b" " in request else b""
                if path == b"/metrics" and self.metrics is None:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n")
                    chunk = b"# HELP nv_x y\n" * 4096
                    while True:
                        conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                body = self.metrics if path == b"/metrics" else self.other
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close"
                             b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            except OSError:
                pass

    def close(self) -> None:
        self.sock.close()


def test_monitor_stops_reading_a_metrics_answer_without_end(capsys):
    peer = Peer(metrics=None)
    try:
        port = peer.address.rsplit(":", 1)[1]
        code = run_cli("monitor", "--once", "--url", peer.address, "--metrics-port", port)
    finally:
        peer.close()
    err = capsys.readouterr().err
    assert code == 1 and "internal error" not in err and "Traceback" not in err, err
    assert f"error: the server at {peer.address} is not Triton" in err and "64 MiB" in err, err


def test_monitor_takes_a_model_config_nested_too_deep_as_not_triton(capsys):
    metrics = b'nv_inference_count{model="m",version="1"} 1\n'
    peer = Peer(metrics=metrics, other=b"[" * 100_000 + b"]" * 100_000)
    try:
        port = peer.address.rsplit(":", 1)[1]
        code = run_cli("monitor", "--once", "--url", peer.address, "--metrics-port", port)
    finally:
        peer.close()
    out, err = capsys.readouterr()
    assert "internal error" not in err and "Traceback" not in err, err
    assert code == 0 and "with no model config: it is not Triton's HTTP port" in err, err
