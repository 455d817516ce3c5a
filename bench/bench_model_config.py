"""tritonkit's config vs Triton's auto-completed config for the same model, side by side in one run.

Both serve the same ONNX MLP (256-1024-1024-10, batch axis dynamic) on the embedded local
Triton, through tritonkit's ONNX Runtime adapter (a python-backend model: one CPU instance,
no GPU accelerator, whatever the config asks), each loaded at concurrency 1 and 16.

- "Triton's auto-completed config" is what Triton serves for the bare model.onnx with no
  config.pbtxt: auto-complete is on by default (tritonkit never passes
  --disable-auto-complete-config), and the ONNX Runtime backend fills in the graph's inputs
  and outputs, max_batch_size = default-max-batch-size (4, Triton's default) since every
  input and output has a variable first dimension, and — max_batch_size > 1 and no
  scheduler — ``dynamic_batching {}`` (Triton's model_configuration.md, "Default Max Batch
  Size and Dynamic Batcher"; onnxruntime_backend's AutoCompleteMaxBatch). The embedded
  server has no ONNX Runtime backend to complete it, so the bench writes that config out.
- "tritonkit's config" is `tritonkit config --gpu a10` (max_batch_size 32, dynamic batching,
  warm-up; its 2 GPU instances and TensorRT FP16 block mean nothing on the local target).

The load comes from `tritonkit loadtest`'s generator (``--perf-analyzer``: perf_analyzer,
which needs a quiet machine to find stable windows), the server on one half of the CPUs
and the load generator on the other (``--no-pin`` shares them). Each round runs the two
configs back to back at each concurrency, in turns (A B, then B A, ...), each after
``--warmup-s`` of untimed load; ratios are tritonkit's / Triton's within a round, reported
as the median of the rounds with their min–max. A perf_analyzer round that found no stable
window is left out with its pair, and flagged. The JSON keeps every round, both configs
(as written, and as the local server loaded them) and the batches Triton formed.

Goal (at concurrency 16, on the median paired ratios): throughput >= ``--goal-throughput``
(2.0) times Triton's, p99 no worse. With ``--check`` (the default) a missed goal exits 1;
a level with no round kept exits 3. Every run's JSON is kept in out/bench-runs/.

    .venv/bin/python bench/bench_model_config.py [--json out.json] [--rounds 5] [--seconds 6]
        [--warmup-s 1] [--concurrency 1,16] [--perf-analyzer [--stability-pct 10]
        [--stabilize-on mean|p99] [--max-trials 10]] [--goal-throughput 2] [--no-pin] [--no-check]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from tritonclient.grpc import model_config_pb2 as mc  # noqa: E402

from bench.common import (EXIT_GOAL_MISSED, EXIT_INCOMPLETE, abba, describe_cpus, fmt_spread,  # noqa: E402
                          log_round, measure_ours, print_left_out, run_facts, served,
                          split_cpus, spread, triton_counts, write_report)
from bench.perf_analyzer import run_perf_analyzer, warmup_requests_for  # noqa: E402
from tritonkit.client import Endpoint  # noqa: E402
from tritonkit.fileio import atomic_write  # noqa: E402
from tritonkit.model_config import config_to_text, configure, read_config, read_graph  # noqa: E402
from tritonkit.repository import ONNX_FILENAME  # noqa: E402

MAX_BATCH = 32
# tritonserver's --backend-config=default-max-batch-size when not given: what the ONNX
# Runtime backend's auto-complete sets for a model that can batch
TRITON_DEFAULT_MAX_BATCH_SIZE = 4
SIDES = {"mlp_triton_auto": "Triton's auto-completed config", "mlp_tritonkit": "tritonkit's config"}
BASE, TUNED = SIDES
FIGURES = ("throughput", "p50_ms", "p99_ms")


def triton_autocompleted(name: str, onnx_path: Path) -> mc.ModelConfig:
    """The config Triton's ONNX Runtime backend auto-completes for a bare ``onnx_path``
    (AutoCompleteConfig / AutoCompleteMaxBatch / AutoCompleteIO): inputs and outputs from
    the graph; if every one has a variable first dimension, max_batch_size is the default
    (4) and, as that is > 1 and no scheduler is set, ``dynamic_batching {}``; else 0.
    (Instance groups are filled in by Triton's core; the local target runs one CPU instance.)"""
    graph = read_graph(onnx_path)
    config = mc.ModelConfig(name=name, platform="onnxruntime_onnx")
    batching = all(len(t.dims) > 0 and t.dims[0] == -1 for t in graph.inputs + graph.outputs)
    config.max_batch_size = TRITON_DEFAULT_MAX_BATCH_SIZE if batching else 0
    strip = 1 if config.max_batch_size > 0 else 0
    for specs, tensors in ((graph.inputs, config.input), (graph.outputs, config.output)):
        for spec in specs:
            tensor = tensors.add(name=spec.name, data_type=mc.DataType.Value(spec.data_type))
            tensor.dims.extend(spec.dims[strip:])
            if not tensor.dims:                 # [batch] only: dims [1], reshaped to []
                tensor.dims.append(1)
                if config.max_batch_size > 0:
                    tensor.reshape.SetInParent()
    if config.max_batch_size > 1:
        config.dynamic_batching.SetInParent()
    return config


def build_repository(root: Path) -> Path:
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                              torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                              torch.nn.Linear(1024, 10)).eval()
    tuned = root / TUNED
    (tuned / "1").mkdir(parents=True)
    torch.onnx.export(mlp, (torch.randn(4, 256),), str(tuned / "1" / ONNX_FILENAME),
                      input_names=["INPUT__0"], output_names=["OUTPUT__0"],
                      dynamic_axes={"INPUT__0": {0: "batch"}, "OUTPUT__0": {0: "batch"}},
                      dynamo=False)
    (tuned / "export-report.json").write_text(json.dumps({"max_batch_size": MAX_BATCH}))
    configure(root, TUNED, gpu="a10")

    base = root / BASE
    (base / "1").mkdir(parents=True)
    shutil.copyfile(tuned / "1" / ONNX_FILENAME, base / "1" / ONNX_FILENAME)
    atomic_write(base / "config.pbtxt",
                 config_to_text(triton_autocompleted(BASE, base / "1" / ONNX_FILENAME)))
    return root


def _loaded_config(endpoint: Endpoint, model: str) -> dict:
    """The config the local server loaded for ``model``, as it reports it."""
    client = endpoint.http()
    try:
        return client.get_model_config(model)
    finally:
        client.close()


def measure(endpoint: Endpoint, url: str, model: str, concurrency: int, args: argparse.Namespace,
            rate: float | None) -> dict:
    """One config at one concurrency with the chosen tool, and the batches Triton formed."""
    before = triton_counts(endpoint, model)
    if args.perf_analyzer:
        warmup = warmup_requests_for(rate, args.warmup_s, concurrency)
        interval_ms = round(args.seconds * 1000 / 3)
        try:
            r = run_perf_analyzer(url, model, concurrency, interval_ms=interval_ms,
                                  stability_pct=args.stability_pct, max_trials=args.max_trials,
                                  warmup_requests=warmup, stability_percentile=_percentile(args))
        except RuntimeError as exc:     # no figures at all, also with windows twice as long
            return {"throughput": None, "p50_ms": None, "p99_ms": None, "stable": False, "exit_code": None,
                    "failure": "no figures: " + " ".join(str(exc).split()), "interval_ms": interval_ms,
                    "retried": True, "warmup_requests": warmup}
        result = {"throughput": r.throughput, "p50_ms": r.p50_us / 1000, "p90_ms": r.p90_us / 1000,
                  "p95_ms": r.p95_us / 1000, "p99_ms": r.p99_us / 1000, "mean_ms": r.avg_us / 1000,
                  "stable": r.stable, "exit_code": r.returncode, "failure": r.failure,
                  "interval_ms": r.interval_ms, "stability_pct": r.stability_pct,
                  "stabilized_on": args.stabilize_on, "max_trials": r.max_trials,
                  "trials": r.trials, "retried": r.retried, "measured_span_s": r.measured_span_s,
                  "warmup_requests": r.warmup_requests}
    else:
        level = measure_ours(endpoint, model, concurrency, args.seconds, warmup_s=args.warmup_s)
        lat = level.latency_ms
        result = {"throughput": level.infer_per_s, "p50_ms": lat["p50"], "p90_ms": lat["p90"],
                  "p95_ms": lat["p95"], "p99_ms": lat["p99"], "mean_ms": lat["mean"],
                  # no stability test: it measures the span it is given
                  "stable": None, "measured_span_s": level.duration_s, "warmup_s": args.warmup_s,
                  "workers": level.workers, "server_batch": level.server_batch}
    served_counts = triton_counts(endpoint, model).minus(before)
    # over the whole invocation (warm-up included): samples per model execution
    result["mean_batch_invocation"] = served_counts.mean_batch
    return result


def _percentile(args: argparse.Namespace) -> int | None:
    return 99 if args.stabilize_on == "p99" else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the report here (every run's is kept "
                                                  "in out/bench-runs/)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=6.0,
                        help="measured seconds per run (perf_analyzer: 3 windows of a third of it)")
    parser.add_argument("--warmup-s", type=float, default=1.0, help="untimed load before each run")
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--perf-analyzer", action="store_true", help="measure with perf_analyzer")
    parser.add_argument("--stability-pct", type=int, default=10,
                        help="perf_analyzer's -s: its last 3 windows agree within this")
    parser.add_argument("--max-trials", type=int, default=10, help="perf_analyzer's -r: most windows")
    parser.add_argument("--stabilize-on", choices=("mean", "p99"), default="mean",
                        help="what perf_analyzer's windows must agree on besides throughput: mean "
                             "latency (its default) or p99 (--percentile 99, stricter)")
    parser.add_argument("--goal-throughput", type=float, default=2.0,
                        help="the goal: tritonkit's / Triton's throughput at concurrency 16")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                        help="server on the first half of the CPUs, load generator on the rest")
    parser.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                        help="exit 1 when the goal is missed")
    args = parser.parse_args()
    facts = run_facts()
    levels = [int(c) for c in args.concurrency.split(",")]
    if args.rounds < 1 or args.seconds <= 0 or args.warmup_s < 0:
        parser.error("--rounds >= 1, --seconds > 0 and --warmup-s >= 0")
    server_cpus, client_cpus = split_cpus(args.pin)
    pinned = describe_cpus(server_cpus, client_cpus)
    console = Console(width=None if sys.stdout.isatty() else 200)
    tool = "perf_analyzer" if args.perf_analyzer else "tritonkit loadtest"

    runs: dict[int, list[dict]] = {c: [] for c in levels}
    rates: dict[tuple[str, int], float] = {}
    configs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        repo = build_repository(Path(tmp))
        for model, label in SIDES.items():
            written = read_config(repo / model / "config.pbtxt")
            configs[model] = {"label": label, "written": config_to_text(written)}
        with served(repo, server_cpus=server_cpus, client_cpus=client_cpus) as deployment:
            endpoint = Endpoint.from_deployment(deployment)
            for model in SIDES:
                configs[model]["loaded_locally"] = _loaded_config(endpoint, model)
            for index in range(args.rounds):
                for concurrency in levels:
                    entry: dict = {"round": index, "order": abba(list(SIDES), index)}
                    for model in entry["order"]:
                        result = measure(endpoint, deployment.http_url, model, concurrency, args,
                                         rates.get((model, concurrency)))
                        entry[model] = result
                        said = f"round {index + 1}/{args.rounds} c={concurrency} {SIDES[model]}: "
                        if result["throughput"] is not None:
                            rates[model, concurrency] = result["throughput"]
                            said += (f"{result['throughput']:,.0f} infer/s, p99 {result['p99_ms']:.2f} ms, "
                                     f"batch {result['mean_batch_invocation'] or 0:.1f}")
                        log_round(console, said, result)
                    runs[concurrency].append(entry)

    summary = []
    for concurrency in levels:
        rounds = runs[concurrency]
        kept = [r for r in rounds if r[BASE]["stable"] is not False and r[TUNED]["stable"] is not False]
        row: dict = {"concurrency": concurrency, "rounds": rounds, "rounds_kept": len(kept),
                     "rounds_left_out": [{"round": r["round"],
                                          "failure": "; ".join(r[m]["failure"] for m in SIDES
                                                               if r[m]["stable"] is False)}
                                         for r in rounds if r not in kept]}
        for key in FIGURES + ("mean_batch_invocation",):
            for model in SIDES:
                row.setdefault(model, {})[key] = spread((r[model][key] for r in kept),
                                                        f"{model} {key} at {concurrency}")
        for key in FIGURES:
            row[f"{key}_ratio"] = spread((r[TUNED][key] / r[BASE][key] for r in kept),
                                         f"{key} ratio at {concurrency}")
        summary.append(row)

    table = Table(title=f"tritonkit's config vs Triton's auto-completed config — ONNX MLP on the local "
                        f"Triton (CPU), {tool}, {args.rounds} round(s) of {args.seconds:g} s after "
                        f"{args.warmup_s:g} s warm-up, {pinned}. Figures: median of the rounds kept; "
                        "×: tritonkit's / Triton's paired within each round, median (min–max)")
    for col in ("conc.", "rounds kept", "Triton's infer/s", "tritonkit's infer/s", "throughput ×",
                "Triton's p99 ms", "tritonkit's p99 ms", "p99 ×", "batch formed Triton's / tritonkit's"):
        table.add_column(col, justify="right")

    def med(s: dict | None, fmt: str) -> str:
        return "—" if not s else format(s["median"], fmt)

    for row in summary:
        table.add_row(str(row["concurrency"]), f"{row['rounds_kept']}/{len(row['rounds'])}",
                      med(row[BASE]["throughput"], ",.0f"), med(row[TUNED]["throughput"], ",.0f"),
                      fmt_spread(row["throughput_ratio"]),
                      med(row[BASE]["p99_ms"], ".2f"), med(row[TUNED]["p99_ms"], ".2f"),
                      fmt_spread(row["p99_ms_ratio"]),
                      f"{med(row[BASE]['mean_batch_invocation'], '.1f')} / "
                      f"{med(row[TUNED]['mean_batch_invocation'], '.1f')}")
    console.print(table)
    print_left_out(console, summary)

    complete = all(row["rounds_kept"] for row in summary)
    at16 = next((row for row in summary if row["concurrency"] == 16), None)
    goal = (f"at concurrency 16, median paired throughput ratio >= {args.goal_throughput:g} and "
            "median paired p99 ratio <= 1.00")
    goal_met = None
    if at16 and at16["rounds_kept"]:
        goal_met = (at16["throughput_ratio"]["median"] >= args.goal_throughput
                    and at16["p99_ms_ratio"]["median"] <= 1.0)
    console.print(f"goal ({goal}): "
                  + ("not judged (concurrency 16 not measured, or no round kept)" if goal_met is None
                     else "met" if goal_met else "NOT met"), markup=False, highlight=False)
    for path in write_report(args.json, {
            "tool": tool, "rounds": args.rounds, "seconds": args.seconds, "warmup_s": args.warmup_s,
            "cpus": pinned, "order": f"ABBA: round 0 {BASE} then {TUNED}, round 1 reversed, ...",
            "perf_analyzer": ({"interval_ms": round(args.seconds * 1000 / 3),
                               "stability_pct": args.stability_pct, "stabilized_on": args.stabilize_on,
                               "max_trials": args.max_trials, "merged_windows": 3}
                              if args.perf_analyzer else None),
            "sides": configs, "results": summary, "complete": complete, "goal": goal,
            "goal_met": goal_met, "checked": args.check}, "bench_model_config", facts):
        console.print(f"wrote {path}", markup=False, highlight=False)
    if not complete:
        return EXIT_INCOMPLETE
    return EXIT_GOAL_MISSED if args.check and goal_met is False else 0


if __name__ == "__main__":
    sys.exit(main())
