"""A file nested thousands of levels deep — a TOML array of arrays, a JSON list of lists —
is bad input said in one line naming the file (exit 2), never "internal error:
RecursionError". The second adversarial pass found it for --server-config, --thresholds,
--gpu FILE.toml, --input-data and a model's export-report.json; a deployment record cut
that way is a corrupt record `down` gets past."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli

DEPTH = 100_000


def deep_toml(path):
    path.write_text("a = " + "[" * DEPTH + "]" * DEPTH + "\n")
    return path


def _said(capsys, path, code: int, expected: int = 2) -> None:
    err = capsys.readouterr().err
    assert code == expected, err
    assert "internal error" not in err and "Traceback" not in err, err
    first = err.strip().splitlines()[0]
    assert first.startswith("error: ") and str(path) in first and "deeper" in first, err


@pytest.mark.parametrize("flag", ["--server-config", "--gpu"])
def test_deploy_refuses_a_toml_nested_too_deep(tmp_path, capsys, example_repository, flag):
    path = deep_toml(tmp_path / "deep.toml")
    _said(capsys, path, run_cli("deploy", "--repository", example_repository, flag, path))


def test_monitor_refuses_thresholds_nested_too_deep(tmp_path, capsys):
    path = deep_toml(tmp_path / "deep.toml")
    _said(capsys, path, run_cli("monitor", "--once", "--thresholds", path))


def test_config_refuses_an_export_report_nested_too_deep(tmp_path, capsys, exported_mlp):
    model = exported_mlp(tmp_path / "repo")
    report = model / "export-report.json"
    report.write_text("[" * DEPTH + "]" * DEPTH)
    _said(capsys, report, run_cli("config", "mlp", "--repository", tmp_path / "repo", "--force"))


@pytest.mark.server
def test_loadtest_refuses_input_data_nested_too_deep(tmp_path, capsys, example_server):
    data = tmp_path / "inputs.json"
    data.write_text('{"INPUT__0": ' + "[" * DEPTH + "]" * DEPTH + "}")
    _said(capsys, data, run_cli("loadtest", "-m", "example", "-c", "1", "--duration", "1",
                                "--repository", example_server.repository, "--input-data", data))


def test_down_gets_past_a_record_nested_too_deep(tmp_path, capsys, example_repository):
    state = example_repository / ".tritonkit"
    state.mkdir(mode=0o700)
    (state / "server.json").write_text("[" * DEPTH + "]" * DEPTH)
    code = run_cli("down", "--repository", example_repository)
    err = capsys.readouterr().err
    assert "internal error" not in err and "Traceback" not in err, err
    assert code == 2 and "is corrupt" in err and "deeper" in err, err
