"""One model's failure does not lose everyone's figures: warm-up (a --reload too) warms every
model, reports each one's figures or its failure, writes the JSON, then exits 1."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ECHO_CONFIG, add_python_model, echo_model, run_cli

PORTS = ("--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")
REFUSES = 'raise pb_utils.TritonModelException("the weights are NaN")'


@pytest.fixture
def three_models(tmp_path):
    """A deployment (not warmed) of three models, the middle one failing every request."""
    repo = tmp_path / "repo"
    add_python_model(repo, "a_first", ECHO_CONFIG, echo_model())
    add_python_model(repo, "b_fails", ECHO_CONFIG, echo_model(execute=REFUSES))
    add_python_model(repo, "c_last", ECHO_CONFIG, echo_model())
    assert run_cli("deploy", "--repository", repo, "--no-warmup", *PORTS) == 0
    yield repo
    # A model whose reload failed holds Triton's exit for its whole exit timeout (30 s):
    # what stops it is not what these tests are about.
    run_cli("down", "--repository", repo, "--timeout", "10")


@pytest.mark.server
def test_a_reload_with_one_failing_model_warms_the_others_and_writes_every_models_figures(
        three_models, tmp_path, capsys):
    out = tmp_path / "warm.json"
    code = run_cli("warmup", "--repository", three_models, "--reload", "--json", out,
                   "--timeout", "60")
    captured = capsys.readouterr()
    assert code == 1
    error = captured.err[captured.err.index("error: "):]
    assert error.startswith("error: a warm-up request to 'b_fails' failed: ")
    assert "the weights are NaN" in error.splitlines()[0]
    assert "the other models were warmed: a_first, c_last" in error
    models = {m["model"]: m for m in json.loads(out.read_text())["models"]}
    assert list(models) == ["a_first", "b_fails", "c_last"]
    for name in ("a_first", "c_last"):       # reloaded (a load sent), then warmed
        assert models[name]["loaded"] and models[name]["requests"] > 0
        assert models[name]["error"] is None
    assert models["b_fails"]["error"].startswith("a warm-up request to 'b_fails' failed")
    assert not models["b_fails"]["steady"]
    rows = {line.split()[0]: line.split()[-1] for line in captured.out.splitlines()
            if line.strip().startswith(("a_first ", "b_fails ", "c_last "))}
    assert rows["b_fails"] == "failed", captured.out
    assert rows["a_first"] != "failed" and rows["c_last"] != "failed", captured.out
    assert "b_fails: failed: a warm-up request to 'b_fails' failed" in captured.out


@pytest.mark.server
def test_a_failed_load_and_a_failed_warm_up_are_both_reported_and_the_rest_warmed(
        three_models, tmp_path, capsys):
    (three_models / "a_first" / "1" / "model.py").write_text("raise RuntimeError('corrupt')\n")
    out = tmp_path / "warm.json"
    code = run_cli("warmup", "--repository", three_models, "--reload", "--json", out,
                   "--timeout", "60")
    error = capsys.readouterr().err
    error = error[error.index("error: "):].splitlines()[0]
    assert code == 1
    assert error.startswith("error: Triton could not load 'a_first'") and "corrupt" in error
    assert error.endswith("(also failed: b_fails)"), error
    models = {m["model"]: m for m in json.loads(out.read_text())["models"]}
    assert "corrupt" in models["a_first"]["error"]
    assert models["b_fails"]["error"].startswith("a warm-up request to 'b_fails' failed")
    assert models["c_last"]["requests"] > 0 and models["c_last"]["error"] is None
