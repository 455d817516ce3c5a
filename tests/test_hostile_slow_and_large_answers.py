"""A peer that is not Triton and answers a byte at a time, or without end, ends each request
tritonkit makes within the request's timeout and a bounded read: the third adversarial pass
found warmup, loadtest and tune kept past 150 s by a trickling peer (timeouts applied per
socket read), and a 10 GB Content-Length or an endless chunked answer read into memory."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tritonkit.client import Endpoint, open_direct
from tritonkit.errors import NotTriton
from tritonkit.loadtest._inputs import RequestTemplate

pytestmark = pytest.mark.timeout(120)


class HostilePeer:
    """A loopback TCP listener that answers every connection with ``answer(conn)``: a peer
    that is deliberately not Triton."""

    def __init__(self, answer) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._answer, self._stop = answer, threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            self._answer(conn, self._stop)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


def trickle(data: bytes, fill: bytes = b"a"):
    """Send ``data`` then ``fill`` without end, a byte every 50 ms: never silent for a read's timeout."""
    def answer(conn, stop) -> None:
        rest = data
        while not stop.is_set():
            conn.sendall(rest[:1] or fill)
            rest = rest[1:]
            time.sleep(0.05)
    return answer


def endless_chunks(conn, stop) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: "
                 b"application/json\r\n\r\n")
    chunk = b"%x\r\n%s\r\n" % (1 << 20, b" " * (1 << 20))
    while not stop.is_set():
        conn.sendall(chunk)


def huge_length(conn, stop) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\nContent-Type: "
                 b"application/json\r\n\r\n{")
    stop.wait(30)


@pytest.fixture
def peer(request):
    made = HostilePeer(request.param)
    yield made
    made.close()


HEADERS_TRICKLE = trickle(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Pad: ")
BODY_TRICKLE = trickle(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n{")


@pytest.mark.parametrize("peer", [HEADERS_TRICKLE, BODY_TRICKLE], indirect=True,
                         ids=["headers", "body"])
def test_a_trickling_peer_ends_a_triton_http_request_within_its_timeout(peer):
    client = Endpoint(http_url=peer.address).http(connection_timeout=1.0, network_timeout=1.0)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        client.get_server_metadata()
    with pytest.raises(TimeoutError):
        client.is_server_live()
    assert time.monotonic() - started < 2 * 1.0 + 1.0     # two requests of 1 s each


@pytest.mark.parametrize("peer", [HEADERS_TRICKLE, BODY_TRICKLE], indirect=True,
                         ids=["headers", "body"])
def test_a_trickling_peer_ends_a_direct_request_within_its_timeout(peer):
    started = time.monotonic()
    with pytest.raises(OSError):
        with open_direct(f"http://{peer.address}/metrics", timeout=1.0) as response:
            response.read()
    assert time.monotonic() - started < 2.0


def _template() -> RequestTemplate:
    return RequestTemplate(model="m", inputs=(("x", "FP32", np.zeros((1, 2), np.float32)),),
                           outputs=("y",), batch_size=1)


@pytest.mark.parametrize("cooperative", [False, True])
@pytest.mark.parametrize("peer", [HEADERS_TRICKLE, BODY_TRICKLE], indirect=True,
                         ids=["headers", "body"])
def test_a_trickling_peer_ends_a_load_test_request_within_its_timeout(peer, cooperative):
    from tritonkit.loadtest._transport import http_sender

    send = http_sender(peer.address, _template(), timeout=1.0, cooperative=cooperative)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        send()
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize("peer", [trickle(b"", fill=b"\0")], indirect=True)
def test_a_trickling_peer_ends_a_grpc_load_test_call_within_its_timeout(peer):
    from tritonkit.loadtest._transport import grpc_sender

    send = grpc_sender(peer.address, _template(), timeout=1.0)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        send()
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize("peer", [huge_length, endless_chunks], indirect=True,
                         ids=["content-length", "chunked"])
def test_an_answer_larger_than_triton_gives_is_not_triton_not_read_into_memory(peer):
    client = Endpoint(http_url=peer.address).http(connection_timeout=5.0, network_timeout=30.0)
    for ask in (client.get_server_metadata, lambda: client.get_model_config("m"),
                client.get_inference_statistics):
        with pytest.raises(NotTriton, match="more than 64 MiB"):
            ask()


@pytest.mark.parametrize("peer", [endless_chunks], indirect=True)
def test_an_endless_inference_answer_fails_the_load_test_request(peer):
    from tritonkit.loadtest._transport import RequestFailed, http_sender

    send = http_sender(peer.address, _template(), timeout=60.0)
    with pytest.raises(RequestFailed, match="more than 1024 MiB") as failed:
        send()
    assert failed.value.foreign


@pytest.mark.slow
@pytest.mark.parametrize("peer", [HEADERS_TRICKLE, BODY_TRICKLE], indirect=True,
                         ids=["headers", "body"])
@pytest.mark.parametrize("verb", ["warmup", "monitor"])
def test_a_command_at_a_trickling_peer_ends_within_its_timeout_as_at_a_silent_one(peer, verb):
    argv = {"warmup": ["warmup", "--url", peer.address, "--timeout", "3"],
            "monitor": ["monitor", "--url", peer.address, "--metrics-port", str(peer.port),
                        "--duration", "1"]}[verb]
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tritonkit", *argv], capture_output=True,
                          text=True, timeout=90)
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    assert "timed out" in done.stderr.splitlines()[-2], done.stderr
    assert "Traceback" not in done.stderr
    assert took < 20, f"{verb} took {took:.0f} s at a peer answering a byte every 50 ms"


class _LargeMetadata:
    """A gRPC peer that answers ServerMetadata with ``size`` bytes of name."""

    def __init__(self, size: int) -> None:
        from concurrent import futures

        import grpc
        from tritonclient.grpc import service_pb2, service_pb2_grpc

        class Servicer(service_pb2_grpc.GRPCInferenceServiceServicer):
            def ServerMetadata(self, request, context):
                return service_pb2.ServerMetadataResponse(name="x" * size, version="2.51.0")

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=1), options=[
            ("grpc.max_send_message_length", 2**31 - 1)])
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Servicer(), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()


def test_a_grpc_answer_larger_than_the_inference_bound_is_refused_not_read(monkeypatch):
    """tritonclient's gRPC client takes answers up to 2 GiB; ours up to the bound an HTTP
    answer has (answers.INFER_ANSWER_MAX_BYTES; 2 MiB here, so that the test sends 3)."""
    from tritonclient.utils import InferenceServerException

    from tritonkit import answers

    monkeypatch.setattr(answers, "INFER_ANSWER_MAX_BYTES", 2 << 20)
    large = _LargeMetadata(3 << 20)
    try:
        address = f"127.0.0.1:{large.port}"
        client = Endpoint(address, grpc_url=address).grpc()
        with pytest.raises(InferenceServerException, match="RESOURCE_EXHAUSTED|larger than max"):
            client.get_server_metadata(client_timeout=30)
        client.close()
        monkeypatch.setattr(answers, "INFER_ANSWER_MAX_BYTES", 4 << 20)   # the control
        within = Endpoint(address, grpc_url=address).grpc()
        assert len(within.get_server_metadata(client_timeout=30).name) == 3 << 20
        within.close()
    finally:
        large.server.stop(None)


@pytest.mark.parametrize("peer", [HEADERS_TRICKLE, BODY_TRICKLE], indirect=True,
                         ids=["headers", "body"])
def test_requests_sent_together_end_with_the_first_ones_deadline_and_the_client_closes(peer):
    """Warm-up sends a burst (one request per instance) and waits for each: at a trickling
    peer the first wait ends at its deadline, and the others, still reading in the
    background, end with it; closing the client (which waits for them) takes no longer."""
    import tritonclient.http as httpclient

    client = Endpoint(http_url=peer.address).http(connection_timeout=1.0, network_timeout=1.0,
                                                  concurrency=3)
    tensor = httpclient.InferInput("INPUT__0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 4), np.float32))
    started = time.monotonic()
    pending = [client.async_infer("m", [tensor]) for _ in range(3)]
    with pytest.raises(TimeoutError):
        for request in pending:
            request.get_result()
    client.close()
    assert time.monotonic() - started < 3.0
