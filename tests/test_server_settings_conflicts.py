"""--server-config settings Triton would take but that cannot work with how tritonkit runs
it are refused before anything starts (exit 2), naming the field and the fix: a model
control mode other than explicit (tritonkit loads every model itself, --load-model
included), negative sizes and times, a bind address that is not an IPv4 address, and
restricted API categories that tritonkit and probes ask without the secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tritonkit.errors import EXIT_USAGE

SHIPPED = (ROOT / "configs" / "server.toml").read_text()

CONFLICTS = {
    'model_control_mode = "poll"': ("model_control_mode", 'model_control_mode = "explicit"'),
    'model_control_mode = "none"': ("model_control_mode", 'model_control_mode = "explicit"'),
    "exit_timeout_secs = -5": ("'exit_timeout_secs' = -5 must be 0 or more", "exit_timeout_secs"),
    "pinned_memory_pool_byte_size = -1": ("'pinned_memory_pool_byte_size' = -1", "server.toml"),
    "min_supported_compute_capability = -1.0": ("'min_supported_compute_capability'", "server.toml"),
    "log_verbose = -1": ("'log_verbose' = -1 must be 0 or more", "log_verbose"),
    'bind_address = "localhost"': ("'bind_address' = 'localhost' is not an IPv4 address",
                                   "127.0.0.1"),
    'bind_address = "::1"': ("is not an IPv4 address", "0.0.0.0"),
    'categories = ["model-repository", "health"]': ("restricts health", "take health out"),
    'categories = ["model-repository", "inference", "model-config"]': (
        "restricts inference, model-config", "take inference, model-config out"),
    'categories = ["model-repository", "metadata"]': ("restricts metadata", "take metadata out"),
}


def settings_with(folder: Path, line: str) -> Path:
    """The shipped server.toml with one setting changed (its key's line replaced)."""
    key = line.split(" = ")[0]
    lines = [line if text.startswith(f"{key} = ") else text for text in SHIPPED.splitlines()]
    assert line in lines
    path = folder / "server.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("line", list(CONFLICTS))
def test_a_local_deploy_with_conflicting_settings_is_refused_before_the_start(
        capsys, tmp_path, example_repository, line):
    settings = settings_with(tmp_path, line)
    code = run_cli("deploy", "--repository", example_repository, "--server-config", settings,
                   "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")
    err = capsys.readouterr().err
    says, fix = CONFLICTS[line]
    lines = err.strip().splitlines()
    assert code == EXIT_USAGE, err
    assert lines[0].startswith(f"error: {settings}: ") and says in lines[0], err
    assert lines[1].startswith("hint: ") and fix in lines[1], err
    assert not (example_repository / ".tritonkit" / "server.log").exists()   # never started


@pytest.mark.parametrize("target", [["--target", "compose", "--no-up"], ["--target", "k8s"]])
def test_container_targets_refuse_them_before_writing_anything(capsys, tmp_path,
                                                               example_repository, target):
    settings = settings_with(tmp_path, 'model_control_mode = "poll"')
    out = tmp_path / "out"
    code = run_cli("deploy", *target, "--gpu", "a10", "--repository", example_repository,
                   "--server-config", settings, "--out", out)
    assert code == EXIT_USAGE
    assert "cannot work with tritonkit" in capsys.readouterr().err
    assert not out.exists()


def test_the_shipped_settings_have_no_conflict():
    from tritonkit.server.settings import load_server_settings

    assert load_server_settings(ROOT / "configs" / "server.toml").model_control_mode == "explicit"
