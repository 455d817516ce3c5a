"""tritonkit's load generator vs NVIDIA's perf_analyzer 2.51.0, side by side in one run.

Both load the same model on the same embedded local Triton, closed loop, at the same
concurrencies, taking turns (perf_analyzer, ours, perf_analyzer, ours, ...) so that a
noisy neighbour hurts both alike; each figure is the median of the rounds. Reported as
ratios ours / perf_analyzer: throughput, p50, p99 — the goal is agreement within ±10 % —
and the best throughput each reached over all concurrencies (the goal: ours >= theirs, so
the load generator is never what limits a test). Client CPU per request shows where the
client's time goes; on a 2-core machine every client microsecond is taken from the server.

    .venv/bin/python bench/bench_loadtest.py [--json out/bench_loadtest.json]
        [--concurrency 1,4,16] [--rounds 2] [--seconds 4] [--protocol http]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench.perf_analyzer import run_perf_analyzer  # noqa: E402
from tritonkit.client import Endpoint  # noqa: E402
from tritonkit.deploy import deploy_local, down  # noqa: E402
from tritonkit.loadtest import LoadSpec, run_loadtest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure_perf_analyzer(url: str, model: str, concurrency: int, seconds: float, protocol: str) -> dict:
    """perf_analyzer at one concurrency: its last stable window, and its CPU per request."""
    cpu, wall = _children_cpu_s(), time.perf_counter()
    result = run_perf_analyzer(url, model, concurrency, protocol=protocol,
                               interval_ms=int(seconds * 1000), stability_pct=50, max_trials=8)
    cpu, wall = _children_cpu_s() - cpu, time.perf_counter() - wall
    return {"qps": result.throughput, "p50_ms": result.p50_us / 1000, "p99_ms": result.p99_us / 1000,
            # its whole run (start-up and every trial window) over the requests it sent in it
            "client_cpu_us": cpu / (result.throughput * wall) * 1e6}


def measure_ours(endpoint: Endpoint, model: str, concurrency: int, seconds: float, protocol: str) -> dict:
    result = run_loadtest(endpoint, LoadSpec(model=model, concurrency=(concurrency,), duration_s=seconds,
                                             warmup_s=1.0, protocol=protocol))
    level = result.levels[0]
    if level.error_count:
        raise SystemExit(f"tritonkit loadtest had errors at concurrency {concurrency}: {level.errors}")
    return {"qps": level.qps, "p50_ms": level.latency_ms["p50"], "p99_ms": level.latency_ms["p99"],
            "client_cpu_us": level.client_cpu_us, "workers": level.workers}


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per run")
    parser.add_argument("--protocol", default="http", choices=("http", "grpc"))
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    model = "example"

    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        shutil.copytree(ROOT / "model_repository", repo, ignore=shutil.ignore_patterns(".tritonkit"))
        deployment = deploy_local(repo, http_port=0, grpc_port=0, metrics_port=0, timeout=180)
        endpoint = Endpoint.from_deployment(deployment)
        url = deployment.http_url if args.protocol == "http" else deployment.grpc_url
        runs: dict[tuple[str, int], list[dict]] = {}
        try:
            for _ in range(args.rounds):
                for concurrency in levels:
                    runs.setdefault(("perf_analyzer", concurrency), []).append(
                        measure_perf_analyzer(url, model, concurrency, args.seconds, args.protocol))
                    runs.setdefault(("tritonkit", concurrency), []).append(
                        measure_ours(endpoint, model, concurrency, args.seconds, args.protocol))
        finally:
            down(repo)

    console = Console()
    table = Table(title=f"tritonkit loadtest vs perf_analyzer 2.51.0 — '{model}' (python backend) on the "
                        f"local Triton, {args.protocol}, closed loop, median of {args.rounds} rounds")
    for col in ("conc.", "PA QPS", "ours QPS", "QPS ×", "PA p50", "ours p50", "p50 ×", "PA p99",
                "ours p99", "p99 ×", "PA cpu µs/req", "ours cpu µs/req"):
        table.add_column(col, justify="right")
    summary = []
    for concurrency in levels:
        pa, ours = runs[("perf_analyzer", concurrency)], runs[("tritonkit", concurrency)]
        row = {"concurrency": concurrency, "rounds": {"perf_analyzer": pa, "tritonkit": ours}}
        for key in ("qps", "p50_ms", "p99_ms", "client_cpu_us"):
            row[f"perf_analyzer_{key}"], row[f"tritonkit_{key}"] = _median(pa, key), _median(ours, key)
            row[f"ratio_{key}"] = row[f"tritonkit_{key}"] / row[f"perf_analyzer_{key}"]
        summary.append(row)
        table.add_row(str(concurrency), f"{row['perf_analyzer_qps']:,.0f}", f"{row['tritonkit_qps']:,.0f}",
                      f"{row['ratio_qps']:.2f}", f"{row['perf_analyzer_p50_ms']:.2f}",
                      f"{row['tritonkit_p50_ms']:.2f}", f"{row['ratio_p50_ms']:.2f}",
                      f"{row['perf_analyzer_p99_ms']:.2f}", f"{row['tritonkit_p99_ms']:.2f}",
                      f"{row['ratio_p99_ms']:.2f}", f"{row['perf_analyzer_client_cpu_us']:.0f}",
                      f"{row['tritonkit_client_cpu_us']:.0f}")
    console.print(table)
    best_pa = max(r["perf_analyzer_qps"] for r in summary)
    best_ours = max(r["tritonkit_qps"] for r in summary)
    within = all(abs(r[f"ratio_{k}"] - 1) <= 0.10 for r in summary for k in ("qps", "p50_ms", "p99_ms"))
    console.print(f"best throughput: perf_analyzer {best_pa:,.0f}/s, tritonkit {best_ours:,.0f}/s "
                  f"(ratio {best_ours / best_pa:.2f}; goal >= 1.00: {'met' if best_ours >= best_pa else 'NOT met'})")
    console.print(f"every QPS/p50/p99 within ±10 % of perf_analyzer's: {'yes' if within else 'no'}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"protocol": args.protocol, "model": model, "levels": summary,
                                         "best_qps": {"perf_analyzer": best_pa, "tritonkit": best_ours},
                                         "max_throughput_ratio": best_ours / best_pa,
                                         "all_within_10_percent": within}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
