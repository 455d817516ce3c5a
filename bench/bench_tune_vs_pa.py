"""How far one round of tune's comparison and one of perf_analyzer's agree on a ratio, in one
spell: the measurement `bench_tune.py`'s confirmation relies on, without the minutes between.

The MLP (examples/mlp.py) is served by the embedded local Triton. Each round swaps in each
side (the served config, i1 b64 d0, and Triton's bare default), warmed, and measures it twice
back to back: as tune's comparison does (`throughput_at_sla`: closed loop, doubled from the
level it met last until the p99 passes --sla-p99-ms) and as the confirmation does
(`bench_tune.pa_under_sla`: perf_analyzer up the concurrencies). The sides alternate A B, B A.
Reported: each tool's ratio per round, its geometric mean, and the spread of its logs (what
a few rounds of either can tell).

    .venv/bin/python bench/bench_tune_vs_pa.py [--rounds 4] [--sla-p99-ms 10]
        [--json out/bench_tune_vs_pa.json]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402

from bench.bench_tune import export_models, pa_under_sla  # noqa: E402
from bench.common import abba, run_facts, write_report  # noqa: E402
from tritonkit.client import Endpoint  # noqa: E402
from tritonkit.deploy import deploy_local, down  # noqa: E402
from tritonkit.tune import Candidate  # noqa: E402
from tritonkit.tune._run import MAX_CONCURRENCY  # noqa: E402
from tritonkit.tune._search import throughput_at_sla  # noqa: E402
from tritonkit.tune._space import as_json, candidate_config, parse_served  # noqa: E402
from tritonkit.tune._trial import ServedModel  # noqa: E402

console = Console()
SIDES = {"served": Candidate(instance_count=1, max_batch_size=64, max_queue_delay_us=0),
         "bare default": Candidate(bare=True)}
TOOLS = ("tune", "perf_analyzer")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--sla-p99-ms", type=float, default=10.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    facts = run_facts()
    figures = {tool: {side: [] for side in SIDES} for tool in TOOLS}
    with tempfile.TemporaryDirectory(prefix="bench-tune-vs-pa-") as tmp:
        repo = Path(tmp) / "repo"
        export_models(repo, ("mlp",))
        endpoint = Endpoint.from_deployment(
            deploy_local(repo, http_port=0, grpc_port=0, metrics_port=0, timeout=300))
        try:
            served = ServedModel(endpoint, "mlp", repository=repo)
            original = served.served_config()
            configs = {side: as_json(candidate_config(parse_served(original), point))
                       for side, point in SIDES.items()}
            start = {side: 1 for side in SIDES}
            try:
                for index in range(args.rounds):
                    for side in abba(list(SIDES), index):
                        served.swap(configs[side])
                        at = throughput_at_sla(served.measure, args.sla_p99_ms, start=start[side],
                                               most=MAX_CONCURRENCY)
                        start[side] = at.concurrency or start[side]
                        pa = pa_under_sla(endpoint.http_url, "mlp", args.sla_p99_ms, ())
                        figures["tune"][side].append(at.qps)
                        figures["perf_analyzer"][side].append(pa["throughput"])
                        console.log(f"round {index + 1} {side}: tune {at.qps:,.0f}/s at "
                                    f"c={at.concurrency}, perf_analyzer {pa['throughput']:,.0f}/s "
                                    f"at c={pa['concurrency']}")
            finally:
                served.restore(original)
        finally:
            down(repo)
    report = {"sla_p99_ms": args.sla_p99_ms, "figures": figures,
              **{tool: _ratios(figures[tool]) for tool in TOOLS}}
    for tool in TOOLS:
        summary = report[tool]
        console.print(f"{tool}: served ÷ bare default by round "
                      f"{', '.join(f'{r:.2f}' for r in summary['ratios'])}; geometric mean "
                      f"{summary['geomean']:.2f}, log-sd {summary['log_sd']:.2f}")
    for path in write_report(args.json, report, "bench_tune_vs_pa", facts):
        console.print(f"wrote {path}")
    return 0


def _ratios(by_side: dict[str, list[float]]) -> dict:
    ratios = [a / b for a, b in zip(by_side["served"], by_side["bare default"]) if a and b]
    logs = [math.log(r) for r in ratios]
    return {"ratios": ratios, "geomean": math.exp(statistics.fmean(logs)) if logs else math.nan,
            "log_sd": statistics.stdev(logs) if len(logs) > 1 else math.nan}


if __name__ == "__main__":
    sys.exit(main())
