"""Reaching a Triton server: where it is, the secret header, inputs from a model's config.

A tritonclient client object is not thread-safe: make one per worker with
``Endpoint.http()`` / ``Endpoint.grpc()``. The HTTP client checks every answer tritonkit
reads against the shape Triton gives it (``tritonkit.answers``): a server that is not
Triton is said to be so in one line (``NotTriton``), wherever it is first asked.
"""

from __future__ import annotations

import http.client
import math
import os
import re
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np

from tritonkit import answers
from tritonkit.errors import Interrupted, UsageError
from tritonkit.fileio import read_user_text
from tritonkit.server.state import Deployment, check_secret, load_deployment

if TYPE_CHECKING:
    from tritonkit.deadline import Deadline

#: The restricted model-repository API's secret for a server that no state here records
#: (a Kubernetes Service, say); ``--secret-file`` takes precedence.
SECRET_ENV = "TRITONKIT_REPOSITORY_SECRET"


@dataclass(frozen=True)
class Endpoint:
    """A server's addresses and the headers its restricted model-repository API needs."""

    http_url: str                               # host:port
    grpc_url: str | None = None
    metrics_url: str | None = None
    repository_headers: dict[str, str] = field(default_factory=dict)
    # The server's log, where it is a file here (a recorded local deployment's): hints name it.
    log_path: str | None = None

    def __post_init__(self) -> None:
        # Every source checks its secret and names itself; this is the last guard before
        # a request: a header line of our own must never be split into two.
        for name, value in self.repository_headers.items():
            if not _HEADER_NAME.fullmatch(name):
                raise UsageError(f"the secret header's name {name!r} is not an HTTP header name",
                                 hint="set restricted_api.header in the server settings to "
                                      "letters, digits and '-' (e.g. tritonkit-repository-key)")
            check_secret(value, f"the header {name}")

    @classmethod
    def from_deployment(cls, deployment: Deployment) -> "Endpoint":
        return cls(http_url=deployment.http_url, grpc_url=deployment.grpc_url,
                   metrics_url=deployment.metrics_url,
                   repository_headers=deployment.repository_headers(),
                   log_path=deployment.log_path)

    def http(self, **kwargs: Any) -> "TritonHttp":
        import tritonclient.http as httpclient

        _interrupts_pass_through_gevent()
        client = _made(httpclient.InferenceServerClient, self.http_url, **kwargs)
        # A request as a whole within its network timeout (tritonclient's default: 60 s),
        # as a peer that says nothing ends it
        return TritonHttp(client, self.http_url, kwargs.get("network_timeout", 60.0))

    def grpc(self, **kwargs: Any):
        if not self.grpc_url:
            raise UsageError("no gRPC address known for this server",
                             hint="pass --grpc-url HOST:PORT with --url, or use --protocol http")
        import tritonclient.grpc as grpcclient

        if "channel_args" not in kwargs:
            kwargs["channel_args"] = _grpc_channel_args(grpcclient)
        return _made(grpcclient.InferenceServerClient, self.grpc_url, **kwargs)


def _grpc_channel_args(grpcclient: Any) -> list[tuple[str, int]]:
    """tritonclient's channel options (it takes them all or none), with an answer bounded
    as an HTTP one is: its own let a peer send 2 GiB, which would be read whole into memory."""
    keepalive = grpcclient.KeepAliveOptions()
    return [
        ("grpc.max_send_message_length", grpcclient.MAX_GRPC_MESSAGE_SIZE),
        ("grpc.max_receive_message_length", answers.INFER_ANSWER_MAX_BYTES),
        ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", keepalive.keepalive_permit_without_calls),
        ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
    ]


class _HalfMade:
    """What a client whose ``__init__`` was cut short becomes: tritonclient's ``__del__``
    would read attributes never set and print a traceback after our one-line error."""


def _made(cls: type, *args: Any, **kwargs: Any) -> Any:
    """``cls(*args, **kwargs)``, where Ctrl-C (or any error) in the middle of ``__init__``
    closes what it had opened and leaves nothing that complains when collected."""
    client = cls.__new__(cls)
    try:
        client.__init__(*args, **kwargs)
    except BaseException:
        parts = vars(client)
        client.__class__ = _HalfMade
        for name in ("_client_stub", "_channel"):   # HTTP's connection pool, gRPC's channel
            if (part := parts.get(name)) is not None:
                try:
                    part.close()
                except Exception:   # closing what never connected: nothing to lose
                    pass
        raise
    return client


def _interrupts_pass_through_gevent() -> None:
    """Ctrl-C (``Interrupted``) while a request waits is raised in gevent's hub, which the
    HTTP client waits in: gevent would print it as a traceback of its own, and one raised
    in a callback would not reach the command at all. Said as a system error, as gevent
    says KeyboardInterrupt: passed to the waiting code, not printed."""
    from gevent.hub import Hub

    if not issubclass(Interrupted, Hub.SYSTEM_ERROR):
        Hub.SYSTEM_ERROR = (*Hub.SYSTEM_ERROR, Interrupted)
        Hub.NOT_ERROR = (*Hub.NOT_ERROR, Interrupted)


def resolve_endpoint(repository: Path | None = None, url: str | None = None,
                     grpc_url: str | None = None, secret: str | None = None,
                     secret_header: str | None = None) -> Endpoint:
    """The server to talk to: ``--url`` if given, else the deployment recorded in ``repository``.

    The restricted API's secret: ``secret`` if given, else (with ``--url``) the
    ``TRITONKIT_REPOSITORY_SECRET`` environment variable, else the deployment's own.
    ``secret_header`` defaults to the recorded deployment's header name, else the server
    settings'.
    """
    if grpc_url and not url:
        raise UsageError("--grpc-url goes with --url (a recorded deployment has its own gRPC "
                         "port, which would be used instead)",
                         hint="pass --url HOST:PORT --grpc-url HOST:PORT, or only --repository")
    if url and not secret:
        secret = os.environ.get(SECRET_ENV, "").strip() or None
        if secret:
            check_secret(secret, f"${SECRET_ENV}")
    if secret:
        if not secret_header and repository is not None:
            try:   # the header the recorded deployment's server was started with
                secret_header = load_deployment(repository).secret_header or None
            except UsageError:
                pass
        if not secret_header:
            from tritonkit.server.settings import load_server_settings

            secret_header = load_server_settings().restricted_api.header
        headers = {secret_header: secret}
    if url:
        url = check_address(url.removeprefix("http://"), "--url")
        if grpc_url:
            check_address(grpc_url, "--grpc-url")
        if not secret:
            headers = {}
            if repository is not None:
                try:
                    headers = load_deployment(repository).repository_headers()
                except UsageError:
                    pass
        return Endpoint(http_url=url, grpc_url=grpc_url, repository_headers=headers)
    if repository is None:
        raise UsageError("no server given", hint="pass --repository DIR (of a deployment) or --url host:port")
    endpoint = Endpoint.from_deployment(load_deployment(repository))
    return replace(endpoint, repository_headers=headers) if secret else endpoint


def server_version(endpoint: Endpoint) -> str | None:
    """The server's version as its metadata says it (Triton's, e.g. "2.51.0"); None when
    it does not say (a server that is no Triton, or did not answer)."""
    client = endpoint.http(connection_timeout=2.0, network_timeout=2.0)
    try:
        version = client.get_server_metadata().get("version")
    except Exception:       # context for a report only: the run says what is wrong with the server
        return None
    finally:
        client.close()
    return str(version) if version else None


class TritonHttp:
    """tritonclient's HTTP client, each answer tritonkit reads checked against the shape
    Triton gives it (``tritonkit.answers``) before anyone reads it: NotTriton when it has
    another. The same names as tritonclient's; what it does not check passes through."""

    def __init__(self, client: Any, server: str, timeout: float = 60.0) -> None:
        self._client = client
        self.server = server            # host:port, as errors name it
        # A request's whole time: tritonclient's timeouts are per socket read, which a peer
        # sending a byte at a time keeps from ever passing.
        self.timeout = timeout
        client._client_stub = _BoundedStub(client._client_stub, server)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def close(self) -> None:
        # Requests sent together (async_infer) that are still reading when one's deadline
        # ended the wait: ended here, where tritonclient's close would wait for them (at a
        # peer that trickles its answer, for ever).
        pool = getattr(self._client, "_pool", None)
        if pool is not None:
            pool.kill(block=True, timeout=5.0)
        self._client.close()

    def get_server_metadata(self, *args: Any, **kwargs: Any) -> dict:
        return answers.check_server_metadata(
            self._asked("GET /v2", self._client.get_server_metadata, *args, **kwargs), self.server)

    def get_model_metadata(self, model_name: str, *args: Any, **kwargs: Any) -> dict:
        return self._checked(f"its metadata of model '{model_name}'", answers.MODEL_METADATA,
                             f"GET /v2/models/{model_name}", self._client.get_model_metadata,
                             model_name, *args, **kwargs)

    def get_model_config(self, model_name: str, *args: Any, **kwargs: Any) -> dict:
        return self._checked(f"its config of model '{model_name}'", answers.MODEL_CONFIG,
                             f"GET /v2/models/{model_name}/config", self._client.get_model_config,
                             model_name, *args, **kwargs)

    def get_inference_statistics(self, *args: Any, **kwargs: Any) -> dict:
        return self._checked("its inference statistics", answers.STATISTICS, "GET .../stats",
                             self._client.get_inference_statistics, *args, **kwargs)

    def get_model_repository_index(self, *args: Any, **kwargs: Any) -> list:
        return self._checked("its model-repository index", answers.REPOSITORY_INDEX,
                             "POST /v2/repository/index",
                             self._client.get_model_repository_index, *args, **kwargs)

    def is_server_live(self, headers: dict | None = None, query_params: dict | None = None) -> bool:
        return self._ready("v2/health/live", headers, query_params)

    def is_server_ready(self, headers: dict | None = None, query_params: dict | None = None) -> bool:
        return self._ready("v2/health/ready", headers, query_params)

    def is_model_ready(self, model_name: str, model_version: str = "",
                       headers: dict | None = None, query_params: dict | None = None) -> bool:
        from urllib.parse import quote

        version = f"/versions/{model_version}" if model_version else ""
        return self._ready(f"v2/models/{quote(model_name)}{version}/ready", headers, query_params)

    def infer(self, model_name: str, *args: Any, **kwargs: Any) -> Any:
        request = f"POST /v2/models/{model_name}/infer"
        return self._inferred(self._asked(request, self._client.infer, model_name, *args,
                                          **kwargs), request)

    def async_infer(self, model_name: str, *args: Any, **kwargs: Any) -> Any:
        checked = self
        request = self._client.async_infer(model_name, *args, **kwargs)
        said = f"POST /v2/models/{model_name}/infer"

        class _Checked:
            def get_result(self, *a: Any, **k: Any) -> Any:
                return checked._inferred(checked._asked(said, request.get_result, *a, **k), said)

        return _Checked()

    def _inferred(self, result: Any, request: str) -> Any:
        answers.expect(result.get_response(), answers.INFER_RESPONSE,
                       what=f"its answer to {request}", server=self.server)
        return result

    def _checked(self, what: str, shape: Any, request: str, call: Callable, *args: Any,
                 **kwargs: Any) -> Any:
        return answers.expect(self._asked(request, call, *args, **kwargs), shape, what=what,
                              server=self.server)

    def _asked(self, request: str, call: Callable, *args: Any, **kwargs: Any) -> Any:
        """``call``'s answer; NotTriton where it is no JSON, or an error answer is not
        Triton's (``{"error": "..."}``)."""
        from tritonclient.utils import InferenceServerException

        try:
            with _deadline(self.timeout):
                return call(*args, **kwargs)
        except InferenceServerException as exc:
            if triton_message(exc).startswith(_UNDECODABLE):
                raise answers.not_triton(self.server, f"its HTTP {exc.status()} answer to "
                                         f"{request} is not Triton's error JSON") from None
            raise
        except ValueError:      # rapidjson's JSONDecodeError, UnicodeDecodeError
            raise answers.not_triton(self.server, f"its answer to {request} is not JSON") from None
        except http.client.HTTPException as exc:
            raise self._unparsed(exc, request) from None

    def _ready(self, uri: str, headers: dict | None, query_params: dict | None) -> bool:
        """Triton answers a readiness check with 200 and no body when ready."""
        try:
            with _deadline(self.timeout):
                response = self._client._get(request_uri=uri, headers=headers,
                                             query_params=query_params)
                body = response.read()
        except http.client.HTTPException as exc:
            raise self._unparsed(exc, f"GET /{uri}") from None
        if response.status_code == 200 and body.strip():
            raise answers.not_triton(self.server, f"it answers GET /{uri} with a body, where "
                                     "Triton's is empty")
        if response.status_code == 404 and uri.startswith("v2/health/"):
            raise answers.not_triton(self.server, f"it has no /{uri} (HTTP 404)")
        return response.status_code == 200

    def _unparsed(self, exc: http.client.HTTPException, request: str) -> Exception:
        """NotTriton where geventhttpclient's parser could not read the answer to ``request``
        as HTTP/1.x (a gRPC port answers HTTP/2): asked once more by ``health``, whose reader
        keeps the first bytes, it is said what the peer speaks. Else ``exc`` (a connection
        closed half-way: the server went away)."""
        from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError

        if not isinstance(exc, HTTPParseError) or isinstance(exc, HTTPConnectionClosed) \
                or len(exc.args) != 2:          # the parser's own: (what it expected, where)
            return exc
        health(self.server, timeout=min(self.timeout, 2.0))     # NotTriton, saying what it is
        return answers.not_triton(self.server, f"its answer to {request} is not HTTP/1.x "
                                  f"({exc.args[0]})")


def _deadline(seconds: float):
    """A whole request within ``seconds``, else TimeoutError("timed out"): the same error as
    a peer that says nothing, for one that trickles its answer a byte at a time."""
    import gevent

    return gevent.Timeout(seconds, TimeoutError("timed out"))


class _BoundedStub:
    """geventhttpclient's client as tritonclient uses it, each answer read with a bound
    (``answers.ANSWER_MAX_BYTES``; an inference answer's ``INFER_ANSWER_MAX_BYTES``):
    a peer that announces or sends more is not Triton, never a MemoryError."""

    def __init__(self, stub: Any, server: str) -> None:
        self._stub, self._server = stub, server

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stub, name)

    def get(self, request_uri: str, headers: dict | None = None) -> "_BoundedAnswer":
        return self._bounded("GET", request_uri, self._stub.get(request_uri, headers=headers or {}))

    def post(self, request_uri: str, body: Any = "", headers: dict | None = None) -> "_BoundedAnswer":
        return self._bounded("POST", request_uri,
                             self._stub.post(request_uri, body=body, headers=headers))

    def _bounded(self, method: str, uri: str, response: Any) -> "_BoundedAnswer":
        path = uri.split("?", 1)[0]
        limit = (answers.INFER_ANSWER_MAX_BYTES if path.endswith("/infer")
                 else answers.ANSWER_MAX_BYTES)
        return _BoundedAnswer(response, limit, self._server, f"{method} /{path.lstrip('/')}")


class _BoundedAnswer:
    def __init__(self, response: Any, limit: int, server: str, request: str) -> None:
        self._response, self._limit, self._server, self._request = response, limit, server, request

    def __getattr__(self, name: str) -> Any:
        return getattr(self._response, name)

    def read(self, length: int | None = None) -> bytes:
        response = self._response
        if length is not None:
            return response.read(length)
        announced = response.get("content-length")
        if announced is not None and announced.strip().isdigit() and int(announced) > self._limit:
            _drop(response)
            raise answers.too_large(self._server, self._request, self._limit)
        body = bytearray()
        while True:
            block = response.read(1 << 20)
            if not block:
                return bytes(body)
            body += block
            if len(body) > self._limit:
                _drop(response)
                raise answers.too_large(self._server, self._request, self._limit)


def _drop(response: Any) -> None:
    """Close a half-read answer's connection: it must never go back to the pool."""
    sock, pool = getattr(response, "_sock", None), getattr(response, "_pool", None)
    response._sock = None
    if sock is not None and pool is not None:
        pool.release_socket(sock)


# How tritonclient says an error answer was not the JSON it expects.
_UNDECODABLE = "an exception occurred in the client while decoding the response"


# A host name or IPv4 address, or an IPv6 address in brackets (a zone after '%').
_HOST = re.compile(r"[A-Za-z0-9_.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}(%[A-Za-z0-9_.-]{1,64})?\]")


def check_address(address: str, flag: str) -> str:
    """``address`` if it is HOST:PORT (a host name or address, an IPv6 host in brackets;
    a port 1-65535; one trailing slash allowed), else a UsageError naming ``flag``.
    A space or a control character in the host is refused here: the client libraries
    refuse it only at the request, which a wait for the server would retry for minutes."""
    address = address.removesuffix("/")
    host, _, port = address.rpartition(":")
    if not _HOST.fullmatch(host) or not port.isascii() or not port.isdigit() \
            or not 0 < int(port) < 65536:
        raise UsageError(f"{flag} {address!r} is not HOST:PORT",
                         hint=f"e.g. {flag} 127.0.0.1:8000")
    return address


#: A secret file holds one token; a larger file is not one.
SECRET_FILE_MAX_BYTES = 64 << 10
# RFC 9110's token: what an HTTP header's name may be made of.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}")


def read_secret_file(path: Path) -> str:
    """The secret in ``path`` (its first line, stripped), checked as a header value; a
    UsageError naming the file if there is none, or the file is no regular UTF-8 file of
    at most ``SECRET_FILE_MAX_BYTES``."""
    text = read_user_text(path, what="the secret file", limit=SECRET_FILE_MAX_BYTES,
                          hint="pass --secret-file with a file that holds the server's secret")
    lines = text.strip().splitlines()
    if not lines or not lines[0].strip():
        raise UsageError(f"the secret file {path} is empty",
                         hint="write the server's secret into it (e.g. from its Kubernetes Secret)")
    return check_secret(lines[0].strip(), f"the secret file {path}")


def triton_message(exc: Exception) -> str:
    """Triton's own message from a tritonclient exception."""
    message = getattr(exc, "message", None)
    text = message() if callable(message) else str(exc)
    return text.strip() if text else exc.__class__.__name__


def split_message(text: str) -> tuple[str, str | None]:
    """A server message's first line, and the rest (a python-backend model's traceback:
    "At:" and its frames) or None: errors show the first, the debug variable the rest."""
    first, _, rest = text.strip().partition("\n")
    return first.strip(), rest.strip() or None


def health(http_url: str, path: str = "/v2/health/live", timeout: float = 1.0) -> str | None:
    """None if ``GET http://<http_url><path>`` answers 200 within ``timeout`` seconds, else
    why not, in a few words; NotTriton if the answer is none Triton gives (a body with its
    200, a 404 for its health endpoints).

    Every poll of a server's health goes through here. It goes straight to the server,
    past any HTTP(S)_PROXY in the environment (a proxy would answer for a server on
    127.0.0.1, or not at all), on a connection of its own that is closed at once: one left
    open holds a stopping Triton for its exit timeout.
    """
    url = f"http://{http_url.removeprefix('http://')}{path}"
    server = http_url.removeprefix("http://")
    try:
        with open_direct(url, timeout=max(timeout, 0.05)) as response:
            if response.status == 200 and response.read(64).strip():
                raise answers.not_triton(server, f"it answers GET {path} with a body, where "
                                         "Triton's is empty")
            return None if response.status == 200 else f"HTTP {response.status} from {path}"
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 404 and path.startswith("/v2/health/"):
            raise answers.not_triton(server, f"it has no {path} (HTTP 404)") from None
        return f"HTTP {exc.code} from {path}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return str(getattr(reason, "strerror", None) or reason or exc.__class__.__name__)
    except (http.client.HTTPException, ValueError) as exc:   # not HTTP there, or a bad address
        if (answer := first_answer(exc)) is not None:
            raise answers.not_http1(server, answer) from None
        return f"{exc.__class__.__name__}: {exc}" if str(exc) else exc.__class__.__name__


def first_answer(exc: Exception) -> bytes | None:
    """The first bytes of an answer http.client could not read as HTTP/1.x (its status line,
    or the version in it); None for any other error (a connection closed half-way, or an
    empty status line: a server going away, which BadStatusLine writes as ``''``)."""
    if isinstance(exc, (http.client.BadStatusLine, http.client.UnknownProtocol)) \
            and not isinstance(exc, ConnectionError) and exc.args \
            and str(exc.args[0]) not in ("", "''"):
        return str(exc.args[0]).encode("latin-1", errors="replace")
    return None


class _DeadlineSocket(socket.socket):
    """A socket whose every read waits only for what is left of ``deadline`` (monotonic):
    a peer that trickles its answer ends as one that says nothing, within the timeout."""

    deadline = float("inf")

    def _wait_left(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        self.settimeout(left)

    def recv_into(self, *args: Any) -> int:
        self._wait_left()
        return super().recv_into(*args)

    def recv(self, *args: Any) -> bytes:
        self._wait_left()
        return super().recv(*args)


class _DeadlineConnection(http.client.HTTPConnection):
    """An HTTP connection whose request, headers and body alike, ends within its timeout."""

    def connect(self) -> None:
        deadline = time.monotonic() + (self.timeout if isinstance(self.timeout, (int, float))
                                       else 60.0)
        super().connect()
        plain = self.sock
        self.sock = _DeadlineSocket(plain.family, plain.type, plain.proto, fileno=plain.detach())
        self.sock.deadline = deadline


class _DeadlineHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request):
        return self.do_open(_DeadlineConnection, req)


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}), _DeadlineHandler)


def open_direct(url: str | urllib.request.Request, timeout: float):
    """``urllib.request.urlopen`` that ignores ``http_proxy``: Triton's ports are reached
    directly, as tritonclient reaches them. A corporate or CI proxy would otherwise answer
    for the server (refused, or its own error page). The whole request, its answer read
    to the end included, is given ``timeout`` seconds, not each read."""
    return _DIRECT.open(url, timeout=timeout)


def wait_until(check: Callable[[], str | None], deadline: "Deadline",
               first_delay: float = 0.05, max_delay: float = 1.0) -> str | None:
    """Call ``check`` until it says None (→ None) or ``deadline`` passes (→ its last word),
    waiting ``first_delay`` seconds after the first miss, twice that after the next, up to
    ``max_delay``. A check may raise to end the wait early (a server process that exited)."""
    delay = first_delay
    while True:
        reason = check()
        if reason is None or deadline.expired():
            return reason
        time.sleep(min(delay, deadline.left()))
        delay = min(delay * 2, max_delay)


# The most one input tensor made up to send may hold: what an answer may (answers.py).
EXAMPLE_INPUT_MAX_BYTES = 1 << 30


def example_input(datatype: str, shape: list[int], rng: np.random.Generator,
                  name: str = "the input") -> np.ndarray:
    """A realistic random tensor for a Triton datatype and a concrete shape; a UsageError
    for one larger than EXAMPLE_INPUT_MAX_BYTES (a config's dims of 10^11, say), which
    would otherwise be a MemoryError, or the host's memory gone."""
    from tritonclient.utils import triton_to_np_dtype

    itemsize = 9 if datatype == "BYTES" else np.dtype(triton_to_np_dtype(datatype)).itemsize
    size = math.prod(shape) * itemsize
    if size > EXAMPLE_INPUT_MAX_BYTES:
        raise UsageError(f"{name} of shape {list(shape)} ({datatype}) would be "
                         f"{size / (1 << 30):,.0f} GiB in one request, more than the "
                         f"{EXAMPLE_INPUT_MAX_BYTES >> 30} GiB tritonkit sends",
                         hint="check its dims and max_batch_size in the model's config.pbtxt")
    if datatype == "BYTES":
        return np.array([b"tritonkit"] * int(np.prod(shape)), dtype=object).reshape(shape)
    dtype = np.dtype(triton_to_np_dtype(datatype))
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        # Integer inputs are often indices (token ids) or masks: 0 and 1 are valid for any
        # vocabulary, larger random values are not.
        return rng.integers(0, 2, size=shape).astype(dtype)
    return rng.standard_normal(size=shape).astype(dtype)


def infer_inputs(protocol: Any, tensors: Iterable[tuple[str, str, np.ndarray]]) -> list:
    """tritonclient's InferInput of ``protocol`` (``tritonclient.http`` or ``.grpc``, the
    same names in both) for each (name, Triton datatype, array), the array's data set (HTTP:
    as binary data)."""
    inputs = []
    for name, datatype, data in tensors:
        tensor = protocol.InferInput(name, list(data.shape), datatype)
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    return inputs
