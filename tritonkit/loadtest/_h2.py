"""One gRPC unary call, posted again and again on an HTTP/2 connection of its own.

gRPC is HTTP/2: a call is a HEADERS frame and a DATA frame (the protobuf message behind a
5-byte prefix); the answer is HEADERS, DATA and trailing HEADERS with ``grpc-status``.
Our request never changes, so the header block and the message are built once and a call
only frames them with the next stream id (a stateful model's call appends its sequence
parameters to the message). Measured here (example model, one user, server on its own CPU): grpcio's
blocking stub costs 190-230 µs of client CPU per call — passing it pre-serialized bytes
saves nothing, and the pure-Python ``h2`` state machine costs 270 µs — against ~40 µs
for this loop, which is what lets a Python client keep up with perf_analyzer over gRPC.

HPACK (header compression, whose decoder state the server's encoder shares) is the
``hpack`` library's, with the server's repeated all-indexed blocks remembered; our own
header block is encoded "never indexed", so it can be sent again unchanged. Flow control: we open the connection's and every stream's receive window
as far as HTTP/2 allows and top the connection's up; what we send respects the server's
windows and frame size. PING and SETTINGS are acknowledged; a call the server says it did
not process (GOAWAY below it, REFUSED_STREAM) is sent once more on a new connection, any
other reset ends it, and a connection is never reused after a half-read answer.
"""

from __future__ import annotations

import functools
import struct
import time
from typing import Any
from urllib.parse import unquote

import hpack

from tritonkit.answers import INFER_ANSWER_MAX_BYTES

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE = 0x2, 0x4, 0x5
NO_ERROR, REFUSED_STREAM = 0x0, 0x7
MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW, DEFAULT_FRAME = 65_535, 16_384


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", kind, flags, stream) + payload


# How long a connection may take to open, whatever the request timeout: a server that
# takes no more connections (its open-files limit reached, its listen backlog full) drops
# the handshake, which the kernel retries at 1 s and 3 s; a run must not wait out a 30 s
# request timeout per connection to learn it.
CONNECT_TIMEOUT_S = 5.0


# Triton's answer headers and trailers are a few hundred bytes.
HEADER_BLOCK_MAX_BYTES = 1 << 20


def open_socket(module: Any, address: tuple[str, int], timeout: float) -> Any:
    """A connected TCP socket (``module`` is ``socket`` or gevent's), Nagle off: a request
    is written whole, and waiting to coalesce it would only add latency. Opened within
    CONNECT_TIMEOUT_S (or ``timeout``, if shorter); each read then waits up to ``timeout``."""
    sock = module.create_connection(address, timeout=min(timeout, CONNECT_TIMEOUT_S))
    sock.settimeout(timeout)
    sock.setsockopt(module.IPPROTO_TCP, module.TCP_NODELAY, 1)
    return sock


def authority(host: str, port: int) -> str:
    """``host:port`` as a Host header or ``:authority`` names it (an IPv6 address in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@functools.cache
def status_names() -> dict[int, str]:
    import grpc

    return {code.value[0]: code.name for code in grpc.StatusCode}


class GrpcFailed(Exception):
    """The call was answered with a non-zero grpc-status (or an HTTP error); ``code``: the
    grpc-status (None: none came)."""

    def __init__(self, text: str, code: int | None = None) -> None:
        super().__init__(text)
        self.code = code


class _Unprocessed(ConnectionResetError):
    """The server says it did not process the call (GOAWAY below its stream, or
    REFUSED_STREAM): RFC 9113 §8.7 lets a client send it again, as grpcio does."""


class GrpcConnection:
    """A kept-alive HTTP/2 connection that makes the same unary call again and again."""

    def __init__(self, host: str, port: int, path: str, message: bytes, timeout: float,
                 socket_module: Any) -> None:
        self._address, self._timeout, self._socket_module = (host, port), timeout, socket_module
        never = hpack.NeverIndexedHeaderTuple
        self._header_block = hpack.Encoder().encode(
            [never(":method", "POST"), never(":scheme", "http"), never(":path", path),
             never(":authority", authority(host, port)), never("content-type", "application/grpc"),
             never("te", "trailers"), never("user-agent", "tritonkit-loadtest")], huffman=False)
        self._message = message
        self._body = struct.pack(">BI", 0, len(message)) + message
        self._names = status_names()
        self._sock = None
        self._connect()                     # now, so a call never pays for the handshake

    # -- connection ----------------------------------------------------------------------

    def _connect(self) -> None:
        sock = open_socket(self._socket_module, self._address, self._timeout)
        settings = struct.pack(">HIHI", SETTINGS_ENABLE_PUSH, 0, SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW)
        try:
            sock.sendall(PREFACE + _frame(SETTINGS, 0, 0, settings)
                         + _frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", MAX_WINDOW - DEFAULT_WINDOW)))
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._buffer = bytearray()
        self._decoder = hpack.Decoder()
        self._known_blocks: dict[bytes, list[tuple[str, str]]] = {}
        self._next_stream = 1
        self._send_window = DEFAULT_WINDOW          # the server's connection window for us
        self._stream_initial = DEFAULT_WINDOW       # ... and each new stream's
        self._max_frame = DEFAULT_FRAME
        self._received = 0                          # DATA bytes since our last top-up
        self._goaway = False
        self._shortened = False                     # a read's timeout cut to the call's time left
        self._deadline = float("inf")
        self._call_bytes = 0
        self._read_once = False

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    # -- a call --------------------------------------------------------------------------

    def call(self, extra: bytes | None = None) -> None:
        """One call with the message, ``extra`` (serialized fields of the same message) appended."""
        body = self._body
        if extra:
            message = self._message + extra
            body = struct.pack(">BI", 0, len(message)) + message
        self._deadline = time.monotonic() + self._timeout     # the call's whole time
        self._call_bytes = 0
        self._read_once = False             # the first read waits the whole timeout
        for attempt in (1, 2):
            if self._sock is None or self._goaway or self._next_stream > MAX_WINDOW:
                self.close()
                self._connect()
            try:
                self._exchange(body)
                break
            except _Unprocessed:
                self.close()
                if attempt == 2:
                    raise
            except BaseException:
                self.close()                # a half-read answer: never reuse the connection
                raise
        if self._shortened:
            self._sock.settimeout(self._timeout)
            self._shortened = False
        self._check(self._answer)

    def _exchange(self, body: bytes) -> None:
        stream = self._next_stream
        self._next_stream += 2
        self._stream, self._stream_window = stream, self._stream_initial
        self._answer: dict[str, str] = {}
        self._ended = False
        self._write_request(stream, body)
        while not self._ended:
            self._read_frame()

    def _write_request(self, stream: int, body: bytes) -> None:
        head = _frame(HEADERS, END_HEADERS, stream, self._header_block)
        if len(body) <= min(self._send_window, self._stream_window, self._max_frame):
            self._send_window -= len(body)
            self._stream_window -= len(body)
            self._sock.sendall(head + _frame(DATA, END_STREAM, stream, body))
            return
        self._sock.sendall(head)
        sent = 0
        while sent < len(body):             # a large request: as far as the windows let us
            room = min(self._send_window, self._stream_window, self._max_frame, len(body) - sent)
            if room <= 0:
                self._read_frame()          # until a WINDOW_UPDATE (or the answer) comes
                if self._ended:             # answered early, e.g. refused: stop sending
                    self._sock.sendall(_frame(RST_STREAM, 0, stream, struct.pack(">I", NO_ERROR)))
                    return
                continue
            last = sent + room == len(body)
            self._sock.sendall(_frame(DATA, END_STREAM if last else 0, stream, body[sent:sent + room]))
            sent += room
            self._send_window -= room
            self._stream_window -= room

    def _recv_exactly(self, n: int) -> bytes:
        buffer = self._buffer
        while len(buffer) < n:
            if self._read_once and self._deadline != float("inf"):
                # A read within what is left of the call's time, not a timeout of its own:
                # a peer trickling its answer ends as one that says nothing. (Outside a
                # call, the connection's handshake, there is no call's time to keep to.)
                left = self._deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("timed out")
                self._sock.settimeout(left)
                self._shortened = True
            data = self._sock.recv(65536)
            self._read_once = True
            if not data:
                raise ConnectionResetError("the server closed the connection")
            buffer += data
        chunk = bytes(buffer[:n])
        del buffer[:n]
        return chunk

    def _read_frame(self) -> None:
        head = self._recv_exactly(9)
        length = int.from_bytes(head[:3], "big")
        kind, flags, stream = head[3], head[4], int.from_bytes(head[5:9], "big") & MAX_WINDOW
        payload = self._recv_exactly(length) if length else b""
        if kind == DATA:
            self._on_data(flags, stream, payload)
        elif kind == HEADERS:
            self._on_headers(flags, stream, payload)
        elif kind == SETTINGS:
            if not flags & ACK:
                self._on_settings(payload)
        elif kind == PING:
            if not flags & ACK:
                self._sock.sendall(_frame(PING, ACK, 0, payload))
        elif kind == WINDOW_UPDATE:
            increment = int.from_bytes(payload[:4], "big") & MAX_WINDOW
            if stream == 0:
                self._send_window += increment
            elif stream == self._stream:
                self._stream_window += increment
        elif kind == RST_STREAM and stream == self._stream:
            code = int.from_bytes(payload[:4], "big")
            if code == REFUSED_STREAM:
                raise _Unprocessed("the server refused the call (REFUSED_STREAM)")
            raise ConnectionResetError(f"the server reset the call (HTTP/2 error {code})")
        elif kind == GOAWAY:
            self._goaway = True
            last = int.from_bytes(payload[:4], "big") & MAX_WINDOW
            if last < self._stream:
                raise _Unprocessed("the server is closing the connection (GOAWAY)")
        # PRIORITY, PUSH_PROMISE (disabled) and unknown frames: nothing to do

    def _on_data(self, flags: int, stream: int, payload: bytes) -> None:
        self._received += len(payload)
        self._call_bytes += len(payload)
        if self._call_bytes > INFER_ANSWER_MAX_BYTES:
            raise GrpcFailed(f"an answer of more than {INFER_ANSWER_MAX_BYTES >> 20} MiB")
        if self._received > MAX_WINDOW // 2:
            self._sock.sendall(_frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self._received)))
            self._received = 0
        if stream == self._stream and flags & END_STREAM:
            self._ended = True              # a body without trailers: _check names it

    def _on_headers(self, flags: int, stream: int, payload: bytes) -> None:
        if flags & PADDED:
            payload = payload[1:len(payload) - payload[0]]
        if flags & PRIORITY:
            payload = payload[5:]
        block, end_stream, more = bytearray(payload), flags & END_STREAM, not flags & END_HEADERS
        while more:                         # CONTINUATION frames carry the rest of the block
            head = self._recv_exactly(9)
            more = not head[4] & END_HEADERS
            block += self._recv_exactly(int.from_bytes(head[:3], "big"))
            if len(block) > HEADER_BLOCK_MAX_BYTES:
                raise GrpcFailed(f"a header block of more than {HEADER_BLOCK_MAX_BYTES >> 10} KiB")
        headers = self._decode(bytes(block))
        if stream == self._stream:
            self._answer.update(headers)
            if end_stream or "grpc-status" in self._answer:
                self._ended = True

    def _decode(self, block: bytes) -> list[tuple[str, str]]:
        """HPACK-decode a header block, every block in order (the table follows the server's).

        After the first answer the server sends the same headers as one-byte references to
        its table, and a block made only of those (every byte >= 0x80: "indexed field")
        changes nothing, so its meaning is kept until a block that does change the table
        comes — the decoder is the costliest step of a call otherwise. An index of 127 or
        more takes further bytes, the last of them < 0x80, so a block with every byte
        >= 0x80 that decoded is one-byte indices only.
        """
        known = self._known_blocks.get(block)
        if known is not None:
            return known
        headers = self._decoder.decode(block, raw=False)
        if block and min(block) >= 0x80:
            self._known_blocks[block] = headers
        else:
            self._known_blocks.clear()
        return headers

    def _on_settings(self, payload: bytes) -> None:
        for offset in range(0, len(payload) - 5, 6):
            key, value = struct.unpack_from(">HI", payload, offset)
            if key == SETTINGS_INITIAL_WINDOW_SIZE:
                self._stream_window += value - self._stream_initial
                self._stream_initial = value
            elif key == SETTINGS_MAX_FRAME_SIZE:
                self._max_frame = value
        self._sock.sendall(_frame(SETTINGS, ACK, 0))

    def _check(self, answer: dict[str, str]) -> None:
        if answer.get(":status", "200") != "200":
            raise GrpcFailed(f"HTTP {answer[':status']}")
        status = answer.get("grpc-status")
        if status is None:
            raise GrpcFailed("no grpc-status in the answer")
        if status != "0":
            code = int(status) if status.isdigit() else -1
            name = self._names.get(code, f"status {status}")
            message = unquote(answer.get("grpc-message", ""))
            raise GrpcFailed(f"{name}: {message}" if message else name, code=code)
