"""The errors tritonkit raises, and the exit codes they map to.

Library code raises these; the CLI's one error boundary (``tritonkit.cli.main``)
prints ``error: <message>`` and ``hint: <hint>`` on stderr and exits with the
class's ``exit_code``. ``TRITONKIT_DEBUG=1`` shows the traceback as well.

    TritonkitError                  something went wrong (exit 1)
    ├── UsageError                  the user's input is wrong: a path, a flag, a file (exit 2)
    │   └── ProfileError            a GPU profile or server-settings file is invalid
    ├── ServerError                 tritonserver could not be found, started, reached or stopped
    │   ├── ModelLoadError          Triton refused to load a model (its own message is kept)
    │   └── NotTriton               what answered is not Triton 2 (another service, version)
    ├── ExportError                 a model could not be exported
    │   ├── VerificationError       the exported model disagrees with PyTorch
    │   └── UserCodeError           the user's code ended the run itself (sys.exit(), its
    │                               own KeyboardInterrupt): no exporter is tried after it
    ├── LoadTestError               a load test could not run or ended in errors (exit 4)
    └── DeployInterrupted           a signal ended a deploy that leaves something behind
                                    (compose containers): exit 128 + the signal, 130 for Ctrl-C

An SLA miss is not an error: ``tritonkit loadtest`` reports it with ``EXIT_SLA_MISS``.
``Interrupted`` is not one either: Ctrl-C, SIGTERM or SIGHUP while a deploy runs, raised
as a BaseException (as KeyboardInterrupt is) so that every clean-up runs the same way
and ``main`` says which signal it was (exit 128 + the signal). Where the clean-up leaves
something running, it becomes a ``DeployInterrupted`` that says what and how to stop it.
"""

from __future__ import annotations

import shlex
import signal

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_SLA_MISS = 3
EXIT_RUN_ERRORS = 4
EXIT_INTERRUPTED = 128 + signal.SIGINT     # a shell's code for a command Ctrl-C ended


class TritonkitError(Exception):
    """Base class: a message that names the thing, and a hint that names the fix."""

    exit_code = EXIT_ERROR

    def __init__(self, message: str, hint: str | None = None, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.detail = detail   # more than one line (a server's traceback): shown with the debug variable

    def __str__(self) -> str:
        return self.message


class UsageError(TritonkitError):
    """The user's input is wrong (a missing path, a bad flag value, a bad file)."""

    exit_code = EXIT_USAGE


class ProfileError(UsageError):
    """A GPU profile or server-settings file is missing or has a bad field."""


class ServerError(TritonkitError):
    """tritonserver could not be found, started, reached or stopped."""


class ModelLoadError(ServerError):
    """Triton refused to load a model; ``message`` carries Triton's own words."""


class NotTriton(ServerError):
    """The server answered, but not as Triton 2 does: another service on the port, or
    another version (``tritonkit.answers`` checks every answer read)."""


class ExportError(TritonkitError):
    """A PyTorch model could not be exported."""


class VerificationError(ExportError):
    """The exported model's outputs disagree with PyTorch beyond tolerance."""


class UserCodeError(ExportError):
    """The user's code (the SPEC's file, the factory, forward()) raised what is no
    Exception: sys.exit(), a KeyboardInterrupt of its own, GeneratorExit, a BaseException.
    It ends the export: the next exporter would run the same code."""


class LoadTestError(TritonkitError):
    """A load test could not run, or ended with errors."""

    exit_code = EXIT_RUN_ERRORS


class Interrupted(BaseException):
    """A signal that ends the command (Ctrl-C, SIGTERM, SIGHUP): one clean-up path for all.

    Not a KeyboardInterrupt: Typer turns that into a bare exit code before ``main``
    could say what happened."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class DeployInterrupted(TritonkitError):
    """A signal ended a deploy that leaves something behind (compose containers): the
    message says what may run, the hint how to stop it. Exit 128 + the signal, as every
    interrupted command: ``EXIT_INTERRUPTED`` (130) for Ctrl-C."""

    def __init__(self, message: str, hint: str | None = None, *,
                 signum: int = signal.SIGINT) -> None:
        super().__init__(message, hint)
        self.signum = signum

    @property
    def exit_code(self) -> int:  # type: ignore[override]  # the signal's, not the class's
        return 128 + self.signum


def printable(text: str) -> str:
    """``text`` with each control or other unprintable character written as its escape
    (``\\x1b``, ``\\r\\n``): a path, flag or folder name said in an error or a report reaches
    the terminal as one line of text, never as a command to the terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def shell_word(value: object) -> str:
    """``value`` as one word of a shell command a hint or a report prints for the user to
    paste: quoted where a space, quote or ``$`` would split it or run something. One with a
    control character (a newline) is ANSI-C quoted (``$'a\\nb'``, bash and zsh): the one
    line an error is printed on escapes it, which inside plain quotes pastes as ``\\n``."""
    text = str(value)
    if not any(ord(c) < 32 or ord(c) == 127 for c in text):
        return shlex.quote(text)
    escaped = "".join(_ANSI_C.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 32 or ord(c) == 127 else c)
                      for c in text)
    return f"$'{escaped}'"


_ANSI_C = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def interrupted_by(signum: int) -> str:
    """How an error names the signal that ended a command: "interrupted" for Ctrl-C."""
    return "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
