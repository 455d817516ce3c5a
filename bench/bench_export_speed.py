"""tritonkit's export (with its verification) against a bare dynamo export, side by side.

For each model (BERT-base, GPT-2, ResNet-50 from tests/real_models.py, random weights),
each round times two sides, each in a fresh Python process that has already built the
model, so imports and model building are left out of both:

- bare:      ``torch.onnx.export(model, kwargs=..., f=..., dynamo=True, dynamic_shapes=...)``
             with the same dynamic axes: the floor, a graph written and nothing checked;
- tritonkit: ``tritonkit.export(...)`` with its defaults: the same exporter, then the ONNX
             checker, ONNX Runtime against PyTorch at the example, batch 1 and a small
             batch, the middle batch (16) and the maximum (32) while verification's budget
             allows (the batches verified and left out are in the JSON), up to 8 samples
             of the largest batch against themselves alone, the configs, the report.

Both sides run with ``OMP_WAIT_POLICY=PASSIVE``, as ``tritonkit export`` sets it unless it
is set. Each round runs every model, its sides alternating (A B, B A, ...), so a busy
machine slows both sides, and all models, alike. The ratio is tritonkit's seconds over
the bare export's within each round: the median of the rounds with their min–max, in wall
time and in CPU time (the process's, every thread counted: what other work on a shared
machine disturbs least). tritonkit's side also says where its time went (exporter,
saving, checker, verification's PyTorch runs, ONNX Runtime's session and runs, configs,
file hashes), in CPU and wall seconds. With ``--check``: exit 1 unless every model's median
ratios are at most 2. Every run's JSON is kept in out/bench-runs/.

    .venv/bin/python bench/bench_export_speed.py [--models bert_base,gpt2,resnet50]
        [--rounds 3] [--gpt2-layers 2] [--json out.json] [--check]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import EXIT_GOAL_MISSED, abba, fmt_spread, run_facts, spread, write_report  # noqa: E402

MODELS = ("bert_base", "gpt2", "resnet50")
SIDES = ("bare", "tritonkit")
GOAL = 2.0
MAX_BATCH = 32
# Where tritonkit's time goes: ("module:object", attribute) timed each call, nested ones
# included in their callers' figures too. A phase's CPU time is the process's, so it
# counts what other threads did meanwhile (ONNX Runtime's session loads beside the checker).
PHASES = {
    "exporter": ("tritonkit.export.onnx_export", "export_onnx"),
    "save": ("tritonkit.export.onnx_export", "save_model"),
    "checker": ("tritonkit.export.pipeline", "check_graph"),
    "verification": ("tritonkit.export.pipeline", "verify_against_torch"),
    "  pytorch runs": ("tritonkit.export.verify", "torch_outputs"),
    "  ORT session": ("tritonkit.export.pipeline", "open_session"),
    "  ORT runs": ("onnxruntime:InferenceSession", "run"),
    "configs": ("tritonkit.export.pipeline", "configure"),
    "hashes": ("tritonkit.export.pipeline", "file_record"),
}


def build(model: str, gpt2_layers: int):
    from tests import real_models

    if model == "gpt2":
        return real_models.gpt2(layers=gpt2_layers)
    return getattr(real_models, model)()


def child(side: str, model: str, gpt2_layers: int) -> dict:
    """One side's export of one model, timed in this (fresh) process."""
    import torch

    built = build(model, gpt2_layers)
    module, example, axes = built[0], built[1], (built[2] if len(built) > 2 else {})
    with tempfile.TemporaryDirectory() as tmp:
        if side == "bare":
            kwargs = example if isinstance(example, dict) else None
            args = () if kwargs else (example,)
            batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
            dims: dict = {}
            names = list(kwargs) if kwargs else ["x"]
            shapes = {name: {0: batch, **{axis: dims.setdefault(label, torch.export.Dim(label))
                                          for axis, label in axes.get(name, {}).items()}}
                      for name in names}
            started, cpu = time.perf_counter(), time.process_time()
            torch.onnx.export(module, args, f=str(Path(tmp) / "model.onnx"), kwargs=kwargs,
                              dynamo=True, verbose=False,
                              dynamic_shapes=shapes if kwargs else (shapes["x"],))
            return {"seconds": time.perf_counter() - started,
                    "cpu_seconds": time.process_time() - cpu}
        import tritonkit

        phases = _timed_phases()
        started, cpu = time.perf_counter(), time.process_time()
        result = tritonkit.export(module, example, name="m", repository=tmp, dynamic_axes=axes,
                                  max_batch_size=MAX_BATCH)
        seconds = time.perf_counter() - started
        return {"seconds": seconds, "cpu_seconds": time.process_time() - cpu,
                "phases": dict(phases),
                "max_errors": result.report["verification"]["max_errors"],
                **{key: result.report["verification"].get(key)
                   for key in ("batches", "left_out", "budget")}}


def _timed_phases() -> dict:
    """Wrap each PHASES function so that its calls add up their wall and CPU seconds."""
    import importlib

    totals: dict = defaultdict(lambda: {"seconds": 0.0, "cpu_seconds": 0.0})
    for label, (where, attribute) in PHASES.items():
        module_name, _, inner = where.partition(":")
        owner = importlib.import_module(module_name)
        for name in filter(None, inner.split(".")):
            owner = getattr(owner, name)
        original = getattr(owner, attribute)

        def timed(*args, __original=original, __label=label, **kwargs):
            started, cpu = time.perf_counter(), time.process_time()
            try:
                return __original(*args, **kwargs)
            finally:
                totals[__label]["seconds"] += time.perf_counter() - started
                totals[__label]["cpu_seconds"] += time.process_time() - cpu

        setattr(owner, attribute, timed)
    return totals


def run_side(side: str, model: str, gpt2_layers: int) -> dict:
    command = [sys.executable, __file__, "--child", side, "--models", model,
               "--gpt2-layers", str(gpt2_layers)]
    # OMP_WAIT_POLICY as `tritonkit export` sets it (unless set), for both sides.
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                          env={"OMP_WAIT_POLICY": "PASSIVE", **os.environ,
                               "HF_HUB_OFFLINE": "1"})
    if done.returncode != 0:
        raise SystemExit(f"{side} export of {model} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated subset of {', '.join(MODELS)}")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per model, sides alternating")
    parser.add_argument("--gpt2-layers", type=int, default=2, help="GPT-2's layers (12: full size)")
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 unless every model's median ratios are at most {GOAL:g}")
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    chosen = [m.strip() for m in args.models.split(",") if m.strip()]
    if set(chosen) - set(MODELS):
        parser.error(f"unknown model(s): {', '.join(sorted(set(chosen) - set(MODELS)))}")
    if args.child:
        with contextlib.redirect_stdout(sys.stderr):    # the exporters print; JSON goes last
            measured = child(args.child, chosen[0], args.gpt2_layers)
        print(json.dumps(measured))
        return 0

    from rich.console import Console
    from rich.table import Table

    facts = run_facts()
    console = Console(width=None if sys.stdout.isatty() else 200)
    rounds: dict[str, list] = {model: [] for model in chosen}
    for index in range(args.rounds):
        for model in chosen:
            entry: dict = {"round": index, "order": abba(SIDES, index)}
            for side in entry["order"]:
                with console.status(f"round {index + 1}/{args.rounds}: {side} export of {model}"):
                    entry[side] = run_side(side, model, args.gpt2_layers)
            entry["ratio"] = entry["tritonkit"]["seconds"] / entry["bare"]["seconds"]
            entry["cpu_ratio"] = entry["tritonkit"]["cpu_seconds"] / entry["bare"]["cpu_seconds"]
            console.print(f"round {index + 1}, {model}: bare {entry['bare']['seconds']:.1f} s "
                          f"({entry['bare']['cpu_seconds']:.1f} s CPU), tritonkit "
                          f"{entry['tritonkit']['seconds']:.1f} s "
                          f"({entry['tritonkit']['cpu_seconds']:.1f} s CPU): "
                          f"{entry['ratio']:.2f}x, CPU {entry['cpu_ratio']:.2f}x; verified at "
                          f"batch {entry['tritonkit']['batches']}, left out "
                          f"{entry['tritonkit']['left_out'] or 'none'}")
            rounds[model].append(entry)
    rows = [_row(model, rounds[model]) for model in chosen]

    table = Table(title=f"tritonkit export + verification vs a bare dynamo export: {args.rounds} "
                        "round(s), medians; ratios: median (min–max) of the rounds' "
                        "tritonkit/bare")
    for column in ("model", "bare s", "bare CPU s", "tritonkit s", "tritonkit CPU s",
                   "ratio (wall)", "ratio (CPU)"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for row in rows:
        table.add_row(_label(row["model"], args.gpt2_layers), f"{row['bare_s']:.1f}",
                      f"{row['bare_cpu_s']:.1f}", f"{row['tritonkit_s']:.1f}",
                      f"{row['tritonkit_cpu_s']:.1f}", fmt_spread(row["ratio_spread"]) + "x",
                      fmt_spread(row["cpu_ratio_spread"]) + "x")
    console.print(table)
    phases = Table(title="where tritonkit's time went: CPU s (wall s), medians; a phase's CPU is the "
                           "process's, so it counts what ran beside it")
    for column in ("model", *PHASES):
        phases.add_column(column.strip(), justify="left" if column == "model" else "right")
    for row in rows:
        phases.add_row(_label(row["model"], args.gpt2_layers),
                       *(f"{row['phases_cpu_s'][label]:.1f} ({row['phases_s'][label]:.1f})"
                         for label in PHASES))
    console.print(phases)
    goal_met = all(row["ratio"] <= GOAL and row["cpu_ratio"] <= GOAL for row in rows)
    report = {"goal": f"tritonkit/bare <= {GOAL:g}", "goal_met": goal_met,
              "gpt2_layers": args.gpt2_layers, "max_batch_size": MAX_BATCH, "rows": rows}
    write_report(args.json, report, "export_speed", facts)
    return EXIT_GOAL_MISSED if args.check and not goal_met else 0


def _row(model: str, rounds: list[dict]) -> dict:
    """One model's rounds summed up: median seconds and ratios with their spread."""
    ratio = spread((r["ratio"] for r in rounds), f"{model} ratio")
    cpu_ratio = spread((r["cpu_ratio"] for r in rounds), f"{model} CPU ratio")

    def median(side: str, key: str) -> float:
        return statistics.median(r[side][key] for r in rounds)

    def phase(label: str, key: str) -> float:
        return statistics.median(r["tritonkit"]["phases"].get(label, {}).get(key, 0.0)
                                 for r in rounds)

    return {"model": model, "rounds": rounds, "ratio": ratio["median"], "ratio_spread": ratio,
            "cpu_ratio": cpu_ratio["median"], "cpu_ratio_spread": cpu_ratio,
            "bare_s": median("bare", "seconds"), "bare_cpu_s": median("bare", "cpu_seconds"),
            "tritonkit_s": median("tritonkit", "seconds"),
            "tritonkit_cpu_s": median("tritonkit", "cpu_seconds"),
            "phases_s": {label: phase(label, "seconds") for label in PHASES},
            "phases_cpu_s": {label: phase(label, "cpu_seconds") for label in PHASES},
            "max_errors": rounds[-1]["tritonkit"]["max_errors"],
            "verified_batches": [r["tritonkit"]["batches"] for r in rounds],
            "left_out": [r["tritonkit"]["left_out"] or [] for r in rounds]}


def _label(model: str, gpt2_layers: int) -> str:
    return f"gpt2 ({gpt2_layers} layers)" if model == "gpt2" else model


if __name__ == "__main__":
    sys.exit(main())
