"""`tritonkit deploy` and `tritonkit down`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tritonkit.cli import app
from tritonkit.cli.options import Repository, Timeout, console
from tritonkit.errors import NotBuiltError, UsageError
from tritonkit import deploy as deploy_lib
from tritonkit.server.state import mask

TARGETS = ("local", "compose", "k8s")


@app.command(epilog="Example: tritonkit deploy --target local --repository model_repository")
def deploy(
    repository: Repository = Path("model_repository"),
    target: Annotated[str, typer.Option(help="local (embedded tritonserver), compose or k8s.")] = "local",
    http_port: Annotated[int, typer.Option(help="HTTP port (0 picks a free one).", min=0, max=65535)] = 8000,
    grpc_port: Annotated[int, typer.Option(help="gRPC port (0 picks a free one).", min=0, max=65535)] = 8001,
    metrics_port: Annotated[int, typer.Option(help="Metrics port (0 picks a free one).", min=0, max=65535)] = 8002,
    server_config: Annotated[Optional[Path], typer.Option(help="Server settings TOML (default configs/server.toml).")] = None,
    timeout: Timeout = 120.0,
) -> None:
    """Start Triton for a model repository, load every model and wait until each is READY."""
    if target not in TARGETS:
        raise UsageError(f"unknown target '{target}'", hint=f"use one of: {', '.join(TARGETS)}")
    if target != "local":
        raise NotBuiltError(f"tritonkit deploy --target {target} is not built yet",
                            hint="use --target local (the embedded Triton) for now")
    deployment = deploy_lib.deploy_local(
        repository, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port,
        server_config=server_config, timeout=timeout)
    console.print(f"[green]Triton is up[/green] ({deployment.target}, pid {deployment.pid}), "
                  f"models READY: {', '.join(deployment.models)}")
    console.print(f"  HTTP     http://{deployment.http_url}")
    console.print(f"  gRPC     {deployment.grpc_url}")
    console.print(f"  metrics  {deployment.metrics_url}")
    console.print(f"  log      {deployment.log_path}")
    console.print(f"  model-repository API needs header {deployment.secret_header}: "
                  f"{mask(deployment.secret())} (full value in {Path(deployment.repository) / '.tritonkit' / 'secret'})")


@app.command(epilog="Example: tritonkit down --repository model_repository")
def down(
    repository: Repository = Path("model_repository"),
    timeout: Timeout = 40.0,
) -> None:
    """Stop the server deployed for a model repository (SIGINT, bounded wait, then kill)."""
    if deploy_lib.down(repository, timeout=timeout):
        console.print(f"stopped the Triton server for {repository}")
    else:
        console.print(f"no running server for {repository} (state cleared)")
