"""Reaching a Triton server: where it is, the secret header, inputs from a model's config.

A tritonclient client object is not thread-safe: make one per worker with
``Endpoint.http()`` / ``Endpoint.grpc()``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from tritonkit.errors import ServerError, UsageError
from tritonkit.server.state import Deployment, load_deployment

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

    @classmethod
    def from_deployment(cls, deployment: Deployment) -> "Endpoint":
        return cls(http_url=deployment.http_url, grpc_url=deployment.grpc_url,
                   metrics_url=deployment.metrics_url,
                   repository_headers=deployment.repository_headers())

    def http(self, **kwargs: Any):
        import tritonclient.http as httpclient

        return httpclient.InferenceServerClient(self.http_url, **kwargs)

    def grpc(self, **kwargs: Any):
        if not self.grpc_url:
            raise UsageError("no gRPC address known for this server",
                             hint="pass --grpc-url host:port, or use --protocol http")
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
    if url and not secret:
        secret = os.environ.get(SECRET_ENV, "").strip() or None
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
        url = url.removeprefix("http://")
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


def read_secret_file(path: Path) -> str:
    """The secret in ``path`` (its first line, stripped); a UsageError if there is none."""
    try:
        lines = Path(path).read_text().strip().splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read the secret file {path} ({exc.strerror or exc})",
                         hint="pass --secret-file with a file that holds the server's secret") from None
    if not lines or not lines[0].strip():
        raise UsageError(f"the secret file {path} is empty",
                         hint="write the server's secret into it (e.g. from its Kubernetes Secret)")
    return lines[0].strip()


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


def check_live(endpoint: Endpoint) -> None:
    """Raise a ServerError if the server does not answer /v2/health/live."""
    client = endpoint.http()
    try:
        if client.is_server_live():
            return
    except Exception as exc:  # tritonclient raises several transport errors
        raise ServerError(f"no Triton server answers at {endpoint.http_url} ({triton_message(exc)})",
                          hint="start one: tritonkit deploy --repository DIR") from None
    finally:
        client.close()      # an open connection holds a stopping Triton for its exit timeout
    raise ServerError(f"the Triton server at {endpoint.http_url} is not live",
                      hint="check its log")


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
