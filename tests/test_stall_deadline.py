"""deploy's and warm-up's --timeout bounds stalls, not the size of the repository: a start
or a warm-up that keeps moving (a model loading with its stub at work, warm-up requests
answered) goes on past it; one where nothing has moved for the timeout fails, naming the
model it waits on."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from tests.conftest import ECHO_CONFIG, ROOT, add_python_model, default_signals, echo_model, run_cli
from tritonkit import deadline as deadline_module
from tritonkit.deadline import Deadline, StallDeadline
from tritonkit.server.local import _cmdline, _pids
from tritonkit.server.state import load_deployment
from tritonkit.warmup import warm_up

PORTS = ("--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")


def test_a_stall_deadline_moves_on_with_progress_and_a_fixed_one_does_not(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(deadline_module, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    fixed, stall = Deadline(10), StallDeadline(10)
    now[0] += 8
    fixed.moved()
    stall.moved()
    now[0] += 8                       # 16 s since the start, 8 since the last progress
    assert fixed.expired() and not stall.expired()
    assert stall.left() == pytest.approx(2)
    now[0] += 2
    assert stall.expired()
    assert stall.ran_out() == "nothing moved for 10 s"
    assert fixed.ran_out() == "the 10 s timeout ran out"


def _piped(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """A tritonkit command with its output to pipes, as in a CI log."""
    return subprocess.run([sys.executable, "-m", "tritonkit", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                          preexec_fn=default_signals)


def _servers_of(repository: Path) -> list[int]:
    """tritonservers (and their stubs) still running for ``repository``."""
    return [pid for pid in _pids() if str(repository) in " ".join(_cmdline(pid))]


@pytest.mark.server
def test_a_start_whose_model_keeps_working_outlasts_the_timeout(tmp_path):
    """A model whose load takes 8 s of work (its stub busy all along, as a big model's
    session build is) is no stall: a 3 s timeout lets it finish."""
    repo = tmp_path / "repo"
    add_python_model(repo, "busy", ECHO_CONFIG, echo_model(
        initialize="end = time.monotonic() + 8\nwhile time.monotonic() < end:\n    pass"))
    started = time.monotonic()
    try:
        code = run_cli("deploy", "--repository", repo, "--no-warmup", "--timeout", "3", *PORTS)
        took = time.monotonic() - started
    finally:
        run_cli("down", "--repository", repo)
    assert code == 0
    assert took > 8


@pytest.mark.server
def test_a_stalled_load_fails_at_the_timeout_naming_the_model_and_its_log_lines(tmp_path):
    """A model stuck in its initialize (its stub idle, as GPT-2's was in
    StubLauncher::WaitForStubProcess) is named once nothing has moved for --timeout, with
    the models that did load and its own lines in the server's log; meanwhile the piped
    progress line says what each model does. Nothing of the server is left running."""
    repo = tmp_path / "repo"
    add_python_model(repo, "quick", ECHO_CONFIG, echo_model())
    add_python_model(repo, "stuck", ECHO_CONFIG, echo_model(initialize="time.sleep(600)"))
    started = time.monotonic()
    run = _piped("deploy", "--repository", repo, "--timeout", "8", *PORTS)
    took = time.monotonic() - started
    assert run.returncode == 1, run.stderr
    error = next(line for line in run.stderr.splitlines() if line.startswith("error: "))
    assert error.startswith("error: tritonserver stalled loading 'stuck': nothing moved for 8 s "
                            "(loading for "), error
    assert "its python-backend stub idle (pid " in error and "READY: quick" in error, error
    hint = next(line for line in run.stderr.splitlines() if line.startswith("hint: "))
    assert "its lines in the server log: loading: stuck:1" in hint, hint
    assert "TRITONBACKEND_ModelInstanceInitialize: stuck_0 " in hint and "raise --timeout" in hint
    assert took < 60                  # 8 s of stall, not the model's 600 s
    # each line says what each model does: both loading (quick too, on a busy host), then
    # quick READY and stuck loading, to the end
    waiting = [line for line in run.stderr.splitlines() if line.startswith("starting tritonserver")]
    both = r"starting tritonserver \(pid \d+\): loading 2 models: quick for \d+ s, stuck for \d+ s"
    one = (r"starting tritonserver \(pid \d+\): loading 2 models, 1 READY \(quick\): stuck for "
           r"\d+ s( \(idle \d+ s\))?")
    kinds = [0 if re.fullmatch(both, line) else 1 if re.fullmatch(one, line) else None
             for line in waiting]
    assert None not in kinds and kinds[-1:] == [1] and kinds == sorted(kinds), run.stderr
    time.sleep(0.5)
    assert _servers_of(repo) == []


@pytest.mark.server
def test_loads_one_after_another_each_get_the_whole_timeout(tmp_path):
    """A warm-up loads one model after another: three loads of some 6 s each (a 4 s
    initialize and the stub's start) pass a 10 s timeout they outlast together."""
    repo = tmp_path / "repo"
    names = ("a_load", "b_load", "c_load")
    for name in names:
        add_python_model(repo, name, ECHO_CONFIG, echo_model(initialize="time.sleep(4)"))
    assert run_cli("deploy", "--repository", repo, "--no-warmup", *PORTS) == 0
    try:
        deployment = load_deployment(repo)
        client = httpclient.InferenceServerClient(deployment.http_url)
        try:
            for name in names:
                client.unload_model(name, headers=deployment.repository_headers())
            while any(client.is_model_ready(name) for name in names):
                time.sleep(0.1)
        finally:
            client.close()
        started = time.monotonic()
        results = warm_up(repo, timeout=10, check=False)
        took = time.monotonic() - started
    finally:
        run_cli("down", "--repository", repo)
    assert [r.model for r in results if r.load_s is not None] == list(names)
    assert took > 12


@pytest.mark.server
def test_a_warm_up_that_keeps_answering_outlasts_the_timeout(tmp_path):
    """Every warm-up request takes 0.3 s: the warm-up of four batch sizes until steady
    takes many times the 5 s timeout, and each answer moves it on. (A 2 s timeout also
    bounded the model's load, where a stub started on a busy host can be seen doing
    nothing for that long.)"""
    repo = tmp_path / "repo"
    add_python_model(repo, "slow", ECHO_CONFIG, echo_model(execute="time.sleep(0.3)"))
    started = time.monotonic()
    try:
        code = run_cli("deploy", "--repository", repo, "--timeout", "5", *PORTS)
        took = time.monotonic() - started
    finally:
        run_cli("down", "--repository", repo)
    assert code == 0
    assert took > 3 * 5


@pytest.mark.server
def test_a_warm_up_request_that_never_returns_fails_its_model_at_the_timeout_not_the_others(
        tmp_path, capsys):
    """'aaa_hang' is warmed first and hangs; 5 s later it fails, named, and 'example' is
    warmed all the same: its figures are printed before the error."""
    repo = tmp_path / "repo"
    add_python_model(repo, "aaa_hang", ECHO_CONFIG, echo_model(execute="time.sleep(600)"))
    add_python_model(repo, "example", ECHO_CONFIG, echo_model())
    started = time.monotonic()
    code = run_cli("deploy", "--repository", repo, "--timeout", "5", *PORTS)
    took = time.monotonic() - started
    captured = capsys.readouterr()
    assert code == 1
    error = captured.err[captured.err.index("error: "):]
    assert error.startswith("error: 'aaa_hang' did not answer a warm-up request within "), error
    assert "nothing moved for 5 s" in error and "refused an input" not in error
    assert "the other models were warmed: example" in captured.err
    rows = {line.split()[0]: line.split() for line in captured.out.splitlines()
            if line.strip().startswith(("aaa_hang", "example"))}
    assert rows["aaa_hang"][-1] == "failed" and rows["example"][-1] != "failed", captured.out
    assert int(rows["example"][-4]) > 0, captured.out         # its reqs: warmed
    assert took < 60
    assert _servers_of(repo) == []
