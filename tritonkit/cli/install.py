"""`tritonkit install-server`: the embedded tritonserver the local target runs, with pip."""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
from typing import Annotated

import typer
from rich.markup import escape

from tritonkit.cli import app
from tritonkit.cli.options import console
from tritonkit.errors import ServerError, UsageError
from tritonkit.server import binary
from tritonkit.server.local import signals_interrupt


@app.command("install-server", epilog="Example: tritonkit install-server (after pip install tritonkit)")
def install_server(
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the pip commands, run nothing (e.g. to run them with uv).")] = False,
) -> None:
    """Install the embedded tritonserver 2.51.0 that deploy --target local runs, and ONNX
    Runtime for the ONNX models it serves, into this Python environment."""
    commands = binary.install_commands()
    if not commands:
        install = binary.find_install()
        console.print(f"nothing to do: the embedded tritonserver ({escape(str(install.binary))}) "
                      "and ONNX Runtime are installed", highlight=False, soft_wrap=True)
        return
    if not dry_run and importlib.util.find_spec("pip") is None:
        raise UsageError("this Python environment has no pip to install the server with",
                         hint="run these with your installer (e.g. uv pip install ...): "
                              + "; ".join(shlex.join(argv[3:]) for argv in commands))
    for argv in commands:
        console.print(escape(shlex.join(argv)), highlight=False, soft_wrap=True)
        if dry_run:
            continue
        with signals_interrupt():   # SIGTERM and SIGHUP stop pip as Ctrl-C does
            code = subprocess.run(argv).returncode
        if code:
            raise ServerError(f"pip exited with {code} (its output is above)",
                              hint=f"fix what pip said, then rerun: {shlex.join(argv)}")
    if not dry_run:
        console.print(f"installed: the embedded tritonserver at "
                      f"{escape(str(binary.find_install().binary))}", highlight=False,
                      soft_wrap=True)
