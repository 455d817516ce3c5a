"""Deploying a model repository: the targets behind `tritonkit deploy` / `tritonkit down`."""

from __future__ import annotations

from pathlib import Path

from tritonkit.repository import model_names
from tritonkit.server.local import start_local, stop_local
from tritonkit.server.settings import Ports, load_server_settings
from tritonkit.server.state import Deployment, load_deployment


def deploy_local(repository: Path, *, http_port: int = 8000, grpc_port: int = 8001,
                 metrics_port: int = 8002, server_config: Path | None = None,
                 timeout: float = 120.0) -> Deployment:
    """Start the embedded Triton on loopback with every model of ``repository`` READY."""
    models = model_names(repository)
    settings = load_server_settings(server_config)
    return start_local(Path(repository), settings,
                       ports=Ports(http=http_port, grpc=grpc_port, metrics=metrics_port),
                       models=models, timeout=timeout)


def down(repository: Path, *, timeout: float = 40.0) -> bool:
    """Stop whatever deployment is recorded for ``repository``; True if one was running."""
    deployment = load_deployment(repository)
    return stop_local(deployment, timeout=timeout)
