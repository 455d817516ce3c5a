"""The ``tritonkit`` console script.

Importing the commands takes a moment (Typer, rich, protobuf); a Ctrl-C in it would
otherwise end in a KeyboardInterrupt traceback from an import, before ``cli.main``'s error
boundary exists, and a SIGTERM or SIGHUP would end the process by the signal itself (exit
-15, no word). Each ends as it does later: one line, 128 + the signal.
"""

from __future__ import annotations

import signal
import sys


class _Stopped(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop(signum, frame) -> None:
    raise _Stopped(signum)


def main() -> int:
    # Only while the commands import: a SIGHUP ignored from the start (nohup) stays ignored.
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP)}
    for signum, handler in previous.items():
        if handler == signal.SIG_DFL:
            signal.signal(signum, _stop)
    try:
        from tritonkit.cli import main as run
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except _Stopped as stopped:
        print(f"error: stopped by {signal.Signals(stopped.signum).name}", file=sys.stderr)
        return 128 + stopped.signum
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
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
    # A Ctrl-C that lands while they are set (one pressed every few milliseconds met that
    # window) leaves the outcome interrupted, with no traceback: no call, where Python
    # runs a pending handler, comes between the command's end and this loop.
    while True:
        try:
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, signal.SIG_IGN)
            break
        except KeyboardInterrupt:
            code = 128 + signal.SIGINT
    from tritonkit.cli import debugging, interrupted

    if interrupted(code) and not debugging():
        # What a signal cut short and the interpreter collects as it ends says nothing.
        sys.unraisablehook = lambda unraisable: None
    return code
