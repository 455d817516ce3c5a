"""The load generator's workers kept between runs (``WorkerPool``), against the real local
Triton: started once per kind of plan, reused run after run, ended when a run fails and
when the pool closes; without a pool each level starts its own, as `tritonkit loadtest`;
either way forked from one fork server."""

from __future__ import annotations

import multiprocessing
from dataclasses import replace

import pytest

from tritonkit.client import Endpoint
from tritonkit.errors import LoadTestError
from tritonkit.loadtest import LoadSpec, WorkerPool, run_loadtest
from tests.conftest import unused_port

pytestmark = pytest.mark.server


def _spec(**load) -> LoadSpec:
    return LoadSpec(model="example", duration_s=0.3, warmup_s=0.1, window_s=0.3, **load)


def test_a_pool_runs_measurement_after_measurement_on_the_worker_it_started_once(
        example_server, spawned):
    endpoint = Endpoint.from_deployment(example_server)
    with WorkerPool() as pool:
        results = [run_loadtest(endpoint, _spec(concurrency=(1,)), pool=pool) for _ in range(3)]
        assert pool.started == 1 and pool.idle == 1
    assert len(spawned) == 1
    assert all(r.levels[0].ok > 0 and not r.levels[0].errors for r in results)
    assert multiprocessing.active_children() == []      # closing the pool ended its worker


def test_a_pool_keeps_a_worker_per_kind_of_plan(example_server, spawned):
    """Closed loop with one user, with several, and open loop each set a process up their
    own way (threads or gevent, its loop's backend, the timer slack): each kind has its
    own workers, reused by the plans of that kind."""
    endpoint = Endpoint.from_deployment(example_server)
    with WorkerPool() as pool:
        for spec in (_spec(concurrency=(1,)), _spec(concurrency=(4,), workers=1),
                     _spec(rates=(50.0,)), _spec(concurrency=(1, 4), workers=1),
                     _spec(rates=(80.0,))):
            result = run_loadtest(endpoint, spec, pool=pool)
            assert all(level.ok > 0 for level in result.levels)
        assert pool.started == 3
    assert len(spawned) == 3


def test_a_pooled_run_that_fails_ends_its_workers_rather_than_keeping_them(
        example_server, spawned, monkeypatch):
    from tritonkit.loadtest import _run

    endpoint = Endpoint.from_deployment(example_server)
    plans = _run._plans
    with WorkerPool() as pool:
        run_loadtest(endpoint, _spec(concurrency=(2,), workers=2), pool=pool)
        assert pool.idle == 2
        monkeypatch.setattr(_run, "_plans", lambda *args: [
            *plans(*args)[:-1], replace(plans(*args)[-1], url=f"127.0.0.1:{unused_port()}")])
        with pytest.raises(LoadTestError, match="worker 1 could not start"):
            run_loadtest(endpoint, _spec(concurrency=(2,), workers=2), pool=pool)
        assert pool.idle == 0 and multiprocessing.active_children() == []
        monkeypatch.setattr(_run, "_plans", plans)
        result = run_loadtest(endpoint, _spec(concurrency=(2,), workers=2), pool=pool)
        assert result.levels[0].ok > 0 and pool.started == 4
    assert multiprocessing.active_children() == []


def test_without_a_pool_each_level_starts_its_own_workers(example_server, spawned):
    """`tritonkit loadtest`'s way, unchanged: every level's workers start for it and end."""
    endpoint = Endpoint.from_deployment(example_server)
    run_loadtest(endpoint, _spec(concurrency=(1, 2), workers=1))
    assert len(spawned) == 2
    assert multiprocessing.active_children() == []


def test_workers_are_forked_from_one_server_not_each_a_new_interpreter(example_server, spawned,
                                                                       monkeypatch):
    """A fresh interpreter per worker imports numpy, gevent and the clients again: 0.16-0.45
    CPU s, at every level. The workers of a run, and of the runs after it, are forked from
    one fork server that imported them once; the process starts no interpreter for them."""
    from multiprocessing import util

    endpoint = Endpoint.from_deployment(example_server)
    run_loadtest(endpoint, _spec(concurrency=(1,), workers=1))      # the fork server is up
    started = []
    spawnv_passfds = util.spawnv_passfds

    def counted(path, args, passfds):
        started.append(args)
        return spawnv_passfds(path, args, passfds)

    monkeypatch.setattr(util, "spawnv_passfds", counted)
    result = run_loadtest(endpoint, _spec(concurrency=(2, 4), workers=2))
    assert all(level.ok > 0 and not level.errors for level in result.levels)
    assert len(spawned) == 1 + 2 * 2
    assert started == []
    assert multiprocessing.active_children() == []
