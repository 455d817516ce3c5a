"""What the benchmarks share: a served copy of a model repository, one measurement by our
load generator, and their --json report."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tritonkit.client import Endpoint
from tritonkit.deploy import deploy_local, down
from tritonkit.fileio import atomic_write
from tritonkit.loadtest import LevelResult, LoadSpec, run_loadtest
from tritonkit.server.state import Deployment


def split_cpus(pin: bool) -> tuple[set[int], set[int]]:
    """(server CPUs, client CPUs): halves of the CPUs we may use when ``pin``, else all for both."""
    cpus = sorted(os.sched_getaffinity(0))
    if not pin or len(cpus) < 2:
        return set(cpus), set(cpus)
    return set(cpus[:len(cpus) // 2]), set(cpus[len(cpus) // 2:])


@contextmanager
def served(source: Path, *, server_cpus: set[int] | None = None,
           client_cpus: set[int] | None = None) -> Iterator[Deployment]:
    """A local Triton over a temporary copy of ``source``, torn down afterwards.

    With CPU sets, the server (and the python-backend stubs it starts) runs on
    ``server_cpus`` and this process — with perf_analyzer and our workers, which inherit
    it — on ``client_cpus``, so neither load generator takes CPU from the server.
    """
    before = os.sched_getaffinity(0)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            repo = Path(tmp) / "repo"
            shutil.copytree(source, repo, ignore=shutil.ignore_patterns(".tritonkit"))
            if server_cpus:
                os.sched_setaffinity(0, server_cpus)
            deployment = deploy_local(repo, http_port=0, grpc_port=0, metrics_port=0, timeout=180)
            os.sched_setaffinity(0, client_cpus or before)
            try:
                yield deployment
            finally:
                down(repo)
    finally:
        os.sched_setaffinity(0, before)


def measure_ours(endpoint: Endpoint, model: str, concurrency: int, seconds: float,
                 protocol: str = "http") -> LevelResult:
    """One closed-loop level of `tritonkit loadtest`; a failed request ends the benchmark."""
    level = run_loadtest(endpoint, LoadSpec(model=model, concurrency=(concurrency,), duration_s=seconds,
                                            warmup_s=1.0, protocol=protocol)).levels[0]
    if level.error_count:
        raise SystemExit(f"tritonkit loadtest had errors on {model} at concurrency {concurrency}: "
                         f"{level.errors}")
    return level


def write_report(path: Path, data: dict) -> Path:
    """A benchmark's --json: written whole or not at all, its folder made if need be."""
    return atomic_write(path, json.dumps(data, indent=2) + "\n")
