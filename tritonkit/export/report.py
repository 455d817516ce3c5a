"""The export report (``export-report.json``): what was exported, how, and how well it matches.

The model-config generator reads it together with the graph; ``tensor_specs`` derives
names, dtypes and shapes from the ONNX graph itself so the two can never disagree.
"""

from __future__ import annotations

import platform
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import onnx

import tritonkit
from tritonkit.fileio import sha256_of



def tensor_specs(values, example_shapes: dict[str, list[int]] | None = None) -> list[dict]:
    """Name, numpy dtype, shape (-1 for a symbolic dim) and dynamic axes of graph values."""
    specs = []
    for value in values:
        tensor_type = value.type.tensor_type
        shape, dynamic = [], {}
        for axis, dim in enumerate(tensor_type.shape.dim):
            if dim.HasField("dim_value"):
                shape.append(int(dim.dim_value))
            else:
                shape.append(-1)
                dynamic[str(axis)] = dim.dim_param
        spec = {"name": value.name,
                "dtype": np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)).name,
                "shape": shape, "dynamic_axes": dynamic}
        if example_shapes and value.name in example_shapes:
            spec["example_shape"] = example_shapes[value.name]
        specs.append(spec)
    return specs


def file_record(path: Path) -> dict:
    return {"sha256": sha256_of(path), "bytes": path.stat().st_size}


def versions() -> dict:
    import onnxruntime
    import torch

    found = {"tritonkit": tritonkit.__version__, "python": platform.python_version(),
             "torch": torch.__version__, "onnx": onnx.__version__,
             "onnxruntime": onnxruntime.__version__}
    try:
        import onnxscript

        found["onnxscript"] = onnxscript.__version__
    except ImportError:
        pass
    return found


def build_report(*, name: str, model: onnx.ModelProto, fmt: str, max_batch_size: int,
                 opset: int, exporter: str, attempts: list[dict], example_shapes: dict,
                 output_shapes: dict, verification: dict | None, source: dict,
                 gpu: str | None) -> dict:
    """Every field of the report but the file hashes and plans (added once the files exist)."""
    return {
        "name": name,
        "format": fmt,
        "max_batch_size": max_batch_size,
        "opset": opset,
        "inputs": tensor_specs(model.graph.input, example_shapes),
        "outputs": tensor_specs(model.graph.output, output_shapes),
        "plans": {},
        "gpu": gpu,
        "exporter": exporter,
        "exporter_attempts": attempts,
        "verification": verification or {"passed": None, "skipped": True},
        "source": source,
        "versions": versions(),
        "files": {},
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
