"""PyTorch → ONNX (and TensorRT on the target GPU), verified, into a Triton model repository.

``tritonkit.export(module, example_inputs, name=..., repository=...)`` is the Python API
(``tritonkit.export`` is that function; import the rest from here: ``from tritonkit.export
import ExportOptions``); ``tritonkit export`` is the same call from the command line.

    spec.py          a SPEC's factory → module, example inputs, dynamic axes
    forward.py       forward() called as the export calls it; its outputs by name
    onnx_export.py   the dynamo exporter, the TorchScript one as fallback; graph tidied
    verify.py        ONNX checker, then ONNX Runtime vs PyTorch on several batches
    tensorrt.py      a plan built on the target GPU, or its trtexec recipe
    report.py        export-report.json (the config generator reads it)
    reproduce.py     reproduce_export.py beside the model
    pipeline.py      all of it, staged beside the repository and moved in at the end
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from tritonkit.extras import EXPORT_MODULES, onnxruntime_telemetry_off, require

require("export", EXPORT_MODULES, needed_by="tritonkit export")   # before torch is imported
onnxruntime_telemetry_off()                     # before anything imports ONNX Runtime

import torch  # noqa: E402

from tritonkit.export.onnx_export import EXPORTERS  # noqa: E402
from tritonkit.export.pipeline import ExportOptions, ExportResult, export_model, export_spec  # noqa: E402

__all__ = ["ExportOptions", "ExportResult", "export", "export_model", "export_spec"]


def export(module: torch.nn.Module, example_inputs: Any, *, name: str, repository: str | Path,
           dynamic_axes: Mapping[str, Mapping[int, str]] | None = None,
           input_names: Sequence[str] | None = None, output_names: Sequence[str] | None = None,
           gpu: str | None = None, format: str = "onnx", max_batch_size: int = 32,
           opset: int = 18, atol: float | None = None, rtol: float | None = None,
           verify: bool = True, verify_batches: str = "budget", force: bool = False,
           exporters: Sequence[str] = EXPORTERS) -> ExportResult:
    """Export a torch.nn.Module to ``repository/name``, verified against PyTorch.

    ``example_inputs`` is a tensor or a tuple of tensors, passed to forward() by position,
    or a dict of tensors, passed by keyword (``{"input_ids": ..., "attention_mask": ...}``),
    the batch first in each; ``dynamic_axes`` names the other axes that vary
    (``{"input_ids": {1: "sequence"}}``). The graph's inputs are named by ``input_names``,
    else the dict's keys, else ``INPUT__<i>``; its outputs by ``output_names``, else by
    the keys or fields of what forward() returns (a dict, a dataclass, a named tuple, a
    Hugging Face ``ModelOutput``), else ``OUTPUT__<i>``. ONNX Runtime is checked against
    PyTorch within ``atol``/``rtol`` (defaults by dtype; ``verify=False`` skips it) at
    batch 1 and a small batch, then at a middle batch and ``max_batch_size`` while their
    runs fit 0.6× the exporter's CPU time (``verify_batches="all"``: always; the report's
    ``verification.batches`` and ``left_out`` say which). ``exporters`` are tried in order
    (the dynamo exporter, then the TorchScript one). Returns the model folder, its report and
    the files written; raises a TritonkitError on failure, and then the repository is
    unchanged.
    """
    options = ExportOptions(
        name=name, repository=Path(repository), gpu=gpu, format=format,
        max_batch_size=max_batch_size, opset=opset, atol=atol, rtol=rtol, verify=verify,
        verify_batches=verify_batches, force=force, input_names=_as_tuple(input_names) or None,
        output_names=_as_tuple(output_names) or None, exporters=_as_tuple(exporters))
    return export_model(module, example_inputs, options, dynamic_axes=dynamic_axes)


def _as_tuple(names: str | Sequence[str] | None) -> tuple[str, ...]:
    """A sequence of names as a tuple, and one string as one name: ``output_names="logits"``
    would otherwise be split into letters and name a two-output model's outputs l and o."""
    if not names:
        return ()
    return (names,) if isinstance(names, str) else tuple(names)


# tritonkit.export is this function (see tritonkit/__init__.py). It shares the package's
# namespace, so that what reaches the package through that name still does:
# tritonkit.export.ExportOptions, `import tritonkit.export.spec as spec`, and patching
# "tritonkit.export.pipeline.<name>" by its dotted path.
export.__dict__ = globals()
