"""`tritonkit warmup`: when latency is steady, the budget a model gets, and what an unsteady
model is told."""

from __future__ import annotations

import time

import pytest

from tests.conftest import error_lines, run_cli
from tests.warmup.conftest import ECHO_CONFIG, _deploy, _echo_model, _python_model, _ready
from tritonkit.cli.warmup import print_results, print_warmup, unsteady_error
from tritonkit.client import Endpoint
from tritonkit.errors import ServerError, UsageError
from tritonkit.server.local import Deadline
from tritonkit.warmup import ModelWarmup, SteadyRule, load_and_warm
from tritonkit.warmup._model import _Target, _until_steady, _Warming
from tritonkit.warmup._requests import Driver


def test_steady_means_two_windows_in_a_row_agree_within_x_percent():
    rule = SteadyRule(window=3, tolerance=0.2)
    assert not rule.is_steady([10.0] * 5)                                # too few: two windows
    assert rule.is_steady([300.0, 10.0, 11.0, 9.5, 10.0, 10.5])          # the spike is past
    assert not rule.is_steady([10.0, 10.0, 10.0, 300.0, 10.0, 11.0])     # ... in the last window
    assert not rule.is_steady([10.0, 10.0, 10.0, 10.0, 10.0, 15.0])
    # A plateau still falling: the last window agrees with itself, not with the one before.
    assert not rule.is_steady([40.0, 36.0, 32.0, 20.0, 18.0, 16.0])
    assert not SteadyRule(window=3, tolerance=0.25).is_steady([21, 10, 9.5, 9.0, 8.6, 8.1,
                                                                7.0, 6.0, 5.5])
    with pytest.raises(UsageError):
        SteadyRule(window=1)


def test_a_sub_millisecond_requests_jitter_within_the_floor_is_steady_a_cold_start_is_not():
    """0.5 ms requests that a busy host delays by up to a millisecond vary by 200 %, with
    no cold start left; a cold start costs milliseconds more."""
    jitter = [0.5, 1.4, 0.45, 0.5, 1.3, 0.48, 0.52, 1.5, 0.5, 0.47]
    assert SteadyRule(floor_ms=1.0).is_steady(jitter)
    assert not SteadyRule(floor_ms=0.0).is_steady(jitter)               # by the fraction alone
    assert not SteadyRule().is_steady(jitter[:9] + [7.0])              # a cold start in the last
    assert not SteadyRule().is_steady([3.0] * 5 + [0.5] * 5)            # still falling, by 2.5 ms
    with pytest.raises(UsageError, match="steady floor"):
        SteadyRule(floor_ms=-1)


def test_an_unsteady_model_after_deploy_is_told_the_whole_command_to_rerun(tmp_path, capsys):
    record = ModelWarmup(model="m", steady=False, requests=2, note="not steady within 2 requests")
    print_warmup([record.as_dict()], tmp_path / "repo")
    out = capsys.readouterr().out
    assert f"run: tritonkit warmup --repository {tmp_path / 'repo'} --model m" in out


@pytest.mark.server
def test_a_model_that_never_becomes_steady_within_the_budget_exits_non_zero(warm_server, capsys):
    # Two requests cannot make a steady window of five: the budget runs out first.
    code = run_cli("warmup", "--repository", warm_server.repository, "--model", "example",
                   "--requests", "2")
    captured = capsys.readouterr()
    assert code == 1
    # One line under the table for all the model's shapes, not one per shape ...
    [line] = [line for line in captured.out.splitlines() if "not steady" in line]
    assert line.strip().startswith("example: not steady within --requests 2 (2 shapes; their "
                                   "first requests used them all; try --requests ")
    # ... and a short error naming the model, not repeating it all.
    error = error_lines(captured.err)
    assert error[0] == "error: not steady: example (the line under the table says why)"
    assert error[1].startswith("hint: try --requests ")
    assert captured.err.splitlines()[1].endswith("--steady-floor-ms (now 1)")
    assert len(captured.err) < 250
    assert _ready(warm_server)
    # The rule's options reach it: the hint names those it ran with.
    assert run_cli("warmup", "--repository", warm_server.repository, "--model", "example",
                   "--requests", "2", "--steady-tolerance", "0.1", "--steady-floor-ms", "0") == 1
    assert capsys.readouterr().err.splitlines()[1].endswith(
        "--steady-tolerance (now 0.1) or --steady-floor-ms (now 0)")


def test_a_models_unsteady_shapes_are_one_line_and_the_error_is_short(tmp_path, capsys):
    """Five shapes, none steady within --requests 3: the same words were said once per
    shape under the table and again in the error (about 1.5 KB)."""
    shapes = [f"INPUT__0:{b}x4" for b in (1, 2, 4, 8, 16)]
    first = Driver(Endpoint("h:1"), "cnn", Deadline(1))
    targets = [_Target(label, "", []) for label in shapes]
    warming = _Warming("cnn", first, targets, lambda _m: None)
    warming.sent = 3
    note = _until_steady(warming, targets, SteadyRule(), 3, Deadline(60), enough=500)
    assert note == ("not steady within --requests 3 (5 shapes; their first requests used "
                    "them all; try --requests 500)")
    results = [ModelWarmup(model=m, steady=False, requests=3, note=note, shapes=shapes,
                           suggested_requests=500) for m in ("cnn", "mlp")]
    print_results(results)
    out = capsys.readouterr().out
    assert out.count("not steady") == 2                    # one line per model
    error = unsteady_error(results, SteadyRule(tolerance=0.001))
    assert error.message == "not steady: cnn, mlp (the line under the table says why)"
    assert error.hint == ("try --requests 500, or raise --timeout, or loosen "
                          "--steady-tolerance (now 0.001) or --steady-floor-ms (now 1)")


@pytest.mark.server
def test_a_request_that_hangs_late_in_a_steady_run_ends_with_the_deadline(tmp_path):
    """The steady run keeps one connection for a shape: a request that hangs long after it
    opened must still end when the time left of a fixed deadline runs out, not the
    connection's time later. (Warm-up's own deadline moves with each answer: there the
    hang ends its timeout after the last one, test_stall_deadline.)"""
    never_steady_then_hangs = _echo_model(
        "        time.sleep(0.03 if self.calls % 2 else 0.001)\n"
        "        if self.calls == 150:\n"
        "            time.sleep(9)")
    repo = tmp_path / "repo"
    _python_model(repo, "hangs", ECHO_CONFIG.replace("max_batch_size: 8", "max_batch_size: 0"),
                  never_steady_then_hangs)
    deployment = _deploy(repo, "--no-warmup")
    try:
        started = time.monotonic()
        with pytest.raises(ServerError, match="'hangs' did not answer a warm-up request within"):
            load_and_warm(Endpoint.from_deployment(deployment), ["hangs"], deadline=Deadline(6),
                          requests=10000)
        took = time.monotonic() - started
    finally:
        run_cli("down", "--repository", repo, "--timeout", "2")   # not the 9 s hang's end
    assert took < 7.0
