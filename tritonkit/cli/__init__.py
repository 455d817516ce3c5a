"""The tritonkit command line: thin Typer commands over the library, one error boundary.

Each command group lives in its own module and registers itself on ``app``; a command
parses its options, makes one library call, renders the result and picks the exit code.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import signal
import sys
import traceback
from collections.abc import MutableMapping

import typer
from typer.core import TyperGroup

from tritonkit.errors import (EXIT_ERROR, EXIT_INTERRUPTED, EXIT_USAGE, Interrupted, TritonkitError,
                             interrupted_by, printable)

DEBUG_ENV = "TRITONKIT_DEBUG"

# Each command and the module of tritonkit.cli that defines it, in the order `tritonkit
# --help` lists them. A module is imported when its command is looked up: `tritonkit down`
# does not import what export, config, loadtest or monitor need (ONNX, gRPC, protobuf).
COMMANDS = {
    "export": "export", "config": "config", "deploy": "deploy", "down": "deploy",
    "warmup": "warmup", "loadtest": "loadtest", "tune": "tune",
    "monitor": "monitor", "diagnose": "monitor", "doctor": "monitor",
    "install-server": "install",
}


class _OnDemand(MutableMapping):
    """Click's table of commands, each built when first looked up (its module imported)."""

    def __init__(self, built: dict) -> None:
        self._built = dict(built)

    def __getitem__(self, name: str):
        if name not in self._built and name in COMMANDS:
            importlib.import_module(f"{__name__}.{COMMANDS[name]}")
            for info in app.registered_commands:
                if (defined := _name(info)) not in self._built:
                    self._built[defined] = typer.main.get_command_from_info(
                        _in_full(info), pretty_exceptions_short=app.pretty_exceptions_short,
                        rich_markup_mode=app.rich_markup_mode)
        return self._built[name]

    def __setitem__(self, name: str, command) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        del self._built[name]

    def __iter__(self):
        yield from COMMANDS
        yield from (name for name in self._built if name not in COMMANDS)

    def __len__(self) -> int:
        return len(set(COMMANDS) | set(self._built))


class _Commands(TyperGroup):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _OnDemand(self.commands)


app = typer.Typer(
    name="tritonkit",
    help="PyTorch model → warmed-up, SLA-verified NVIDIA Triton deployment.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Click's plain help: it wraps every line to the terminal. Rich's option table cut a
    # long word in its narrow help column with "…", and showed <bool> beside every flag.
    rich_markup_mode=None,
    cls=_Commands,
)



def installed_version() -> str:
    """The installed distribution's version (package metadata); the package's own where it
    runs from a checkout that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tritonkit")
    except PackageNotFoundError:
        from tritonkit import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        print(f"tritonkit {installed_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit.",
                                 callback=_print_version, is_eager=True),
) -> None:
    """PyTorch model → warmed-up, SLA-verified NVIDIA Triton deployment."""


def _name(info) -> str:
    return info.name or typer.main.get_command_name(info.callback.__name__)


def _in_full(info):
    """`tritonkit --help` lists each command with its docstring's first paragraph, whole:
    left to itself, Click cuts it to what fits one line and ends it with "..."."""
    doc = inspect.getdoc(info.callback) if info.callback else None
    if info.short_help is None and doc:
        info.short_help = " ".join(doc.split("\n\n")[0].split())
    return info


def commands() -> dict:
    """Every command, by name, as Click runs it (each module imported)."""
    return dict(typer.main.get_command(app).commands)


def debugging() -> bool:
    """Whether TRITONKIT_DEBUG asks for tracebacks and what finalisers print."""
    return os.environ.get(DEBUG_ENV, "") not in ("", "0", "false", "no")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI. Every TritonkitError ends here as one line (and a hint) on stderr.

    A signal can cut a library object's ``__init__`` short (a tritonclient client's); its
    ``__del__`` then fails when collected, and Python would print "Exception ignored in ..."
    and a traceback around our one line. What is collected while a command runs is held
    back: said after it if the command was not interrupted, else only with the debug
    variable (the console script, ``tritonkit._entry``, does the same for what is
    collected after an interrupted command, as the interpreter ends)."""
    held: list[str] = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: held.append(_said(unraisable))
    code: int | None = None
    try:
        code = _main(argv)
        return code
    finally:
        sys.unraisablehook = previous
        if not (interrupted(code) and not debugging()):
            sys.stderr.write("".join(held))


def interrupted(code: int | None) -> bool:
    """Whether ``main`` returned a signal's exit code (128 + the signal)."""
    return code is not None and code >= 128


def _said(unraisable) -> str:
    """What Python's own hook prints for an exception nobody could catch."""
    where = unraisable.err_msg or "Exception ignored in"
    if unraisable.object is not None:
        where = f"{where}: {unraisable.object!r}"
    return where + "\n" + "".join(traceback.format_exception(
        unraisable.exc_type, unraisable.exc_value, unraisable.exc_traceback))


def _main(argv: list[str] | None) -> int:
    try:
        # In non-standalone mode click returns typer.Exit's code instead of raising it.
        code = app(args=argv, prog_name=app.info.name, standalone_mode=False)
    except TritonkitError as exc:
        if debugging():
            traceback.print_exc()
        _print_error(exc.message, exc.hint)
        if exc.detail and debugging():
            print(exc.detail, file=sys.stderr)
        return _exit(exc.exit_code)
    except typer.Exit as exc:
        return _exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt, Interrupted) as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        print(f"error: {interrupted_by(signum)}", file=sys.stderr)
        return _exit(128 + signum)
    except typer.TyperException as exc:  # bad flags (Click's usage errors): said as ours are
        if type(exc).__name__ == "NoArgsIsHelpError":    # a bare `tritonkit`: its help
            exc.show()
        else:
            _print_error(_usage_message(exc), _usage_hint(exc))
        return _exit(getattr(exc, "exit_code", EXIT_USAGE))
    except Exception as exc:  # our bugs, and paths no check of ours foresaw
        if debugging():
            traceback.print_exc()
        if isinstance(exc, OSError) and exc.filename:
            # A path the user gave that the OS refused (a file where a folder must be, no
            # permission, a name too long): bad input, said in the OS's words.
            _print_error(f"cannot use {exc.filename}: {exc.strerror or exc}",
                         "check the path: a folder where a file is needed or the other way "
                         "round, its permissions, its length")
            return _exit(EXIT_USAGE)
        _print_error(f"internal error: {exc.__class__.__name__}: {exc}",
                     f"this is a tritonkit bug; rerun with {DEBUG_ENV}=1 for the traceback "
                     "and report it")
        return _exit(EXIT_ERROR)
    if code == EXIT_INTERRUPTED:
        # Typer turns Ctrl-C into a silent exit 130 (no command of ours returns it).
        print("error: interrupted", file=sys.stderr)
    return _exit(code if isinstance(code, int) else 0)


def _exit(code: int | None) -> int:
    return int(code or 0)


def _print_error(message: str, hint: str | None) -> None:
    """One line each: what the user typed or a folder holds may carry a control character."""
    print(f"error: {printable(message)}", file=sys.stderr)
    if hint:
        print(f"hint: {printable(hint)}", file=sys.stderr)


def _usage_message(exc: typer.TyperException) -> str:
    """Click's message, with its "(Possible options: …)" said as the one closest match."""
    options = getattr(exc, "possibilities", None)
    if options:
        closest = difflib.get_close_matches(exc.option_name, options, n=1, cutoff=0.0)
        return f"{exc.message} (did you mean {closest[0]}?)"
    return exc.format_message()


def _usage_hint(exc: typer.TyperException) -> str | None:
    """The help of the command the bad flag was given to."""
    ctx = getattr(exc, "ctx", None)
    return f"{ctx.command_path} --help" if ctx is not None else None
