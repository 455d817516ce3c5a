"""The one boundary around the user's code: the SPEC's file, its factory, the model's
forward() and whatever they call.

An Exception the user's code raises is the call site's to say: it knows what was being
done (importing, building, verifying at batch 7). What is no Exception ends a plain Python
program, and would end the export with the user's exit code, silently or as a Ctrl-C:
``sys.exit()`` (SystemExit), a KeyboardInterrupt the code raised itself, GeneratorExit, a
BaseException of its own. Each becomes a ``UserCodeError`` (exit 1) that names the code.
A real Ctrl-C meanwhile stays one: the SIGINT handler in force during the block marks it.
``os._exit()`` and a signal the code sends itself are out of any boundary's reach.

What the process runs on is put back after the block: the working folder, the SIGINT,
SIGTERM and SIGHUP handlers, the umask, the recursion limit, ``sys.stdout`` and
``sys.stderr`` (a closed one opened again on its descriptor). Code that changes them would
otherwise move where the export writes (a relative ``--repository``), what a Ctrl-C does,
who may read the files written, or where (whether) the result is said.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Iterator

from tritonkit.errors import Interrupted, UserCodeError

_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                 if hasattr(signal, name))


@contextlib.contextmanager
def running(what: str, duty: str) -> Iterator[None]:
    """Run the block as the user's code ``what`` ("the factory m.py:build"): what it raises
    that is no Exception becomes a UserCodeError naming it, its hint saying ``duty`` (what
    the code is for: "a factory returns (module, example_inputs)")."""
    folder = _working_folder()
    with _handlers_kept() as ctrl_c, _process_kept():
        try:
            yield
        except Exception:
            raise
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt) and ctrl_c.is_set() \
                    or isinstance(exc, Interrupted):
                raise               # the user's Ctrl-C (SIGTERM, SIGHUP), not the code's own
            did, cause = _what_it_did(exc)
            raise UserCodeError(f"{what} {did}: nothing was exported",
                                hint=f"take the {cause} out: {duty} (TRITONKIT_DEBUG=1 shows "
                                     "where it is)") from exc
        finally:
            if folder is not None and _working_folder() != folder:
                with contextlib.suppress(OSError):
                    os.chdir(folder)


def _what_it_did(exc: BaseException) -> tuple[str, str]:
    """How the error says what the code did, and what to take out of it."""
    if isinstance(exc, SystemExit):
        code = exc.code
        said = "" if code is None else str(code) if isinstance(code, int) else _short(repr(code))
        return f"called sys.exit({said})", "sys.exit() call"
    name = type(exc).__name__
    if isinstance(exc, KeyboardInterrupt):
        return (f"raised {name} itself (no Ctrl-C reached tritonkit)", f"raise {name}")
    text = _short(str(exc))
    return f"raised {name}" + (f" ({text})" if text else ""), f"raise {name}"


def _short(text: str) -> str:
    lines = text.strip().splitlines()
    line = lines[0] if lines else ""
    return line if len(line) <= 200 else line[:197] + "..."


@contextlib.contextmanager
def _process_kept() -> Iterator[None]:
    """The umask, the recursion limit and the standard streams as they were before the block."""
    umask = os.umask(0o022)
    os.umask(umask)
    limit = sys.getrecursionlimit()
    streams = {"stdout": sys.stdout, "stderr": sys.stderr}
    try:
        yield
    finally:
        os.umask(umask)
        sys.setrecursionlimit(limit)
        for name, stream in streams.items():
            if getattr(stream, "closed", False):        # the code closed it: open its fd again
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    fd = 1 if name == "stdout" else 2
                    stream = open(fd, "w", encoding=stream.encoding, errors=stream.errors,
                                  closefd=False, buffering=1)
            setattr(sys, name, stream)


def _working_folder() -> str | None:
    try:
        return os.getcwd()
    except OSError:         # deleted under us: nothing to go back to
        return None


@contextlib.contextmanager
def _handlers_kept() -> Iterator[threading.Event]:
    """The signal handlers as they were before the block, put back after it; meanwhile a
    SIGINT sets the event, then goes to the handler that was in force.

    Only the main thread has signal handlers. Elsewhere no Ctrl-C can raise in the block,
    so any KeyboardInterrupt there is the code's own: the event stays clear.
    """
    ctrl_c = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield ctrl_c
        return
    before = {signum: signal.getsignal(signum) for signum in _SIGNALS}
    previous = before.get(signal.SIGINT)
    if callable(previous):      # SIG_IGN and SIG_DFL raise nothing in Python: left as they are

        def on_sigint(signum, frame):
            ctrl_c.set()
            previous(signum, frame)

        signal.signal(signal.SIGINT, on_sigint)
    try:
        yield ctrl_c
    finally:
        for signum, handler in before.items():
            if handler is not None and signal.getsignal(signum) is not handler:
                signal.signal(signum, handler)
