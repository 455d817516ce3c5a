"""Option aliases shared by several commands (one definition, the same help everywhere)."""

from __future__ import annotations

import os
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
Timeout = Annotated[float, typer.Option(
    "--timeout", help="One deadline in seconds for the whole wait.", min=0.1)]
JsonOut = Annotated[Optional[Path], typer.Option(
    "--json", help="Also write the result as JSON to this file.")]
Force = Annotated[bool, typer.Option("--force", help="Replace output files that exist.")]

# Written to a pipe or a CI log, Rich lays tables out for 80 columns (unless COLUMNS says
# otherwise) and cuts what does not fit with '…': a load test's p99.9 read '24.…'. Such a
# log is read in a wide viewer, and a cut number is lost: lay out for LOG_COLUMNS there.
LOG_COLUMNS = 160


def _console(*, stderr: bool = False) -> Console:
    console = Console(stderr=stderr)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(stderr=stderr, width=LOG_COLUMNS)
    return console


console = _console()
err_console = _console(stderr=True)


@contextmanager
def progress_status(first: str, *, plain_after: float | None = None
                    ) -> Iterator[Callable[[str], None]]:
    """A spinner line saying what is being waited for, updated through the callable it
    yields. On a terminal only: a pipe or a log file gets no control codes. There, with
    ``plain_after``, a wait that lasts longer gets one plain line on stderr, the message
    of that moment — not a line per update — so a CI log says what a long wait was for."""
    if not console.is_terminal:
        if plain_after is None:
            yield lambda _message: None
            return
        told = False
        since = time.monotonic()

        def tell_once(message: str) -> None:
            nonlocal told
            if not told and time.monotonic() - since >= plain_after:
                told = True
                err_console.print(escape(message), highlight=False, soft_wrap=True)

        yield tell_once
        return
    with console.status(escape(first)) as status:
        yield lambda message: status.update(escape(message))
