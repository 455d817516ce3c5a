"""Ctrl-C or SIGTERM while a request waits on a server that never answers ends the command
with one line and 128 + the signal, no traceback. The second adversarial pass found
`loadtest --url` at such a peer printing gevent's traceback of ``Interrupted`` (the HTTP
client waits in gevent's hub, where the signal handler's exception was raised)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading

import pytest

from tests.conftest import default_signals

pytestmark = pytest.mark.timeout(120)

VERBS = {"loadtest": ("loadtest", "-m", "mlp", "-c", "1", "--duration", "1"),
         "tune": ("tune", "mlp", "--sla-p99-ms", "10", "--budget-s", "30")}


class SilentPeer:
    """A TCP listener on loopback that takes each connection and its request, and never
    answers; ``asked`` is set once a request came in."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.asked = threading.Event()
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)
            if conn.recv(65536):
                self.asked.set()

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("verb", VERBS)
def test_a_signal_while_a_request_waits_is_one_line_and_128_plus_the_signal(verb, signum):
    peer = SilentPeer()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "tritonkit", *VERBS[verb], "--url",
                                 f"127.0.0.1:{peer.port}"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=default_signals)
        assert peer.asked.wait(60), "the command never asked the peer"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        peer.close()
    assert proc.returncode == 128 + signum, err
    assert "Traceback" not in err and "Interrupted" not in err, err
    said = "error: interrupted" if signum == signal.SIGINT else "error: stopped by SIGTERM"
    assert err.strip().splitlines()[-1] == said, err
