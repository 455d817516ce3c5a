"""A real Docker engine for the compose tests: the one that answers, or one they start.

``Engine.start`` takes an engine that answers and leaves it alone; otherwise, as root, it
installs Debian's docker.io where dockerd is missing and starts ``dockerd
--storage-driver=vfs`` (overlay is not available on our machines) in the background, with a
pidfile and a log of its own. ``standin`` builds the stand-in Triton image
(docker/standin/build.sh) once. ``close`` removes what the tests made — the Compose
projects they name (containers, networks, volumes by their project label) and the image if
this run built it — and stops the engine only if it started it and nothing else runs
on it. Anything it cannot do is a reason to skip (``Engine.unavailable``), never a guess.

One engine serves a whole run, its xdist workers included (tests/conftest.py, ``ENGINE``):
the worker that asks first starts it and builds the image, ``record`` says what it did, every
worker works on ``Engine.of_run(folder, record)``, and the run's end closes it once. The
projects the tests name are kept in a file of that folder, so that end knows them all.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "docker" / "standin" / "build.sh"
#: Every Docker object the tests make is named from this (image, Compose projects' folders).
PREFIX = "tk-test-"
START_S = 60.0


def _run(*argv: str, timeout: float = 60.0, **kwargs) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(argv, 1, "", str(exc))


def _docker(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    return _run("docker", *args, timeout=timeout)


def answers() -> bool:
    return shutil.which("docker") is not None and \
        _docker("info", "--format", "{{.ServerVersion}}", timeout=20).returncode == 0


def apt_install(*packages: str) -> str | None:
    """Install Debian packages (as root); why not, or None once done."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return f"{', '.join(packages)} missing, and no apt-get as root to install it"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"],
                 ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]):
        done = _run(*argv, timeout=600, env=env)
        if done.returncode != 0:
            return f"{' '.join(argv)} failed: {(done.stderr or done.stdout).strip()[-300:]}"
    return None


class Engine:
    """The engine the compose tests run on, and what they made on it."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.unavailable: str | None = None     # why no engine: the tests skip with it
        self.pid: int | None = None             # dockerd, when this run started it
        self.image: str | None = None
        self.built_image = False

    def record(self) -> dict:
        """What ``of_run`` needs in another process of the run (JSON)."""
        return {"unavailable": self.unavailable, "pid": self.pid, "image": self.image,
                "built_image": self.built_image}

    @classmethod
    def of_run(cls, workdir: Path, record: dict) -> "Engine":
        engine = cls(workdir)
        for key, value in record.items():
            setattr(engine, key, value)
        return engine

    @property
    def projects(self) -> list[str]:
        """The Compose projects the tests named, in any process of the run."""
        path = self.workdir / "projects"
        return path.read_text().split() if path.exists() else []

    def add_project(self, project: str) -> None:
        with open(self.workdir / "projects", "a") as f:
            f.write(project + "\n")

    def start(self) -> "Engine":
        if answers():
            return self
        if os.geteuid() != 0:
            self.unavailable = (f"no Docker engine answers, and starting one needs root "
                                f"(uid {os.geteuid()} here)")
            return self
        if not shutil.which("dockerd") and (why := apt_install("docker.io")):
            self.unavailable = why
            return self
        log = open(self.workdir / "dockerd.log", "ab")
        process = subprocess.Popen(
            ["dockerd", "--storage-driver=vfs", f"--pidfile={self.workdir / 'dockerd.pid'}"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        log.close()
        self.pid = process.pid
        _STARTED.append(process)          # reaped when it ends, if this process is still there
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline and process.poll() is None:
            if answers():
                return self
            time.sleep(0.5)
        tail = (self.workdir / "dockerd.log").read_text(errors="replace").strip().splitlines()[-3:]
        self._stop_dockerd()
        self.unavailable = f"dockerd --storage-driver=vfs did not start: {' | '.join(tail)}"
        return self

    def need_compose(self) -> None:
        from tritonkit.server.compose import compose_command

        if compose_command() is None and (why := apt_install("docker-compose")):
            self.unavailable = why

    def standin(self) -> str:
        """The stand-in image, built once (an image of the same inputs is kept as it is)."""
        if self.image:
            return self.image
        if not shutil.which("debootstrap") and (why := apt_install("debootstrap")):
            raise RuntimeError(f"cannot build the stand-in image: {why}")
        name = f"{PREFIX}standin"
        tag = hashlib.sha256(BUILD.read_bytes()).hexdigest()[:12]    # as build.sh names it
        existed = _docker("image", "inspect", f"{name}:{tag}").returncode == 0
        built = _run("bash", str(BUILD), name, timeout=900,
                     env={**os.environ, "PYTHON": sys.executable})
        if built.returncode != 0:
            raise RuntimeError(f"docker/standin/build.sh failed ({built.returncode}): "
                               f"{built.stderr.strip()[-2000:]}")
        self.image = built.stdout.strip().splitlines()[-1]
        assert self.image == f"{name}:{tag}", self.image
        self.built_image = not existed
        return self.image

    def project_objects(self, project: str) -> dict[str, list[str]]:
        """The containers, networks and volumes Compose made for ``project``."""
        label = f"label=com.docker.compose.project={project}"
        return {kind: _docker(*command, "--filter", label).stdout.split()
                for kind, command in (("containers", ("ps", "-aq")),
                                      ("networks", ("network", "ls", "-q")),
                                      ("volumes", ("volume", "ls", "-q")))}

    def remove_project(self, project: str) -> None:
        objects = self.project_objects(project)
        for kind, rm in (("containers", ("rm", "-f")), ("networks", ("network", "rm")),
                         ("volumes", ("volume", "rm", "-f"))):
            if objects[kind]:
                _docker(*rm, *objects[kind], timeout=120)

    def close(self) -> None:
        for project in self.projects:
            self.remove_project(project)
        if self.built_image and self.image:
            _docker("image", "rm", self.image, timeout=120)
        if self.pid is None:
            return
        others = _docker("ps", "-aq").stdout.split()
        if others:          # someone else's containers: their engine now too
            print(f"\nleft dockerd (pid {self.pid}) running: {len(others)} containers "
                  "the tests did not make are on it", file=sys.stderr)
            return
        self._stop_dockerd()

    def _stop_dockerd(self) -> None:
        """SIGTERM, 30 s, then SIGKILL: from whichever process of the run closes it, which
        need not be the one that started it (and so cannot wait for it as its child)."""
        if self.pid is None:
            return
        for signum in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)
            deadline = time.monotonic() + 30
            while _alive(self.pid) and time.monotonic() < deadline:
                for process in _STARTED:
                    process.poll()
                time.sleep(0.1)
            if not _alive(self.pid):
                break
        self.pid = None


# dockerd processes this process started: polled, so that one that ends is reaped here.
_STARTED: list[subprocess.Popen] = []


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
