"""`tritonkit deploy` and `tritonkit down`."""

from __future__ import annotations

import itertools
import shlex
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from tritonkit.cli import app
from tritonkit.cli.options import (DAY_S, PHASE_LINES_EVERY_S, Repository, Timeout,
                                   console, progress_status)
from tritonkit.errors import UsageError, printable, shell_word
from tritonkit import deploy as deploy_lib
from tritonkit.warmup import WarmupFailed
from tritonkit.server.compose import STARTUP_S as COMPOSE_STARTUP_S
from tritonkit.server.container import CONTAINER_PORTS
from tritonkit.server.k8s import K8S_DIRNAME, PRESTOP_S, STARTUP_S
from tritonkit.server.local import (Stopped, listens_everywhere, others_see_command_lines,
                                    signals_interrupt)
from tritonkit.server.settings import Ports
from tritonkit.server.state import mask

TARGETS = ("local", "compose", "k8s")
LOCAL_STARTUP_S = 120.0

_K8S_PORTS = ("the Service publishes Triton's own ports "
              f"{'/'.join(str(p) for p in CONTAINER_PORTS.as_dict().values())} inside the cluster",
              "drop {flag}: the Service's ports are set in {k8s}/service.yaml (spec.ports); "
              "for a port on this host use --target compose")
# The flags a target has no use for, each with why and what sets that there instead
# (the hint: {flag} is the flag as given). Refused when given: ignored, a user believes
# they got a port or a public service they did not.
NOT_USED_BY: dict[str, dict[str, tuple[str, str]]] = {
    "local": {
        "out": ("the local server writes no deployment files; its state and log are in "
                "{repository}/.tritonkit",
                "drop {flag}, or use --target compose or k8s to write files there"),
        "up": ("the local target always starts the server, and writes nothing else",
               "drop {flag}; --target compose --no-up writes files without starting anything"),
        "public": ("the local server binds to the server settings' bind_address "
                   "(127.0.0.1 by default)",
                   'drop {flag}; to listen on every interface set bind_address = "0.0.0.0" '
                   "in a copy of configs/server.toml and pass it as --server-config"),
        "image": ("the local target runs the embedded tritonserver on this host, not an image",
                  "drop {flag}, or use --target compose to run that image"),
        "device_ids": ("the local server has no GPU: it serves a CPU mirror of the "
                       "repository (ONNX Runtime through the python backend)",
                       "drop {flag}, or use --target compose to reserve GPUs"),
        "replicas": ("the local target runs one server",
                     "drop {flag}, or use --target k8s for a fleet of replicas"),
        "storage_class": ("it names the claim --target k8s copies the repository into; the "
                          "local server reads the folder itself", "drop {flag}"),
        "cpu": ("it sets the CPU request of a --target k8s pod; the local server runs as "
                "this host's process", "drop {flag}"),
        "memory": ("it sets the memory request and limit of a --target k8s pod; the local "
                   "server runs as this host's process", "drop {flag}"),
        "force": ("the local target writes no files to replace",
                  "drop {flag}; to replace a running local server: tritonkit down "
                  "--repository {repository}, then deploy again"),
        "onnx_backend": ("the local server always serves ONNX through the python backend "
                         "(it has no other)", "drop {flag}"),
    },
    "compose": {
        "replicas": ("compose runs one Triton container",
                     "drop {flag}; --device-ids gives that container more GPUs, --target k8s "
                     "runs a fleet of replicas"),
        "storage_class": ("compose mounts the repository folder from this host; it has no "
                          "claim", "drop {flag}"),
        "cpu": ("it sets the CPU request of a --target k8s pod; compose sets no CPU share",
                "drop {flag}; limit the container with deploy.resources in the compose file"),
        "memory": ("it sets the memory request and limit of a --target k8s pod; compose sets "
                   "no memory limit",
                   "drop {flag}; limit the container with deploy.resources in the compose file"),
    },
    "k8s": {
        "http_port": _K8S_PORTS, "grpc_port": _K8S_PORTS, "metrics_port": _K8S_PORTS,
        "up": ("k8s writes the manifests and applies nothing",
               "drop {flag}; apply them with the kubectl commands deploy prints"),
        "public": ("the Service is a ClusterIP, reached from inside the cluster only",
                   "drop {flag}; to expose it change the Service's type in "
                   "{k8s}/service.yaml (LoadBalancer, NodePort) or put an Ingress in front"),
        "device_ids": ("each replica asks for one nvidia.com/gpu and Kubernetes picks the card",
                       "drop {flag}; --replicas sets how many GPUs (one a replica), --gpu which "
                       "kind of card"),
        "warmup": ("a replica warms each model as it loads it, from the model_warmup entries "
                   "in the model's config",
                   "drop {flag}; to skip the warm-up, remove model_warmup from each "
                   "model's configs/{gpu}.pbtxt"),
        "onnx_backend": ("the replicas serve the repository copied into the claim, with the "
                         "image's own backends", "drop {flag}"),
    },
}


@app.command(epilog="Example: tritonkit deploy --target local --repository model_repository; "
                     "tritonkit deploy --target compose --gpu p100 --repository model_repository")
def deploy(
    ctx: typer.Context,
    repository: Repository = Path("model_repository"),
    target: Annotated[str, typer.Option(help="local (embedded tritonserver), compose or k8s.")] = "local",
    http_port: Annotated[int, typer.Option(help="HTTP port (local: 0 picks a free one).", min=0, max=65535)] = 8000,
    grpc_port: Annotated[int, typer.Option(help="gRPC port (local: 0 picks a free one).", min=0, max=65535)] = 8001,
    metrics_port: Annotated[int, typer.Option(help="Metrics port (local: 0 picks a free one).", min=0, max=65535)] = 8002,
    server_config: Annotated[Optional[Path], typer.Option(help="Server settings TOML (default configs/server.toml).")] = None,
    gpu: Annotated[Optional[str], typer.Option(help="GPU profile (configs/gpus/<name>.toml): picks each model's configs/<gpu>.pbtxt.")] = None,
    out: Annotated[Path, typer.Option(help="compose/k8s: folder for the generated files (k8s: OUT/k8s/).")] = Path("docker"),
    up: Annotated[bool, typer.Option("--up/--no-up", help="compose: start it after writing the files.")] = True,
    public: Annotated[bool, typer.Option(help="compose: publish the ports on every interface, not only 127.0.0.1.")] = False,
    image: Annotated[Optional[str], typer.Option(help="compose/k8s: Triton image instead of the GPU profile's.")] = None,
    device_ids: Annotated[str, typer.Option(help="compose: GPU device ids to reserve, comma-separated.")] = "0",
    replicas: Annotated[int, typer.Option(
        help="k8s: replicas, one GPU each.", min=1, max=2**31 - 1)] = 1,    # k8s: int32
    storage_class: Annotated[Optional[str], typer.Option(
        help="k8s: storage class of the model repository's ReadWriteMany claim "
             "(default: the cluster's).")] = None,
    cpu: Annotated[Optional[str], typer.Option(
        help="k8s: the Triton container's CPU request, e.g. 4 or 1500m (default 2; no CPU "
             "limit).")] = None,
    memory: Annotated[Optional[str], typer.Option(
        help="k8s: the Triton container's memory request and limit, e.g. 8Gi (default: "
             "/dev/shm + pinned memory pool + model files + 2Gi for tritonserver).")] = None,
    force: Annotated[bool, typer.Option(help="compose/k8s: replace files written before.")] = False,
    warmup: Annotated[bool, typer.Option(
        "--warmup/--no-warmup", help="Warm every model up until its latency is steady (local, compose).")] = True,
    onnx_backend: Annotated[str, typer.Option(
        help="compose: serve ONNX models with Triton's onnxruntime backend, or with python "
             "(ONNX Runtime in the python backend: an image without that backend, as "
             "docker/standin/'s).")] = "onnxruntime",
    timeout: Annotated[Optional[float], typer.Option(
        help="local: fail once nothing has moved for this many seconds — no model loaded, "
             "no stub working, no line in the server's log, no warm-up request answered "
             "(default 120); compose: one deadline for the whole wait (default 600 — a first "
             "start on a GPU builds TensorRT engines before Triton answers); k8s: how "
             f"long a replica's startup probe lets it load and warm its models (default "
             f"{STARTUP_S}).",
        min=0.1, max=DAY_S)] = None,
) -> None:
    """Start Triton for a model repository, load every model, wait until each is READY, warm it up.

    Local: all or nothing — a failure, Ctrl-C, SIGTERM or SIGHUP stops the server again."""
    if target not in TARGETS:
        raise UsageError(f"unknown target '{target}'", hint=f"use one of: {', '.join(TARGETS)}")
    _refuse_flags_not_used(ctx, target, repository=repository, out=out, gpu=gpu)
    if target == "k8s":
        _print_k8s(deploy_lib.deploy_k8s(repository, gpu=gpu, out=out, image=image, force=force,
                                         replicas=replicas, server_config=server_config,
                                         storage_class=storage_class, cpu=cpu, memory=memory,
                                         startup_timeout=timeout))
        return
    _refuse_shared_ports({"--http-port": http_port, "--grpc-port": grpc_port,
                          "--metrics-port": metrics_port}, target)
    if timeout is None:
        timeout = float(COMPOSE_STARTUP_S) if target == "compose" else LOCAL_STARTUP_S
    try:
        with signals_interrupt(), progress_status(f"deploying {repository}",
                                                  plain_after=PHASE_LINES_EVERY_S,
                                                  plain_every=PHASE_LINES_EVERY_S) as progress:
            if target == "compose":
                files, running = deploy_lib.deploy_compose(
                    repository, gpu=gpu, out=out, up=up, public=public, image=image,
                    force=force, ports=Ports(http=http_port, grpc=grpc_port, metrics=metrics_port),
                    device_ids=tuple(d.strip() for d in device_ids.split(",") if d.strip())
                    if _given(ctx, "device_ids") else None,
                    server_config=server_config, timeout=timeout, warmup=warmup,
                    onnx_backend=onnx_backend, progress=progress)
            else:
                deployment = deploy_lib.deploy_local(
                    repository, http_port=http_port, grpc_port=grpc_port,
                    metrics_port=metrics_port, server_config=server_config, timeout=timeout,
                    gpu=gpu, warmup=warmup, progress=progress)
    except WarmupFailed as failed:      # every model's figures or failure, then the error
        from tritonkit.cli.warmup import print_results  # here: keeps the --help order

        print_results(failed.results)
        raise
    if target == "compose":
        _print_compose(files, running, repository, gpu)
        return
    served = f", serving each model's configs/{gpu}.pbtxt" if gpu else ""
    console.print(f"[green]Triton is up[/green] ({deployment.target}, pid {deployment.pid}"
                  f"{escape(served)}), models READY: {', '.join(deployment.models)}")
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
    _print_ps_note()
    if "warmup" in deployment.extra:
        from tritonkit.cli.warmup import print_warmup  # here: keeps the --help order

        print_warmup(deployment.extra["warmup"], repository)


def _refuse_flags_not_used(ctx: typer.Context, target: str, *, repository: Path,
                           out: Path, gpu: str | None) -> None:
    """A UsageError naming the first flag given (on the command line or by an environment
    variable, a default's value included) that ``target`` has no use for (``NOT_USED_BY``);
    its hint lists the others. Defaults are not refused: one set serves every target."""
    given = [name for name in NOT_USED_BY[target] if _given(ctx, name)]
    if not given:
        return
    why, hint = NOT_USED_BY[target][given[0]]
    flag = _flag_as_given(ctx, given[0])
    fields = {"flag": flag, "repository": repository, "k8s": Path(out) / K8S_DIRNAME,
              "gpu": gpu or "<gpu>"}
    others = [_flag_as_given(ctx, name) for name in given[1:]]
    also = f"; {', '.join(others)} {'does' if len(others) == 1 else 'do'} not apply either" \
        if others else ""
    raise UsageError(f"{flag} does not apply to --target {target} ({why.format(**fields)})",
                     hint=hint.format(**{**fields, "repository": shell_word(repository)}) + also)


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether parameter ``name`` was given, not defaulted (by name: Typer keeps its own
    copy of click's ParameterSource enum)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")


def _flag_as_given(ctx: typer.Context, name: str) -> str:
    """The flag of parameter ``name`` as the user spelled it: --no-up for a False --up/--no-up."""
    param = next(p for p in ctx.command.params if p.name == name)
    if ctx.params.get(name) is False and param.secondary_opts:
        return param.secondary_opts[0]
    return max(param.opts, key=len)


def _refuse_shared_ports(ports: dict[str, int], target: str) -> None:
    """Two port flags that name one port, said by their flags (0, "pick one", may repeat)."""
    chosen = [(flag, port) for flag, port in ports.items() if port]
    for (first, port), (second, other) in itertools.combinations(chosen, 2):
        if port == other:
            raise UsageError(f"{first} and {second} are both {port}",
                             hint="give each its own port" +
                                  (" (0 picks a free one)" if target == "local" else ""))


def _print_ignored(gitignore: Path | None, created: bool, secret_file: str) -> None:
    """The .gitignore a deploy wrote, or added the file holding its secret to (if any)."""
    if gitignore is not None:
        did = "wrote" if created else f"added {secret_file} to"
        console.print(f"  {did} {escape(str(gitignore))}: git leaves the secret out",
                      highlight=False, soft_wrap=True)


def _print_compose(files, running, repository: Path, gpu: str | None) -> None:
    console.print(f"wrote {files.compose_file} and {files.env_file}")
    _print_ignored(files.gitignore, files.gitignore_created, ".env")
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
        where = " on a GPU host" if files.uses_gpu else ""
        console.print(escape(f"  start it{where}: docker compose -f "
                             f"{shell_word(files.compose_file)} up -d"), highlight=False,
                      soft_wrap=True)
        return
    console.print(f"[green]Triton is up[/green] (compose project {files.project}, "
                  f"image {running.extra['image']}), models READY: {', '.join(running.models)}")
    _print_ps_note()
    console.print(f"  HTTP     http://{running.http_url}")
    console.print(f"  gRPC     {running.grpc_url}")
    console.print(f"  metrics  {running.metrics_url}")
    if "warmup" in running.extra:
        from tritonkit.cli.warmup import print_warmup  # here: keeps the --help order

        print_warmup(running.extra["warmup"], repository)


def _print_ps_note() -> None:
    """Where the secret can be seen all the same: Triton 2.51 takes it only on its command
    line, which every user of the host may read unless /proc hides it."""
    if others_see_command_lines():
        console.print("  note: the secret is on Triton's command line: other users here see it "
                      "in ps (hidepid=2 on /proc hides it)", highlight=False, soft_wrap=True)


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
    _print_ignored(written.gitignore, written.gitignore_created, "secret.yaml")
    requests, limits = written.resources["requests"], written.resources["limits"]
    given = " (--memory)" if written.memory_rule == "--memory" else ""
    console.print(f"  each replica: cpu {requests['cpu']} requested (no limit), memory "
                  f"{limits['memory']} requested and limit{given}", highlight=False, soft_wrap=True)
    if not given:
        console.print(f"  memory {limits['memory']} = {written.memory_rule}", highlight=False,
                      soft_wrap=True)
    console.print(f"  startup: {written.startup_s} s to load and warm its models (--timeout); "
                  f"stop: {PRESTOP_S} s of preStop first", highlight=False, soft_wrap=True)
    if written.pdb:
        console.print(f"  PodDisruptionBudget {written.pdb}: a node drain evicts one of the "
                      f"{written.replicas} replicas at a time", highlight=False, soft_wrap=True)
    elif written.surge:
        console.print("  one replica: a rollout starts the new pod first (maxSurge 1), but a "
                      "node drain is an outage; --replicas 2 or more avoids it",
                      highlight=False, soft_wrap=True)
    else:
        console.print("  one replica: each rollout or node drain is an outage (maxSurge 0: no "
                      "spare GPU); --replicas 2 or more avoids it", highlight=False, soft_wrap=True)
    if written.pdb_removed:
        console.print(f"  removed {K8S_DIRNAME}/pod-disruption-budget.yaml of the run with more "
                      f"replicas: kubectl delete pdb {written.pdb_removed} (apply -k leaves it "
                      "in the cluster, and with one replica it blocks every drain)",
                      highlight=False, soft_wrap=True)
    console.print(f"  copy the model repository into the claim {written.claim} "
                  "(ReadWriteMany), then start the replicas:", highlight=False)
    for command in written.fill_commands:
        console.print(f"    {escape(command)}", highlight=False, soft_wrap=True)


# Off a terminal, a `down` still waiting after this long says once what for: a quick stop
# (Triton unloads the example model in about 2 s) stays one line.
DOWN_PLAIN_AFTER_S = 5.0


@app.command(epilog="Example: tritonkit down --repository model_repository")
def down(
    repository: Repository = Path("model_repository"),
    timeout: Timeout = 40.0,
) -> None:
    """Stop the server deployed for a model repository (local: SIGINT, bounded wait, then
    kill; compose: docker compose down)."""
    with progress_status(f"stopping the server for {printable(str(repository))}",
                         plain_after=DOWN_PLAIN_AFTER_S) as progress:
        with signals_interrupt():           # SIGTERM and SIGHUP end it as Ctrl-C does
            stopped = deploy_lib.down(repository, timeout=timeout, progress=progress)
    shown = printable(str(repository))          # one line, whatever the folder's name
    if stopped is None:
        line = f"nothing to stop for {shown}: no deployment recorded"
    elif isinstance(stopped, Stopped):
        line = f"stopped the Triton server for {shown}: {stopped.describe()}"
    elif stopped:
        line = f"stopped the Triton server for {shown}"
    else:
        line = f"no running server for {shown} (state cleared)"
    console.print(line, soft_wrap=True, highlight=False, markup=False)
