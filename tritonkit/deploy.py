"""Deploying a model repository: the targets behind `tritonkit deploy` / `tritonkit down`.

A deploy holds the repository's deploy lock from its first check to its last write. A
local deploy is all or nothing: if a model fails to load or to warm up, or the deploy
is interrupted (Ctrl-C; SIGTERM and SIGHUP under ``signals_interrupt``), the server is
stopped and its record cleared; the log stays. A compose deployment, once its
containers run, is left running on a later failure or interrupt (the error says how to
stop it; an interrupt during ``docker compose up`` itself says what may have started); a
``tritonkit down`` meanwhile ends the deploy, whether it waits, loads or warms up.
"""

from __future__ import annotations

import dataclasses
import functools
import signal
from pathlib import Path

from tritonkit.client import Endpoint
from tritonkit.deadline import StallDeadline
from tritonkit.errors import Interrupted, TritonkitError, UsageError
from tritonkit.profiles import available_profiles, load_profile
from tritonkit.repository import (model_names, refuse_missing_gpu_configs,
                                  refuse_shell_unsafe_path, refuse_versionless)
from tritonkit.server import compose, k8s
from tritonkit.server.container import container_spec
from tritonkit.server.local import (Deadline, Progress, discard_mirror, mirror_dir,
                                    refuse_if_recorded, remove_mirror, server_exited, Stopped,
                                    start_local, stop_local, stop_unrecorded)
from tritonkit.server.local_repository import build_local_repository
from tritonkit.server.settings import Ports, load_server_settings
from tritonkit.server.state import (CorruptState, Deployment, clear_deployment, deploy_lock,
                                    is_recorded, load_deployment, require_repository_folder,
                                    save_deployment)
from tritonkit.warmup import load_and_warm


def deploy_local(repository: Path, *, http_port: int = 8000, grpc_port: int = 8001,
                 metrics_port: int = 8002, server_config: Path | None = None,
                 timeout: float = 120.0, gpu: str | None = None,
                 warmup: bool = True, progress: Progress | None = None) -> Deployment:
    """Start the embedded Triton on loopback with every model of ``repository`` READY.

    ``timeout`` bounds stalls, not the deploy: the start and the warm-up go on while they
    move (a model loads, a stub works, the log grows, a warm-up request is answered) and
    fail once nothing has moved for ``timeout`` seconds, naming the model waited on.

    With ``warmup`` every model is then warmed until steady (``tritonkit.warmup``); the
    figures land in the state as ``extra["warmup"]``. A model that fails to warm up does
    not keep the others from it; then the server is stopped (deploy leaves nothing
    half-done) and ``WarmupFailed`` carries every model's figures or failure.

    The server reads a CPU mirror of the repository (ONNX models through the python
    backend adapter); ``gpu`` picks each model's ``configs/<gpu>.pbtxt`` to mirror.
    """
    # Absolute: the server's --model-repository is how `down` knows its process is ours.
    repository = Path(repository).resolve()
    refuse_shell_unsafe_path(repository, "repository path")
    models = model_names(repository)
    refuse_versionless(repository, models)
    if gpu:
        refuse_missing_gpu_configs(repository, models, load_profile(gpu).name)
    settings = load_server_settings(server_config)
    if gpu:
        settings = load_profile(gpu).server_settings(settings)
    with deploy_lock(repository):
        refuse_if_recorded(repository)       # before the mirror of a live server is touched
        deployment = None                    # start_local cleans up after itself
        try:
            mirror = build_local_repository(repository, mirror_dir(repository),
                                            models, model_config_name=gpu)
            deployment = start_local(repository, settings,
                                     ports=Ports(http=http_port, grpc=grpc_port,
                                                 metrics=metrics_port),
                                     models=models, timeout=timeout, serve_from=mirror,
                                     progress=progress, gpu=gpu, server_config=server_config)
            if not warmup:
                return deployment
            results = load_and_warm(Endpoint.from_deployment(deployment), deployment.models,
                                    deadline=StallDeadline(timeout), config_dir=mirror,
                                    progress=progress,
                                    server_exited=functools.partial(server_exited, deployment),
                                    fresh=True)
        except BaseException as exc:
            if deployment is not None:
                stop_local(deployment, timeout=min(5.0, settings.exit_timeout_secs))
                if isinstance(exc, TritonkitError):
                    _add_hint(exc, f"deploy stopped the server (its log: {deployment.log_path}); "
                                   "deploy with --no-warmup to keep it up and look")
            discard_mirror(repository)       # nothing of a failed deploy is left to serve
            raise
        deployment = dataclasses.replace(
            deployment, extra={**deployment.extra, "warmup": [r.as_dict() for r in results]})
        save_deployment(deployment)
        return deployment


def deploy_compose(repository: Path, *, gpu: str | None, out: Path = Path("docker"), up: bool = True,
                   public: bool = False, image: str | None = None, force: bool = False,
                   ports: Ports = Ports(), device_ids: tuple[str, ...] | None = None,
                   server_config: Path | None = None, timeout: float = 600.0,
                   warmup: bool = True, onnx_backend: str = "onnxruntime",
                   progress: Progress | None = None) -> tuple[compose.ComposeFiles, Deployment | None]:
    """Write the compose file and env file for ``gpu``; with ``up``, start it, load every
    model that is not READY, (``warmup``) warm every model up and wait for readiness, all
    within ``timeout`` of the containers starting. ``device_ids``: the GPUs to reserve
    (None: GPU 0; a CPU profile reserves none); ``onnx_backend``: how ONNX models are
    served (``compose_repository``).

    Without a Docker engine (or, for a GPU profile, the NVIDIA runtime), ``up`` raises a
    ServerError that says what is missing and that the files were written.
    """
    repository = Path(repository)
    spec = container_spec(repository, _gpu_for("compose", gpu), image=image,
                          server_config=server_config)
    if device_ids is not None and not spec.uses_gpu:
        raise UsageError(f"--device-ids does not apply to the {spec.gpu} profile: it reserves "
                         "no GPU", hint="drop --device-ids, or deploy with a GPU profile")
    with deploy_lock(repository):
        files = compose.write_compose(spec, repository, Path(out), ports=ports, public=public,
                                      device_ids=("0",) if device_ids is None else device_ids,
                                      force=force,
                                      starting=up, onnx_backend=onnx_backend)
        if not up:
            return files, None
        deployment = compose.compose_up(files, spec, repository, server_config=server_config)
        deadline = Deadline(timeout)       # from the containers' start, not the image pull
        try:
            compose.wait_live(deployment, deadline, progress)
            if warmup:      # loads every model that is not READY, then warms each
                results = load_and_warm(Endpoint.from_deployment(deployment), deployment.models,
                                        deadline=deadline, config_dir=repository,
                                        progress=progress, fresh=True,
                                        server_exited=functools.partial(compose.taken_down,
                                                                        deployment))
                if (gone := compose.taken_down(deployment)) is not None:
                    raise gone      # a `down` after the last request: not to be recorded again
                deployment = dataclasses.replace(
                    deployment,
                    extra={**deployment.extra, "warmup": [r.as_dict() for r in results]})
                save_deployment(deployment)
            else:
                compose.load_models(deployment, deadline, progress)
            compose.wait_ready(deployment, deadline, progress)
        except TritonkitError as exc:
            if compose.taken_down(deployment) is None:      # still recorded, still running
                _add_hint(exc, compose.left_running(repository))
            raise
        except (Interrupted, KeyboardInterrupt) as exc:
            raise compose.interrupted(getattr(exc, "signum", signal.SIGINT),
                                      Path(deployment.repository)) from None
        return files, deployment


def deploy_k8s(repository: Path, *, gpu: str | None, out: Path = Path("docker"),
               image: str | None = None, force: bool = False, replicas: int = 1,
               server_config: Path | None = None,
               storage_class: str | None = None, cpu: str | None = None,
               memory: str | None = None,
               startup_timeout: float | None = None) -> k8s.K8sFiles:
    """Write ``out/k8s/`` manifests for a fleet of ``gpu`` replicas (nothing is applied)."""
    spec = container_spec(Path(repository), _gpu_for("k8s", gpu), image=image,
                          server_config=server_config)
    return k8s.write_k8s(spec, Path(repository), Path(out), replicas=replicas, force=force,
                         storage_class=storage_class, cpu=cpu, memory=memory,
                         startup_timeout=startup_timeout)


def _gpu_for(target: str, gpu: str | None) -> str:
    if not gpu:
        raise UsageError(f"--target {target} needs --gpu: the image and the server settings "
                         "depend on the card", hint=f"e.g. --gpu {' or --gpu '.join(available_profiles())}")
    return gpu


def _add_hint(exc: TritonkitError, note: str) -> None:
    if note not in (exc.hint or ""):
        exc.hint = "; ".join(filter(None, [exc.hint, note]))


def down(repository: Path, *, timeout: float = 40.0,
         progress: Progress | None = None) -> Stopped | bool | None:
    """Stop whatever deployment is recorded for ``repository``: how its server ended
    (``Stopped``; compose: True where the engine cannot say) if it was running, False if it
    had gone already (the record is cleared all the same), None if
    nothing was recorded — a second ``down`` (a teardown script's) is no error, as a second
    ``docker compose down`` is not. With no record, a local server still serving the
    repository is stopped all the same, and a mirror a failed or killed deploy left is
    removed; so is a server whose record is corrupt (found by its command line).
    ``progress`` hears what a stopping local server waits for (Triton drains open client
    connections for up to its exit timeout)."""
    if not is_recorded(repository):
        if stopped := stop_unrecorded(repository, timeout, progress):
            return stopped[-1]
        require_repository_folder(repository)      # a typo is not "nothing to stop"
        remove_mirror(repository)
        return None
    try:
        deployment = load_deployment(repository)
    except CorruptState:
        # A record cut short (a full disk, an edit): its local server, if one serves the
        # repository, is still found by its command line.
        stopped = stop_unrecorded(repository, timeout, progress)
        if not stopped:
            raise
        clear_deployment(repository)
        remove_mirror(repository)
        return stopped[-1]
    if deployment.target == "compose":
        return compose.compose_down(deployment, timeout=timeout)
    deadline = Deadline(timeout)
    stopped = stop_local(deployment, timeout=timeout, progress=progress)
    if not stopped:
        # The record names no live server of ours (its pid is another process's, or from
        # another pid namespace), yet one may serve the repository: found by its command line.
        if strays := stop_unrecorded(repository, deadline.left(), progress):
            remove_mirror(repository)
            return strays[-1]
    return stopped
