"""`tritonkit export`: a PyTorch model factory → a verified ONNX (or TensorRT) model folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.markup import escape

from tritonkit.cli import app
from tritonkit.cli.options import Repository, console, err_console
from tritonkit.server.local import signals_interrupt
from tritonkit.tables import fitted, new_table

if TYPE_CHECKING:       # the export package imports torch: only `tritonkit export` pays for it
    from tritonkit.export import ExportResult


def _names(text: Optional[str]) -> Optional[tuple[str, ...]]:
    return tuple(part.strip() for part in text.split(",") if part.strip()) if text else None


@app.command(epilog="Example: tritonkit export examples/mlp.py:build --name mlp "
                    "--repository model_repository --gpu a10")
def export(
    spec: Annotated[str, typer.Argument(metavar="SPEC",
        help="The model factory: path/to/file.py:factory or package.module:factory; it "
             "returns (module, example_inputs[, dynamic_axes]).")],
    name: Annotated[str, typer.Option("--name", "-n", help="Model name (its folder in the repository).")],
    repository: Repository,
    gpu: Annotated[Optional[str], typer.Option(
        "--gpu", help="Target GPU profile (a10, cpu, p100, or a profile .toml).")] = None,
    fmt: Annotated[str, typer.Option(
        "--format", help="onnx, or tensorrt (a plan built on the target GPU).")] = "onnx",
    max_batch_size: Annotated[int, typer.Option(
        "--max-batch-size", help="Largest batch Triton may send.", min=1)] = 32,
    opset: Annotated[int, typer.Option("--opset", help="ONNX opset.", min=7)] = 18,
    atol: Annotated[Optional[float], typer.Option(
        "--atol", help="Absolute tolerance vs PyTorch for float outputs (default by output "
                       "dtype), scaled by an output's largest magnitude below 1.", min=0)] = None,
    rtol: Annotated[Optional[float], typer.Option(
        "--rtol", help="Relative tolerance vs PyTorch (default by output dtype).", min=0)] = None,
    input_names: Annotated[Optional[str], typer.Option(
        "--input-names", help="Comma-separated input names (default: dict keys or INPUT__<i>).")] = None,
    output_names: Annotated[Optional[str], typer.Option(
        "--output-names", help="Comma-separated output names (default: dict keys or OUTPUT__<i>).")] = None,
    dynamic_axis: Annotated[Optional[list[str]], typer.Option(
        "--dynamic-axis", help="INPUT:AXIS[=LABEL], an axis besides the batch that varies "
                               "(repeatable), e.g. input_ids:1=sequence.")] = None,
    verify: Annotated[bool, typer.Option(
        "--verify/--no-verify", help="Compare ONNX Runtime with PyTorch on several batches.")] = True,
    verify_batches: Annotated[str, typer.Option(
        "--verify-batches", help="budget: batch 1 and a small batch always, the middle and max "
                                 "batches while their runs fit 0.6x the exporter's CPU time "
                                 "(2 s at least); "
                                 "all: every batch.")] = "budget",
    exporter: Annotated[Optional[list[str]], typer.Option(
        "--exporter", help="dynamo or torchscript, tried in the order given (repeatable; "
                           "default: dynamo, then torchscript if it fails).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing model folder.")] = False,
) -> None:
    """Export a PyTorch model to ONNX, verified against PyTorch, into a model repository."""
    # Before torch loads libgomp, which reads it once: PyTorch's idle OpenMP threads then
    # sleep between the verification's operators instead of spinning on a core the other
    # thread (or ONNX Runtime) needs. On a busy 2-core host that halved its PyTorch runs.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from tritonkit.export import ExportOptions, export_spec
    from tritonkit.export.spec import parse_dynamic_axis

    axes: dict[str, dict[int, str]] = {}
    for text in dynamic_axis or []:
        input_name, axis, label = parse_dynamic_axis(text)
        axes.setdefault(input_name, {})[axis] = label
    options = ExportOptions(
        name=name, repository=Path(repository), gpu=gpu, format=fmt,
        max_batch_size=max_batch_size, opset=opset, atol=atol, rtol=rtol, verify=verify,
        verify_batches=verify_batches, force=force, input_names=_names(input_names),
        output_names=_names(output_names),
        **({"exporters": tuple(exporter)} if exporter else {}))
    said: list[str] = []

    def say(note: str) -> None:     # the clean-up's, said at once: the export may yet fail
        console.print(escape(note))
        said.append(note)

    # SIGTERM and SIGHUP end an export as Ctrl-C does: its staging folder removed.
    with signals_interrupt(), err_console.status(f"exporting {spec}"):
        result = export_spec(spec, options, dynamic_axes=axes, on_note=say)
    _render(result, said)


def _render(result: ExportResult, said: list[str]) -> None:
    report = result.report
    console.print(f"exported [bold]{report['name']}[/] to {escape(str(result.path))} with the "
                  f"{report['exporter']} exporter (opset {report['opset']}, "
                  f"max batch {report['max_batch_size']})")
    # |onnx - torch| <= atol + rtol·|torch| per element: "err/tol" is the largest share of
    # that any element took (at most 1 passes), where max abs and max rel errors are often
    # of different elements (a rel error of 0.9 on a logit near 0, well within atol).
    table = new_table()
    for name in ("tensor", "dtype", "shape", "max abs err", "max rel err", "atol", "rtol",
                 "err/tol", "check"):
        table.add_column(name, no_wrap=name not in ("tensor", "shape"),
                         justify="right" if name in NUMERIC else "left")
    errors = (report["verification"].get("max_errors") or {})
    for spec in report["inputs"]:
        table.add_row(f"in  {spec['name']}", _dtype(spec), _shape(spec), *[""] * 6)
    for spec in report["outputs"]:
        table.add_row(f"out {spec['name']}", _dtype(spec), _shape(spec),
                      *_verified_columns(errors.get(spec["name"])))
    console.print(fitted(table))
    for attempt in report["exporter_attempts"]:
        if not attempt["ok"]:
            note = f": {attempt['note']}" if attempt.get("note") else ""
            console.print(escape(f"the {attempt['exporter']} exporter failed ({attempt['error']}); "
                                 f"used the {report['exporter']} exporter{note}"))
    verification = report["verification"]
    if verification.get("passed"):
        batches = verification.get("batches") or sorted({c["batch"] for c in verification["cases"]})
        console.print(f"verified against PyTorch on {verification['provider']} at batch "
                      f"{', '.join(map(str, batches))}")
    else:
        console.print("[yellow]not verified[/] (--no-verify)")
    for note in result.notes:
        if note not in said:
            console.print(escape(note))
    for warning in result.warnings:
        err_console.print(f"warning: {escape(warning)}", highlight=False, soft_wrap=True)
    for path in result.written:
        console.print(f"  wrote {escape(str(path))}")


NUMERIC = ("max abs err", "max rel err", "atol", "rtol", "err/tol")


def _verified_columns(worst: dict | None) -> list[str]:
    """max abs err, max rel err, atol, rtol, err/tol and the verdict of one output."""
    if not worst:
        return ["-"] * 6
    exact = worst["atol"] == 0 and worst["rtol"] == 0    # integer outputs, or --atol 0 --rtol 0
    return [f"{worst['max_abs_error']:.2e}", f"{worst['max_rel_error']:.2e}",
            *(["exact", ""] if exact else [f"{worst['atol']:.1e}", f"{worst['rtol']:.1e}"]),
            f"{worst['tolerance_share']:.2f}", "pass" if worst["passed"] else "[red]fail[/]"]


def _dtype(spec: dict) -> str:
    """Triton's name of a tensor's dtype (FP32, INT64), as its config and loadtest say it."""
    import numpy as np
    from tritonclient.utils import np_to_triton_dtype

    return np_to_triton_dtype(np.dtype(spec["dtype"])) or spec["dtype"]


def _shape(spec: dict) -> str:
    named = {int(axis): label for axis, label in spec["dynamic_axes"].items()}
    return escape("[" + ", ".join(named.get(i, str(d)) for i, d in enumerate(spec["shape"])) + "]")
