"""The CLI's contract: every command has help with an example, one error boundary."""

from __future__ import annotations

import os
import signal
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


def test_the_table_of_commands_names_each_command_its_modules_define():
    """`tritonkit --help` lists the table; a command missing from it could not be run."""
    from tritonkit import cli

    for module in set(cli.COMMANDS.values()):
        __import__(f"tritonkit.cli.{module}")
    defined = {cli._name(info) for info in app.registered_commands}
    assert defined == set(cli.COMMANDS)
    assert list(cli.commands()) == list(cli.COMMANDS)


def test_a_command_imports_its_own_module_only():
    """`tritonkit down` or a misspelt flag is answered without importing what export,
    loadtest or monitor need (a CLI subprocess started in about half the time)."""
    script = ("import sys\n"
              "from tritonkit.cli import main\n"
              "code = main(['down', '--no-such-flag'])\n"
              "print(code, sorted(m for m in sys.modules if m.startswith('tritonkit.cli.')))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    code, modules = done.stdout.split(" ", 1)
    assert code == "2"
    assert "tritonkit.cli.deploy" in modules
    for other in ("export", "config", "loadtest", "tune", "monitor", "warmup"):
        assert f"tritonkit.cli.{other}'" not in modules, other
    assert "No such option: --no-such-flag" in done.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(command, capsys):
    assert run_cli(command, "--help") == 0
    assert "Example: tritonkit " + command in capsys.readouterr().out


def test_an_unknown_option_is_a_usage_error_without_traceback(capsys):
    assert run_cli("deploy", "--no-such-flag") == 2
    err = capsys.readouterr().err
    assert "No such option" in err and "Traceback" not in err


@pytest.mark.parametrize("args,error", [
    (["loadtest", "--duraton", "5"], "No such option: --duraton (did you mean --duration?)"),
    (["loadtest", "--concurrency", "1"], "Missing option '--model' / '-m'."),
    (["deploy", "--http-port", "70000"],
     "Invalid value for '--http-port': Input should be less than or equal to 65535"),
    (["no-such-command"], "No such command 'no-such-command'."),
])
def test_a_usage_error_is_one_error_line_and_a_hint_to_the_commands_help(capsys, args, error):
    """Click's own errors (a flag misspelled, missing, out of range) read as tritonkit's do."""
    assert run_cli(*args) == 2
    command = "tritonkit" if args[0] == "no-such-command" else f"tritonkit {args[0]}"
    assert capsys.readouterr().err.splitlines() == [f"error: {error}", f"hint: {command} --help"]


def _tritonkit(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tritonkit", *args], capture_output=True,
                          text=True, env=env, timeout=120)


@pytest.mark.slow
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


def _ends_interrupted(probe: str) -> None:
    """The console script, run by ``probe``, ends as interrupted: exit 130, one line."""
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert run.returncode == 130
    assert run.stderr == "error: interrupted\n"


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
    _ends_interrupted(probe)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_while_the_commands_still_import_is_one_line_and_128_plus_it(signum):
    """Sent in the first half second (the signal arrives as tritonkit.cli is imported), it
    ended the process by the signal itself: exit -15, nothing said."""
    probe = (
        "import os, signal, sys, time\n"
        "class Stop:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'tritonkit.cli':\n"
        f"            os.kill(os.getpid(), {int(signum)})\n"
        "            time.sleep(5)\n"
        "sys.meta_path.insert(0, Stop())\n"
        "from tritonkit._entry import main\n"
        "sys.exit(main())\n")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert run.returncode == 128 + signum
    assert run.stderr == f"error: stopped by {signum.name}\n"


def test_a_ctrl_c_after_the_command_said_how_it_ended_is_no_traceback():
    """Ctrl-C pressed again and again reached cli.main's last lines, after its error boundary
    had said "error: interrupted": the console script still ends with exit 130 and no
    traceback."""
    probe = (
        "import sys\n"
        "import tritonkit.cli as cli\n"
        "def run(argv=None):\n"
        "    print('error: interrupted', file=sys.stderr)\n"
        "    raise KeyboardInterrupt\n"
        "cli.main = run\n"
        "from tritonkit._entry import main\n"
        "sys.exit(main())\n")
    _ends_interrupted(probe)


def test_a_ctrl_c_while_the_script_turns_signals_off_at_its_end_is_no_traceback():
    """A Ctrl-C pressed every 50 ms met the console script as it set Ctrl-C, SIGTERM and
    SIGHUP to be ignored, once the command had ended: a KeyboardInterrupt traceback from
    signal.signal. Simulated: the first of those calls is interrupted."""
    probe = (
        "import signal, sys\n"
        "import tritonkit.cli as cli\n"
        "def run(argv=None):\n"
        "    print('error: interrupted', file=sys.stderr)\n"
        "    real = signal.signal\n"
        "    def interrupted_once(signum, handler):\n"
        "        signal.signal = real\n"
        "        raise KeyboardInterrupt\n"
        "    signal.signal = interrupted_once\n"
        "    return 130\n"
        "cli.main = run\n"
        "from tritonkit._entry import main\n"
        "code = main()\n"
        "assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN\n"
        "sys.exit(code)\n")
    _ends_interrupted(probe)


# An object whose __del__ fails (as tritonclient's client does when Ctrl-C cut its __init__
# short), made where every command passes (the server's address), then the command ends.
# Held by the failing frame, it is collected while the command ends; held by a module, as
# the interpreter ends (after main() returned, in the console script).
CUT_SHORT = """
import sys
import tritonkit.client as client

class CutShort:
    def __del__(self):
        raise AttributeError("'InferenceServerClient' object has no attribute '_closed'")

kept = []
def post_init(self):
    cut_short = CutShort()
    {held}
    raise {raised}

client.Endpoint.__post_init__ = post_init
from tritonkit._entry import main
sys.argv = ["tritonkit", "warmup", "--url", "127.0.0.1:9", "--model", "m"]
sys.exit(main())
"""


@pytest.mark.parametrize("held", ["pass", "kept.append(cut_short)"], ids=["by-frame", "to-exit"])
@pytest.mark.parametrize("debug", ["", "1"])
def test_what_an_interrupt_cut_short_is_collected_without_a_word_unless_debugging(debug, held):
    probe = CUT_SHORT.format(raised="KeyboardInterrupt", held=held)
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "TRITONKIT_DEBUG": debug})
    assert run.returncode == 130
    if debug:
        assert "Exception ignored" in run.stderr and "no attribute '_closed'" in run.stderr
    else:
        assert run.stderr == "error: interrupted\n"


def test_a_failing_finaliser_in_a_command_that_was_not_interrupted_is_still_said():
    run = subprocess.run([sys.executable, "-c", CUT_SHORT.format(raised="RuntimeError('bug')", held="pass")],
                         capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if k != "TRITONKIT_DEBUG"})
    assert run.returncode == 1
    assert run.stderr.startswith("error: internal error: RuntimeError: bug\n")
    assert "Exception ignored in: <function CutShort.__del__" in run.stderr
    assert "no attribute '_closed'" in run.stderr


@pytest.mark.slow
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
    text = " ".join(capsys.readouterr().out.split())    # however the lines wrap
    assert "-r, --repository <path> Model repository of a deployment (its state finds the " \
           "server). [default: (model_repository unless --url)]" in text


def _unwrapped(text: str) -> str:
    return "".join(text.split())


@pytest.mark.slow
@pytest.mark.parametrize("columns", [60, 80])
@pytest.mark.parametrize("command", COMMANDS)
def test_help_wraps_to_the_terminal_and_cuts_no_text(monkeypatch, capsys, command, columns):
    """Every option's help, whole, at any width: no "…" where a narrow column ran out, no
    line past the terminal, and no <bool> beside a flag as if it took a value."""
    monkeypatch.setenv("COLUMNS", str(columns))
    assert run_cli(command, "--help") == 0
    out = capsys.readouterr().out
    assert "…" not in out and "<bool>" not in out
    assert max(len(line) for line in out.splitlines()) <= columns
    params = typer.main.get_command(app).commands[command].params
    for param in params:
        if param.help:
            assert _unwrapped(param.help) in _unwrapped(out), param.name


def test_the_command_list_gives_each_command_its_whole_summary(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    assert run_cli("--help") == 0
    out = _unwrapped(capsys.readouterr().out)
    for command in typer.main.get_command(app).commands.values():
        summary = command.help.split("\n\n")[0]
        assert _unwrapped(summary) in out, command.name


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


def test_down_with_nothing_deployed_says_so_and_succeeds_every_time(tmp_path, capsys):
    """A teardown script's `down` (a trap, a second run) is no error, as a second
    `docker compose down` is not."""
    for _ in range(2):
        assert run_cli("down", "--repository", tmp_path) == 0
        captured = capsys.readouterr()
        assert " ".join(captured.out.split()) == \
            f"nothing to stop for {tmp_path}: no deployment recorded"
        assert captured.err == ""


@pytest.mark.parametrize("kind,says", [("file", "is not a folder"), ("missing", "does not exist")])
def test_down_on_a_repository_path_that_is_no_folder_is_still_an_error(tmp_path, capsys, kind,
                                                                       says):
    path = tmp_path / "repo"
    if kind == "file":
        path.write_text("not a folder\n")
    assert run_cli("down", "--repository", path) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"error: model repository {path} {says}",
                   "hint: pass --repository with the folder you deployed"]


def test_a_compose_deploy_rerun_after_docker_was_missing_rewrites_its_own_files_not_edited_ones(
        example_repository, tmp_path, monkeypatch, capsys):
    """The first run wrote the files and found no Docker engine: the same command again
    replaces what it wrote (no --force), but never a file the user edited since."""
    from tritonkit.server.container import SECRET_VARIABLE
    from tritonkit.server.state import read_secret

    monkeypatch.setenv("PATH", str(tmp_path / "no-docker-here"))
    out = tmp_path / "docker"
    deploy = ("deploy", "--target", "compose", "--gpu", "p100", "--repository",
              example_repository, "--out", out)
    for _ in range(2):
        assert run_cli(*deploy) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: no Docker CLI on this machine; wrote"), err
        # the env file carries the secret the repository records now
        assert (out / ".env").read_text().splitlines()[-1] == \
            f"{SECRET_VARIABLE}={read_secret(example_repository)}"

    for name, edit in (("docker-compose.yml", "# mine\n"), (".env", "EXTRA=1\n")):
        path = out / name
        original = path.read_text()
        path.write_text(original + edit)
        assert run_cli(*deploy) == 2
        assert capsys.readouterr().err.splitlines()[0] == \
            f"error: compose output {path} already exists and was edited since tritonkit wrote it"
        assert path.read_text() == original + edit
        path.write_text(original)


@pytest.mark.parametrize("flag,example", [("--json", "run.json"), ("--csv", "run.csv"),
                                          ("--plot", "run.png")])
def test_an_output_flag_given_a_folder_is_shown_a_file_name_of_its_own_type(tmp_path, flag,
                                                                             example):
    from tritonkit.errors import UsageError
    from tritonkit.fileio import check_outputs

    with pytest.raises(UsageError) as refused:
        check_outputs({flag: tmp_path}, force=False)
    assert refused.value.message == f"{flag} file {tmp_path} is a folder"
    assert refused.value.hint == f"give a file name, e.g. {tmp_path / example}"


def test_an_export_over_an_existing_model_offers_another_name(tmp_path, capsys):
    """Refused before the factory is even looked for: the spec need not exist."""
    (tmp_path / "existing").mkdir()
    assert run_cli("export", tmp_path / "nowhere.py:build", "--name", "existing",
                   "--repository", tmp_path) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: model {tmp_path / 'existing'} already exists",
        "hint: pass --force to replace it, or choose another --name"]


def test_monitor_given_a_folder_for_its_csv_is_shown_a_csv_file_name(tmp_path, capsys):
    assert run_cli("monitor", "--csv", tmp_path) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: monitor CSV {tmp_path} is a folder",
        f"hint: give a file name, e.g. {tmp_path / 'run.csv'}"]


def test_a_file_that_exists_is_kept_and_the_hint_offers_only_the_ways_out_there_are(tmp_path):
    """`tritonkit config` has no other path to write to: --force is its one way out; an
    output flag may also be given another path."""
    from tritonkit.errors import UsageError
    from tritonkit.fileio import check_output, refuse_overwrite

    path = tmp_path / "config.pbtxt"
    path.write_text("mine\n")
    with pytest.raises(UsageError) as config:
        refuse_overwrite(path, force=False, what="model config")
    assert (config.value.message, config.value.hint) == (
        f"model config {path} already exists", "pass --force to replace it")
    with pytest.raises(UsageError) as output:
        check_output(path, force=False, what="--json file")
    assert output.value.hint == "pass --force to replace it, or give another path"
    assert path.read_text() == "mine\n"


@pytest.mark.parametrize("target,hint", [
    ("local", "give each its own port (0 picks a free one)"),
    ("compose", "give each its own port"),          # compose refuses 0: fixed ports only
])
def test_two_port_flags_naming_one_port_are_named_by_their_flags(tmp_path, capsys, target, hint):
    extra = ("--gpu", "a10") if target == "compose" else ()
    assert run_cli("deploy", "--target", target, *extra, "--repository", tmp_path,
                   "--http-port", "18124", "--grpc-port", "8001", "--metrics-port", "18124") == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: --http-port and --metrics-port are both 18124", f"hint: {hint}"]


def test_deploy_help_says_a_port_of_0_picks_a_free_one_only_locally(capsys):
    assert run_cli("deploy", "--help") == 0
    help_text = " ".join(capsys.readouterr().out.split())
    for role in ("HTTP", "gRPC", "Metrics"):
        assert f"{role} port (local: 0 picks a free one)." in help_text
    assert "(0 picks a free one)" not in help_text


def _files_under(folder) -> list:
    return sorted(p.relative_to(folder) for p in folder.rglob("*"))


# (target, the flags as given, the flag the error names): a flag the target has no use for,
# its default's value given explicitly included.
FLAGS_A_TARGET_DOES_NOT_USE = [
    ("k8s", ["--http-port", "9000"], "--http-port"),
    ("k8s", ["--grpc-port", "8001"], "--grpc-port"),
    ("k8s", ["--metrics-port", "0"], "--metrics-port"),
    ("k8s", ["--public"], "--public"),
    ("k8s", ["--no-public"], "--no-public"),
    ("k8s", ["--device-ids", "1"], "--device-ids"),
    ("k8s", ["--no-up"], "--no-up"),
    ("k8s", ["--up"], "--up"),
    ("k8s", ["--no-warmup"], "--no-warmup"),
    ("k8s", ["--warmup"], "--warmup"),
    ("local", ["--out", "docker"], "--out"),
    ("local", ["--image", "nvcr.io/nvidia/tritonserver:24.10-py3"], "--image"),
    ("local", ["--replicas", "2"], "--replicas"),
    ("local", ["--replicas", "1"], "--replicas"),
    ("local", ["--storage-class", "nfs-client"], "--storage-class"),
    ("local", ["--cpu", "2"], "--cpu"),
    ("local", ["--memory", "8Gi"], "--memory"),
    ("local", ["--public"], "--public"),
    ("local", ["--force"], "--force"),
    ("local", ["--no-force"], "--no-force"),
    ("local", ["--device-ids", "0"], "--device-ids"),
    ("local", ["--no-up"], "--no-up"),
    ("compose", ["--replicas", "2"], "--replicas"),
    ("compose", ["--storage-class", "nfs-client"], "--storage-class"),
    ("compose", ["--cpu", "2"], "--cpu"),
    ("compose", ["--memory", "8Gi"], "--memory"),
]


@pytest.mark.slow
@pytest.mark.parametrize("target,flags,flag", FLAGS_A_TARGET_DOES_NOT_USE,
                         ids=[f"{t}{' '.join(f)}" for t, f, _ in FLAGS_A_TARGET_DOES_NOT_USE])
def test_deploy_refuses_a_flag_its_target_does_not_use_before_writing_anything(
        example_repository, tmp_path, monkeypatch, capsys, target, flags, flag):
    """Ignored, such a flag lets a user believe they got a port or a public service they did
    not. Refused up front: exit 2, one line naming the flag and the target, a hint."""
    from tritonkit import deploy as deploy_lib

    def start_no_server(*args, **kwargs):      # were it not refused: a real Triton would start
        raise AssertionError("deploy_local reached")

    monkeypatch.setattr(deploy_lib, "deploy_local", start_no_server)
    monkeypatch.chdir(tmp_path)                 # "--out docker" would land here
    out = tmp_path / "out"
    before = _files_under(example_repository)
    target_flags = {"local": [], "compose": ["--gpu", "a10", "--out", out, "--no-up"],
                    "k8s": ["--gpu", "a10", "--out", out]}[target]
    assert run_cli("deploy", "--target", target, "--repository", example_repository,
                   *target_flags, *flags) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2, err
    assert err[0].startswith(f"error: {flag} does not apply to --target {target} ("), err
    assert err[1].startswith(f"hint: drop {flag}"), err
    assert not out.exists() and not (tmp_path / "docker").exists()
    assert _files_under(example_repository) == before


def test_a_k8s_deploy_with_a_port_and_public_is_refused_and_names_the_others_too(
        example_repository, tmp_path, capsys):
    """The doc audit's case: it exited 0 and service.yaml kept port 8000."""
    out = tmp_path / "O"
    assert run_cli("deploy", "--target", "k8s", "--gpu", "a10", "-r", example_repository,
                   "--out", out, "--http-port", "9000", "--public", "--no-warmup") == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: --http-port does not apply to --target k8s (the Service publishes Triton's "
        "own ports 8000/8001/8002 inside the cluster)",
        f"hint: drop --http-port: the Service's ports are set in {out / 'k8s' / 'service.yaml'} "
        "(spec.ports); for a port on this host use --target compose; --public, --no-warmup do "
        "not apply either"]
    assert not out.exists()


@pytest.mark.parametrize("target,flags", [
    ("k8s", ["--gpu", "a10", "--image", "nvcr.io/nvidia/tritonserver:24.10-py3",
             "--replicas", "2", "--storage-class", "nfs-client", "--cpu", "4",
             "--memory", "16Gi", "--timeout", "1200",
             "--server-config", "configs/server.toml", "--force"]),
    ("compose", ["--gpu", "a10", "--no-up", "--public",
                 "--image", "nvcr.io/nvidia/tritonserver:24.10-py3", "--device-ids", "0,1",
                 "--http-port", "18000", "--grpc-port", "18001", "--metrics-port", "18002",
                 "--server-config", "configs/server.toml", "--no-warmup", "--timeout", "30",
                 "--force"]),
])
def test_deploy_takes_every_flag_its_file_writing_targets_use(example_repository, tmp_path,
                                                              target, flags):
    out = tmp_path / "out"
    assert run_cli("deploy", "--target", target, "--repository", example_repository,
                   "--out", out, *flags) == 0
    assert (out / "k8s" / "service.yaml").exists() if target == "k8s" else \
        (out / "docker-compose.yml").exists()


@pytest.mark.server
def test_a_local_deploy_takes_every_flag_the_local_target_uses(example_repository):
    """The real embedded Triton (--gpu with the local target: tests/test_local_adapter.py)."""
    from tritonkit.server.state import load_deployment

    try:
        assert run_cli("deploy", "--target", "local", "--repository", example_repository,
                       "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
                       "--server-config", "configs/server.toml", "--no-warmup",
                       "--timeout", "60") == 0
        assert load_deployment(example_repository).target == "local"
    finally:
        run_cli("down", "--repository", example_repository)


WIDE_TABLE = """
from rich.table import Table
from tritonkit.cli.options import console
table = Table()
for i in range(10):
    table.add_column(f"p{i}", justify="right", no_wrap=True)
table.add_row(*["12,345.678"] * 10)
console.print(table)
"""


@pytest.mark.slow
def test_a_table_written_to_a_pipe_keeps_every_number_whole():
    """A CI log is a pipe: Rich laid tables out for 80 columns there and cut numbers with
    '…' (a load test's p99.9 read '24.…'). COLUMNS, where set, is still obeyed."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    piped = subprocess.run([sys.executable, "-c", WIDE_TABLE], capture_output=True, text=True,
                           env=env, timeout=60)
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.count("12,345.678") == 10 and "…" not in piped.stdout
    narrow = subprocess.run([sys.executable, "-c", WIDE_TABLE], capture_output=True, text=True,
                            env={**env, "COLUMNS": "60"}, timeout=60)
    assert "…" in narrow.stdout and max(map(len, narrow.stdout.splitlines())) <= 60


def test_a_progress_line_asked_for_after_its_wait_ended_is_not_printed(capsys):
    """Off a terminal, a wait's phase lines go to stderr; one asked for once the command's
    own output has begun (a callback kept past its block) would land after it."""
    from tritonkit.cli.options import progress_status

    with progress_status("first", plain_after=0.0, plain_every=0.0) as tell:
        tell("during the wait")
    kept = tell
    kept("after the wait")
    err = capsys.readouterr().err
    assert "during the wait" in err and "after the wait" not in err
