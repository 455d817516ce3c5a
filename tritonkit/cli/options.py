"""Option aliases shared by several commands (one definition, the same help everywhere)."""

from __future__ import annotations

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

console = Console()
err_console = Console(stderr=True)


@contextmanager
def progress_status(first: str) -> Iterator[Callable[[str], None]]:
    """A spinner line saying what is being waited for, updated through the callable it
    yields. Only on a terminal: a pipe or a log file gets nothing (no control codes)."""
    if not console.is_terminal:
        yield lambda _message: None
        return
    with console.status(escape(first)) as status:
        yield lambda message: status.update(escape(message))
