"""Exported ONNX on ONNX Runtime (CPU) vs PyTorch eager, per example model, in one run.

Each example in examples/ (the models the export tests use) is exported with
`tritonkit export` (verified as usual), then timed at batch 1 and batch 32 on the same
inputs: one forward pass in PyTorch eager (no_grad) and one ``session.run`` in ONNX
Runtime's CPU provider, alternated so that a busy machine slows both alike. Both use
the same number of threads. The figure is the median over the iterations; the ratio is
PyTorch's median over ONNX Runtime's (above 1: ONNX Runtime is faster); the JSON
also has each side's 90th percentile.

    .venv/bin/python bench/bench_export.py [--json out.json] [--iterations 200] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench.common import write_report  # noqa: E402
from tritonkit.export import ExportOptions, export_spec  # noqa: E402
from tritonkit.export.spec import load_factory, normalize_inputs, order_like_forward  # noqa: E402

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


def time_pair(run_torch, run_ort, iterations: int, warmup: int) -> tuple[list[float], list[float]]:
    """Milliseconds per call of each, alternated call by call."""
    for _ in range(warmup):
        run_torch()
        run_ort()
    torch_ms, ort_ms = [], []
    for _ in range(iterations):
        start = time.perf_counter()
        run_torch()
        middle = time.perf_counter()
        run_ort()
        end = time.perf_counter()
        torch_ms.append((middle - start) * 1e3)
        ort_ms.append((end - middle) * 1e3)
    return torch_ms, ort_ms


def bench_model(name: str, spec: str, repository: Path, *, threads: int, iterations: int,
                warmup: int) -> list[dict]:
    result = export_spec(str(EXAMPLES / spec), ExportOptions(name=name, repository=repository,
                                                             max_batch_size=max(BATCHES)))
    module, example, *_ = load_factory(str(EXAMPLES / spec))
    module.eval()
    inputs = normalize_inputs(order_like_forward(module, example))
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(str(result.path / "1" / "model.onnx"), options,
                                   providers=["CPUExecutionProvider"])
    generator = torch.Generator().manual_seed(0)
    rows = []
    for batch in BATCHES:
        tensors = tuple(batch_of(t, batch, generator) for t in inputs.tensors)
        feed = {n: t.numpy() for n, t in zip(inputs.names, tensors)}

        def run_torch():
            with torch.inference_mode():
                module(*tensors)

        def run_ort():
            session.run(None, feed)

        torch_ms, ort_ms = time_pair(run_torch, run_ort, iterations, warmup)
        torch_median, ort_median = statistics.median(torch_ms), statistics.median(ort_ms)
        rows.append({
            "model": name, "batch": batch, "exporter": result.report["exporter"],
            "torch_ms_median": torch_median, "ort_ms_median": ort_median,
            "torch_ms_p90": float(np.percentile(torch_ms, 90)),
            "ort_ms_p90": float(np.percentile(ort_ms, 90)),
            "speedup": torch_median / ort_median, "iterations": iterations,
        })
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    parser.add_argument("--iterations", type=int, default=200, help="timed calls per engine")
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls per engine first")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="intra-op threads for both PyTorch and ONNX Runtime")
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated subset of {', '.join(MODELS)}")
    args = parser.parse_args()
    chosen = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted(set(chosen) - set(MODELS))
    if unknown:
        parser.error(f"unknown model(s): {', '.join(unknown)}")

    torch.set_num_threads(args.threads)
    console = Console()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in chosen:
            with console.status(f"exporting and timing {name}"):
                rows += bench_model(name, MODELS[name], Path(tmp), threads=args.threads,
                                    iterations=args.iterations, warmup=args.warmup)

    table = Table(title=f"ONNX Runtime (CPU) vs PyTorch eager, median of {args.iterations} "
                        f"calls, {args.threads} thread(s)")
    for column in ("model", "exporter", "batch", "torch ms", "ORT ms", "torch/ORT"):
        table.add_column(column, justify="left" if column in ("model", "exporter") else "right")
    for row in rows:
        table.add_row(row["model"], row["exporter"], str(row["batch"]),
                      f"{row['torch_ms_median']:.3f}", f"{row['ort_ms_median']:.3f}",
                      f"{row['speedup']:.2f}x")
    console.print(table)
    if args.json:
        write_report(args.json, {
            "threads": args.threads, "iterations": args.iterations, "warmup": args.warmup,
            "versions": {"torch": torch.__version__, "onnxruntime": ort.__version__},
            "cpu_count": os.cpu_count(), "results": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
