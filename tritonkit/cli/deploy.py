"""`tritonkit deploy` and `tritonkit down`."""

from __future__ import annotations

import itertools
import shlex
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from tritonkit.cli import app
from tritonkit.cli.options import Repository, Timeout, console, progress_status
from tritonkit.errors import UsageError
from tritonkit import deploy as deploy_lib
from tritonkit.server.compose import STARTUP_S as COMPOSE_STARTUP_S
from tritonkit.server.local import listens_everywhere, signals_interrupt
from tritonkit.server.settings import Ports
from tritonkit.server.state import mask

TARGETS = ("local", "compose", "k8s")
LOCAL_STARTUP_S = 120.0


@app.command(epilog="Example: tritonkit deploy --target local --repository model_repository; "
                     "tritonkit deploy --target compose --gpu p100 --repository model_repository")
def deploy(
    repository: Repository = Path("model_repository"),
    target: Annotated[str, typer.Option(help="local (embedded tritonserver), compose or k8s.")] = "local",
    http_port: Annotated[int, typer.Option(help="HTTP port (0 picks a free one).", min=0, max=65535)] = 8000,
    grpc_port: Annotated[int, typer.Option(help="gRPC port (0 picks a free one).", min=0, max=65535)] = 8001,
    metrics_port: Annotated[int, typer.Option(help="Metrics port (0 picks a free one).", min=0, max=65535)] = 8002,
    server_config: Annotated[Optional[Path], typer.Option(help="Server settings TOML (default configs/server.toml).")] = None,
    gpu: Annotated[Optional[str], typer.Option(help="GPU profile (configs/gpus/<name>.toml): picks each model's configs/<gpu>.pbtxt.")] = None,
    out: Annotated[Path, typer.Option(help="compose/k8s: folder for the generated files (k8s: OUT/k8s/).")] = Path("docker"),
    up: Annotated[bool, typer.Option("--up/--no-up", help="compose: start it after writing the files.")] = True,
    public: Annotated[bool, typer.Option(help="compose: publish the ports on every interface, not only 127.0.0.1.")] = False,
    image: Annotated[Optional[str], typer.Option(help="compose/k8s: Triton image instead of the GPU profile's.")] = None,
    device_ids: Annotated[str, typer.Option(help="compose: GPU device ids to reserve, comma-separated.")] = "0",
    replicas: Annotated[int, typer.Option(help="k8s: replicas, one GPU each.", min=1)] = 1,
    storage_class: Annotated[Optional[str], typer.Option(
        help="k8s: storage class of the model repository's ReadWriteMany claim "
             "(default: the cluster's).")] = None,
    force: Annotated[bool, typer.Option(help="compose/k8s: replace files written before.")] = False,
    warmup: Annotated[bool, typer.Option(
        "--warmup/--no-warmup", help="Warm every model up until its latency is steady (local, compose).")] = True,
    timeout: Annotated[Optional[float], typer.Option(
        help="One deadline in seconds for the whole wait (default: local 120, compose 600 — a "
             "first start on a GPU builds TensorRT engines before Triton answers).",
        min=0.1)] = None,
) -> None:
    """Start Triton for a model repository, load every model, wait until each is READY, warm it up.

    Local: all or nothing — a failure, Ctrl-C, SIGTERM or SIGHUP stops the server again."""
    if target not in TARGETS:
        raise UsageError(f"unknown target '{target}'", hint=f"use one of: {', '.join(TARGETS)}")
    if target == "k8s":
        _print_k8s(deploy_lib.deploy_k8s(repository, gpu=gpu, out=out, image=image, force=force,
                                         replicas=replicas, server_config=server_config,
                                         storage_class=storage_class))
        return
    _refuse_shared_ports({"--http-port": http_port, "--grpc-port": grpc_port,
                          "--metrics-port": metrics_port})
    if timeout is None:
        timeout = float(COMPOSE_STARTUP_S) if target == "compose" else LOCAL_STARTUP_S
    with signals_interrupt(), progress_status(f"deploying {repository}") as progress:
        if target == "compose":
            files, running = deploy_lib.deploy_compose(
                repository, gpu=gpu, out=out, up=up, public=public, image=image, force=force,
                ports=Ports(http=http_port, grpc=grpc_port, metrics=metrics_port),
                device_ids=tuple(d.strip() for d in device_ids.split(",") if d.strip()),
                server_config=server_config, timeout=timeout, warmup=warmup, progress=progress)
        else:
            deployment = deploy_lib.deploy_local(
                repository, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port,
                server_config=server_config, timeout=timeout, gpu=gpu, warmup=warmup,
                progress=progress)
    if target == "compose":
        _print_compose(files, running, repository, gpu)
        return
    console.print(f"[green]Triton is up[/green] ({deployment.target}, pid {deployment.pid}), "
                  f"models READY: {', '.join(deployment.models)}")
    console.print(f"  HTTP     http://{deployment.http_url}")
    console.print(f"  gRPC     {deployment.grpc_url}")
    console.print(f"  metrics  {deployment.metrics_url}")
    console.print(f"  log      {deployment.log_path}")
    bind = deployment.extra.get("bind_address")
    if bind is not None and listens_everywhere(bind):
        console.print(f"  [yellow]listening on every interface[/yellow] (bind_address "
                      f"'{bind}' in the server settings): other hosts can reach it")
    console.print(f"  model-repository API needs header {deployment.secret_header}: "
                  f"{mask(deployment.secret())} (full value in {Path(deployment.repository) / '.tritonkit' / 'secret'})")
    if "warmup" in deployment.extra:
        from tritonkit.cli.warmup import print_warmup  # here: keeps the --help order

        print_warmup(deployment.extra["warmup"], repository)


def _refuse_shared_ports(ports: dict[str, int]) -> None:
    """Two port flags that name one port, said by their flags (0, "pick one", may repeat)."""
    chosen = [(flag, port) for flag, port in ports.items() if port]
    for (first, port), (second, other) in itertools.combinations(chosen, 2):
        if port == other:
            raise UsageError(f"{first} and {second} are both {port}",
                             hint="give each its own port (0 picks a free one)")


def _print_compose(files, running, repository: Path, gpu: str | None) -> None:
    console.print(f"wrote {files.compose_file} and {files.env_file}")
    console.print(f"  model-repository API needs header {files.secret_header}: "
                  f"{mask(files.secret)} (full value in {files.env_file}, 0600)")
    if files.public:
        console.print("  [yellow]ports published on every interface[/yellow] (--public): "
                      "other hosts can reach them")
    if running is None and files.not_started_over:
        redeploy = shlex.join(["tritonkit", "deploy", "--target", "compose", "--gpu", str(gpu),
                               "--repository", str(repository),
                               "--out", str(files.compose_file.parent)])
        console.print(escape(f"  the compose deployment recorded for {repository} keeps running "
                             f"with its old settings until redeployed: {redeploy} (with this "
                             "run's other flags, without --no-up)"),
                      highlight=False, soft_wrap=True)
        return
    if running is None:
        console.print(f"  start it on a GPU host: docker compose -f {files.compose_file} up -d")
        return
    console.print(f"[green]Triton is up[/green] (compose project {files.project}, "
                  f"image {running.extra['image']}), models READY: {', '.join(running.models)}")
    console.print(f"  HTTP     http://{running.http_url}")
    console.print(f"  gRPC     {running.grpc_url}")
    console.print(f"  metrics  {running.metrics_url}")
    if "warmup" in running.extra:
        from tritonkit.cli.warmup import print_warmup  # here: keeps the --help order

        print_warmup(running.extra["warmup"], repository)


def _print_k8s(written) -> None:
    console.print(f"wrote {len(written.files)} manifests to {written.directory} "
                  f"(deployment {written.name}; secret {mask(written.secret)} in secret.yaml, 0600)")
    if written.secret_kept:
        said = ("the secret of the secret.yaml written before, kept: replicas and clients "
                "that hold it keep working")
    elif written.secret_replaced:
        said = (f"a new secret (the secret.yaml there {written.secret_replaced}): replicas "
                f"running with the old one need kubectl rollout restart "
                f"deployment/{written.name} after kubectl apply -k")
    else:
        said = "a new secret (no secret.yaml there before)"
    console.print(f"  {escape(said)}", highlight=False, soft_wrap=True)
    console.print(f"  copy the model repository into the claim {written.claim} "
                  "(ReadWriteMany), then start the replicas:", highlight=False)
    for command in written.fill_commands:
        console.print(f"    {escape(command)}", highlight=False, soft_wrap=True)


@app.command(epilog="Example: tritonkit down --repository model_repository")
def down(
    repository: Repository = Path("model_repository"),
    timeout: Timeout = 40.0,
) -> None:
    """Stop the server deployed for a model repository (local: SIGINT, bounded wait, then
    kill; compose: docker compose down)."""
    with progress_status(f"stopping the server for {repository}") as progress:
        stopped = deploy_lib.down(repository, timeout=timeout, progress=progress)
    if stopped is None:
        console.print(f"nothing to stop for {repository}: no deployment recorded", soft_wrap=True, highlight=False)
    elif stopped:
        console.print(f"stopped the Triton server for {repository}", soft_wrap=True, highlight=False)
    else:
        console.print(f"no running server for {repository} (state cleared)", soft_wrap=True, highlight=False)
