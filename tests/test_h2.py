"""The gRPC load generator's HTTP/2 connection, frame by frame.

Triton cannot be made to send a GOAWAY, a refused stream, padded or continued header
blocks or a shrunken window on demand, so these tests put a scripted HTTP/2 peer on a
real loopback TCP socket: it reads the frames our connection writes and answers with the
frames each case needs (HPACK by the same ``hpack`` library a server would use). What
Triton itself does with our calls is tested against the real server in tests/loadtest/.
"""

from __future__ import annotations

import socket
import struct
import threading
from concurrent.futures import ThreadPoolExecutor

import hpack
import pytest

from tritonkit.loadtest._h2 import (
    ACK, CONTINUATION, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, PADDED, PING, PREFACE,
    PRIORITY, REFUSED_STREAM, RST_STREAM, SETTINGS, SETTINGS_INITIAL_WINDOW_SIZE, WINDOW_UPDATE,
    GrpcConnection, GrpcFailed)

MESSAGE = b"m" * 100                        # the serialized request our connection repeats


class PeerConnection:
    """One accepted connection of the scripted peer."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.encoder = hpack.Encoder()
        self.seen: list[tuple[int, int, int, bytes]] = []
        assert self._exactly(len(PREFACE)) == PREFACE

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def read_frame(self) -> tuple[int, int, int, bytes]:
        head = self._exactly(9)
        length = int.from_bytes(head[:3], "big")
        frame = (head[3], head[4], int.from_bytes(head[5:9], "big"), self._exactly(length) if length else b"")
        self.seen.append(frame)
        return frame

    def read_call(self) -> tuple[int, bytes]:
        """Frames until a request's body ends: (its stream, the body)."""
        body = b""
        while True:
            kind, flags, stream, payload = self.read_frame()
            if kind == DATA:
                body += payload
                if flags & END_STREAM:
                    return stream, body

    def send(self, kind: int, flags: int, stream: int, payload: bytes = b"") -> None:
        self.sock.sendall(struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", kind, flags, stream) + payload)

    def block(self, headers: list[tuple[str, str]]) -> bytes:
        return self.encoder.encode(headers)

    def answer(self, stream: int, status: str = "0", message: str | None = None) -> None:
        """A whole answer: headers, one message, trailers."""
        self.send(HEADERS, END_HEADERS, stream, self.block([(":status", "200"),
                                                           ("content-type", "application/grpc")]))
        self.send(DATA, 0, stream, struct.pack(">BI", 0, 3) + b"out")
        trailers = [("grpc-status", status)] + ([("grpc-message", message)] if message else [])
        self.send(HEADERS, END_HEADERS | END_STREAM, stream, self.block(trailers))


class Peer:
    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(10)
        self.port = self.listener.getsockname()[1]
        self.accepted: list[PeerConnection] = []
        self._pending: list[socket.socket] = []
        self._ready = threading.Condition()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            sock.settimeout(10)
            with self._ready:
                self._pending.append(sock)
                self._ready.notify_all()

    def next_connection(self) -> PeerConnection:
        with self._ready:
            assert self._ready.wait_for(lambda: self._pending, timeout=10), "no connection came"
            conn = PeerConnection(self._pending.pop(0))
        self.accepted.append(conn)
        return conn


@pytest.fixture
def peer():
    p = Peer()
    yield p
    p.listener.close()
    for conn in p.accepted:
        conn.sock.close()


@pytest.fixture
def background():
    with ThreadPoolExecutor(max_workers=1) as pool:
        yield pool


def connect(peer: Peer) -> GrpcConnection:
    return GrpcConnection("127.0.0.1", peer.port, "/inference.GRPCInferenceService/ModelInfer",
                          MESSAGE, 10.0, socket)


def first_call(peer: Peer, background: ThreadPoolExecutor):
    """A connection, the peer's end of it, and a call in flight whose request the peer has
    read: (client, server, the pending call, its stream)."""
    client = connect(peer)
    server = peer.next_connection()
    call = background.submit(client.call)
    stream, _ = server.read_call()
    return client, server, call, stream


def test_a_call_sends_its_message_behind_the_grpc_prefix_and_returns_on_status_zero(peer, background):
    client = connect(peer)
    server = peer.next_connection()
    for expected_stream in (1, 3, 5):
        call = background.submit(client.call)
        stream, body = server.read_call()
        assert stream == expected_stream
        assert body == struct.pack(">BI", 0, len(MESSAGE)) + MESSAGE
        server.answer(stream)
        assert call.result(timeout=10) is None
    assert len(peer.accepted) == 1          # one connection for all three
    client.close()


def test_pings_and_settings_are_acknowledged(peer, background):
    client, server, call, stream = first_call(peer, background)
    server.send(SETTINGS, 0, 0, struct.pack(">HI", SETTINGS_INITIAL_WINDOW_SIZE, 1_000_000))
    server.send(PING, 0, 0, b"12345678")
    server.answer(stream)
    call.result(timeout=10)
    acks = []
    while len(acks) < 2:
        kind, flags, _, payload = server.read_frame()
        if flags & ACK and kind in (SETTINGS, PING):
            acks.append((kind, payload))
    assert sorted(acks) == [(SETTINGS, b""), (PING, b"12345678")]
    client.close()


def test_a_body_larger_than_the_servers_window_waits_for_its_window_updates(peer, background):
    client, server, call, stream = first_call(peer, background)
    server.send(SETTINGS, 0, 0, struct.pack(">HI", SETTINGS_INITIAL_WINDOW_SIZE, 40))
    server.answer(stream)
    call.result(timeout=10)                 # the settings were read during that call

    call = background.submit(client.call)
    pieces = []
    while sum(map(len, pieces)) < 105:
        kind, flags, stream, payload = server.read_frame()
        if kind == DATA:
            pieces.append(payload)
            if not flags & END_STREAM and sum(map(len, pieces)) % 40 == 0:
                server.send(WINDOW_UPDATE, 0, stream, struct.pack(">I", 40))
    assert [len(p) for p in pieces] == [40, 40, 25]           # never past the window given
    assert b"".join(pieces) == struct.pack(">BI", 0, len(MESSAGE)) + MESSAGE
    server.answer(stream)
    call.result(timeout=10)
    client.close()


def test_a_goaway_below_the_call_sends_it_again_on_a_new_connection(peer, background):
    client, first, call, stream = first_call(peer, background)
    first.answer(stream)
    call.result(timeout=10)
    first.send(GOAWAY, 0, 0, struct.pack(">II", 1, 0))      # draining: nothing after stream 1

    call = background.submit(client.call)
    first.read_call()                       # written before the GOAWAY was read: not processed
    second = peer.next_connection()
    stream, _ = second.read_call()
    assert stream == 1                      # a fresh connection starts again at 1
    second.answer(stream)
    assert call.result(timeout=10) is None
    client.close()


def test_a_refused_stream_is_sent_again_once_then_fails(peer, background):
    client = connect(peer)
    call = background.submit(client.call)
    for _ in range(2):
        server = peer.next_connection()
        stream, _ = server.read_call()
        server.send(RST_STREAM, 0, stream, struct.pack(">I", REFUSED_STREAM))
    with pytest.raises(ConnectionResetError, match="REFUSED_STREAM"):
        call.result(timeout=10)
    assert len(peer.accepted) == 2


def test_any_other_reset_fails_the_call_and_the_next_call_reconnects(peer, background):
    client, first, call, stream = first_call(peer, background)
    first.send(RST_STREAM, 0, stream, struct.pack(">I", 2))        # INTERNAL_ERROR
    with pytest.raises(ConnectionResetError, match="HTTP/2 error 2"):
        call.result(timeout=10)
    call = background.submit(client.call)
    second = peer.next_connection()
    stream, _ = second.read_call()
    second.answer(stream)
    call.result(timeout=10)


def test_an_error_status_names_its_code_and_message_and_keeps_the_connection(peer, background):
    client = connect(peer)
    server = peer.next_connection()
    for status, message, expected in (("5", "no%20such%20model", "NOT_FOUND: no such model"),
                                      ("13", None, "INTERNAL")):
        call = background.submit(client.call)
        stream, _ = server.read_call()
        # trailers-only: one HEADERS frame ends the stream
        headers = [(":status", "200"), ("content-type", "application/grpc"), ("grpc-status", status)]
        server.send(HEADERS, END_HEADERS | END_STREAM, stream,
                    server.block(headers + ([("grpc-message", message)] if message else [])))
        with pytest.raises(GrpcFailed) as failed:
            call.result(timeout=10)
        assert str(failed.value) == expected
    assert len(peer.accepted) == 1


def test_an_answer_without_trailers_is_a_failure_not_a_success(peer, background):
    client, server, call, stream = first_call(peer, background)
    server.send(HEADERS, END_HEADERS, stream, server.block([(":status", "200")]))
    server.send(DATA, END_STREAM, stream, struct.pack(">BI", 0, 0))
    with pytest.raises(GrpcFailed, match="no grpc-status"):
        call.result(timeout=10)


def test_padded_and_prioritized_header_blocks_continued_over_frames_are_read_whole(peer, background):
    client, server, call, stream = first_call(peer, background)
    block = server.block([(":status", "200"), ("content-type", "application/grpc"),
                          ("grpc-status", "5"), ("grpc-message", "split")])
    head, rest = block[:4], block[4:]
    padding = b"\0" * 3
    server.send(HEADERS, PADDED | PRIORITY | END_STREAM, stream,
                bytes([len(padding)]) + struct.pack(">IB", 0, 15) + head + padding)
    server.send(CONTINUATION, 0, stream, rest[:2])
    server.send(CONTINUATION, END_HEADERS, stream, rest[2:])
    with pytest.raises(GrpcFailed, match="^NOT_FOUND: split$"):
        call.result(timeout=10)


def test_a_remembered_header_block_follows_the_servers_table_when_it_changes(peer, background):
    """The same bytes (a one-byte reference into the server's table) mean grpc-status 0,
    then — once the server has added an entry in front — grpc-status 5."""
    client = connect(peer)
    server = peer.next_connection()
    blocks = []
    outcomes = []
    for status in ("0", "0", "5", "5"):
        call = background.submit(client.call)
        stream, _ = server.read_call()
        block = server.block([(":status", "200"), ("grpc-status", status)])
        blocks.append(block)
        server.send(HEADERS, END_HEADERS | END_STREAM, stream, block)
        try:
            call.result(timeout=10)
            outcomes.append("ok")
        except GrpcFailed as exc:
            outcomes.append(str(exc))
    assert blocks[1] == blocks[3] and min(blocks[1]) >= 0x80   # identical, all-indexed bytes
    assert outcomes == ["ok", "ok", "NOT_FOUND", "NOT_FOUND"]
