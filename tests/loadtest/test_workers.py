"""`tritonkit loadtest` worker processes: started with a main guard and the environment
left alone, as many as the limits were checked for, stopped when one cannot start."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import run_cli
from tritonkit.client import Endpoint
from tritonkit.errors import EXIT_USAGE, LoadTestError
from tritonkit.loadtest import LoadSpec, run_loadtest


@pytest.mark.server
def test_a_script_without_a_main_guard_is_told_to_add_one(served, tmp_path):
    """Each worker imports the main script again, and an unguarded one calls
    the load test there. The worker leaves at once; the script is told why, not that a
    worker died (exit code None)."""
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from tritonkit.client import Endpoint\n"
        "from tritonkit.loadtest import LoadSpec, run_loadtest\n"
        f"run_loadtest(Endpoint(http_url={served.http_url!r}),\n"
        "             LoadSpec(model='example', concurrency=(1,), duration_s=0.5, warmup_s=0))\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("tritonkit.errors.UsageError: a load-test worker ran the main script's "
                           "load test again: put the call under `if __name__ == \"__main__\":`"), done.stderr
    assert "RuntimeError" not in done.stderr        # the worker's own failure, a page long, is gone


def test_starting_workers_leaves_the_process_environment_alone(monkeypatch):
    """A child another thread starts meanwhile (a tritonserver, a CLI run in a subprocess)
    must not inherit a load-test worker's mark, nor two load tests at once remove each
    other's: a worker knows itself by its process name, never by os.environ."""
    from tritonkit.loadtest._pool import worker_context
    from tritonkit.loadtest._run import _run_level

    seen = []

    def start(self):
        seen.append(dict(os.environ))
        raise OSError("no worker started in this test")

    monkeypatch.setattr(worker_context().Process, "start", start)
    spec = LoadSpec(model="m", concurrency=(1,), duration_s=0.5, warmup_s=0)
    before = dict(os.environ)
    with pytest.raises(OSError, match="no worker started"):
        _run_level(Endpoint(http_url="-"), "-", spec, None, 1, [1], None)
    assert seen == [before] and dict(os.environ) == before


@pytest.mark.server
def test_a_worker_that_cannot_start_stops_the_ready_ones_at_once(served, monkeypatch):
    """The workers that did start wait for their start time; they are let go at once, not
    each after a timeout."""
    import multiprocessing
    from dataclasses import replace

    from tritonkit.loadtest import _run
    from tests.conftest import unused_port

    plans, wait_ready = _run._plans, _run._wait_ready
    failed_at = []

    def last_one_unreachable(*args):
        made = plans(*args)
        return [*made[:-1], replace(made[-1], url=f"127.0.0.1:{unused_port()}")]

    def noting_the_failure(*args):
        try:
            wait_ready(*args)
        finally:
            failed_at.append(time.monotonic())

    monkeypatch.setattr(_run, "_plans", last_one_unreachable)
    monkeypatch.setattr(_run, "_wait_ready", noting_the_failure)
    with pytest.raises(LoadTestError, match="worker 3 could not start"):
        run_loadtest(Endpoint.from_deployment(served),
                     LoadSpec(model="example", concurrency=(4,), workers=4, duration_s=1, warmup_s=0))
    # timed from the failure, not from the spawn (seconds of imports on a busy machine):
    # three ready workers kept 5 s each took 15 s; stopping them takes well under a second
    # (8 s: a busy 2-core host's start of the clean-up, not a worker's timeout)
    assert time.monotonic() - failed_at[0] < 8
    assert multiprocessing.active_children() == []


@pytest.mark.server
def test_a_level_runs_the_workers_its_limits_were_checked_for(served, monkeypatch):
    """The CPUs this process may use can change while a run prepares (a benchmark pins it):
    the workers checked against the limits up front are the workers that run."""
    cpus = iter([{0}])
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: next(cpus, {0, 1, 2, 3}))
    result = run_loadtest(Endpoint.from_deployment(served),
                          LoadSpec(model="example", concurrency=(4,), duration_s=0.5, warmup_s=0))
    assert result.levels[0].workers == 1        # four users in the one worker planned
    assert result.levels[0].ok > 0


def test_in_flight_over_the_workers_the_cpus_give_is_refused_up_front(monkeypatch, capsys):
    """--max-in-flight is per worker; without --workers the CPUs decide how many."""
    import os

    from tests.conftest import unused_port

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    code = run_cli("loadtest", "--url", f"127.0.0.1:{unused_port()}", "--model", "m",
                   "--rate", "20000", "--max-in-flight", "4000")
    assert code == EXIT_USAGE
    assert "4 workers x 4000 requests in flight at rate 20000/s is more than one load " \
        "generator holds" in capsys.readouterr().err


@pytest.mark.server
def test_a_program_that_started_its_own_fork_server_still_runs_its_load_tests(served, tmp_path):
    """multiprocessing's fork server is one per process: a program that started it first
    (no preload of ours) has the workers forked from it, and they run and end as ours do."""
    script = tmp_path / "own_server.py"
    script.write_text(
        "import multiprocessing, multiprocessing.forkserver\n"
        "from tritonkit.client import Endpoint\n"
        "from tritonkit.loadtest import LoadSpec, run_loadtest\n"
        "if __name__ == '__main__':\n"
        "    multiprocessing.forkserver.ensure_running()\n"
        f"    result = run_loadtest(Endpoint(http_url={served.http_url!r}),\n"
        "        LoadSpec(model='example', concurrency=(1, 2), workers=2, duration_s=0.5,\n"
        "                 warmup_s=0))\n"
        "    assert all(level.ok > 0 and not level.errors for level in result.levels)\n"
        "    assert multiprocessing.active_children() == []\n"
        "    print('ok')\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
