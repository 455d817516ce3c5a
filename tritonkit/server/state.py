"""The deployment state kept inside a model repository (``DIR/.tritonkit/``).

``deploy`` writes it; ``down``, ``warmup`` and ``loadtest`` read it to find the server,
its URLs and the secret header for the restricted model-repository API. The secret
lives in its own 0600 file and is never printed in full.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tritonkit.errors import UsageError
from tritonkit.fileio import atomic_write

STATE_DIRNAME = ".tritonkit"
STATE_FILENAME = "server.json"
SECRET_FILENAME = "secret"


def state_dir(repository: Path) -> Path:
    return Path(repository) / STATE_DIRNAME


@dataclass(frozen=True)
class Deployment:
    """A running deployment: where it is, how to reach it, how to stop it."""

    target: str                      # "local" | "compose" | "k8s"
    repository: str                  # absolute path of the model repository
    host: str                        # the address clients connect to
    http_port: int
    grpc_port: int
    metrics_port: int
    secret_header: str
    models: list[str]
    started_at: float
    pid: int | None = None           # local target: the tritonserver process
    log_path: str | None = None
    argv: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def http_url(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    def secret(self) -> str:
        """The secret header's value, read from its 0600 file."""
        return read_secret(Path(self.repository))

    def repository_headers(self) -> dict[str, str]:
        """Headers that the restricted model-repository API requires."""
        return {self.secret_header: self.secret()}


def new_secret(repository: Path) -> str:
    """Generate a deployment secret and store it 0600 beside the state."""
    value = secrets.token_urlsafe(24)
    atomic_write(state_dir(repository) / SECRET_FILENAME, value + "\n", mode=0o600)
    return value


def read_secret(repository: Path) -> str:
    path = state_dir(repository) / SECRET_FILENAME
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        raise UsageError(f"no deployment secret in {path.parent}",
                         hint="deploy with 'tritonkit deploy' first") from None


def save_deployment(deployment: Deployment) -> Path:
    path = state_dir(Path(deployment.repository)) / STATE_FILENAME
    return atomic_write(path, json.dumps(asdict(deployment), indent=2) + "\n")


def load_deployment(repository: Path) -> Deployment:
    """The deployment recorded in ``repository``; UsageError if there is none."""
    path = state_dir(Path(repository)) / STATE_FILENAME
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"no deployment recorded in {repository}",
                         hint=f"start one: tritonkit deploy --repository {repository}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"deployment state {path} is corrupt ({exc})",
                         hint="stop the server by hand and delete the file") from None
    return Deployment(**data)


def clear_deployment(repository: Path) -> None:
    (state_dir(Path(repository)) / STATE_FILENAME).unlink(missing_ok=True)


def mask(secret: str) -> str:
    """A secret as it may be shown: its first four characters only."""
    return secret[:4] + "…" if secret else ""
