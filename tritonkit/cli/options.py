"""Option aliases shared by several commands (one definition, the same help everywhere)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

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

console = Console()
err_console = Console(stderr=True)
