"""Tuned config vs Triton's default config for the same model, side by side in one run.

Both configs serve the same ONNX MLP (256-1024-1024-10) on the embedded local Triton
(through the ONNX Runtime adapter), each loaded at concurrency 1 and 16.
"default" is what a hand-written minimal config gives: the graph's inputs and
outputs, the same max_batch_size, one instance, no dynamic batching, no warm-up.
"tuned" is `tritonkit config --gpu a10` (dynamic batching, instances, warm-up) as the
local target serves it.

The load comes from `tritonkit loadtest`'s generator (bench/bench_loadtest.py shows it
agrees with perf_analyzer and costs the server less CPU); the two configs take turns,
round after round, and each figure is the median of the rounds. ``--perf-analyzer``
measures with perf_analyzer instead (it needs a quiet machine to find stable windows).

    .venv/bin/python bench/bench_model_config.py [--json out.json] [--rounds 3] [--seconds 4]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from tritonclient.grpc import model_config_pb2 as mc  # noqa: E402

from bench.common import measure_ours, write_report  # noqa: E402
from bench.perf_analyzer import PerfResult, run_perf_analyzer  # noqa: E402
from tritonkit.client import Endpoint  # noqa: E402
from tritonkit.deploy import deploy_local, down  # noqa: E402
from tritonkit.fileio import atomic_write  # noqa: E402
from tritonkit.model_config import config_to_text, configure, read_config  # noqa: E402

MAX_BATCH = 32


def build_repository(root: Path) -> Path:
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                              torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                              torch.nn.Linear(1024, 10)).eval()
    tuned = root / "mlp_tuned"
    (tuned / "1").mkdir(parents=True)
    torch.onnx.export(mlp, (torch.randn(4, 256),), str(tuned / "1" / "model.onnx"),
                      input_names=["INPUT__0"], output_names=["OUTPUT__0"],
                      dynamic_axes={"INPUT__0": {0: "batch"}, "OUTPUT__0": {0: "batch"}},
                      dynamo=False)
    (tuned / "export-report.json").write_text(json.dumps({"max_batch_size": MAX_BATCH}))
    configure(root, "mlp_tuned", gpu="a10")

    default = root / "mlp_default"
    shutil.copytree(tuned, default)
    shutil.rmtree(default / "configs")
    config = read_config(tuned / "config.pbtxt")
    plain = mc.ModelConfig(name="mlp_default", platform=config.platform,
                           max_batch_size=config.max_batch_size)
    plain.input.extend(config.input)
    plain.output.extend(config.output)
    atomic_write(default / "config.pbtxt", config_to_text(plain))
    return root


def _measure(endpoint: Endpoint, model: str, concurrency: int, seconds: float) -> PerfResult:
    level = measure_ours(endpoint, model, concurrency, seconds)
    lat = level.latency_ms
    return PerfResult(concurrency=concurrency, throughput=level.infer_per_s, p50_us=lat["p50"] * 1000,
                      p90_us=lat["p90"] * 1000, p95_us=lat["p95"] * 1000, p99_us=lat["p99"] * 1000,
                      avg_us=lat["mean"] * 1000)


def _median(results: list[PerfResult]) -> PerfResult:
    """Each figure's median over the rounds; unstable if any round was (perf_analyzer)."""
    return PerfResult(concurrency=results[0].concurrency, **{
        name: statistics.median(getattr(r, name) for r in results)
        for name in ("throughput", "p50_us", "p90_us", "p95_us", "p99_us", "avg_us")},
        returncode=next((r.returncode for r in results if not r.stable), 0),
        failure="; ".join(sorted({r.failure for r in results if not r.stable})) or None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per run")
    parser.add_argument("--perf-analyzer", action="store_true", help="measure with perf_analyzer")
    parser.add_argument("--stability-pct", type=int, default=10,
                        help="perf_analyzer's stability threshold (raise it on a busy machine)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        repo = build_repository(Path(tmp))
        deployment = deploy_local(repo, http_port=0, grpc_port=0, metrics_port=0, timeout=180)
        endpoint = Endpoint.from_deployment(deployment)
        runs: dict[tuple[str, int], list[PerfResult]] = {}
        try:
            for _ in range(args.rounds):
                for concurrency in (1, 16):
                    for model in ("mlp_default", "mlp_tuned"):
                        if args.perf_analyzer:
                            result = run_perf_analyzer(
                                deployment.http_url, model, concurrency,
                                interval_ms=int(args.seconds * 1000), stability_pct=args.stability_pct)
                        else:
                            result = _measure(endpoint, model, concurrency, args.seconds)
                        runs.setdefault((model, concurrency), []).append(result)
        finally:
            down(repo)
        rows = {key: _median(results) for key, results in runs.items()}

    tool = "perf_analyzer" if args.perf_analyzer else "tritonkit loadtest"
    table = Table(title=f"tuned config vs default config ({tool}, local Triton, CPU, "
                        f"median of {args.rounds} rounds)")
    for col in ("concurrency", "default infer/s", "tuned infer/s", "throughput ×",
                "default p99 ms", "tuned p99 ms", "p99 ×"):
        table.add_column(col, justify="right")
    summary = []
    for concurrency in (1, 16):
        d, t = rows[("mlp_default", concurrency)], rows[("mlp_tuned", concurrency)]
        ratio_qps, ratio_p99 = t.throughput / d.throughput, t.p99_us / d.p99_us
        summary.append({"concurrency": concurrency, "default": asdict(d), "tuned": asdict(t),
                        "stable": d.stable and t.stable,
                        "throughput_ratio": ratio_qps, "p99_ratio": ratio_p99})
        table.add_row(str(concurrency) + ("" if d.stable and t.stable else "*"),
                      f"{d.throughput:,.0f}", f"{t.throughput:,.0f}",
                      f"{ratio_qps:.2f}", f"{d.p99_us / 1000:.2f}", f"{t.p99_us / 1000:.2f}",
                      f"{ratio_p99:.2f}")
    Console().print(table)
    failures = sorted({r.failure for r in rows.values() if not r.stable})
    if failures:
        Console().print(f"* perf_analyzer exited non-zero in some rounds ({'; '.join(failures)}): those "
                        "figures are its last window's (no stable window: raise --stability-pct or "
                        "--seconds)", markup=False, highlight=False)
    at16 = summary[1]
    verdict = at16["throughput_ratio"] >= 2.0 and at16["p99_ratio"] <= 1.0
    Console().print(f"goal (>= 2x throughput at 16, p99 no worse): "
                    f"{'met' if verdict else 'NOT met'}")
    if args.json:
        write_report(args.json, {"tool": tool, "rounds": args.rounds, "results": summary,
                                 "goal_met": verdict})
    return 0


if __name__ == "__main__":
    sys.exit(main())
