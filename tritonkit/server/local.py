"""The embedded local Triton: the real tritonserver 2.51.0, started in the background.

``start_local`` launches it on the settings' ``bind_address`` (loopback) with explicit
model control, every model in the repository loaded at start-up, and waits until each
model is READY: a start that keeps moving gets the time it needs, one that stalls for the
timeout fails naming the model it waits on (``loading.LoadWatch``). The process is recorded (status "starting") as
soon as it exists, so ``tritonkit down`` can stop a deploy killed half-way. Failures (a
port in use, a model Triton refuses, Ctrl-C, SIGTERM/SIGHUP through
``signals_interrupt``) raise and leave no server behind.
``stop_local`` sends SIGINT, waits, then kills the whole process group (the python
backend's stubs included), all within one deadline.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import re
import secrets
import signal
import socket
import stat
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence

from tritonkit.client import health
from tritonkit.deadline import Deadline, StallDeadline
from tritonkit.errors import Interrupted, ModelLoadError, ServerError, UsageError, shell_word
from tritonkit.fileio import read_tail
from tritonkit.repository import refuse_shell_unsafe_path
from tritonkit.server.binary import find_install, prepare_backends, server_environment
from tritonkit.server.listening import listening_ports
from tritonkit.server.loading import LoadWatch, stub_crash
from tritonkit.server.settings import Ports, ServerSettings, tritonserver_argv
from tritonkit.server.unload import unload_models
from tritonkit.server.state import (
    RUNNING,
    STARTING,
    STATE_DIRNAME,
    Deployment,
    clear_deployment,
    deploy_lock,
    is_recorded,
    load_deployment,
    new_secret,
    save_deployment,
    state_dir,
    state_folder,
)

LOG_FILENAME = "server.log"
BACKENDS_DIRNAME = "backends"
#: How much of a server's log is read back to tell how it ended (its last words, what a
#: stop waits for): a server logging verbosely for weeks writes gigabytes.
LOG_TAIL_BYTES = 4 << 20

#: Told what is being waited for now, one short line at a time (a CLI shows it as a status).
Progress = Callable[[str], None]


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free now (racy by nature; good enough for tests and auto-pick)."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1", avoid: Sequence[int] = ()) -> list[int]:
    """``count`` distinct ports the OS says are free now, none of them in ``avoid``.

    Every socket stays bound until all are picked: one closed before the next is asked for
    leaves its port free to be handed out again, and three picks in a row then, now and
    again, name one port twice (two deploys in one CI run were refused so).
    """
    picked: list[int] = []
    with contextlib.ExitStack() as held:
        while len(picked) < count:
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            if (port := sock.getsockname()[1]) not in avoid:
                picked.append(port)
    return picked


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


def check_port_free(host: str, port: int, role: str, *, picked: bool = False) -> None:
    """A UsageError (a flag fixes it), saying what the OS said, unless tritonserver could
    listen there now. ``picked``: a port chosen here (0 given), which in use was taken by
    another process since the pick, as a connection's own port can on a busy host:
    PortTaken (the deploy picks again)."""
    problem = port_problem(host, port)
    if problem is None:
        return
    if problem == IN_USE and picked:
        raise PortTaken(f"{role} port {port} on {host}, picked as free, was taken by another "
                        "process", port=port, hint="deploy again (0 picks another free port)")
    flag = f"--{role}-port"
    if problem == IN_USE:
        raise UsageError(f"{role} port {port} on {host} is already in use",
                          hint=f"stop what listens there, or pass {flag} with a free port "
                               "(0 picks one)")
    raise UsageError(f"cannot listen on {host}:{port} for {role}: {problem}",
                      hint=f"pass {flag} with another port (0 picks one), or bind an address "
                           "of this host (bind_address in the server settings)")


def check_bind_address(host: str) -> None:
    """A UsageError unless ``host`` is an IPv4 address (or a name of one): the ports are
    picked and checked over IPv4 (an IPv6 address such as '::' failed there)."""
    if not host:
        return                         # Python binds '' as INADDR_ANY
    try:
        socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UsageError(f"the local server cannot listen on '{host}' ({exc.strerror})",
                         hint="set bind_address in the server settings to an IPv4 address of "
                              "this host: 127.0.0.1, or 0.0.0.0 for every interface") from None


def resolve_ports(host: str, ports: Ports) -> Ports:
    """Replace 0 with a free port, then check every port is free (a picked one found in
    use: PortTaken)."""
    check_bind_address(host)
    ports.require_distinct()
    given = ports.as_dict()
    picked = iter(free_ports(sum(not port for port in given.values()), host,
                             avoid=[port for port in given.values() if port]))
    chosen = Ports(**{role: port or next(picked) for role, port in given.items()})
    for role, port in chosen.as_dict().items():
        check_port_free(host, port, role, picked=not given[role])
    return chosen


def running_deployment(repository: Path) -> Deployment | None:
    """The recorded local deployment if its server is still alive, else None."""
    try:
        deployment = load_deployment(repository)
    except UsageError:
        return None
    if deployment.target == "local" and is_our_server(deployment):
        return deployment
    return None


MIRROR_DIRNAME = "local"


def mirror_dir(repository: Path) -> Path:
    """The CPU mirror of ``repository`` that its local server reads."""
    return state_dir(Path(repository).resolve()) / MIRROR_DIRNAME


def repository_of_mirror(served: Path) -> Path:
    """The repository whose mirror (``mirror_dir``) a server reads, from the folder it was
    given; that folder itself when it is no mirror (a server started on a repository)."""
    served = Path(served)
    if served.name == MIRROR_DIRNAME and served.parent.name == STATE_DIRNAME:
        return served.parent.parent
    return served


def server_log(repository: Path) -> Path:
    """The log the local server of ``repository`` writes (its record names it too)."""
    return state_dir(Path(repository).resolve()) / LOG_FILENAME


# Where Linux lists its processes; a host without it (macOS writing compose files) has no
# local server of ours to find.
PROC = Path("/proc")


def unrecorded_servers(repository: Path) -> list[int]:
    """Pids of tritonservers serving ``repository``'s mirror, found by their command line:
    the ones no record names once the state file was deleted while they ran. Where there is
    no /proc, none."""
    served = f"--model-repository={mirror_dir(repository)}"
    return [pid for pid in _pids()
            if _is_tritonserver(_cmdline(pid), served) and _running(pid)]


def refuse_if_running(repository: Path) -> None:
    """A UsageError if a server recorded for ``repository`` is still alive, or one serves
    it that no record names (a second server would start beside it, out of `down`'s reach)."""
    if running_deployment(repository):
        raise UsageError(f"a tritonkit server is already running for {repository}",
                         hint=f"stop it first: tritonkit down --repository {shell_word(repository)}")
    strays = unrecorded_servers(repository)
    if strays:
        raise UsageError(f"a tritonserver (pid {', '.join(map(str, strays))}) still serves "
                         f"{repository}, but no deployment records it (its state file was "
                         "removed)", hint=f"stop it first: tritonkit down --repository {shell_word(repository)}")


def stop_unrecorded(repository: Path, timeout: float = 40.0,
                    progress: Progress | None = None) -> list[Stopped]:
    """Stop the servers ``unrecorded_servers`` finds, all within ``timeout``; how each ended.
    ``progress`` hears what each waits for (from the repository's server log). A server
    this user may not signal (another user's) is left running and named in a ServerError,
    once the others are stopped."""
    strays = unrecorded_servers(repository)
    deadline = Deadline(timeout)
    refused, stopped = [], []
    for pid in strays:
        try:
            stopped.append(_terminate(pid, Deadline(deadline.left()), progress,
                                      server_log(repository)))
        except PermissionError:
            refused.append(pid)
    if stopped:
        remove_mirror(repository)        # kept while a refused one still serves it
    if refused:
        raise _not_ours_to_signal(refused, repository)
    return stopped


def _not_ours_to_signal(pids: list[int], repository: Path) -> ServerError:
    """A server of another user: this one may not signal it."""
    listed = ", ".join(f"{pid} (user {_owner(pid)})" for pid in pids)
    return ServerError(f"not allowed to stop the tritonserver serving {repository}: pid {listed}",
                       hint="stop it as that user (tritonkit down --repository "
                            f"{shell_word(repository)}), or with sudo: sudo kill -INT "
                            f"{' '.join(map(str, pids))}")


def _owner(pid: int) -> str:
    """The name (else the uid) of the user a process runs as; '?' if it cannot be told."""
    try:
        uid = (PROC / str(pid)).stat().st_uid
    except OSError:
        return "?"
    try:
        import pwd
        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def refuse_if_recorded(repository: Path) -> None:
    """A UsageError if ``repository`` has a deployment that a local deploy would replace:
    a live local server, or any compose deployment (its clients hold the secret a new
    deploy would overwrite). A local server that is gone is only a stale record: what it
    left behind (a killed server's stubs and shared memory) is cleared before the new one."""
    refuse_if_running(repository)
    if not is_recorded(repository):
        return
    recorded = load_deployment(repository)        # a corrupt record is an error too
    if recorded.target != "local":
        raise UsageError(f"a {recorded.target} deployment is recorded for {repository}; a "
                         "local deploy would replace its state and secret",
                         hint=f"stop it first: tritonkit down --repository {shell_word(repository)}")
    if recorded.pid:
        _clear_leftovers(recorded.pid, shm_prefix(recorded.argv))


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP raise ``Interrupted`` while this holds: a deploy stopped
    from the keyboard, by a service manager or by a closed terminal cleans up one way.
    Only the main thread can take signals; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    # A signal the caller ignores stays ignored: `nohup tritonkit deploy` outlives its terminal.
    caught = [sig for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
              if signal.getsignal(sig) is not signal.SIG_IGN]

    def interrupt(signum: int, _frame: object) -> None:
        # The clean-up that follows is bounded: a second Ctrl-C must not cut it short.
        for sig in caught:
            signal.signal(sig, signal.SIG_IGN)
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, interrupt) for sig in caught}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP wait while this holds (a report being written and said:
    what was measured is kept whole and each file named, however often Ctrl-C is pressed);
    the first that came is raised as ``Interrupted`` when the block ends without an error.
    Only the main thread can take signals; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: held.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
                if signal.getsignal(sig) not in (None, signal.SIG_IGN)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if held:
        raise Interrupted(held[0])


def listens_everywhere(bind_address: str) -> bool:
    """Whether ``bind_address`` is the wildcard: every interface, other hosts included."""
    return bind_address in ("", "0.0.0.0")


def client_host(bind_address: str) -> str:
    """The address clients use for a server bound to ``bind_address`` (a wildcard bind is
    reached on loopback)."""
    return "127.0.0.1" if listens_everywhere(bind_address) else bind_address


def start_local(
    repository: Path,
    settings: ServerSettings,
    *,
    ports: Ports = Ports(),
    models: Sequence[str],
    timeout: float = 120.0,
    host: str | None = None,
    model_config_name: str | None = None,
    serve_from: Path | None = None,
    progress: Progress | None = None,
    gpu: str | None = None,
    server_config: Path | None = None,
) -> Deployment:
    """Start the embedded tritonserver for ``repository`` and wait until ``models`` are READY:
    ``timeout`` bounds a stall (nothing moving in the log or the model's stubs), not the start.

    ``host`` is the address to bind (default: the settings' ``bind_address``). ``gpu``, the
    profile whose configs the mirror serves, is recorded (a redeploy names it again), as
    is ``server_config``, the settings file ``settings`` came from.
    ``serve_from`` is the folder the server actually reads (the CPU mirror of
    ``repository``); the deployment's state always lives in ``repository``. The caller
    holds ``deploy_lock``; an exception of any kind (Ctrl-C too) stops the server and
    clears its record.
    """
    refuse_if_recorded(Path(repository).resolve())   # before the ports: one in use may be its
    host = host or settings.bind_address
    picked_by_us = {port for port in ports.as_dict().values() if not port}
    named = {port for port in ports.as_dict().values() if port}
    for attempt in range(1, PORT_PICKS + 1):
        try:
            chosen = resolve_ports(host, ports)
            return _start_local(repository, settings, chosen, models=models, timeout=timeout,
                                host=host, model_config_name=model_config_name,
                                serve_from=serve_from, progress=progress, gpu=gpu,
                                server_config=server_config)
        except PortTaken as exc:
            # A port picked here (0 asked for one) was taken by another process between the
            # pick and the check, or the server's bind: pick again. A port the user named is
            # theirs to fix.
            if not picked_by_us or exc.port in named or attempt == PORT_PICKS:
                raise
    raise AssertionError("unreachable")


# How many times ports picked for a deploy (0 given) are picked again when another process
# takes one before tritonserver binds it (the pick and the bind cannot be one step).
PORT_PICKS = 3


def _start_local(repository: Path, settings: ServerSettings, ports: Ports, *,
                 models: Sequence[str], timeout: float, host: str,
                 model_config_name: str | None, serve_from: Path | None,
                 progress: Progress | None, gpu: str | None,
                 server_config: Path | None) -> Deployment:
    """start_local on ports resolved already."""
    repository = Path(repository).resolve()
    for folder in {repository, Path(serve_from or repository).resolve()}:   # backends under the first
        refuse_shell_unsafe_path(folder, "repository path")
    deadline = StallDeadline(timeout)
    refuse_if_recorded(repository)
    install = find_install()
    env = server_environment(install)
    with state_folder(repository, create=True) as sdir, \
            sdir.child(BACKENDS_DIRNAME, create=True) as backends_dir:
        backends = prepare_backends(install, backends_dir)
    secret = new_secret(repository)
    argv = tritonserver_argv(
        settings, binary=str(install.binary), model_repository=str(serve_from or repository),
        ports=ports,
        models=models, secret=secret, bind_address=host, backend_directory=str(backends),
        model_config_name=model_config_name, gpu_metrics=False,
        # Several local servers share this host's /dev/shm: with the python backend's one
        # default prefix their stubs' regions collide (a second server then took its whole
        # exit timeout, 30 s, to stop). The HTTP port is unique while the server runs, the
        # token for ever: the regions a killed server left are this server's alone to remove.
        python_shm_prefix=f"tritonkit_{ports.http}_{secrets.token_hex(4)}_")
    # Auto-complete stays on, though it starts one more stub per python-backend model load
    # (1.3 s, 0.4 CPU s here): with --disable-auto-complete-config 2.51's python backend
    # aborted (boost::interprocess::lock_exception) finalizing a swapped-out config's instance
    # and starting two versions of a model, and a reload of an unchanged version was a no-op.
    log_path = server_log(repository)
    proc = None
    raise_open_files_limit()                # inherited by the server: a file per connection
    try:
        with _new_log(repository) as log:
            # A new session: the server outlives this command and Ctrl-C here does not
            # reach it; stop_local signals the whole group.
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        deployment = Deployment(
            target="local", repository=str(repository), host=client_host(host),
            http_port=ports.http, grpc_port=ports.grpc, metrics_port=ports.metrics,
            secret_header=settings.restricted_api.header, models=list(models),
            started_at=time.time(), pid=proc.pid, log_path=str(log_path),
            argv=[a if "restricted" not in a else a.split("=", 1)[0] + "=<secret>" for a in argv],
            extra={"served_repository": str(serve_from or repository),
                   "model_config_name": model_config_name, "bind_address": host,
                   **({"gpu": gpu} if gpu else {}),
                   **({"server_config": str(Path(server_config).resolve())}
                      if server_config else {})},
            status=STARTING)
        save_deployment(deployment)          # from here on `tritonkit down` can stop it
        _wait_until_ready(proc, deployment, deadline, progress)
        deployment = dataclasses.replace(deployment, status=RUNNING)
        save_deployment(deployment)
        _LEFT_RUNNING.append(proc)
    except BaseException:
        if proc is not None:
            _terminate(proc.pid, Deadline(min(5.0, settings.exit_timeout_secs)),
                       prefix=shm_prefix(argv))
            proc.poll()                      # reaped already: settle its return code
            clear_deployment(repository)
        raise
    return deployment


def _new_log(repository: Path):
    """The server log, made anew, the last one kept as ``server.log.1`` (the log of a
    server that crashed outlives the redeploy its error recommends). Opened only as a file
    this call makes: a link or anything else planted there is refused, never written
    through."""
    with state_folder(repository, create=True) as folder:
        folder.rotate(LOG_FILENAME, LOG_FILENAME + ".1")
        return os.fdopen(folder.create(LOG_FILENAME), "wb")


def raise_open_files_limit() -> None:
    """This process's soft open-files limit up to its hard one, for it and the processes it
    starts: a server holds a file per client connection, a load-test worker a socket per
    slot, and the usual soft 1024 stops either near a thousand where the hard limit allows
    far more. Left as it is where the hard limit cannot be taken (unlimited, say)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


# The servers this process started and left running, as a deploy does: held so that their
# Popen is never collected while they serve (its __del__ warns "subprocess is still
# running" about a server meant to outlive the command).
_LEFT_RUNNING: list[subprocess.Popen] = []


def stop_local(deployment: Deployment, timeout: float = 40.0,
               progress: Progress | None = None) -> Stopped | bool:
    """Stop a local deployment (SIGINT, wait, then kill), all within ``timeout`` seconds;
    ``progress`` hears what a stopping Triton still waits for. If it was running, how it
    ended (a ``Stopped``, which is truthy); else False."""
    stopped: Stopped | bool = False
    prefix = shm_prefix(deployment.argv)
    if is_our_server(deployment):
        pid: int = deployment.pid        # type: ignore[assignment]
        deadline = Deadline(timeout)
        try:
            with contextlib.suppress(ProcessLookupError):    # gone: _terminate says so
                os.kill(pid, 0)          # ours to signal, before its models are unloaded
                unload_models(deployment, deadline, progress)
            stopped = _terminate(pid, deadline, progress,
                                 Path(deployment.log_path) if deployment.log_path else None,
                                 prefix)
        except PermissionError:          # its record stays: the server still runs
            raise _not_ours_to_signal([pid], Path(deployment.repository)) from None
    elif deployment.pid:                 # crashed or killed: what it left behind
        _clear_leftovers(deployment.pid, prefix)
    clear_deployment(Path(deployment.repository))
    remove_mirror(Path(deployment.repository))
    return stopped


def remove_mirror(repository: Path) -> bool:
    """Remove ``repository``'s mirror (``mirror_dir``) once no server reads it; whether it
    was removed. Its ONNX models are hard-linked snapshots: left behind, a re-exported
    model's old graph kept its disk space until the next deploy, which rebuilds the mirror.

    Left alone while a deploy holds the lock (it builds or serves this mirror, or is
    stopping its own server on a failure), while a deployment is recorded again (a deploy
    since the stop) or while any tritonserver still serves it. Nothing but that folder is
    removed: a link in it is unlinked, never followed, and a mirror that is itself a link
    is left as it is."""
    mirror = mirror_dir(repository)
    if mirror.is_symlink() or not mirror.is_dir():
        return False
    try:
        with deploy_lock(repository):
            return discard_mirror(repository)
    except UsageError:                   # another deploy holds the lock, or .tritonkit is foreign
        return False


def discard_mirror(repository: Path) -> bool:
    """``remove_mirror`` for a caller that holds the deploy lock (a deploy that failed):
    the mirror removed unless a deployment is recorded or a server still serves it;
    whether it was removed. Removed through descriptors: a link in it is unlinked, never
    followed; a mirror that is itself a link (or no folder) is left as it is."""
    if is_recorded(repository) or unrecorded_servers(repository):
        return False
    try:
        with state_folder(Path(repository).resolve()) as folder:
            info = folder.lstat(MIRROR_DIRNAME)
            if info is None or not stat.S_ISDIR(info.st_mode):
                return False
            return folder.remove_tree(MIRROR_DIRNAME)
    except (FileNotFoundError, NotADirectoryError):
        return False


def _wait_until_ready(proc: subprocess.Popen, deployment: Deployment, deadline: Deadline,
                      progress: Progress | None = None) -> None:
    """Until the server and every model are READY. Each look at the start that sees it
    move (``LoadWatch``: a line in the log, a model loaded, a stub working) moves a stall
    deadline on; one that runs out names the model the start waits on."""
    watch = LoadWatch(proc.pid, deployment.log_path, deployment.models)
    while True:
        code = proc.poll()
        if code is not None:
            raise _startup_failure(deployment, code)
        if watch.look():
            deadline.moved()
        if health(deployment.http_url, "/v2/health/ready") is None and all(
                health(deployment.http_url, f"/v2/models/{m}/ready") is None
                for m in deployment.models) and _holds_its_ports(proc.pid, deployment):
            return
        if progress:
            progress(f"starting tritonserver (pid {proc.pid}): {watch.line()}")
        if deadline.expired():
            raise watch.stalled(deadline)
        time.sleep(min(0.25, deadline.left()))


def _holds_its_ports(pid: int, deployment: Deployment) -> bool:
    """Whether the server listens on each of its ports (``listening``: it says READY before
    it binds the metrics port, and exits when that one is taken). True where /proc cannot
    tell."""
    held = listening_ports(pid)
    wanted = {deployment.http_port, deployment.grpc_port, deployment.metrics_port} - {None, 0}
    return held is None or wanted <= held


_MODEL_ERROR = re.compile(r'"(failed to load \'[^\']+\'[^"]*?|Poll failed for model directory[^"]*)"')
_SERVER_ERROR = re.compile(r"^error: (.*)$", re.MULTILINE)
_FAILED_MODEL = re.compile(r"failed to load '([^']+)'")


def _signal_name(code: int | str) -> str | None:
    """The signal a negative exit code (Popen's, waitstatus_to_exitcode's) stands for."""
    if not isinstance(code, int) or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


# Of the signals that end a tritonserver only these come from outside: `tritonkit down`, a
# service manager, a closed terminal (SIGKILL has words of its own). Triton's crash handler
# logs 'Signal (11) received.' and a stack trace for SIGSEGV and SIGABRT, then raises the
# signal again: those exit codes, and the other faults', are the server's own crash.
_FROM_OUTSIDE = frozenset({"SIGINT", "SIGTERM", "SIGHUP"})
_CRASHES = frozenset({"SIGSEGV", "SIGABRT", "SIGBUS", "SIGFPE", "SIGILL"})


def _ended_by_signal(deployment: Deployment, code: int | str, when: str) -> ServerError | None:
    """How a server a signal ended is told, or None if no signal ended it. Stopped from
    outside or killed, it did not fail by itself: the log's last lines, quoted as if they
    were its reason, were only what it was doing then. Crashed, they are its last words."""
    name = _signal_name(code)
    if name is None:
        return None
    hint = f"full server log: {deployment.log_path}"
    if name == "SIGKILL":
        how = "killed by SIGKILL (by hand, or by the kernel's OOM killer: see dmesg)"
    elif name in _FROM_OUTSIDE:
        how = f"stopped by {name} from outside (another tritonkit down, say)"
    else:
        what = f"crashed ({name})" if name in _CRASHES else f"ended by {name}"
        how = f"{what}: {_last_words(_log_of(deployment))}"
        hint = f"the server log, with Triton's stack trace if it logged one: {deployment.log_path}"
    return ServerError(f"tritonserver exited with code {code} {when}: {how}", hint=hint)


class PortTaken(ServerError):
    """tritonserver could not listen on a port: another process bound it between the check
    and the server's own bind (``port`` the one it named)."""

    def __init__(self, message: str, *, port: int, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.port = port


# How tritonserver says it (HTTP, gRPC and metrics alike): "Socket '127.0.0.1:8000' already in use".
_PORT_IN_USE = re.compile(r"Socket '[^']*:(\d+)' already in use")


# What tritonserver logs as it begins to shut down (a start-up model failed: it exits).
_SHUTTING_DOWN = '"Waiting for in-flight requests to complete."'


def _startup_failure(deployment: Deployment, code: int) -> ServerError:
    """Turn an exited server's log into one error that carries Triton's own message.

    A model that failed to load makes tritonserver exit, and 2.51 sometimes crashes as it
    unloads the rest (SIGSEGV: seen in a suite run on a busy host): the failed load is the
    cause, said first; the crash after it is a clause."""
    log = _log_of(deployment)
    crashed_on_the_way_out = (_signal_name(code) in _CRASHES and _SHUTTING_DOWN in log
                              and any(_failed_loads(log)))
    if not crashed_on_the_way_out and \
            (signalled := _ended_by_signal(deployment, code, "before its models were READY")):
        return signalled
    if taken := _PORT_IN_USE.search(log):
        port = int(taken.group(1))
        return PortTaken(f"tritonserver could not listen on port {port}: another process took "
                         "it as the server started", port=port,
                         hint=f"pass free ports (0 picks one); full server log: {deployment.log_path}")
    model_errors = list(_failed_loads(log))
    server_errors = _SERVER_ERROR.findall(log)
    hint = f"full server log: {deployment.log_path}"
    if model_errors:
        message = _in_repository_terms(model_errors[0], deployment)
        failed = _FAILED_MODEL.match(message)
        if failed and (crash := stub_crash(failed.group(1), message, deployment.log_path,
                                           during="while it loaded")):
            return ModelLoadError(crash, hint=hint)
        then = f" (tritonserver then crashed as it shut down: {_signal_name(code)})" \
            if crashed_on_the_way_out else ""
        return ModelLoadError(f"Triton could not load a model: {message}{then}", hint=hint)
    if server_errors:
        return ServerError(f"tritonserver exited ({code}): {server_errors[-1]}", hint=hint)
    return ServerError(f"tritonserver exited with code {code}: {_tail(log)}", hint=hint)


def _failed_loads(log: str):
    """Triton's first line for each model it could not load, as its log says it."""
    return (m.group(1).split("\\n")[0] for m in _MODEL_ERROR.finditer(log)
            if "version" in m.group(1) or "Poll failed" in m.group(1))


def _in_repository_terms(message: str, deployment: Deployment) -> str:
    """Triton's message with the mirror it read named as the repository the user gave: a
    model file there is the user's file under the same path (a hard link, or a copy)."""
    served = deployment.extra.get("served_repository")
    if not served or Path(served) == Path(deployment.repository):
        return message
    return message.replace(str(served).rstrip("/") + "/", str(deployment.repository).rstrip("/") + "/")


_SIGNALLED = re.compile(r"^Signal \((\d+)\) received\.", re.MULTILINE)


def how_it_ended(deployment: Deployment) -> str:
    """How a local server that is gone ended, as far as its log tells (a SIGKILL leaves
    nothing there)."""
    try:
        log = _log_of(deployment)
    except OSError:
        return "its log cannot be read to say how it ended"
    if signalled := _SIGNALLED.findall(log):
        name = _signal_name(-int(signalled[-1]))
        if name in _CRASHES:
            return f"it crashed ({name}): {_last_words(log)}"
        return f"it was stopped by {name}"
    if errors := _SERVER_ERROR.findall(log):
        return f"it exited on an error: {errors[-1]}"
    return "its log ends with no shutdown (killed, as by kill -9 or the OOM killer, or crashed)"


def _log_of(deployment: Deployment) -> str:
    """The end of a server's log (``LOG_TAIL_BYTES``), '' if there is none."""
    return read_tail(Path(deployment.log_path), LOG_TAIL_BYTES) if deployment.log_path else ""


def _tail(log: str) -> str:
    """A log's last three lines as one, for an error that has nothing better to quote."""
    return " | ".join(log.strip().splitlines()[-3:]) or "no output"


# What a python backend stub writes when its server is gone: never the server's last words.
_STUB_ORPHANED = re.compile(r"^.*Non-graceful termination detected\..*$\n?", re.MULTILINE)


def _last_words(log: str) -> str:
    """What a server's log said last: its last error line, else its last lines. The stack
    trace a crash handler writes after 'Signal (11) received.' is left to the log itself."""
    crashes = [m for m in _SIGNALLED.finditer(log) if _signal_name(-int(m.group(1))) in _CRASHES]
    if crashes:
        log = log[:crashes[-1].start()]
    log = _STUB_ORPHANED.sub("", log)
    errors = _SERVER_ERROR.findall(log)
    return errors[-1] if errors else _tail(log)


def _exit_failure(deployment: Deployment, code: int | str) -> ServerError:
    """A server that started and then died: its last words, never taken for a failed load."""
    if signalled := _ended_by_signal(deployment, code, "after it started"):
        return signalled
    return ServerError(f"tritonserver exited with code {code} after it started: "
                       f"{_last_words(_log_of(deployment))}",
                       hint=f"full server log: {deployment.log_path}")


def server_exited(deployment: Deployment) -> ServerError | None:
    """Why a local server that had started is gone, from its log, or None while it runs."""
    pid: int = deployment.pid      # type: ignore[assignment]
    code: int | str = "unknown"
    try:
        done, status = os.waitpid(pid, os.WNOHANG)      # one call: it reaps, so never twice
        if done == 0:
            return None                                 # our child, running
        code = os.waitstatus_to_exitcode(status)
    except ChildProcessError:                           # not our child, or reaped elsewhere
        if _running(pid):
            return None
    return _exit_failure(deployment, code)


def refuse_gone_local_server(deployment: Deployment) -> None:
    """A ServerError at once if the record names a local server that no longer runs.

    Only a local record, and only before the warm-up: a server that dies in the middle
    may be redeployed (new ports, new secret), and that restart is followed."""
    if deployment.target != "local" or is_our_server(deployment):
        return
    repository = deployment.repository
    raise ServerError(
        f"the local server recorded in {repository} (pid {deployment.pid}) is no longer "
        f"running: {how_it_ended(deployment)}",
        hint=f"start it again: tritonkit deploy --repository {shell_word(repository)} (it replaces the "
             f"stale record); its log: {deployment.log_path}")


def is_our_server(deployment: Deployment) -> bool:
    """Whether the deployment's pid is still its tritonserver: the process is named so and
    serves the deployment's own folder (a pid the OS gave to something else since is
    never signalled)."""
    if not deployment.pid:
        return False
    served = deployment.extra.get("served_repository") or deployment.repository
    return _is_tritonserver(_cmdline(deployment.pid), f"--model-repository={served}")


def _is_tritonserver(argv: list[str], serving: str) -> bool:
    """A command line of tritonserver started with ``serving`` (its --model-repository)."""
    return bool(argv) and "tritonserver" in argv[0] and serving in argv[1:]


# How a stop ended (``Stopped.how``).
EXITED, EXIT_TIMEOUT, KILLED, GONE = "exited", "exit timeout", "killed", "gone"

# What Triton 2.51 logs when its --exit-timeout-secs ends with work still open; it then
# exits at once, that work abandoned (`down` is not its parent: no exit status to read).
_EXIT_TIMEOUT_EXPIRED = "Exit timeout expired"
# A countdown line at 0: the exit timeout was spent (its phases share it). Triton says
# "Exit timeout expired" only when models are still live then; one held up by a client's
# connection alone, its models already unloaded, goes on to exit without saying it.
_TIMEOUT_SPENT = '"Timeout 0: Found '


@dataclasses.dataclass(frozen=True)
class Stopped:
    """How a stopped tritonserver ended: ``how`` is EXITED (on its own after SIGINT),
    EXIT_TIMEOUT (Triton gave up waiting and exited), KILLED (still running when the
    deadline ran out) or GONE (it had exited before the SIGINT); ``waited_for`` is, from
    Triton's log, what held it up (EXIT_TIMEOUT) or what it still waited for (KILLED).
    Always truthy: a server was there to stop."""

    pid: int
    how: str
    seconds: float
    timeout: float
    waited_for: str | None = None

    def describe(self) -> str:
        """One clause for a user: how it ended, and after how long."""
        after = f"{self.seconds:.1f} s after SIGINT"
        if self.how == KILLED:
            waiting = f" while Triton waited for {self.waited_for}" if self.waited_for else ""
            return (f"it was still running when the {self.timeout:g} s timeout ran out, so "
                    f"it was killed (SIGKILL){waiting}")
        if self.how == EXIT_TIMEOUT:
            held = f", held up by {self.waited_for}" if self.waited_for else ""
            return f"Triton's exit timeout expired and it exited {after}{held}"
        if self.how == GONE:
            return "it had exited already"
        return f"it exited on its own {after}"


def _terminate(pid: int, deadline: Deadline, progress: Progress | None = None,
               log_path: Path | None = None, prefix: str | None = None) -> Stopped:
    """SIGINT the server, wait, then SIGKILL its process group: all within ``deadline``;
    then what it left behind (``_clear_leftovers``: stubs, shared memory under ``prefix``,
    else the one its command line names). Returns how it ended.

    The last tenth of it (at most 1 s) is kept for the kill, so a server that ignores
    SIGINT (Triton waits for requests in flight) is still gone when the deadline ends.
    While it waits, ``progress`` hears what Triton's log says it waits for. A
    PermissionError (another user's process) is raised before anything is sent."""
    prefix = prefix or shm_prefix(_cmdline(pid))
    log_from = _log_size(log_path)       # what this stop logs comes after it
    started = time.monotonic()
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        _clear_leftovers(pid, prefix)
        return Stopped(pid, GONE, 0.0, deadline.seconds)
    kill_at = deadline.end - min(1.0, deadline.seconds / 10)
    told_at = 0.0
    while time.monotonic() < kill_at and _alive(pid):
        if progress and time.monotonic() - told_at >= 0.5:
            told_at = time.monotonic()
            what = draining(log_path) if log_path else None
            progress(f"stopping tritonserver (pid {pid})"
                     + (f": Triton waits for {what}" if what else ""))
        time.sleep(min(0.05, max(0.0, kill_at - time.monotonic())))
    killed = _alive(pid)
    seconds = time.monotonic() - started
    try:
        os.killpg(pid, signal.SIGKILL)  # the stubs too, if any linger
    except (ProcessLookupError, PermissionError):
        pass
    while _alive(pid) and not deadline.expired():
        time.sleep(0.01)
    if not _alive(pid):
        _clear_leftovers(pid, prefix)
    return ending_from_log(_log_since(log_path, log_from), pid=pid, killed=killed,
                           seconds=seconds, timeout=deadline.seconds)


def ending_from_log(logged: str, *, pid: int, killed: bool, seconds: float,
                    timeout: float) -> Stopped:
    """How a tritonserver told to stop (SIGINT) ended, from what it logged since: killed
    at the timeout, its exit timeout expired, or on its own; and what held it up."""
    waits = _waits(logged)
    if killed:      # what it still waited for: what the progress line said last
        return Stopped(pid, KILLED, seconds, timeout, waits[-1][1] if waits else None)
    if _EXIT_TIMEOUT_EXPIRED in logged or (waits and _TIMEOUT_SPENT in logged):
        return Stopped(pid, EXIT_TIMEOUT, seconds, timeout, _held_up_by(waits))
    return Stopped(pid, EXITED, seconds, timeout)


def _log_size(log_path: Path | None) -> int:
    try:
        return log_path.lstat().st_size if log_path else 0
    except OSError:
        return 0


def _log_since(log_path: Path | None, offset: int) -> str:
    """What a log holds past ``offset`` ('' without one), its last ``LOG_TAIL_BYTES`` at most."""
    if not log_path:
        return ""
    return read_tail(log_path, min(LOG_TAIL_BYTES, max(0, _log_size(log_path) - offset)))


# The python backend's regions of one server: tritonkit_<http port>_<token>_<uuid>.
_SHM_PREFIX = re.compile(r"shm-region-prefix-name=(tritonkit_\d+_[0-9a-f]{8}_)$")
SHM = Path("/dev/shm")


def shm_prefix(argv: Sequence[str]) -> str | None:
    """The python backend's shared-memory prefix a tritonserver command line gives, if it
    is one of tritonkit's unique ones (an older record's port-only prefix may be another
    live server's too: None)."""
    for arg in argv:
        if found := _SHM_PREFIX.search(arg):
            return found.group(1)
    return None


def others_see_command_lines(mountinfo: Path = PROC / "self" / "mountinfo") -> bool:
    """Whether every user of this host may read every process's command line (and so
    tritonserver's secret flag in ``ps``): /proc is not mounted with ``hidepid`` 1 or 2
    (``noaccess``, ``invisible``). Where it cannot be told, yes."""
    try:
        lines = Path(mountinfo).read_text().splitlines()
    except OSError:
        return True
    for line in lines:
        fields = line.split()
        if len(fields) > 5 and fields[4] == str(PROC) and " - proc " in line:
            options = ",".join([fields[5], line.split(" - ", 1)[1].split()[-1]]).split(",")
            return not any(option in ("hidepid=1", "hidepid=2", "hidepid=noaccess",
                                      "hidepid=invisible") for option in options)
    return True


def _pids() -> list[int]:
    """Every process's id (none where there is no /proc)."""
    try:
        return [int(entry.name) for entry in PROC.iterdir() if entry.name.isdigit()]
    except OSError:
        return []


def _cmdline(pid: int) -> list[str]:
    """A process's command line ([] once it is gone)."""
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _stat(pid: int) -> list[str]:
    """A process's /proc stat fields after its name: state, ppid, pgrp, ... ([] once gone)."""
    try:
        return (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _clear_leftovers(pgid: int, prefix: str | None) -> None:
    """What a server that is gone left behind: its python-backend stubs (a server killed or
    crashed leaves them running, in its process group) and their shared-memory regions in
    /dev/shm (memory, a megabyte or more per model instance, until the host reboots).

    Only what carries the server's own shm prefix: a recorded pid the OS has since given to
    another server (whose stubs would share that process group id) is left alone."""
    if not prefix:
        return
    stubs = _stubs_of(pgid, prefix)
    for pid in stubs:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    # A SIGKILL lands when the kernel delivers it: a stub still starting could make a region
    # after the glob below. Gone first (a second at most), then the regions.
    gone_by = time.monotonic() + 1.0
    while any(_running(pid) for pid in stubs) and time.monotonic() < gone_by:
        time.sleep(0.01)
    for region in SHM.glob(prefix + "*"):
        region.unlink(missing_ok=True)


def _stubs_of(pgid: int, prefix: str) -> list[int]:
    """The python-backend stubs still running in process group ``pgid`` whose command line
    names shared memory under ``prefix``: the ones a gone server of that prefix left."""
    stubs = []
    for pid in _pids():
        fields = _stat(pid)
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            argv = _cmdline(pid)
            if (argv and argv[0].endswith("triton_python_backend_stub")
                    and any(arg.startswith(prefix) for arg in argv[1:])):
                stubs.append(pid)
    return stubs


# Triton's countdown while it stops: 'Timeout 14: Found 1 HTTP service connections' (an
# idle keep-alive client holds the stop up to --exit-timeout-secs), then in-flight work.
_DRAINING = re.compile(r'"Timeout (\d+): Found (\d+) ([^"]+)"')


def draining(log_path: Path) -> str | None:
    """What a stopping tritonserver last said it waits for, from its log's tail: e.g. '1 HTTP
    service connections (14 s left of its exit timeout)'; None if nothing (or no log)."""
    found = _DRAINING.findall(read_tail(log_path, 4096))
    if not found or not _waits_for_something(found[-1]):
        return None
    left, count, what = found[-1]
    return f"{count} {what} ({left} s left of its exit timeout)"


def _waits_for_something(found: tuple[str, str, str]) -> bool:
    """A countdown line that counts something: '1 live models and 0 …', or '0 live models
    and 2 in-flight non-inference requests'."""
    _left, count, what = found
    return any(int(n) for n in re.findall(r"\d+", f"{count} {what}"))


def _waits(logged: str) -> list[tuple[str, str]]:
    """Each countdown line of a stop that counts something, in order: its kind (what it
    counts, the numbers left out) and what it says ('6 live models and 0 in-flight …')."""
    return [(re.sub(r"\d+", "#", what), f"{count} {what}")
            for left, count, what in _DRAINING.findall(logged)
            if _waits_for_something((left, count, what))]


def _held_up_by(waits: list[tuple[str, str]]) -> str | None:
    """What held a stop up until Triton's exit timeout expired. Its phases share the
    timeout, in order (client connections, in-flight work, unloads): the first that waited
    for something held it; said with its last count, what that phase still waited for
    when it ended (models unload one by one: '6 live models' was where it began, '1 live
    models' what it waited for to the end, and what the progress line said last)."""
    if not waits:
        return None
    kind = waits[0][0]
    return [said for k, said in waits if k == kind][-1]


def _alive(pid: int) -> bool:
    try:
        # Reap it if it is our child; a zombie counts as gone.
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    return _running(pid)


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (reaps nothing)."""
    fields = _stat(pid)
    return bool(fields) and fields[0] != "Z"
