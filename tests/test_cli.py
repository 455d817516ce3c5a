"""The CLI's contract: every command has help with an example, one error boundary."""

from __future__ import annotations

import subprocess
import sys

import pytest

import typer

from tests.conftest import run_cli
from tritonkit.cli import app

# Every command the CLI registers, so a new one cannot skip its help and example.
COMMANDS = sorted(typer.main.get_command(app).commands)


def test_the_cli_registers_every_documented_command():
    assert set(COMMANDS) >= {"export", "config", "deploy", "down", "warmup", "loadtest",
                             "monitor", "diagnose", "doctor"}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(command, capsys):
    assert run_cli(command, "--help") == 0
    assert "Example: tritonkit " + command in capsys.readouterr().out


def test_an_unknown_option_is_a_usage_error_without_traceback(capsys):
    assert run_cli("deploy", "--no-such-flag") == 2
    err = capsys.readouterr().err
    assert "No such option" in err and "Traceback" not in err


def _tritonkit(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tritonkit", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def test_errors_are_one_line_and_a_hint_and_debug_shows_the_traceback(tmp_path):
    import os

    env = {k: v for k, v in os.environ.items() if k != "TRITONKIT_DEBUG"}
    plain = _tritonkit("deploy", "--repository", str(tmp_path / "missing"), env=env)
    assert plain.returncode == 2
    lines = plain.stderr.strip().splitlines()
    assert lines[0].startswith("error: model repository") and lines[1].startswith("hint: ")
    assert "Traceback" not in plain.stderr

    debug = _tritonkit("deploy", "--repository", str(tmp_path / "missing"),
                       env={**env, "TRITONKIT_DEBUG": "1"})
    assert debug.returncode == 2
    assert "Traceback" in debug.stderr and "UsageError" in debug.stderr


def test_only_export_pays_for_importing_torch():
    """Every command starts from `import tritonkit.cli`; torch (over a second to import)
    is loaded by `tritonkit export` alone."""
    probe = "import sys, tritonkit.cli; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
