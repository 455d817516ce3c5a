"""What the benchmarks share: a served copy of a model repository, one measurement by our
load generator, Triton's own counts, paired ratios and their spread, the order of the
sides each round, and their --json report (every run's kept, with the commit and host)."""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from tritonkit.client import Endpoint
from tritonkit.deploy import deploy_local, down
from tritonkit.fileio import atomic_write
from tritonkit.loadtest import LevelResult, LoadSpec, run_loadtest
from tritonkit.server.state import Deployment

ROOT = Path(__file__).resolve().parent.parent
# Every run's JSON is kept here; TRITONKIT_BENCH_RUNS moves it (the tests' runs go to theirs).
RUNS_DIR = Path(os.environ.get("TRITONKIT_BENCH_RUNS") or ROOT / "out" / "bench-runs")
# Exit statuses of the benchmarks: a goal missed (with --check), a measurement that cannot
# be judged (a side failed in every round of a level, or gave no figures).
EXIT_GOAL_MISSED = 1
EXIT_INCOMPLETE = 3


def split_cpus(pin: bool) -> tuple[set[int], set[int]]:
    """(server CPUs, client CPUs): halves of the CPUs we may use when ``pin``, else all for both."""
    cpus = sorted(os.sched_getaffinity(0))
    if not pin or len(cpus) < 2:
        return set(cpus), set(cpus)
    return set(cpus[:len(cpus) // 2]), set(cpus[len(cpus) // 2:])


def describe_cpus(server_cpus: set[int], client_cpus: set[int]) -> str:
    return (f"server on CPUs {sorted(server_cpus)}, clients on {sorted(client_cpus)}"
            if server_cpus != client_cpus else "server and clients share the CPUs")


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


# -- Triton's own counts -------------------------------------------------------------------------

@dataclass(frozen=True)
class TritonCounts:
    """One model's cumulative inference statistics: requests answered, samples inferred,
    model executions (batches), and Triton's queue + compute nanoseconds."""

    requests: int
    inferences: int
    executions: int
    server_ns: int

    def minus(self, other: "TritonCounts") -> "TritonCounts":
        return TritonCounts(self.requests - other.requests, self.inferences - other.inferences,
                            self.executions - other.executions, self.server_ns - other.server_ns)

    @property
    def mean_batch(self) -> float | None:
        """Samples per model execution: the batches Triton's scheduler formed."""
        return self.inferences / self.executions if self.executions else None


def triton_counts(endpoint: Endpoint, model: str) -> TritonCounts:
    client = endpoint.http(connection_timeout=5.0, network_timeout=10.0)
    try:
        stats = client.get_inference_statistics(model, headers=dict(endpoint.repository_headers) or None)
    finally:
        client.close()
    requests = inferences = executions = server_ns = 0
    for entry in stats.get("model_stats", []):
        inference = entry.get("inference_stats", {})
        requests += int(inference.get("success", {}).get("count", 0))
        server_ns += sum(int(inference.get(k, {}).get("ns", 0))
                         for k in ("queue", "compute_input", "compute_infer", "compute_output"))
        inferences += int(entry.get("inference_count", 0))
        executions += int(entry.get("execution_count", 0))
    return TritonCounts(requests, inferences, executions, server_ns)


def cpu_seconds(*, own: bool) -> float:
    """CPU (user + system) of the reaped child processes, plus this process's own if ``own``.
    With ``own``, also our load-test workers': forked from multiprocessing's fork server,
    they are its children, reaped by it, and it is counted among ours only once it ends."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    if own:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        total += usage.ru_utime + usage.ru_stime + _fork_server_cpu_seconds()
    return total


def _fork_server_cpu_seconds() -> float:
    """The running fork server's CPU and its reaped children's (0 where none runs)."""
    from multiprocessing import forkserver

    pid = forkserver._forkserver._forkserver_pid
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except (OSError, TypeError):
        return 0.0
    # utime, stime, cutime, cstime: fields 14-17 of stat(5), in clock ticks
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


# -- our load generator --------------------------------------------------------------------------

def measure_ours(endpoint: Endpoint, model: str, concurrency: int, seconds: float,
                 protocol: str = "http", warmup_s: float = 1.0) -> LevelResult:
    """One closed-loop level of `tritonkit loadtest` (``warmup_s`` of untimed load first).

    A failed request, a level that ended early (the server stopped answering), no answer at
    all, or figures missing (latencies, Triton's split) end the benchmark: none of them is a
    measurement to take a median of.
    """
    level = run_loadtest(endpoint, LoadSpec(model=model, concurrency=(concurrency,), duration_s=seconds,
                                            warmup_s=warmup_s, protocol=protocol)).levels[0]
    where = f"tritonkit loadtest on {model} at concurrency {concurrency} ({protocol})"
    if level.error_count:
        raise SystemExit(f"{where} had errors: {level.errors}")
    if level.ended_early:
        raise SystemExit(f"{where} ended early: {level.ended_early}")
    if level.ok <= 0 or not level.latency_ms:
        raise SystemExit(f"{where} got no answer in {seconds:g} s")
    if not level.server_split_ms:
        raise SystemExit(f"{where}: Triton's statistics could not be read (no server-time split)")
    return level


# -- the order of the sides, paired ratios and their spread ---------------------------------------

def abba(sides: Sequence[str], round_index: int) -> list[str]:
    """The sides in the order they run in round ``round_index``: A B, then B A, then A B...
    so neither always runs first (after the other's load) or last."""
    return list(sides) if round_index % 2 == 0 else list(reversed(sides))


def finite(values: Iterable[float], what: str) -> list[float]:
    """``values`` as a list, refusing NaN, infinities and None (a figure that was not measured)."""
    values = list(values)
    bad = [v for v in values if v is None or not math.isfinite(v)]
    if bad:
        raise SystemExit(f"{what}: not a measured figure ({bad[0]!r}) among {values}")
    return values


def spread(values: Iterable[float], what: str) -> dict | None:
    """Median, min and max of per-round figures (None when there are none)."""
    values = finite(values, what)
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values), "rounds": values}


def fmt_spread(s: dict | None, digits: int = 2) -> str:
    """``1.03 (0.98–1.07)``; one round: the figure alone; none: a dash."""
    if not s:
        return "—"
    if s["n"] == 1:
        return f"{s['median']:.{digits}f}"
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}–{s['max']:.{digits}f})"


# -- the report -----------------------------------------------------------------------------------

def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def run_facts(argv: list[str] | None = None) -> dict:
    """What a result needs to be read later: when, which code, which host, how it was run."""
    commit = _git("rev-parse", "HEAD")
    changed = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": commit,
        "uncommitted_changes": None if changed is None else bool(changed),
        "argv": argv if argv is not None else sys.argv,
        "host": {
            "nproc": os.cpu_count(),
            "usable_cpus": sorted(os.sched_getaffinity(0)),
            "cpu_model": _cpu_model(),
            "load_average_1_5_15": list(os.getloadavg()),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
    }


def write_report(path: Path | None, data: dict, bench: str, facts: dict,
                 runs_dir: Path = RUNS_DIR) -> list[Path]:
    """A benchmark's report, with ``facts`` (run_facts() taken at its start) as "run".

    Every run's is kept: written to ``runs_dir/<bench>-<UTC time>-<commit>.json`` whatever
    else happens, and to ``path`` (--json) too when given. Each file is written whole or
    not at all, its folder made if need be.
    """
    facts = dict(facts, finished_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    text = json.dumps({"bench": bench, "run": facts, **data}, indent=2) + "\n"
    stamp = facts["started_utc"].replace("-", "").replace(":", "")
    commit = (facts.get("commit") or "nocommit")[:10] + ("-dirty" if facts.get("uncommitted_changes") else "")
    written = [atomic_write(runs_dir / f"{bench}-{stamp}-{commit}.json", text)]
    if path is not None:
        written.append(atomic_write(path, text))
    return written


def log_round(console, said: str, result: dict) -> None:
    """One round of one side, as the bench runs: ``said`` and, for a run left out, why."""
    if result["stable"] is False:
        said += f" (left out: exit {result['exit_code']}, {result['failure']})"
    console.log(said, markup=False, highlight=False, _stack_offset=2)   # the bench's line


def print_left_out(console, rows: list[dict]) -> None:
    """The rounds whose perf_analyzer run was left out, with their pair, and why."""
    for row in rows:
        for left in row["rounds_left_out"]:
            console.print(f"concurrency {row['concurrency']}, round {left['round']}: perf_analyzer exited "
                          f"non-zero ({left['failure']}): the pair is left out",
                          markup=False, highlight=False)
