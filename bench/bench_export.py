"""Exported ONNX on ONNX Runtime (CPU) vs PyTorch eager, per example model, in one run.

Each example in examples/ (the models the export tests use) is exported with
`tritonkit export` (verified as usual), then timed at batch 1 and batch 32 on the same
inputs: one forward pass in PyTorch eager (inference_mode) and one ``session.run`` in ONNX
Runtime's CPU provider, both with the same number of intra-op threads.

Each engine is timed in blocks of its own — ``--rounds`` rounds, each a block of calls of
one engine then a block of the other, the order turned each round (A B, B A, ...) — so a
busy machine slows both alike and neither engine's idle threads sit on a core while the
other runs. Idle threads do not spin either: ONNX Runtime's intra-op threads are told not
to (``session.intra_op.allow_spinning`` = 0) and PyTorch's OpenMP threads wait passively
(``OMP_WAIT_POLICY=PASSIVE``, set before torch loads libgomp, unless already set);
``--spinning`` leaves both engines their default spinning waits instead (waking sleeping
threads adds to every parallel region, and an eager PyTorch call has more of them than an
ONNX Runtime session's: the JSON says which was used).

Figures: each engine's median and 90th percentile over all its calls; the ratio is
PyTorch's median over ONNX Runtime's within each round (above 1: ONNX Runtime is faster),
reported as the median of the rounds with their min–max. With ``--check``: exit 1 unless
that median is above 1 for every model and batch. Every run's JSON is kept in out/bench-runs/.

    .venv/bin/python bench/bench_export.py [--json out.json] [--iterations 200] [--rounds 10]
        [--threads N] [--models mlp,cnn] [--spinning] [--check]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# libgomp reads this once, when torch loads it: idle OpenMP threads then sleep instead of
# spinning on a core the other engine (or the next block) needs. --spinning leaves both
# engines their default (spinning) waits; read here, before argparse, as torch loads below.
SPINNING = "--spinning" in sys.argv[1:]
if not SPINNING:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench.common import (EXIT_GOAL_MISSED, abba, finite, fmt_spread, run_facts, spread,  # noqa: E402
                          write_report)
from tritonkit.export import ExportOptions, export_spec  # noqa: E402
from tritonkit.export.forward import call  # noqa: E402
from tritonkit.export.spec import (load_factory, normalize_inputs, order_like_forward,  # noqa: E402
                                   passes_by_keyword)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MODELS = {
    "mlp": "mlp.py:build",
    "cnn": "cnn.py:build",
    "encoder": "encoder.py:build",
    "multi_output": "multi_output.py:build",
    "lstm": "recurrent.py:build",
    "gru": "recurrent.py:build_gru",
    "sequence": "sequence.py:build",
}
BATCHES = (1, 32)


def batch_of(example: torch.Tensor, batch: int, generator: torch.Generator) -> torch.Tensor:
    """Random inputs like the example's (same trailing shape, token ids stay valid) at ``batch``."""
    shape = (batch, *example.shape[1:])
    if example.is_floating_point():
        return torch.randn(shape, generator=generator, dtype=example.dtype)
    return torch.randint(int(example.min()), int(example.max()) + 1, shape,
                         generator=generator, dtype=example.dtype)


ENGINES = ("torch", "ort")


def time_blocks(runs: dict, iterations: int, rounds: int, warmup: int) -> list[dict]:
    """Milliseconds per call of each engine, in blocks: per round, a block of one engine's
    calls then one of the other's, the order turned each round. ``warmup`` untimed calls
    of each first, each engine on its own."""
    for engine in ENGINES:
        for _ in range(warmup):
            runs[engine]()
    per_block = max(1, math.ceil(iterations / rounds))
    timed = []
    for index in range(rounds):
        entry: dict = {"round": index, "order": abba(ENGINES, index)}
        for engine in entry["order"]:
            run, times = runs[engine], []
            for _ in range(per_block):
                start = time.perf_counter()
                run()
                times.append((time.perf_counter() - start) * 1e3)
            entry[f"{engine}_ms"] = times
        timed.append(entry)
    return timed


def bench_model(name: str, spec: str, repository: Path, *, threads: int, iterations: int,
                rounds: int, warmup: int) -> list[dict]:
    result = export_spec(str(EXAMPLES / spec), ExportOptions(name=name, repository=repository,
                                                             max_batch_size=max(BATCHES)))
    module, example, *_ = load_factory(str(EXAMPLES / spec))
    module.eval()
    inputs = normalize_inputs(order_like_forward(module, example),
                              by_keyword=passes_by_keyword(module, example))
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if SPINNING else "0")
    session = ort.InferenceSession(str(result.path / "1" / "model.onnx"), options,
                                   providers=["CPUExecutionProvider"])
    generator = torch.Generator().manual_seed(0)
    rows = []
    for batch in BATCHES:
        tensors = tuple(batch_of(t, batch, generator) for t in inputs.tensors)
        feed = {n: t.numpy() for n, t in zip(inputs.names, tensors)}

        def run_torch():
            with torch.inference_mode():
                call(module, tensors, inputs.keywords)

        def run_ort():
            session.run(None, feed)

        timed = time_blocks({"torch": run_torch, "ort": run_ort}, iterations, rounds, warmup)
        where = f"{name} at batch {batch}"
        calls = {e: finite((ms for r in timed for ms in r[f"{e}_ms"]), f"{e} {where}") for e in ENGINES}
        ratio = spread((statistics.median(r["torch_ms"]) / statistics.median(r["ort_ms"]) for r in timed),
                       f"torch/ORT {where}")
        row = {"model": name, "batch": batch, "exporter": result.report["exporter"],
               "calls_per_engine": len(calls["torch"]), "rounds": timed,
               # torch's median / ORT's, within each round: median (min, max) over the rounds
               "speedup": ratio["median"], "speedup_spread": ratio,
               "speedup_all_calls": statistics.median(calls["torch"]) / statistics.median(calls["ort"])}
        for engine in ENGINES:
            for q in (10, 50, 90):
                label = "median" if q == 50 else f"p{q}"
                row[f"{engine}_ms_{label}"] = float(np.percentile(calls[engine], q))
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the report here (every run's is kept "
                                                  "in out/bench-runs/)")
    parser.add_argument("--iterations", type=int, default=200, help="timed calls per engine, all rounds")
    parser.add_argument("--rounds", type=int, default=10,
                        help="blocks per engine (at most --iterations), their order turned each round")
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls per engine first")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="intra-op threads for both PyTorch and ONNX Runtime")
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated subset of {', '.join(MODELS)}")
    parser.add_argument("--spinning", action="store_true",
                        help="let idle intra-op threads spin (each engine's default) instead of "
                             "sleeping; the blocks still keep the engines apart")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 unless ONNX Runtime is faster (median ratio > 1) everywhere")
    args = parser.parse_args()
    facts = run_facts()
    chosen = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted(set(chosen) - set(MODELS))
    if unknown:
        parser.error(f"unknown model(s): {', '.join(unknown)}")
    if args.iterations < 1 or args.rounds < 1:
        parser.error("--iterations and --rounds take whole numbers >= 1")
    rounds = min(args.rounds, args.iterations)

    torch.set_num_threads(args.threads)
    console = Console(width=None if sys.stdout.isatty() else 200)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in chosen:
            with console.status(f"exporting and timing {name}"):
                rows += bench_model(name, MODELS[name], Path(tmp), threads=args.threads,
                                    iterations=args.iterations, rounds=rounds, warmup=args.warmup)

    calls = rows[0]["calls_per_engine"] if rows else 0
    table = Table(title=f"ONNX Runtime (CPU) vs PyTorch eager, {calls} calls per engine in {rounds} "
                        f"block(s) each (ABBA), {args.threads} thread(s), "
                        f"{'spinning' if SPINNING else 'no spinning'} (OMP_WAIT_POLICY="
                        f"{os.environ.get('OMP_WAIT_POLICY', 'unset')}). ms: median "
                        "(p90) over all calls; torch/ORT: the rounds' ratios of medians, median (min–max)")
    for column in ("model", "exporter", "batch", "torch ms", "ORT ms", "torch/ORT"):
        table.add_column(column, justify="left" if column in ("model", "exporter") else "right")
    for row in rows:
        table.add_row(row["model"], row["exporter"], str(row["batch"]),
                      f"{row['torch_ms_median']:.3f} ({row['torch_ms_p90']:.3f})",
                      f"{row['ort_ms_median']:.3f} ({row['ort_ms_p90']:.3f})",
                      fmt_spread(row["speedup_spread"]) + "x")
    console.print(table)
    goal_met = all(row["speedup"] > 1.0 for row in rows)
    console.print(f"goal (ONNX Runtime faster, median ratio > 1, every model and batch): "
                  f"{'met' if goal_met else 'NOT met'}", markup=False, highlight=False)
    for path in write_report(args.json, {
            "threads": args.threads, "iterations": args.iterations, "rounds": rounds,
            "calls_per_engine": calls, "warmup": args.warmup, "order": "ABBA blocks: round 0 torch then ORT",
            "waiting": {"spinning": SPINNING, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
                        "ort_session.intra_op.allow_spinning": "1" if SPINNING else "0"},
            "versions": {"torch": torch.__version__, "onnxruntime": ort.__version__},
            "torch_parallel_info": torch.__config__.parallel_info(),
            "cpu_count": os.cpu_count(), "results": rows, "goal_met": goal_met, "checked": args.check},
            "bench_export", facts):
        console.print(f"wrote {path}", markup=False, highlight=False)
    return EXIT_GOAL_MISSED if args.check and not goal_met else 0


if __name__ == "__main__":
    sys.exit(main())
