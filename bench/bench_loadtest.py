"""tritonkit's load generator vs NVIDIA's perf_analyzer 2.51.0, side by side in one run.

Both load the same model on the same embedded local Triton, closed loop, at the same
concurrencies, taking turns (perf_analyzer, ours, perf_analyzer, ours, ...) so that a
noisy neighbour hurts both alike; each figure is the median of the rounds. Reported as
ratios ours / perf_analyzer: throughput, p50, p99 — the goal is agreement within ±10 % —
and the best throughput each reached over all concurrencies (the goal: ours >= theirs, so
the load generator is never what limits a test).

The server runs on one half of the CPUs and the load generators on the other (``--no-pin``
shares them all): otherwise every microsecond a client spends is taken from the server,
and the faster client measures a faster server. Two more columns show where any difference comes from:

- *server ms*: Triton's own queue + compute time per request while each tool drove it —
  what the server did, which both tools should agree on;
- *PA net*: perf_analyzer's figures without its own client time, which it measures itself
  (its "Client Send" + "Client Recv", a mean: the net percentiles are the percentile less
  that mean, an approximation): at concurrency 1 that time is in every latency. Over gRPC
  perf_analyzer counts only its marshalling there (~2 µs), so the net figures are its raw ones.

    .venv/bin/python bench/bench_loadtest.py [--json out/bench_loadtest.json]
        [--concurrency 1,4,16] [--rounds 2] [--seconds 4] [--protocol http,grpc] [--no-pin]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench.common import measure_ours, served, split_cpus, write_report  # noqa: E402
from bench.perf_analyzer import run_perf_analyzer  # noqa: E402
from tritonkit.client import Endpoint  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = "example"
TOLERANCE = 0.10


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_theirs(url: str, concurrency: int, seconds: float, protocol: str) -> dict:
    """perf_analyzer at one concurrency: its last stable window, and its CPU per request."""
    cpu, wall = _children_cpu_s(), time.perf_counter()
    result = run_perf_analyzer(url, MODEL, concurrency, protocol=protocol,
                               interval_ms=int(seconds * 1000), stability_pct=50, max_trials=8)
    cpu, wall = _children_cpu_s() - cpu, time.perf_counter() - wall
    own_ms = (result.client_us or 0.0) / 1000
    return {"qps": result.throughput, "p50_ms": result.p50_us / 1000, "p99_ms": result.p99_us / 1000,
            # its whole run (start-up and every trial window) over the requests it sent in it
            "client_cpu_us": cpu / (result.throughput * wall) * 1e6,
            "server_ms": (result.server_us or float("nan")) / 1000,
            "own_client_ms": own_ms,
            # False: perf_analyzer exited non-zero and these are its last window's figures;
            # "failure" says why ("no stable window", or what it printed last)
            "stable": result.stable, "failure": result.failure,
            # closed loop, throughput ∝ 1 / mean latency: its own measured rate, scaled by
            # how much shorter the mean request would be without its client time
            "net_qps": result.throughput * result.avg_us / (result.avg_us - own_ms * 1000),
            "net_p50_ms": result.p50_us / 1000 - own_ms, "net_p99_ms": result.p99_us / 1000 - own_ms}


def run_ours(endpoint: Endpoint, concurrency: int, seconds: float, protocol: str) -> dict:
    level = measure_ours(endpoint, MODEL, concurrency, seconds, protocol)
    split = level.server_split_ms or {}
    server = sum(split.get(k, float("nan")) for k in ("queue", "compute_input", "compute_infer",
                                                       "compute_output"))
    return {"qps": level.qps, "p50_ms": level.latency_ms["p50"], "p99_ms": level.latency_ms["p99"],
            "client_cpu_us": level.client_cpu_us, "workers": level.workers, "server_ms": server}


def compare(levels: list[int], runs: dict) -> list[dict]:
    rows = []
    for concurrency in levels:
        pa, ours = runs["perf_analyzer", concurrency], runs["tritonkit", concurrency]
        row = {"concurrency": concurrency, "rounds": {"perf_analyzer": pa, "tritonkit": ours}}
        for key in ("qps", "p50_ms", "p99_ms", "client_cpu_us", "server_ms"):
            row[f"perf_analyzer_{key}"] = statistics.median(r[key] for r in pa)
            row[f"tritonkit_{key}"] = statistics.median(r[key] for r in ours)
            row[f"ratio_{key}"] = row[f"tritonkit_{key}"] / row[f"perf_analyzer_{key}"]
        for key in ("qps", "p50_ms", "p99_ms"):
            row[f"perf_analyzer_net_{key}"] = statistics.median(r[f"net_{key}"] for r in pa)
            row[f"ratio_net_{key}"] = row[f"tritonkit_{key}"] / row[f"perf_analyzer_net_{key}"]
        row["perf_analyzer_own_client_ms"] = statistics.median(r["own_client_ms"] for r in pa)
        row["perf_analyzer_unstable_rounds"] = sum(not r["stable"] for r in pa)
        row["perf_analyzer_failures"] = sorted({r["failure"] for r in pa if not r["stable"]})
        row["within"] = all(abs(row[f"ratio_{k}"] - 1) <= TOLERANCE for k in ("qps", "p50_ms", "p99_ms"))
        row["within_net"] = all(abs(row[f"ratio_net_{k}"] - 1) <= TOLERANCE
                                for k in ("qps", "p50_ms", "p99_ms"))
        rows.append(row)
    return rows


def show(console: Console, protocol: str, rows: list[dict], rounds: int, pinned: str) -> dict:
    table = Table(title=f"tritonkit loadtest vs perf_analyzer 2.51.0 — '{MODEL}' on the local Triton, "
                        f"{protocol}, closed loop, median of {rounds} rounds, {pinned}")
    for col in ("conc.", "QPS PA / ours", "×", "p50 ms PA / ours", "×", "p99 ms PA / ours", "×",
                "server ms PA / ours", "PA own client ms", "× vs PA net QPS / p50 / p99",
                "client CPU µs/req PA / ours"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["concurrency"]) + ("*" if r["perf_analyzer_unstable_rounds"] else ""),
            f"{r['perf_analyzer_qps']:,.0f} / {r['tritonkit_qps']:,.0f}", f"{r['ratio_qps']:.2f}",
            f"{r['perf_analyzer_p50_ms']:.3f} / {r['tritonkit_p50_ms']:.3f}", f"{r['ratio_p50_ms']:.2f}",
            f"{r['perf_analyzer_p99_ms']:.3f} / {r['tritonkit_p99_ms']:.3f}", f"{r['ratio_p99_ms']:.2f}",
            f"{r['perf_analyzer_server_ms']:.3f} / {r['tritonkit_server_ms']:.3f}",
            f"{r['perf_analyzer_own_client_ms']:.3f}",
            f"{r['ratio_net_qps']:.2f} / {r['ratio_net_p50_ms']:.2f} / {r['ratio_net_p99_ms']:.2f}",
            f"{r['perf_analyzer_client_cpu_us']:.0f} / {r['tritonkit_client_cpu_us']:.0f}")
    console.print(table)
    for r in rows:
        if r["perf_analyzer_unstable_rounds"]:
            console.print(f"* concurrency {r['concurrency']}: perf_analyzer exited non-zero in "
                          f"{r['perf_analyzer_unstable_rounds']} round(s) "
                          f"({'; '.join(r['perf_analyzer_failures'])}): its figures there are its last "
                          "window's (no stable window: raise --seconds, or quiet the machine)",
                          markup=False, highlight=False)
    best_pa = max(r["perf_analyzer_qps"] for r in rows)
    best_ours = max(r["tritonkit_qps"] for r in rows)
    verdict = {"best_qps": {"perf_analyzer": best_pa, "tritonkit": best_ours},
               "max_throughput_ratio": best_ours / best_pa,
               "max_throughput_goal_met": best_ours >= best_pa,
               "all_within_10_percent": all(r["within"] for r in rows),
               "all_within_10_percent_of_pa_net": all(r["within_net"] for r in rows)}
    console.print(f"{protocol}: best throughput perf_analyzer {best_pa:,.0f}/s, tritonkit {best_ours:,.0f}/s "
                  f"(ratio {best_ours / best_pa:.2f}; goal >= 1.00: "
                  f"{'met' if verdict['max_throughput_goal_met'] else 'NOT met'})")
    console.print(f"{protocol}: QPS/p50/p99 within ±10 % of perf_analyzer's at concurrency "
                  f"{[r['concurrency'] for r in rows if r['within']]}; of perf_analyzer's net of its own "
                  f"client time at {[r['concurrency'] for r in rows if r['within_net']]}")
    return verdict


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per run")
    parser.add_argument("--protocol", default="http", help="http, grpc or both: http,grpc")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                        help="server on the first half of the CPUs, load generators on the rest")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    protocols = args.protocol.split(",")
    if not set(protocols) <= {"http", "grpc"}:
        parser.error("--protocol takes http, grpc or http,grpc")
    server_cpus, client_cpus = split_cpus(args.pin)
    pinned = (f"server on CPUs {sorted(server_cpus)}, clients on {sorted(client_cpus)}"
              if server_cpus != client_cpus else "server and clients share the CPUs")

    runs: dict[str, dict] = {p: {} for p in protocols}
    with served(ROOT / "model_repository", server_cpus=server_cpus, client_cpus=client_cpus) as deployment:
        endpoint = Endpoint.from_deployment(deployment)
        for _ in range(args.rounds):
            for protocol in protocols:
                url = deployment.http_url if protocol == "http" else deployment.grpc_url
                for concurrency in levels:
                    runs[protocol].setdefault(("perf_analyzer", concurrency), []).append(
                        run_theirs(url, concurrency, args.seconds, protocol))
                    runs[protocol].setdefault(("tritonkit", concurrency), []).append(
                        run_ours(endpoint, concurrency, args.seconds, protocol))

    console = Console()
    report = {"model": MODEL, "rounds": args.rounds, "seconds": args.seconds, "cpus": pinned, "protocols": {}}
    for protocol in protocols:
        rows = compare(levels, runs[protocol])
        report["protocols"][protocol] = {"levels": rows,
                                         **show(console, protocol, rows, args.rounds, pinned)}
    if args.json:
        write_report(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
