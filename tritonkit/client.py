"""Reaching a Triton server: where it is, the secret header, inputs from a model's config.

A tritonclient client object is not thread-safe: make one per worker with
``Endpoint.http()`` / ``Endpoint.grpc()``.
"""

from __future__ import annotations

import http.client
import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np

from tritonkit.errors import UsageError
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

    def http(self, **kwargs: Any):
        import tritonclient.http as httpclient

        return httpclient.InferenceServerClient(self.http_url, **kwargs)

    def grpc(self, **kwargs: Any):
        if not self.grpc_url:
            raise UsageError("no gRPC address known for this server",
                             hint="pass --grpc-url HOST:PORT with --url, or use --protocol http")
        import tritonclient.grpc as grpcclient

        return grpcclient.InferenceServerClient(self.grpc_url, **kwargs)


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


def check_address(address: str, flag: str) -> str:
    """``address`` if it is HOST:PORT (a port 1-65535; an IPv6 host in brackets, one
    trailing slash allowed), else a UsageError naming ``flag``."""
    address = address.removesuffix("/")
    host, _, port = address.rpartition(":")
    bare_ipv6 = ":" in host and not (host.startswith("[") and host.endswith("]"))
    if not host or bare_ipv6 or not port.isdigit() or not 0 < int(port) < 65536 or "/" in address:
        raise UsageError(f"{flag} {address} is not HOST:PORT",
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
    why not, in a few words.

    Every poll of a server's health goes through here. It goes straight to the server,
    past any HTTP(S)_PROXY in the environment (a proxy would answer for a server on
    127.0.0.1, or not at all), on a connection of its own that is closed at once: one left
    open holds a stopping Triton for its exit timeout.
    """
    url = f"http://{http_url.removeprefix('http://')}{path}"
    try:
        with open_direct(url, timeout=max(timeout, 0.05)) as response:
            return None if response.status == 200 else f"HTTP {response.status} from {path}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code} from {path}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return str(getattr(reason, "strerror", None) or reason or exc.__class__.__name__)
    except (http.client.HTTPException, ValueError) as exc:   # not HTTP there, or a bad address
        return f"{exc.__class__.__name__}: {exc}" if str(exc) else exc.__class__.__name__


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def open_direct(url: str, timeout: float):
    """``urllib.request.urlopen`` that ignores ``http_proxy``: Triton's ports are reached
    directly, as tritonclient reaches them. A corporate or CI proxy would otherwise answer
    for the server (refused, or its own error page)."""
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


def example_input(datatype: str, shape: list[int], rng: np.random.Generator) -> np.ndarray:
    """A realistic random tensor for a Triton datatype and a concrete shape."""
    from tritonclient.utils import triton_to_np_dtype

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
