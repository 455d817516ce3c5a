"""The ``tritonkit`` console script.

Importing the commands takes a moment (Typer, rich, protobuf); a Ctrl-C in it would
otherwise end in a KeyboardInterrupt traceback from an import, before ``cli.main``'s error
boundary exists. It ends as a Ctrl-C later does: one line, exit 130.
"""

from __future__ import annotations

import signal
import sys


def main() -> int:
    try:
        from tritonkit.cli import main as run
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    try:
        code = run()
    except KeyboardInterrupt:
        # A Ctrl-C pressed again as the command ended, after its error boundary had said how
        # (a suite run met it in cli.main's last lines): the outcome stands as interrupted,
        # with no traceback.
        code = 128 + signal.SIGINT
    # The command's outcome is decided: a Ctrl-C, SIGTERM or SIGHUP now (a user pressing
    # again) would end the interpreter by the signal itself as it exits, before it flushed
    # what the command said to a pipe or a file (its whole report) and with no exit code.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    from tritonkit.cli import debugging, interrupted

    if interrupted(code) and not debugging():
        # What a signal cut short and the interpreter collects as it ends says nothing.
        sys.unraisablehook = lambda unraisable: None
    return code
