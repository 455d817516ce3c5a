"""The embedded local Triton: the real tritonserver 2.51.0, started in the background.

``start_local`` launches it on loopback with explicit model control, every model in
the repository loaded at start-up, and waits — under one deadline — until each model
is READY. Failures (a port in use, a model Triton refuses) raise with Triton's own
message and leave no server behind. ``stop_local`` sends SIGINT, waits a bounded
time, then kills the whole process group (the python backend's stubs included).
"""

from __future__ import annotations

import errno
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Sequence

from tritonkit.errors import ModelLoadError, ServerError, UsageError
from tritonkit.server.binary import find_install, prepare_backends, server_environment
from tritonkit.server.settings import Ports, ServerSettings, tritonserver_argv
from tritonkit.server.state import (
    Deployment,
    clear_deployment,
    load_deployment,
    new_secret,
    save_deployment,
    state_dir,
)

LOG_FILENAME = "server.log"


class Deadline:
    """One deadline shared by nested waits, so timeouts never add up."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def expired(self) -> bool:
        return self.left() <= 0.0


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free now (racy by nature; good enough for tests and auto-pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


IN_USE = "in use"


def port_problem(host: str, port: int) -> str | None:
    """Why tritonserver could not listen on ``host:port`` now, in the OS's words, or None.

    SO_REUSEADDR, as Triton's own listeners set it: the connections of a server just
    stopped linger in TIME_WAIT for a minute and must not read as "in use". Only the
    errno that means it is "in use"; a port below 1024 without the right is another thing.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return IN_USE
            if exc.errno == errno.EACCES:
                return "permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE)"
            return (exc.strerror or str(exc)).lower()
    return None


def check_port_free(host: str, port: int, role: str) -> None:
    """A ServerError, saying what the OS said, unless tritonserver could listen there now."""
    problem = port_problem(host, port)
    if problem is None:
        return
    flag = f"--{role}-port"
    if problem == IN_USE:
        raise ServerError(f"{role} port {port} on {host} is already in use",
                          hint=f"stop what listens there, or pass {flag} with a free port "
                               "(0 picks one)")
    raise ServerError(f"cannot listen on {host}:{port} for {role}: {problem}",
                      hint=f"pass {flag} with another port (0 picks one), or bind an address "
                           "of this host (bind_address in the server settings)")


def resolve_ports(host: str, ports: Ports) -> Ports:
    """Replace 0 with a free port, then check every port is free."""
    chosen = Ports(**{role: port or free_port(host) for role, port in ports.as_dict().items()})
    if len(set(chosen.as_dict().values())) != 3:
        raise UsageError(f"the HTTP, gRPC and metrics ports must differ (got {chosen})",
                         hint="pass three different ports")
    for role, port in chosen.as_dict().items():
        check_port_free(host, port, role)
    return chosen


def running_deployment(repository: Path) -> Deployment | None:
    """The recorded deployment if its process is still alive, else None."""
    try:
        deployment = load_deployment(repository)
    except UsageError:
        return None
    if deployment.target == "local" and deployment.pid and _is_our_server(deployment.pid):
        return deployment
    return None


def refuse_if_running(repository: Path) -> None:
    """A UsageError if a server recorded for ``repository`` is still alive."""
    if running_deployment(repository):
        raise UsageError(f"a tritonkit server is already running for {repository}",
                         hint=f"stop it first: tritonkit down --repository {repository}")


def start_local(
    repository: Path,
    settings: ServerSettings,
    *,
    ports: Ports = Ports(),
    models: Sequence[str],
    timeout: float = 120.0,
    host: str = "127.0.0.1",
    model_config_name: str | None = None,
    serve_from: Path | None = None,
) -> Deployment:
    """Start the embedded tritonserver for ``repository`` and wait until ``models`` are READY.

    ``serve_from`` is the folder the server actually reads (the CPU mirror of
    ``repository``); the deployment's state always lives in ``repository``.
    """
    repository = Path(repository).resolve()
    deadline = Deadline(timeout)
    refuse_if_running(repository)
    install = find_install()
    env = server_environment(install)
    ports = resolve_ports(host, ports)
    sdir = state_dir(repository)
    backends = prepare_backends(install, sdir / "backends")
    secret = new_secret(repository)
    argv = tritonserver_argv(
        settings, binary=str(install.binary), model_repository=str(serve_from or repository),
        ports=ports,
        models=models, secret=secret, bind_address=host, backend_directory=str(backends),
        model_config_name=model_config_name, gpu_metrics=False,
        # Several local servers share this host's /dev/shm: with the python backend's one
        # default prefix their stubs' regions collide (a second server then took its whole
        # exit timeout, 30 s, to stop). The HTTP port is unique while the server runs.
        python_shm_prefix=f"tritonkit_{ports.http}_")
    log_path = sdir / LOG_FILENAME
    with open(log_path, "wb") as log:
        # A new session: the server outlives this command and Ctrl-C here does not
        # reach it; stop_local signals the whole group.
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    deployment = Deployment(
        target="local", repository=str(repository), host=host, http_port=ports.http,
        grpc_port=ports.grpc, metrics_port=ports.metrics,
        secret_header=settings.restricted_api.header, models=list(models),
        started_at=time.time(), pid=proc.pid, log_path=str(log_path),
        argv=[a if "restricted" not in a else a.split("=", 1)[0] + "=<secret>" for a in argv],
        extra={"served_repository": str(serve_from or repository),
               "model_config_name": model_config_name})
    try:
        _wait_until_ready(proc, deployment, deadline)
    except BaseException:
        _terminate(proc.pid, grace=min(5.0, settings.exit_timeout_secs))
        proc.wait(timeout=5)
        raise
    save_deployment(deployment)
    return deployment


def stop_local(deployment: Deployment, timeout: float = 40.0) -> bool:
    """Stop a local deployment (SIGINT, bounded wait, then kill). True if it was running."""
    was_running = bool(deployment.pid) and _is_our_server(deployment.pid)
    if was_running:
        _terminate(deployment.pid, grace=timeout)  # type: ignore[arg-type]
    clear_deployment(Path(deployment.repository))
    return was_running


def _wait_until_ready(proc: subprocess.Popen, deployment: Deployment, deadline: Deadline) -> None:
    base = f"http://{deployment.host}:{deployment.http_port}"
    pending = list(deployment.models)
    while True:
        code = proc.poll()
        if code is not None:
            raise _startup_failure(deployment, code)
        if not pending and _http_ok(f"{base}/v2/health/ready"):
            return
        pending = [m for m in pending if not _http_ok(f"{base}/v2/models/{m}/ready")]
        if deadline.expired():
            what = f"models {', '.join(pending)} not READY" if pending else "server not ready"
            raise ServerError(
                f"tritonserver did not become ready within {deadline.seconds:g} s ({what})",
                hint=f"raise --timeout, or read the log: {deployment.log_path}")
        time.sleep(min(0.1, deadline.left()))


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


_MODEL_ERROR = re.compile(r'"(failed to load \'[^\']+\'[^"]*?|Poll failed for model directory[^"]*)"')
_SERVER_ERROR = re.compile(r"^error: (.*)$", re.MULTILINE)


def _startup_failure(deployment: Deployment, code: int) -> ServerError:
    """Turn an exited server's log into one error that carries Triton's own message."""
    log = Path(deployment.log_path or "").read_text(errors="replace") if deployment.log_path else ""
    model_errors = [m.group(1).split("\\n")[0] for m in _MODEL_ERROR.finditer(log)
                    if "version" in m.group(1) or "Poll failed" in m.group(1)]
    server_errors = _SERVER_ERROR.findall(log)
    hint = f"full server log: {deployment.log_path}"
    if model_errors:
        return ModelLoadError(f"Triton could not load a model: {model_errors[0]}", hint=hint)
    if server_errors:
        return ServerError(f"tritonserver exited ({code}): {server_errors[-1]}", hint=hint)
    tail = " | ".join(line for line in log.strip().splitlines()[-3:])
    return ServerError(f"tritonserver exited with code {code}: {tail or 'no output'}", hint=hint)


def _is_our_server(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"tritonserver" in cmdline.split(b"\0", 1)[0]


def _terminate(pid: int, *, grace: float) -> None:
    """SIGINT the server, wait up to ``grace`` seconds, then SIGKILL its process group."""
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        return
    end = time.monotonic() + grace
    while time.monotonic() < end:
        if not _alive(pid):
            break
        time.sleep(0.05)
    try:
        os.killpg(pid, signal.SIGKILL)  # the stubs too, if any linger
    except (ProcessLookupError, PermissionError):
        pass
    end = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < end:
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        # Reap it if it is our child; a zombie counts as gone.
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
