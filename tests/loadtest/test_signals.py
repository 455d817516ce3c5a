"""`tritonkit loadtest` ended by a signal (Ctrl-C, SIGTERM, SIGHUP) or its parent killed:
no traceback, workers stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import default_signals
from tests.loadtest.conftest import load_test_workers
from tritonkit.client import Endpoint
from tritonkit.loadtest import LoadSpec


def _answered(client) -> int:
    stats = client.get_inference_statistics("example")["model_stats"]
    return sum(int(m["inference_stats"]["success"]["count"]) for m in stats)


def _loadtest_process(deployment, *args) -> subprocess.Popen:
    """`tritonkit loadtest` in a process group of its own, as a terminal would run it."""
    return subprocess.Popen(
        [sys.executable, "-m", "tritonkit", "loadtest", "--repository", str(deployment.repository),
         "--model", "example", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=default_signals)


def _interrupted(run: subprocess.Popen) -> tuple[float, str]:
    """Ctrl-C as a terminal sends it (to the whole process group): seconds until the run
    ended, and what it wrote on stderr."""
    pressed = time.monotonic()
    os.killpg(run.pid, signal.SIGINT)
    _, err = run.communicate(timeout=60)
    return time.monotonic() - pressed, err


@pytest.mark.server
def test_ctrl_c_ends_a_run_whose_requests_stall_in_seconds_without_a_traceback(served):
    """Every worker is blocked in a request the frozen server will not answer for 30 s
    (the request timeout): Ctrl-C does not wait for them."""
    client = Endpoint.from_deployment(served).http()
    run = _loadtest_process(served, "--concurrency", "3", "--workers", "3", "--duration", "60",
                            "--warmup-s", "0")
    try:
        before, deadline = _answered(client), time.monotonic() + 30
        while _answered(client) < before + 300 and time.monotonic() < deadline:   # workers loading
            time.sleep(0.2)
        os.kill(served.pid, signal.SIGSTOP)
        time.sleep(0.5)                          # every request now out waits on the server
        took, err = _interrupted(run)
    finally:
        os.kill(served.pid, signal.SIGCONT)
        if run.poll() is None:
            run.kill()
        client.close()
    assert run.returncode == 130
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines() == ["error: interrupted"], err      # the CLI's one line
    assert took < 6, f"Ctrl-C took {took:.1f} s"      # it was 15 s and more: 5 s per worker


@pytest.mark.server
def test_ctrl_c_while_the_workers_are_still_starting_prints_no_traceback(served):
    """A worker starts for a second or more (imports): one interrupted then is the
    parent's to report, once, not a KeyboardInterrupt traceback from each worker."""
    run = _loadtest_process(served, "--concurrency", "3", "--workers", "3", "--duration", "60")
    try:
        deadline = time.monotonic() + 30
        while len(load_test_workers(run.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(load_test_workers(run.pid)) == 3, "the workers did not start"
        time.sleep(0.1)                          # all three started; none imported all it needs
        took, err = _interrupted(run)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines() == ["error: interrupted"], err      # the CLI's one line
    assert took < 6, f"Ctrl-C took {took:.1f} s"


def _left_in_session(sid: int) -> list[int]:
    """The processes still running of a run started in a session of its own: itself, its
    workers, whatever else it started (not one that has ended, a zombie not yet reaped)."""
    left = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text()
        except OSError:             # ended meanwhile
            continue
        state, _ppid, _pgrp, session = fields[fields.rindex(")") + 2:].split()[:4]
        if int(session) == sid and state != "Z":
            left.append(int(stat.parent.name))
    return left


def _kill_what_is_left(sid: int) -> None:
    """A worker the run left behind (its process group is its session) is the test's to end."""
    try:
        os.killpg(sid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _signalled_mid_run(deployment, signum: int) -> tuple[subprocess.Popen, str, list[int], int]:
    """A run loading the server, sent ``signum`` (the command alone, not its process group,
    as a CI runner stops its job): the run once ended, its stderr, what of it still runs
    10 s later at the most (a worker leaves within a poll; the level had 60 s to run), and
    the requests the server answered in the second after that."""
    client = Endpoint.from_deployment(deployment).http()
    run = _loadtest_process(deployment, "--concurrency", "2", "--workers", "2", "--duration", "60",
                            "--warmup-s", "0")
    try:
        before, deadline = _answered(client), time.monotonic() + 30
        while _answered(client) < before + 300 and time.monotonic() < deadline:
            assert run.poll() is None, run.communicate()
            time.sleep(0.2)
        assert _answered(client) >= before + 300, "the run did not load the server"
        os.kill(run.pid, signum)
        _, err = run.communicate(timeout=30)    # (a worker left holding its stderr keeps it open)
        deadline = time.monotonic() + 10
        while _left_in_session(run.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        left, answered = _left_in_session(run.pid), _answered(client)
        time.sleep(1)
        return run, err, left, _answered(client) - answered
    finally:
        if run.poll() is None:
            run.kill()
        _kill_what_is_left(run.pid)
        client.close()


@pytest.mark.server
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_ends_a_run_as_ctrl_c_does_and_stops_its_workers(served, signum):
    """A CI job cancelled mid-run (its runner sends the command SIGTERM) or a closed
    terminal (SIGHUP) ends the run as Ctrl-C does: one line, exit 128 + the signal, and
    no worker left loading the server until its level would have ended."""
    run, err, left, answered_since = _signalled_mid_run(served, signum)
    assert run.returncode == 128 + signum
    assert "Traceback" not in err, err
    assert err.strip().splitlines() == [f"error: stopped by {signum.name}"], err
    assert left == []
    assert answered_since == 0


@pytest.mark.server
def test_workers_leave_at_once_when_their_parent_is_killed_outright(served):
    """A parent that could clean nothing up (SIGKILL) still leaves nothing loading the
    server: each worker ends as soon as its parent is gone."""
    run, _, left, answered_since = _signalled_mid_run(served, signal.SIGKILL)
    assert run.returncode == -signal.SIGKILL
    assert left == []
    assert answered_since == 0


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_a_signal_while_a_worker_starts_comes_once_the_worker_is_counted_and_is_stopped(
        monkeypatch, signum):
    """A SIGTERM or a Ctrl-C in the middle of starting a worker waits until the run knows
    of the worker: the run then ends as stopped, and the worker with it (a Ctrl-C is not
    lost: a search that lost one went on for minutes)."""
    import multiprocessing

    from tritonkit.errors import Interrupted
    from tritonkit.loadtest._pool import worker_context
    from tritonkit.loadtest._run import _run_level

    start = worker_context().Process.start

    def signalled_while_starting(self):
        start(self)
        os.kill(os.getpid(), signum)    # the worker runs; its start() has not returned

    def stop(signum, _frame):
        raise Interrupted(signum)

    monkeypatch.setattr(worker_context().Process, "start", signalled_while_starting)
    spec = LoadSpec(model="m", concurrency=(1,), duration_s=0.5, warmup_s=0)
    previous = signal.signal(signum, stop)
    try:
        with pytest.raises(Interrupted) as stopped:
            _run_level(Endpoint(http_url="-"), "-", spec, None, 1, [1], None)
    finally:
        signal.signal(signum, previous)
    assert stopped.value.signum == signum
    assert multiprocessing.active_children() == []
