"""Names and paths a shell would read as more than a word: Triton's python backend (2.51)
starts each model's stub through `sh -c` with the model's path unquoted, so a repository
path or a model folder holding `$( )` ran a command at deploy, and one holding a space
hung the load until the timeout. Deploy refuses them before tritonserver starts; the
commands a hint prints for such a path paste back as that path; and tritonkit's own
files are never a user's output, nor its configs written through a link out of the
repository."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from tests import onnx_graphs
from tests.conftest import EXAMPLE_REPOSITORY, run_cli
from tritonkit.errors import shell_word
from tritonkit.model_config import configure

PORTS = ("--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")
INJECTED = "$(touch${IFS}PWNED)"


def _example_at(path):
    shutil.copytree(EXAMPLE_REPOSITORY, path,
                    ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    return path


def _errors(captured) -> list[str]:
    return [line for line in captured.err.splitlines() if line.strip()]


@pytest.mark.parametrize("name, bad", [
    (f"r{INJECTED}", "'$'"),
    ("my models", "' '"),
    ("models\nnext", "'\\n'"),
])
def test_deploy_refuses_a_repository_path_a_shell_would_split_or_run_before_any_server(
        tmp_path, capsys, name, bad):
    repo = _example_at(tmp_path / name)
    started = time.monotonic()
    code = run_cli("deploy", "--repository", repo, *PORTS, "--timeout", "30")
    took = time.monotonic() - started
    captured = capsys.readouterr()
    assert code == 2
    error, hint = _errors(captured)
    assert error.startswith("error: the repository path ") and f"holds {bad}" in error
    assert hint.startswith("hint: move or rename it")
    assert took < 5                                  # not the stall timeout
    assert not (tmp_path / "PWNED").exists() and not (repo / "PWNED").exists()
    assert not (repo / ".tritonkit" / "local").exists()     # no mirror made, no server


@pytest.mark.parametrize("command", ["deploy", "doctor"])
def test_a_model_folder_named_like_a_command_is_refused_by_name(tmp_path, capsys, command):
    repo = tmp_path / "repo"
    name = f"m{INJECTED}"
    onnx_graphs.mlp(repo / name)
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n')
    args = (("deploy", "--repository", repo, *PORTS, "--timeout", "30") if command == "deploy"
            else ("doctor", "--repository", repo))
    code = run_cli(*args)
    out = capsys.readouterr()
    assert code != 0
    said = out.err if command == "deploy" else out.out + out.err
    assert f"model name 'm{INJECTED}' is not a plain folder name: it holds '$'" in said
    assert "rename the folder" in said
    assert not list(tmp_path.rglob("PWNED"))


def test_a_hint_for_a_path_with_a_newline_pastes_back_as_that_path(tmp_path):
    for value in (tmp_path / "we ird\n$HOME `id` repo", "a'b\\c\td\x01e\x7f", "plain", "sp ace"):
        word = shell_word(value)
        assert "\n" not in word
        pasted = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True,
                                text=True, check=True).stdout
        assert pasted == str(value)


@pytest.mark.parametrize("command", ["warmup", "loadtest"])
def test_an_output_inside_the_state_folder_is_refused_even_with_force(tmp_path, capsys, command):
    repo = _example_at(tmp_path / "repo")
    secret = repo / ".tritonkit" / "secret"
    secret.parent.mkdir()
    secret.write_text("the deployment's secret\n")
    secret.chmod(0o600)
    extra = ("--model", "example") if command == "loadtest" else ()
    code = run_cli(command, "--repository", repo, *extra, "--json", secret, "--force")
    captured = capsys.readouterr()
    assert code == 2
    assert _errors(captured)[0] == (f"error: --json file {secret} is inside a .tritonkit folder, "
                                    "which holds a deployment's state, secret and log")
    assert secret.read_text() == "the deployment's secret\n"
    assert secret.stat().st_mode & 0o777 == 0o600


def test_config_force_does_not_write_through_a_configs_link_out_of_the_repository(
        tmp_path, capsys):
    repo = tmp_path / "repo"
    onnx_graphs.mlp(repo / "mlp")
    configure(repo, "mlp")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "a10.pbtxt").write_text("the user's own file\n")
    shutil.rmtree(repo / "mlp" / "configs")
    (repo / "mlp" / "configs").symlink_to(outside)
    code = run_cli("config", "mlp", "--repository", repo, "--force")
    captured = capsys.readouterr()
    assert code == 2
    assert _errors(captured)[0] == (f"error: {repo / 'mlp' / 'configs'} is a link to {outside}, "
                                    f"outside the model repository {repo}: configs are written "
                                    "only inside it")
    assert sorted(p.name for p in outside.iterdir()) == ["a10.pbtxt"]
    assert (outside / "a10.pbtxt").read_text() == "the user's own file\n"
