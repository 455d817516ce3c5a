"""A python-backend stub that dies (or stops answering Triton's health check) is a crash of
its model, said as one with the model's lines in the server's log: never "the model
refused an input built from its config", which it did not."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import ECHO_CONFIG, add_python_model, echo_model, run_cli

PORTS = ("--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")
LAST_WORDS = "allocating 12 GiB for the attention cache"

DIES_ON_A_REQUEST = {
    "sigkill": f"print({LAST_WORDS!r}, flush=True)\nos.kill(os.getpid(), signal.SIGKILL)",
    "exit": f"print({LAST_WORDS!r}, flush=True)\nos._exit(1)",
}


def _error(err: str) -> tuple[str, str]:
    """The error line and the hint line of a command's stderr (progress lines before them)."""
    lines = err[err.index("error: "):].splitlines()
    return lines[0], next((line for line in lines if line.startswith("hint: ")), "")


@pytest.mark.server
@pytest.mark.parametrize("how", sorted(DIES_ON_A_REQUEST))
def test_a_stub_that_dies_on_a_warm_up_request_is_a_crash_with_its_log_lines(tmp_path, capsys,
                                                                             how):
    repo = tmp_path / "repo"
    add_python_model(repo, "crashy", ECHO_CONFIG, echo_model(execute=DIES_ON_A_REQUEST[how]))
    add_python_model(repo, "steady", ECHO_CONFIG, echo_model())
    code = run_cli("deploy", "--repository", repo, "--timeout", "60", *PORTS)
    captured = capsys.readouterr()
    error, hint = _error(captured.err)
    assert code == 1
    # Triton names the stub, unless the kill caught it holding its health mutex.
    assert re.match(r"error: 'crashy' crashed during a warm-up request: its python-backend "
                    r"stub( crashy_0)? died or stopped answering \(Triton: (Stub process "
                    r"'crashy_0' is not healthy|Failed to obtain the health mutex)", error), error
    assert f"its last lines in the server log: {LAST_WORDS}" in error, error
    assert "refused an input" not in captured.err
    assert "no input was refused" in hint and "the other models were warmed: steady" in hint
    # The other model's figures (steady or not: a busy host decides that) beside the failure.
    rows = {line.split()[0]: line.split() for line in captured.out.splitlines()
            if line.strip().startswith(("crashy ", "steady "))}
    assert rows["crashy"][-1] == "failed" and rows["steady"][-1] != "failed", captured.out
    assert int(rows["steady"][-4]) > 0, captured.out          # its reqs


@pytest.mark.server
def test_a_stub_that_dies_while_its_model_loads_is_a_crash_with_its_log_lines(tmp_path,
                                                                               capsys):
    repo = tmp_path / "repo"
    add_python_model(repo, "dies", ECHO_CONFIG, echo_model(
        initialize=f"print({LAST_WORDS!r}, flush=True)\nos._exit(3)"))
    add_python_model(repo, "fine", ECHO_CONFIG, echo_model())
    code = run_cli("deploy", "--repository", repo, "--timeout", "60", *PORTS)
    error, hint = _error(capsys.readouterr().err)
    assert code == 1
    assert error.startswith("error: 'dies' crashed while it loaded: its python-backend stub "
                            "dies_0 died or stopped answering (Triton: failed to load 'dies' "
                            "version 1: Internal: Stub process 'dies_0' is not healthy."), error
    assert LAST_WORDS in error.split("its last lines in the server log: ")[1], error
    assert hint.startswith("hint: full server log: ")


@pytest.mark.server
def test_warmup_of_a_model_whose_stub_dies_writes_every_models_figures_then_fails(
        tmp_path, capsys):
    repo = tmp_path / "repo"
    add_python_model(repo, "crashy", ECHO_CONFIG,
                     echo_model(execute=DIES_ON_A_REQUEST["sigkill"]))
    add_python_model(repo, "steady", ECHO_CONFIG, echo_model())
    out = tmp_path / "warm.json"
    assert run_cli("deploy", "--repository", repo, "--no-warmup", *PORTS) == 0
    try:
        code = run_cli("warmup", "--repository", repo, "--json", out, "--timeout", "60")
    finally:
        run_cli("down", "--repository", repo)
    error, _hint = _error(capsys.readouterr().err)
    assert code == 1
    assert error.startswith("error: 'crashy' crashed during a warm-up request"), error
    models = {m["model"]: m for m in json.loads(out.read_text())["models"]}
    assert models["crashy"]["error"].startswith("'crashy' crashed during a warm-up request")
    assert models["steady"]["error"] is None and models["steady"]["requests"] > 0
