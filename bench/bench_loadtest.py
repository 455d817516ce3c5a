"""tritonkit's load generator vs NVIDIA's perf_analyzer 2.51.0, side by side in one run.

Both load the same model on the same embedded local Triton, closed loop, at the same
concurrencies. Each round runs the two back to back at each level, in turns: ours first
in even rounds, perf_analyzer first in odd ones (A B, B A, ...), so neither always runs
right after the other's load. Both get the same warm-up — ``--warmup-s`` of untimed load
at that concurrency: ours discards it, perf_analyzer sends as many requests first
(``--warmup-request-count``, about that long at the rate last measured there) — and
measure comparable spans: ours ``--seconds``; perf_analyzer merges its last 3 windows
of ``--seconds``/3 once they agree within ``--stability-pct`` in throughput and mean
latency (``--stabilize-on p99``: p99), at most ``--max-trials`` windows. A perf_analyzer
run that found no stable window (non-zero exit, or no figures even with windows twice as
long) is left out with its pair, and flagged.

Figures are per round: each ratio ours / perf_analyzer is taken within a round (the pair
ran back to back), and reported as the median of the rounds with their min–max. Goals:

- *agreement*: at every concurrency, the median paired ratio of QPS, p50 and p99 within ±10 %;
- *maximum throughput*: the median over rounds of (ours' best QPS over the concurrencies /
  perf_analyzer's best) >= 1.00, so the load generator is never what limits a test.

The server runs on one half of the CPUs and the load generators on the other (``--no-pin``
shares them all): otherwise every microsecond a client spends is taken from the server,
and the faster client measures a faster server. Columns that show where a difference comes from:

- *server ms*: Triton's own queue + compute time per request while each tool drove it,
  over its measured span (both from Triton's statistics) — which both should agree on;
- *outside ms*: each tool's mean latency less that server time: its client, the network
  and Triton's HTTP/gRPC handling, measured the same way for both;
- *client CPU µs/req*: CPU of every client process over the whole invocation (start-up,
  warm-up, every window) over the requests Triton answered in it — perf_analyzer's process;
  ours: this process (which runs the load test's parent and its server watcher) and its workers.

With ``--check`` (the default) a missed goal exits 1; a level where perf_analyzer found no
stable window in any round exits 3 (nothing to compare). Every run's JSON is kept in
out/bench-runs/ (with the commit and host); ``--json`` writes a copy where asked.

    .venv/bin/python bench/bench_loadtest.py [--json out/bench_loadtest.json] [--rounds 5]
        [--concurrency 1,4,16] [--seconds 6] [--warmup-s 1] [--protocol http,grpc]
        [--stability-pct 10] [--stabilize-on mean|p99] [--max-trials 10] [--no-pin] [--no-check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench.common import (EXIT_GOAL_MISSED, EXIT_INCOMPLETE, ROOT, abba, cpu_seconds,  # noqa: E402
                          describe_cpus, fmt_spread, log_round, measure_ours, print_left_out,
                          run_facts, served, split_cpus, spread, triton_counts, write_report)
from bench.perf_analyzer import run_perf_analyzer, warmup_requests_for  # noqa: E402
from tritonkit.client import Endpoint  # noqa: E402

MODEL = "example"
TOLERANCE = 0.10
SIDES = ("tritonkit", "perf_analyzer")          # round 0 runs them in this order, round 1 reversed
AGREEMENT = ("qps", "p50_ms", "p99_ms")
COLUMNS = AGREEMENT + ("server_ms", "outside_ms", "client_cpu_us")


def run_theirs(endpoint: Endpoint, url: str, concurrency: int, args: argparse.Namespace, protocol: str,
               rate: float | None) -> dict:
    """perf_analyzer at one concurrency: its stable window's figures, how it got them, and
    its CPU per request Triton answered over the whole invocation."""
    warmup = warmup_requests_for(rate, args.warmup_s, concurrency)
    interval_ms = round(args.seconds * 1000 / 3)
    before, cpu = triton_counts(endpoint, MODEL), cpu_seconds(own=False)
    try:
        result = run_perf_analyzer(url, MODEL, concurrency, protocol=protocol, interval_ms=interval_ms,
                                   stability_pct=args.stability_pct, max_trials=args.max_trials,
                                   warmup_requests=warmup, stability_percentile=_percentile(args))
    except RuntimeError as exc:     # no figures at all, also with windows twice as long
        return {key: None for key in COLUMNS} | {
            "stable": False, "exit_code": None, "failure": "no figures: " + " ".join(str(exc).split()),
            "interval_ms": interval_ms, "stability_pct": args.stability_pct, "max_trials": args.max_trials,
            "retried": True, "warmup_requests": warmup}
    cpu, answered = cpu_seconds(own=False) - cpu, triton_counts(endpoint, MODEL).minus(before)
    if result.server_us is None or result.throughput <= 0:
        raise SystemExit(f"perf_analyzer at concurrency {concurrency} ({protocol}) gave no server "
                         f"time or no throughput (exit {result.returncode}: {result.failure})")
    return {"qps": result.throughput, "p50_ms": result.p50_us / 1000, "p99_ms": result.p99_us / 1000,
            "server_ms": result.server_us / 1000, "outside_ms": (result.avg_us - result.server_us) / 1000,
            "client_cpu_us": cpu / answered.requests * 1e6,
            # its own "Client Send" + "Client Recv" (part of outside_ms), for reference
            "own_client_ms": None if result.client_us is None else result.client_us / 1000,
            # False: it exited non-zero (no stable window; "failure" says why): left out
            "stable": result.stable, "exit_code": result.returncode, "failure": result.failure,
            "interval_ms": result.interval_ms, "stability_pct": result.stability_pct,
            "stabilized_on": args.stabilize_on,
            "max_trials": result.max_trials, "trials": result.trials, "retried": result.retried,
            "measured_span_s": result.measured_span_s, "warmup_requests": result.warmup_requests,
            "invocation_requests": answered.requests, "invocation_cpu_s": cpu}


def run_ours(endpoint: Endpoint, concurrency: int, args: argparse.Namespace, protocol: str) -> dict:
    """Our load generator at one concurrency, and the CPU of this process and its workers
    per request Triton answered over the whole call."""
    before, cpu = triton_counts(endpoint, MODEL), cpu_seconds(own=True)
    level = measure_ours(endpoint, MODEL, concurrency, args.seconds, protocol, args.warmup_s)
    cpu, answered = cpu_seconds(own=True) - cpu, triton_counts(endpoint, MODEL).minus(before)
    split = level.server_split_ms
    server = sum(split[k] for k in ("queue", "compute_input", "compute_infer", "compute_output"))
    return {"qps": level.qps, "p50_ms": level.latency_ms["p50"], "p99_ms": level.latency_ms["p99"],
            "server_ms": server, "outside_ms": level.latency_ms["mean"] - server,
            "client_cpu_us": cpu / answered.requests * 1e6,
            # no stability test: it measures the span it is given
            "stable": None, "workers": level.workers, "measured_span_s": level.duration_s,
            "warmup_s": args.warmup_s, "invocation_requests": answered.requests, "invocation_cpu_s": cpu,
            # what `tritonkit loadtest` itself reports: its workers' CPU per request sent
            "loadtest_reported_client_cpu_us": level.client_cpu_us}


def compare(levels: list[int], runs: dict[int, list[dict]]) -> list[dict]:
    """Per concurrency: each side's figures and the paired ratios over the rounds kept."""
    rows = []
    for concurrency in levels:
        rounds = runs[concurrency]
        kept = [r for r in rounds if r["perf_analyzer"]["stable"]]
        row = {"concurrency": concurrency, "rounds": rounds, "rounds_kept": len(kept),
               "rounds_left_out": [{"round": r["round"], "failure": r["perf_analyzer"]["failure"]}
                                   for r in rounds if not r["perf_analyzer"]["stable"]]}
        for key in COLUMNS:
            row[key] = {side: spread((r[side][key] for r in kept), f"{side} {key} at {concurrency}")
                        for side in SIDES}
            row[key]["ratio"] = spread((r["tritonkit"][key] / r["perf_analyzer"][key] for r in kept),
                                       f"ratio {key} at {concurrency}")
        row["within"] = (all(abs(row[k]["ratio"]["median"] - 1) <= TOLERANCE for k in AGREEMENT)
                         if kept else None)
        rows.append(row)
    return rows


def best_throughput(rows: list[dict], n_rounds: int) -> dict:
    """Per round, ours' best QPS over the concurrencies over perf_analyzer's (over the levels
    whose pair was kept that round), and their spread."""
    ratios, bests = [], []
    for index in range(n_rounds):
        pairs = [r for row in rows for r in row["rounds"]
                 if r["round"] == index and r["perf_analyzer"]["stable"]]
        if not pairs:
            continue
        best = {side: max(r[side]["qps"] for r in pairs) for side in SIDES}
        bests.append({"round": index, **best})
        ratios.append(best["tritonkit"] / best["perf_analyzer"])
    return {"per_round": bests, "ratio": spread(ratios, "best throughput ratio")}


def show(console: Console, protocol: str, rows: list[dict], best: dict, heading: str) -> dict:
    table = Table(title=f"tritonkit loadtest vs perf_analyzer 2.51.0 — '{MODEL}' on the local Triton, "
                        f"{protocol}, closed loop; {heading}. Figures: median of the rounds kept; "
                        "×: ours / perf_analyzer paired within each round, median (min–max)")
    for col in ("conc.", "rounds kept", "QPS PA / ours", "×", "p50 ms PA / ours", "×", "p99 ms PA / ours",
                "×", "server ms PA / ours", "outside ms PA / ours", "client CPU µs/req PA / ours"):
        table.add_column(col, justify="right")

    def pair(row: dict, key: str, digits: int, scale: str = "") -> str:
        pa, ours = row[key]["perf_analyzer"], row[key]["tritonkit"]
        if not pa:
            return "—"
        return f"{pa['median']:{scale}.{digits}f} / {ours['median']:{scale}.{digits}f}"

    for row in rows:
        table.add_row(
            str(row["concurrency"]), f"{row['rounds_kept']}/{len(row['rounds'])}",
            pair(row, "qps", 0, ","), fmt_spread(row["qps"]["ratio"]),
            pair(row, "p50_ms", 3), fmt_spread(row["p50_ms"]["ratio"]),
            pair(row, "p99_ms", 3), fmt_spread(row["p99_ms"]["ratio"]),
            pair(row, "server_ms", 3), pair(row, "outside_ms", 3), pair(row, "client_cpu_us", 0))
    console.print(table)
    print_left_out(console, rows)
    complete = all(row["rounds_kept"] for row in rows) and best["ratio"] is not None
    ratio = best["ratio"]
    verdict = {
        "complete": complete,
        "max_throughput_ratio": ratio,
        "max_throughput_goal": "median over rounds of ours' best QPS / perf_analyzer's best >= 1.00",
        "max_throughput_goal_met": None if ratio is None else ratio["median"] >= 1.0,
        "agreement_goal": (f"median paired ratio of QPS, p50 and p99 within ±{TOLERANCE:.0%} "
                           "at every concurrency"),
        "agreement_goal_met": all(row["within"] for row in rows) if complete else None,
        "within_at": [row["concurrency"] for row in rows if row["within"]],
    }
    if ratio:
        console.print(f"{protocol}: best throughput, ours / perf_analyzer over {ratio['n']} round(s): "
                      f"{fmt_spread(ratio)} (goal: median >= 1.00: "
                      f"{'met' if verdict['max_throughput_goal_met'] else 'NOT met'})")
    agreed = verdict["agreement_goal_met"]
    console.print(f"{protocol}: QPS/p50/p99 median paired ratios within ±10 % at concurrency "
                  f"{verdict['within_at']} of {[row['concurrency'] for row in rows]} (goal: all: "
                  f"{'not judged' if agreed is None else 'met' if agreed else 'NOT met'})")
    if not complete:
        console.print(f"{protocol}: INCOMPLETE — perf_analyzer found no stable window in any round at "
                      f"concurrency {[row['concurrency'] for row in rows if not row['rounds_kept']]}")
    return verdict


def _percentile(args: argparse.Namespace) -> int | None:
    return 99 if args.stabilize_on == "p99" else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the report here (every run's is kept "
                                                  "in out/bench-runs/)")
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=6.0,
                        help="measured seconds per run: ours measures this long; perf_analyzer's "
                             "windows are a third of it (its figures merge its last 3)")
    parser.add_argument("--warmup-s", type=float, default=1.0,
                        help="untimed load before each measurement, both tools")
    parser.add_argument("--protocol", default="http", help="http, grpc or both: http,grpc")
    parser.add_argument("--stability-pct", type=int, default=10,
                        help="perf_analyzer's -s: its last 3 windows agree within this")
    parser.add_argument("--max-trials", type=int, default=10, help="perf_analyzer's -r: most windows")
    parser.add_argument("--stabilize-on", choices=("mean", "p99"), default="mean",
                        help="what perf_analyzer's windows must agree on besides throughput: mean "
                             "latency (its default) or p99 (--percentile 99, stricter)")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                        help="server on the first half of the CPUs, load generators on the rest")
    parser.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                        help="exit 1 when a goal is missed")
    args = parser.parse_args()
    facts = run_facts()
    levels = [int(c) for c in args.concurrency.split(",")]
    protocols = args.protocol.split(",")
    if not set(protocols) <= {"http", "grpc"}:
        parser.error("--protocol takes http, grpc or http,grpc")
    if args.rounds < 1 or args.seconds <= 0 or args.warmup_s < 0:
        parser.error("--rounds >= 1, --seconds > 0 and --warmup-s >= 0")
    server_cpus, client_cpus = split_cpus(args.pin)
    pinned = describe_cpus(server_cpus, client_cpus)
    console = Console(width=None if sys.stdout.isatty() else 200)

    runs: dict[str, dict[int, list[dict]]] = {p: {c: [] for c in levels} for p in protocols}
    rates: dict[tuple[str, int], float] = {}
    with served(ROOT / "model_repository", server_cpus=server_cpus, client_cpus=client_cpus) as deployment:
        endpoint = Endpoint.from_deployment(deployment)
        for index in range(args.rounds):
            for protocol in protocols:
                url = deployment.http_url if protocol == "http" else deployment.grpc_url
                for concurrency in levels:
                    entry: dict = {"round": index, "order": abba(SIDES, index)}
                    for side in entry["order"]:
                        if side == "tritonkit":
                            result = run_ours(endpoint, concurrency, args, protocol)
                        else:
                            result = run_theirs(endpoint, url, concurrency, args, protocol,
                                                rates.get((protocol, concurrency)))
                        entry[side] = result
                        said = f"round {index + 1}/{args.rounds} {protocol} c={concurrency} {side}: "
                        if result["qps"] is not None:
                            rates[protocol, concurrency] = result["qps"]
                            said += (f"{result['qps']:,.0f}/s p50 {result['p50_ms']:.3f} ms "
                                     f"p99 {result['p99_ms']:.3f} ms")
                        log_round(console, said, result)
                    runs[protocol][concurrency].append(entry)

    heading = (f"{args.rounds} round(s), ours {args.seconds:g} s / perf_analyzer 3 x "
               f"{round(args.seconds * 1000 / 3)} ms windows within {args.stability_pct} % "
               f"({args.stabilize_on} latency, throughput), "
               f"{args.warmup_s:g} s warm-up each, {pinned}")
    report = {"model": MODEL, "rounds": args.rounds, "seconds": args.seconds, "warmup_s": args.warmup_s,
              "perf_analyzer": {"interval_ms": round(args.seconds * 1000 / 3),
                                "stability_pct": args.stability_pct, "stabilized_on": args.stabilize_on,
                                "max_trials": args.max_trials,
                                "merged_windows": 3},
              "order": "ABBA: round 0 " + " then ".join(SIDES) + ", round 1 reversed, ...",
              "tolerance": TOLERANCE, "cpus": pinned, "protocols": {}}
    verdicts = []
    for protocol in protocols:
        rows = compare(levels, runs[protocol])
        best = best_throughput(rows, args.rounds)
        verdict = show(console, protocol, rows, best, heading)
        verdicts.append(verdict)
        report["protocols"][protocol] = {"levels": rows, "best_qps": best, **verdict}
    complete = all(v["complete"] for v in verdicts)
    goals_met = complete and all(v["max_throughput_goal_met"] and v["agreement_goal_met"] for v in verdicts)
    report.update(complete=complete, goals_met=goals_met, checked=args.check)
    for path in write_report(args.json, report, "bench_loadtest", facts):
        console.print(f"wrote {path}", markup=False, highlight=False)
    if not complete:
        return EXIT_INCOMPLETE
    return EXIT_GOAL_MISSED if args.check and not goals_met else 0


if __name__ == "__main__":
    sys.exit(main())
