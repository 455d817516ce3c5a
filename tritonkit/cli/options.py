"""Option aliases shared by several commands (one definition, the same help everywhere)."""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Callable, Iterator, Optional

import typer
from rich.console import Console
from rich.markup import escape

Repository = Annotated[Path, typer.Option(
    "--repository", "-r", help="Model repository folder (holds <model>/config.pbtxt).")]
OptionalRepository = Annotated[Optional[Path], typer.Option(
    "--repository", "-r", help="Model repository of a deployment (its state finds the server).")]
Url = Annotated[Optional[str], typer.Option(
    "--url", help="Triton HTTP address host:port, instead of a deployment's state.")]
# A day: the most a flag in seconds takes. Longer is no sampling interval (time.sleep
# overflows at inf), no deadline (inf, 1e300: a typo), and a --live recording is held in
# memory until it is diagnosed.
DAY_S = 86_400.0
Timeout = Annotated[float, typer.Option(
    "--timeout", help="One deadline in seconds for the whole wait.", min=0.1, max=DAY_S)]
JsonOut = Annotated[Optional[Path], typer.Option(
    "--json", help="Also write the result as JSON to this file.")]
Force = Annotated[bool, typer.Option("--force", help="Replace output files that exist.")]

# Written to a pipe or a CI log, Rich lays tables out for 80 columns (unless COLUMNS says
# otherwise) and cuts what does not fit with '…': a load test's p99.9 read '24.…'. Such a
# log is read in a wide viewer, and a cut number is lost: lay out for LOG_COLUMNS there.
LOG_COLUMNS = 160


def _console(*, stderr: bool = False) -> Console:
    """Rich's console; off a terminal, tables LOG_COLUMNS wide and lines of text left whole
    (a path or a command cut across lines cannot be copied, nor found by grep)."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, soft_wrap=True,
                          width=None if os.environ.get("COLUMNS") else LOG_COLUMNS)
    return console


console = _console()
err_console = _console(stderr=True)


# Off a terminal, a long deploy or warm-up tells its phase of the moment this often at most
# (once it is this old): a CI log shows what it waits for, and a quick run prints nothing.
PHASE_LINES_EVERY_S = 5.0


@contextmanager
def progress_status(first: str, *, plain_after: float | None = None,
                    plain_every: float | None = None) -> Iterator[Callable[[str], None]]:
    """A spinner line saying what is being waited for, updated through the callable it
    yields. On a terminal only: a pipe or a log file gets no control codes. There, with
    ``plain_after``, a wait that lasts longer gets a plain line on stderr, the message of
    that moment — not a line per update — so a CI log says what a long wait was for; with
    ``plain_every`` too, a later message gets its line once the last line is that old (a
    long deploy tells each slow phase, a few seconds apart at most); without it, that one
    line is all."""
    if console.is_terminal:
        with console.status(escape(first)) as status:
            yield lambda message: status.update(escape(message))
        return
    if plain_after is None:
        yield lambda _message: None
        return
    plain = _PlainProgress(first, plain_after, plain_every)
    try:
        yield plain.update
    finally:
        plain.close()


class _PlainProgress:
    """``progress_status`` off a terminal: the message of the moment as a plain stderr line
    when it has not been told yet and the last line (at first, the start) is old enough.

    A ticker thread looks too, not only each update: a phase that blocks without a word (a
    model's explicit load) is told while it lasts, not after it ended, when the next
    message comes."""

    TICK_S = 0.25

    def __init__(self, first: str, after: float, every: float | None) -> None:
        self.message, self.after, self.every = first, after, every
        self.told: str | None = None
        self.told_at = time.monotonic()
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.ticker = threading.Thread(target=self._tick, name="plain-progress", daemon=True)
        self.ticker.start()

    def update(self, message: str) -> None:
        if self.stopped.is_set():       # the command's own output has begun: say nothing
            return
        with self.lock:
            self.message = message
            self._tell_if_due()

    def close(self) -> None:
        self.stopped.set()
        self.ticker.join()

    def _tick(self) -> None:
        while not self.stopped.wait(self.TICK_S):
            with self.lock:
                self._tell_if_due()

    def _tell_if_due(self) -> None:
        gap = self.after if self.told is None else self.every
        if gap is None or self.message == self.told or time.monotonic() - self.told_at < gap:
            return
        self.told, self.told_at = self.message, time.monotonic()
        err_console.print(escape(self.message), highlight=False, soft_wrap=True)
