"""The deployment state kept inside a model repository (``DIR/.tritonkit/``).

``deploy`` writes it; ``down``, ``warmup`` and ``loadtest`` read it to find the server,
its URLs and the secret header for the restricted model-repository API. The secret
lives in its own 0600 file and is never printed in full.

Where the secret is visible all the same: tritonserver takes it only as a flag
(``--http-restricted-api=model-repository:<header>=<secret>``), so on the host that
runs the local server it is in ``/proc/<pid>/cmdline``, which every local user can
read unless ``/proc`` is mounted with ``hidepid=2`` (or ``hidepid=invisible``). On a
shared host, mount it so; inside the containers (compose, Kubernetes) only the
container's own processes and the host's root see it.

A deploy holds ``deploy_lock`` from its first check to its last write, so a second
deploy of the same repository fails at once instead of starting a server of its own.

Every file here is read and written through ``state_folder`` (an ``OwnedFolder``): a link,
FIFO or folder planted in ``.tritonkit/`` (or ``.tritonkit`` itself a link) is refused,
never followed.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shlex
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Iterator

from tritonkit.errors import UsageError, shell_word
from tritonkit.fileio import KIB, MIB, STATE_DIRNAME, OwnedFolder

STATE_FILENAME = "server.json"
SECRET_FILENAME = "secret"
LOCK_FILENAME = "deploy.lock"
STARTING, RUNNING = "starting", "running"


def state_dir(repository: Path) -> Path:
    return Path(repository) / STATE_DIRNAME


def state_folder(repository: Path, *, create: bool = False) -> OwnedFolder:
    """``DIR/.tritonkit`` opened without following links (made 0700 if ``create``);
    FileNotFoundError if it (or the repository) is missing and not to be made."""
    return OwnedFolder(Path(repository), STATE_DIRNAME, create=create, mode=0o700)


def _read_state(repository: Path, name: str, limit: int) -> bytes | None:
    """The bytes of the state file ``name``; None where there is none (no state folder,
    no repository)."""
    try:
        with state_folder(repository) as folder:
            return folder.read(name, limit)
    except (FileNotFoundError, NotADirectoryError):
        return None


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
    # "starting": recorded as soon as the process exists (so `down` can stop a deploy that
    # was killed half-way); "running": every model READY.
    status: str = RUNNING

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


#: The longest secret header value tritonkit sends (Triton's HTTP server takes 8 KiB of
#: headers in all; a token is a few dozen characters).
SECRET_MAX_CHARS = 4096


def check_secret(value: str, source: str) -> str:
    """``value`` if it can be an HTTP header's value: 1 to ``SECRET_MAX_CHARS`` visible
    ASCII characters (no space, no control character: a CR LF in it would start a header
    of its own); else a UsageError naming ``source`` and never the value."""
    hint = ("give a secret of visible ASCII characters, e.g. "
            "python3 -c 'import secrets; print(secrets.token_urlsafe(24))'")
    if not value:
        raise UsageError(f"the secret from {source} is empty", hint=hint)
    if len(value) > SECRET_MAX_CHARS:
        raise UsageError(f"the secret from {source} is {len(value)} characters long; a header "
                         f"value of at most {SECRET_MAX_CHARS} is sent", hint=hint)
    for at, char in enumerate(value, start=1):
        if not "!" <= char <= "~":
            what = ("a space" if char == " " else
                    f"a control character (0x{ord(char):02x})" if ord(char) < 0x20 or char == "\x7f"
                    else "a character that is not ASCII")
            raise UsageError(f"the secret from {source} holds {what} at character {at}: a "
                             "header value must be visible ASCII", hint=hint)
    return value


def new_secret(repository: Path) -> str:
    """Generate a deployment secret and store it 0600 beside the state."""
    value = secrets.token_urlsafe(24)
    with state_folder(repository, create=True) as folder:
        folder.write(SECRET_FILENAME, value + "\n", mode=0o600)
    return value


def read_secret(repository: Path) -> str:
    """The secret recorded in ``repository`` (checked as a header value)."""
    path = state_dir(repository) / SECRET_FILENAME
    raw = _read_state(repository, SECRET_FILENAME, 16 * KIB)
    if raw is None:
        raise UsageError(f"no deployment secret in {path.parent}",
                         hint="deploy with 'tritonkit deploy' first")
    return check_secret(raw.decode("utf-8", "replace").strip(), str(path))


def _state_file(repository: Path) -> Path:
    return state_dir(Path(repository)) / STATE_FILENAME


def is_recorded(repository: Path) -> bool:
    """Whether a deployment is recorded in ``repository`` (its server may be gone): anything
    named so there, which ``load_deployment`` then reads or refuses."""
    try:
        with state_folder(repository) as folder:
            return folder.lstat(STATE_FILENAME) is not None
    except (FileNotFoundError, NotADirectoryError):
        return False


def save_deployment(deployment: Deployment) -> Path:
    with state_folder(Path(deployment.repository), create=True) as folder:
        return folder.write(STATE_FILENAME, json.dumps(asdict(deployment), indent=2) + "\n")


def require_repository_folder(repository: Path) -> None:
    """A UsageError unless ``repository`` is a folder (the one a deployment is recorded in)."""
    repository = Path(repository)
    if not repository.exists():
        raise UsageError(f"model repository {repository} does not exist",
                         hint="pass --repository with the folder you deployed")
    if not repository.is_dir():
        raise UsageError(f"model repository {repository} is not a folder",
                         hint="pass --repository with the folder you deployed")


#: A record is a few KiB; a larger file is no record of ours.
STATE_MAX_BYTES = MIB
CORRUPT_HINT = ("tritonkit down --repository {repository} stops a local server it finds "
                "serving the repository and clears the record; else delete the file")


class CorruptState(UsageError):
    """The deployment record is there but cannot be read as one (truncated, edited)."""


def load_deployment(repository: Path) -> Deployment:
    """The deployment recorded in ``repository``; UsageError if there is none."""
    path = _state_file(repository)
    if Path(repository).exists():
        require_repository_folder(repository)
    try:
        raw = _read_state(repository, STATE_FILENAME, STATE_MAX_BYTES)
    except OSError as exc:
        raise UsageError(f"cannot read deployment state {path} ({exc.strerror or exc})",
                         hint="run as the user who deployed it, or check the file's permissions") \
            from None
    if raw is None:
        raise UsageError(f"no deployment recorded in {repository}",
                         hint=f"start one: tritonkit deploy --repository {shell_word(repository)}")
    try:
        data = json.loads(raw)
    except RecursionError:                     # nested thousands deep: no record of ours
        raise CorruptState(f"deployment state {path} is corrupt (it nests deeper than a JSON "
                           "parser follows)", hint=CORRUPT_HINT.format(repository=shell_word(repository))) \
            from None
    except ValueError as exc:                  # bad JSON, bad bytes
        raise CorruptState(f"deployment state {path} is corrupt ({exc})",
                           hint=CORRUPT_HINT.format(repository=shell_word(repository))) from None
    # Fields a later tritonkit added are left aside: `down` must still stop its server.
    known = {f.name for f in fields(Deployment)}
    try:
        deployment = Deployment(**{k: v for k, v in data.items() if k in known})
    except (TypeError, AttributeError) as exc:  # a field missing, or not a JSON object
        raise CorruptState(f"deployment state {path} is corrupt ({exc})",
                           hint=CORRUPT_HINT.format(repository=shell_word(repository))) from None
    # The state belongs to the folder it was found in: a repository moved (or renamed)
    # after its deploy keeps its secret and record here, and `down` must clear this
    # record, never one a new repository at the old path keeps. How the server was started
    # (argv, served_repository) stays as recorded: that is how `down` knows its process.
    return replace(deployment, repository=str(Path(repository).resolve()))


def clear_deployment(repository: Path) -> None:
    try:
        with state_folder(repository) as folder:
            folder.remove(STATE_FILENAME)
    except (FileNotFoundError, NotADirectoryError):
        pass


@contextmanager
def deploy_lock(repository: Path) -> Iterator[None]:
    """Hold the repository's deploy lock; a UsageError at once if another deploy holds it.

    An ``flock``: the kernel releases it when the holder exits, however it exits, so a
    killed deploy never leaves a stale lock behind. The server does not inherit it
    (the descriptor is close-on-exec).
    """
    with state_folder(Path(repository), create=True) as folder:
        fd = folder.lock(LOCK_FILENAME)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"another tritonkit deploy of {repository} is in progress",
                             hint="wait for it to end, or stop it: tritonkit down "
                                  f"--repository {shell_word(repository)}") from None
        yield
    finally:
        os.close(fd)


def mask(secret: str) -> str:
    """A secret as it may be shown: its first four characters only."""
    return secret[:4] + "…" if secret else ""


def redeploy_command(repository: Path) -> str:
    """``tritonkit down`` then ``tritonkit deploy`` of ``repository`` as it was deployed: its
    target, the ports it serves on (a bare deploy takes 8000-8002, which may be another
    server's), its GPU profile and server settings file, and for compose the folder of its
    files, its image, its GPUs and whether it is public (a bare redeploy would write new
    files into ./docker and stop publishing on every interface), from its record (none
    readable: the bare commands)."""
    deploy = ["tritonkit", "deploy", "-r", str(repository)]
    try:
        deployment = load_deployment(repository)
    except UsageError:
        deployment = None
    if deployment is not None:
        if deployment.target != "local":
            deploy += ["--target", deployment.target]
        # The ports it serves on: the record keeps those, not whether the deploy picked
        # them (--*-port 0); they were free until the down just before.
        for flag, port, default in (("--http-port", deployment.http_port, 8000),
                                    ("--grpc-port", deployment.grpc_port, 8001),
                                    ("--metrics-port", deployment.metrics_port, 8002)):
            if port != default:
                deploy += [flag, str(port)]
        extra = deployment.extra
        if extra.get("gpu"):                     # the profile, where the record keeps it
            deploy += ["--gpu", str(extra["gpu"])]
        if deployment.target == "compose":
            if extra.get("compose_file"):
                deploy += ["--out", str(Path(extra["compose_file"]).parent)]
            if extra.get("image"):
                deploy += ["--image", str(extra["image"])]
            if extra.get("device_ids") and list(extra["device_ids"]) != ["0"]:
                deploy += ["--device-ids", ",".join(map(str, extra["device_ids"]))]
            if extra.get("public"):
                deploy += ["--public"]
            if extra.get("onnx_backend", "onnxruntime") != "onnxruntime":
                deploy += ["--onnx-backend", str(extra["onnx_backend"])]
        if extra.get("server_config"):
            deploy += ["--server-config", str(extra["server_config"])]
    return f"{shlex.join(['tritonkit', 'down', '-r', str(repository)])} && {shlex.join(deploy)}"
