"""`tritonkit loadtest`: what a level offers (concurrency or a rate, its arrivals, how they
are dealt to workers) and the loads refused before a run starts."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tests.conftest import run_cli
from tritonkit.errors import EXIT_USAGE, UsageError
from tritonkit.loadtest import LoadSpec, closed_loop, open_loop_schedule, split_schedule


def test_closed_loop_spreads_virtual_users_evenly_over_workers():
    assert closed_loop(10, 4) == [3, 3, 2, 2]
    assert closed_loop(2, 8) == [1, 1]          # no idle worker processes
    assert sum(closed_loop(33, 2)) == 33


def test_constant_arrivals_are_exactly_one_over_rate_apart():
    times = open_loop_schedule(200, 2.0, "constant")
    assert len(times) == 400
    np.testing.assert_allclose(np.diff(times), 1 / 200)


def test_poisson_arrivals_offer_the_exact_rate_with_exponential_gaps():
    times = open_loop_schedule(1000, 5.0, "poisson", seed=1)
    gaps = np.diff(times)
    assert len(times) == 5000 and np.all(gaps >= 0) and times[-1] < 5.0
    assert gaps.mean() == pytest.approx(1 / 1000, rel=0.05)
    assert gaps.std() == pytest.approx(gaps.mean(), rel=0.1)     # exponential: std == mean
    assert not np.array_equal(times, open_loop_schedule(1000, 5.0, "poisson", seed=2))


def test_a_schedule_is_dealt_round_robin_so_each_worker_keeps_the_rhythm():
    parts = split_schedule(np.arange(10.0), 3)
    assert [p.tolist() for p in parts] == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]


def test_a_load_spec_needs_exactly_one_of_concurrency_and_rate():
    with pytest.raises(UsageError, match="exactly one"):
        LoadSpec(model="m")
    with pytest.raises(UsageError, match="exactly one"):
        LoadSpec(model="m", concurrency=(1,), rates=(10.0,))
    with pytest.raises(UsageError, match="arrivals"):
        LoadSpec(model="m", rates=(10.0,), arrivals="bursty")


def test_a_spec_with_no_time_to_measure_is_refused_with_a_hint():
    with pytest.raises(UsageError, match=r"--duration \(0\) and --window-s \(1\) must be > 0") as refused:
        LoadSpec(model="m", concurrency=(1,), duration_s=0)
    assert refused.value.hint == "e.g. --duration 10 --window-s 1 --warmup-s 1"


def test_bad_flags_are_usage_errors(capsys):
    assert run_cli("loadtest", "--model", "m", "--concurrency", "1,x") == EXIT_USAGE
    assert "comma-separated" in capsys.readouterr().err
    assert run_cli("loadtest", "--model", "m", "--concurrency", "1", "--rate", "5") == EXIT_USAGE
    assert run_cli("loadtest", "--model", "m", "--rate", "5", "--sla-max-error-rate", "3") == EXIT_USAGE
    assert run_cli("loadtest", "--model", "m", "--rate", "inf") == EXIT_USAGE


@pytest.mark.parametrize("args,says", [
    (("--rate", "1e9"), "more than one level may schedule"),
    (("--concurrency", "100000"), "more than one load generator holds"),
    (("--concurrency", "1", "--duration", "inf"), "--duration inf is not a time of at most 3600 s"),
    (("--concurrency", "1", "--request-timeout", "1e10"), "--request-timeout 1e+10 is not a time"),
    (("--concurrency", "1", "--duration", "3000", "--window-s", "1"), "more than 1000 timeline windows"),
    (("--rate", "10", "--workers", "500"), "--workers 500 is more than 64 processes"),
    (("--rate", "10", "--max-in-flight", "5000"), "more than one load generator holds"),
])
def test_a_load_no_single_load_generator_can_hold_is_refused_at_once(tmp_path, capsys, args, says):
    """At once and as bad input (exit 2): not minutes of building a schedule or starting
    sockets, then a run error that blames the server."""
    from tests.conftest import unused_port

    started = time.monotonic()
    code = run_cli("loadtest", "--url", f"127.0.0.1:{unused_port()}", "--model", "m", *args)
    assert code == EXIT_USAGE
    assert says in capsys.readouterr().err
    assert time.monotonic() - started < 10      # seconds on a busy host, never minutes


@pytest.mark.parametrize("args, says", [
    (["--concurrency", "0"], "error: --concurrency 0: each level needs at least 1 request in flight"),
    (["--concurrency", "1,0,-2"], "error: --concurrency 0,-2: each level needs at least 1 request"),
    (["--rate", "0"], "error: --rate 0: each level needs a finite rate above 0 requests per second"),
])
def test_a_level_with_nothing_to_send_names_the_level(capsys, args, says):
    assert run_cli("loadtest", "--model", "m", *args) == EXIT_USAGE
    assert capsys.readouterr().err.startswith(says)
