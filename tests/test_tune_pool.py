"""A tune keeps its load generator's workers for the whole search (a ``WorkerPool``),
against the real local Triton: a probe does not start a process of its own."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from tritonkit.client import Endpoint
from tritonkit.profiles import TuneSpace
from tritonkit.report import Sla
from tritonkit.tune import tune

pytestmark = [pytest.mark.server, pytest.mark.slow]      # a search: a minute


def test_a_tune_starts_its_load_generator_workers_once_not_per_probe(deployed, spawned):
    endpoint = Endpoint.from_deployment(deployed)
    result = tune(endpoint, "example", Sla(p99_ms=5000.0), space=TuneSpace(instance_count=(1, 2)),
                  space_keys={"instance_count"}, budget_s=60, probe_s=0.3, max_concurrency=2,
                  repository=deployed.repository)
    probes = sum(len(t.found.probes) for t in result.trials if t.found)
    rounds = sum(len(c.winner_runs) + len(c.baseline_runs) for c in result.comparisons)
    # The most one run holds of each kind of process: closed loop, a user each, up to
    # max_concurrency (one per CPU); open loop, one per 1,500 requests/s, one per CPU.
    cpus = len(os.sched_getaffinity(0))
    most = min(2, cpus) + cpus
    assert 1 <= len(spawned) <= most < probes + rounds, spawned
    assert multiprocessing.active_children() == []
