"""What a starting local Triton's models are doing, model by model, and what its log says
of one model.

Triton opens its HTTP port only once every model given at start-up has loaded, so a
starting server is watched from outside: its log (``loading: m:1``, an instance's
initialize, ``successfully loaded 'm'``) and its python-backend stubs (one process per
model instance, in the server's process group, working or idle). Anything that moves is
progress (``LoadWatch.look``); the model idle the longest is the one a stalled start
waits on (``LoadWatch.stalled``).

A python-backend stub that died or stopped answering Triton's health check is a crash of
its model, whatever the request was (``stub_crash``).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from tritonkit.deadline import Deadline
from tritonkit.errors import ServerError
from tritonkit.fileio import read_tail

PROC = Path("/proc")
STUB = "triton_python_backend_stub"
#: A stub counts as working while it uses at least this share of a core (a loading model
#: imports, reads and builds sessions; an idle stub only wakes its health thread).
BUSY_SHARE = 0.05
#: A model idle this long is said so in the progress line.
IDLE_SHOWN_S = 5.0
#: The most of a log one look reads (a starting server writes a few KiB).
_READ_BOUND = 4 << 20
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

# Triton 2.51's lines for a model's load, as its log writes them.
_LOADING = re.compile(r'"loading: (.+):\d+"')
_INSTANCE = re.compile(r'"TRITONBACKEND_ModelInstanceInitialize: (\S+) \(')
_LOADED = re.compile(r'"successfully loaded \'([^\']+)\'')
# A log line's prefix: severity and date, time, thread, source file and line.
_PREFIX = re.compile(r"^[IWE]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] ")
# What the python backend answers when a stub missed its 1 s health check (it died, or
# hangs): on a request ('Stub process 'm_0_0' is not healthy.', or without the name when
# the request could not even be handed over), and at a load.
_UNHEALTHY = re.compile(r"Stub process(?: '(?P<instance>[^']+)')? is not healthy"
                        r"|Failed to obtain the health mutex")


@dataclass
class _Model:
    """One model of a starting server, as seen so far."""

    name: str
    moved_at: float                             # last time anything of it moved
    loading_since: float | None = None          # its "loading:" line
    loaded: bool = False
    stubs: dict[int, tuple[float, float]] = field(default_factory=dict)  # pid: (cpu s, when)


class LoadWatch:
    """The models a local tritonserver (``pid``, the leader of its process group) loads at
    start-up, from its log at ``log_path`` and its python-backend stubs."""

    def __init__(self, pid: int, log_path: str | Path | None, models: Sequence[str],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pid, self.log_path, self.clock = pid, log_path, clock
        self.started = clock()
        self.models = {name: _Model(name, self.started) for name in models}
        self.offset = 0
        self.partial = ""

    def look(self) -> bool:
        """Read what moved since the last look; whether anything did (a log line, a model
        loaded, a stub started or working)."""
        now = self.clock()
        moved = False
        for line in self._new_lines():
            moved = True
            if found := _LOADING.search(line):
                if model := self.models.get(found.group(1)):
                    model.loading_since, model.moved_at = now, now
            elif found := _INSTANCE.search(line):
                if model := self._model_of_instance(found.group(1)):
                    model.moved_at = now
            elif found := _LOADED.search(line):
                if model := self.models.get(found.group(1)):
                    model.loaded, model.moved_at = True, now
        seen = {m.name: m.stubs for m in self.models.values()}
        for model in self.models.values():
            model.stubs = {}                # a stub gone (auto-complete's) is left out
        for pid, name, cpu in python_stubs(self.pid):
            model = self.models.get(name)
            if model is None or model.loaded:
                continue
            before = seen[name].get(pid)
            model.stubs[pid] = (cpu, now)
            if before is None or cpu - before[0] >= BUSY_SHARE * max(now - before[1], 0.01):
                model.moved_at = now
                moved = True
        return moved

    def line(self) -> str:
        """What each model is doing, in one line: READY, or loading for how long (and idle
        for how long, once that shows)."""
        now = self.clock()
        ready = [m.name for m in self.models.values() if m.loaded]
        loading = []
        for model in self.models.values():
            if model.loaded:
                continue
            since = model.loading_since or self.started
            idle = now - model.moved_at
            loading.append(f"{model.name} for {now - since:.0f} s"
                           + (f" (idle {idle:.0f} s)" if idle >= IDLE_SHOWN_S else ""))
        head = f"loading {len(self.models)} model{'s' if len(self.models) != 1 else ''}"
        if ready:
            head += f", {len(ready)} READY ({', '.join(ready)})"
        return head + (f": {', '.join(loading)}" if loading else ": every one loaded, "
                                                                  "the server starting")

    def stalled(self, deadline: Deadline) -> ServerError:
        """The error for a start that stopped moving: the model idle the longest named,
        with its lines in the server's log."""
        log = f"full server log: {self.log_path}"
        waiting = [m for m in self.models.values() if not m.loaded]
        if not waiting:
            return ServerError(f"tritonserver loaded every model but did not become ready: "
                               f"{deadline.ran_out()}", hint=f"raise --timeout, or read the {log}")
        now = self.clock()
        stuck = min(waiting, key=lambda m: m.moved_at)
        ready = [m.name for m in self.models.values() if m.loaded]
        others = [m.name for m in waiting if m is not stuck]
        what = [f"loading for {now - (stuck.loading_since or self.started):.0f} s"]
        if stuck.stubs:
            pids = ", ".join(str(pid) for pid in stuck.stubs)
            what.append(f"its python-backend stub{'s' if len(stuck.stubs) > 1 else ''} idle "
                        f"(pid {pids})")
        if ready:
            what.append(f"READY: {', '.join(ready)}")
        if others:
            what.append(f"also loading: {', '.join(others)}")
        lines = log_lines(self.log_path, naming=stuck.name)
        said = f"its lines in the server log: {' | '.join(lines)}; " if lines else ""
        return ServerError(
            f"tritonserver stalled loading '{stuck.name}': {deadline.ran_out()} "
            f"({'; '.join(what)})",
            hint=f"{said}if it is only slow (a big model on a busy host), raise --timeout; {log}")

    def _model_of_instance(self, instance: str) -> _Model | None:
        """The model an instance name (``<model>_<group>_<index>``) belongs to."""
        owners = [m for name, m in self.models.items() if instance.startswith(name + "_")]
        return max(owners, key=lambda m: len(m.name), default=None)

    def _new_lines(self) -> list[str]:
        """The log's complete lines written since the last look (at most ``_READ_BOUND``)."""
        size = _size(self.log_path)
        if size <= self.offset:
            return []
        if size - self.offset > _READ_BOUND:
            self.partial = ""               # what it ended with is not read
        text = read_tail(Path(self.log_path), min(size - self.offset, _READ_BOUND))
        self.offset = size
        *lines, self.partial = (self.partial + text).split("\n")
        return [line for line in lines if line.strip()]


def _size(log_path: str | Path | None) -> int:
    try:
        return os.lstat(log_path).st_size if log_path else 0
    except OSError:
        return 0


def python_stubs(pgid: int) -> list[tuple[int, str, float]]:
    """The python-backend stubs in process group ``pgid``: (pid, the model it serves, the
    CPU seconds it has used). The model is the folder of the model file the stub runs
    (``<repository>/<model>/<version>/model.py``)."""
    stubs = []
    try:
        entries = [entry for entry in PROC.iterdir() if entry.name.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if fields[2] != str(pgid) or fields[0] == "Z":
                continue
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except (OSError, IndexError):
            continue
        if len(argv) > 1 and argv[0].endswith(STUB):
            cpu = (int(fields[11]) + int(fields[12])) / _TICKS
            stubs.append((int(entry.name), Path(argv[1]).parent.parent.name, cpu))
    return stubs


def log_lines(log_path: str | Path | None, *, since: int | None = None,
              naming: str | None = None, limit: int = 5) -> list[str]:
    """The last ``limit`` lines of a server's log past offset ``since`` (of its last 256
    KiB at most), without Triton's prefix and quotes. With ``naming``, only the lines that
    name that model or one of its instances (``m_0``, ``m_0_0``) and those a stub wrote
    itself (a model's prints and tracebacks carry no prefix)."""
    if not log_path:
        return []
    text = read_tail(Path(log_path), min(256 << 10, max(0, _size(log_path) - (since or 0))))
    named = (re.compile(rf"(?<![\w.-]){re.escape(naming)}(?:_\d+)*(?![\w.-])")
             if naming else None)
    lines = []
    for raw in text.splitlines():
        line = _PREFIX.sub("", raw).strip().strip('"').strip()
        if not line or line[0] in "+|":
            continue
        if named and line == raw.strip() and line.startswith("error: "):
            continue                    # the server's own last words, not a stub's
        if named and not named.search(line) and line != raw.strip():
            continue
        lines.append(line)
    return lines[-limit:]


def stub_crash(name: str, message: str, log_path: str | Path | None, *, during: str,
               since: int | None = None) -> str | None:
    """One line for model ``name`` when Triton's ``message`` says its python-backend stub
    died or stopped answering its health check (a crash of the model's process, however it
    came), with its last lines in the server's log: those logged past offset ``since``
    (what the model's requests made it write), else those that name it. None when the
    message says no such thing."""
    found = _UNHEALTHY.search(message)
    if found is None:
        return None
    instance = found.group("instance")
    lines = [line for line in (log_lines(log_path, since=since, limit=20) if since is not None
                               else log_lines(log_path, naming=name, limit=20))
             if not _UNHEALTHY.search(line)][-5:]        # Triton's words are said already
    said = f"; its last lines in the server log: {' | '.join(lines)}" if lines else ""
    return (f"'{name}' crashed {during}: its python-backend stub"
            f"{f' {instance}' if instance else ''} died or stopped answering "
            f"(Triton: {message}){said}")
