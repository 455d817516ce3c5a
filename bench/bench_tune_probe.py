"""What one of tune's measurements costs beyond the load it measures: its workers spawned for
it (as `tritonkit loadtest` runs) against workers kept by a pool for the whole tune.

The MLP (examples/mlp.py) is served by the embedded local Triton; each side measures it
through `ServedModel.measure` (closed loop at --concurrency, --probe-s seconds after 0.5 s of
warm-up), the sides interleaved A B, B A, ... in one run. A probe's overhead is its wall time
less the load's (warm-up + probe). The pool's first probe starts its worker and is reported
apart; the rest reuse it.

    .venv/bin/python bench/bench_tune_probe.py [--rounds 6] [--probe-s 2] [--concurrency 4]
        [--json out/bench_tune_probe.json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402

from bench.common import ROOT, abba, run_facts, write_report  # noqa: E402
from tritonkit.cli import main as tritonkit_main  # noqa: E402
from tritonkit.client import Endpoint  # noqa: E402
from tritonkit.deploy import deploy_local, down  # noqa: E402
from tritonkit.loadtest import WorkerPool  # noqa: E402
from tritonkit.tune._search import CLOSED  # noqa: E402
from tritonkit.tune._trial import ServedModel  # noqa: E402

console = Console()
WARMUP_S = 0.5


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--probe-s", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    facts = run_facts()
    overhead: dict[str, list[float]] = {"spawned": [], "pooled": []}
    first_pooled = None
    with tempfile.TemporaryDirectory(prefix="bench-tune-probe-") as tmp:
        repo = Path(tmp) / "repo"
        if tritonkit_main(["export", str(ROOT / "examples/mlp.py:build"), "--name", "mlp",
                           "--repository", str(repo), "--max-batch-size", "64"]) != 0:
            raise SystemExit("export failed")
        deployment = deploy_local(repo, http_port=0, grpc_port=0, metrics_port=0, timeout=300)
        endpoint = Endpoint.from_deployment(deployment)
        try:
            with WorkerPool() as pool:
                sides = {"spawned": ServedModel(endpoint, "mlp", probe_s=args.probe_s,
                                                probe_warmup_s=WARMUP_S, repository=repo),
                         "pooled": ServedModel(endpoint, "mlp", probe_s=args.probe_s,
                                               probe_warmup_s=WARMUP_S, repository=repo, pool=pool)}
                sides["spawned"].warm()
                began = time.monotonic()
                sides["pooled"].measure(CLOSED, args.concurrency)
                first_pooled = time.monotonic() - began - args.probe_s - WARMUP_S
                for index in range(args.rounds):
                    for name in abba(list(sides), index):
                        began = time.monotonic()
                        probe = sides[name].measure(CLOSED, args.concurrency)
                        extra = time.monotonic() - began - args.probe_s - WARMUP_S
                        overhead[name].append(extra)
                        console.log(f"round {index + 1} {name}: overhead {extra:.2f} s "
                                    f"({probe.qps:,.0f} requests/s)")
                started = pool.started
        finally:
            down(repo)
    report = {"probe_s": args.probe_s, "warmup_s": WARMUP_S, "concurrency": args.concurrency,
              "overhead_s": overhead, "first_pooled_overhead_s": first_pooled,
              "pool_workers_started": started,
              "median_overhead_s": {k: statistics.median(v) for k, v in overhead.items()}}
    medians = report["median_overhead_s"]
    console.print(f"overhead per probe, median of {args.rounds}: spawned {medians['spawned']:.2f} s, "
                  f"pooled {medians['pooled']:.2f} s (its first, starting the worker: "
                  f"{first_pooled:.2f} s); pool workers started: {started}")
    for path in write_report(args.json, report, "bench_tune_probe", facts):
        console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
