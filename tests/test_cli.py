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


def test_ctrl_c_while_the_commands_still_import_is_one_line_and_exit_130():
    """The console script's first half second is imports, before main()'s error boundary:
    a Ctrl-C there (simulated: the import of tritonkit.cli is interrupted) must not print
    an import traceback."""
    probe = (
        "import sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'tritonkit.cli':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "from tritonkit._entry import main\n"
        "sys.exit(main())\n")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert run.returncode == 130
    assert run.stderr == "error: interrupted\n"


def test_only_export_pays_for_importing_torch():
    """Every command starts from `import tritonkit.cli`; torch (over a second to import)
    is loaded by `tritonkit export` alone."""
    probe = "import sys, tritonkit.cli; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_grpc_url_without_url_is_refused_not_silently_ignored(tmp_path, capsys):
    assert run_cli("loadtest", "--repository", tmp_path, "--model", "m", "--concurrency", "1",
                   "--protocol", "grpc", "--grpc-url", "127.0.0.1:1") == 2
    assert "--grpc-url goes with --url" in capsys.readouterr().err


def test_loadtest_help_shows_the_repository_it_reads_by_default(capsys):
    assert run_cli("loadtest", "--help") == 0
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())    # however the box wraps
    assert "--repository -r <path> Model repository of a deployment (its state finds the server). " \
           "[default: (model_repository unless --url)]" in text


def test_grpc_against_a_bare_url_says_to_pass_its_grpc_address(capsys):
    """--url is the HTTP address; gRPC needs --grpc-url beside it (said before any request)."""
    assert run_cli("loadtest", "--url", "127.0.0.1:1", "--model", "m", "--concurrency", "1",
                   "--protocol", "grpc") == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "error: no gRPC address known for this server (--url is its HTTP address)"
    assert err[1] == "hint: pass --grpc-url HOST:PORT with --url, or use --protocol http"


@pytest.mark.parametrize("name", ["mlp/", "../elsewhere", "a b", ".hidden", ""])
def test_config_refuses_a_model_name_that_is_not_a_plain_folder_name(tmp_path, capsys, name):
    assert run_cli("config", name, "--repository", tmp_path / "repo") == 2
    assert "is not a plain folder name" in capsys.readouterr().err
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "repo").exists()


def test_a_path_the_os_refuses_is_bad_input_in_the_os_words_not_an_internal_error(tmp_path,
                                                                                  capsys):
    afile = tmp_path / "afile"
    afile.write_text("a file, not a folder\n")
    code = run_cli("export", "examples/mlp.py:build", "--name", "mlp", "--repository",
                   afile / "repo", "--no-verify")
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ") and "internal error" not in err and "Traceback" not in err


@pytest.mark.parametrize("signum,code", [(2, 130), (15, 143)])
def test_a_deploy_interrupted_with_something_left_running_is_one_line_a_hint_and_the_signals_code(
        monkeypatch, capsys, signum, code):
    """A signal that ends a deploy which leaves containers behind: the error says what may
    run, the hint how to stop it, and the exit code is 128 + the signal, as for any
    interrupted command (the boundary does not take it for an internal error)."""
    from tritonkit import deploy as deploy_lib
    from tritonkit.errors import DeployInterrupted

    def deploy_compose(repository, **kwargs):
        raise DeployInterrupted("interrupted; the compose containers keep running",
                                hint="stop them: tritonkit down --repository DIR", signum=signum)

    monkeypatch.setattr(deploy_lib, "deploy_compose", deploy_compose)
    assert run_cli("deploy", "--target", "compose", "--gpu", "a10") == code
    assert capsys.readouterr().err.splitlines() == [
        "error: interrupted; the compose containers keep running",
        "hint: stop them: tritonkit down --repository DIR"]
