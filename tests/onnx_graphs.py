"""Small ONNX graphs built with onnx.helper: deterministic inputs for config tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _save(model: onnx.ModelProto, model_dir: Path) -> Path:
    # Stamped as an exporter stamps it, with its opset's IR version: onnx.helper's default is
    # the package's newest (13 with onnx 1.22), which no Triton image's ONNX Runtime loads.
    model.ir_version = helper.find_min_ir_version_for(list(model.opset_import))
    onnx.checker.check_model(model)
    path = model_dir / "1" / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def mlp(model_dir: Path, features: int = 16, hidden: int = 64, classes: int = 10) -> Path:
    """INPUT__0 FP32 [batch, features] -> Gemm/Relu/Gemm -> OUTPUT__0 FP32 [batch, classes]."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((features, hidden)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(np.zeros(hidden, np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((hidden, classes)).astype(np.float32), "w2")
    b2 = numpy_helper.from_array(np.zeros(classes, np.float32), "b2")
    nodes = [helper.make_node("Gemm", ["INPUT__0", "w1", "b1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["OUTPUT__0"])]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("INPUT__0", TensorProto.FLOAT, ["batch", features])],
        [helper.make_tensor_value_info("OUTPUT__0", TensorProto.FLOAT, ["batch", classes])],
        [w1, b1, w2, b2])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model_dir)


def token_encoder(model_dir: Path, vocab: int = 100, width: int = 8) -> Path:
    """input_ids INT64 [batch, seq] + attention_mask INT64 [batch, seq] -> hidden FP32 [batch, seq, width]."""
    rng = np.random.default_rng(1)
    table = numpy_helper.from_array(rng.standard_normal((vocab, width)).astype(np.float32), "emb")
    axes = numpy_helper.from_array(np.array([-1], np.int64), "axes")
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["e"]),
             helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["m", "axes"], ["m3"]),
             helper.make_node("Mul", ["e", "m3"], ["hidden"])]
    graph = helper.make_graph(
        nodes, "encoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "seq", width])],
        [table, axes])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model_dir)


def scorer(model_dir: Path, features: int = 8) -> Path:
    """One value per sample in and out: weight FP32 [batch] and x FP32 [batch, features] ->
    score FP32 [batch] (a regression head: x @ w * weight)."""
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array(rng.standard_normal((features,)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["s"]),
             helper.make_node("Mul", ["s", "weight"], ["score"])]
    graph = helper.make_graph(
        nodes, "scorer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features]),
         helper.make_tensor_value_info("weight", TensorProto.FLOAT, ["batch"])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch"])],
        [w])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model_dir)


def relu_chain(model_dir: Path, depth: int, width: int = 1024, *, residual: bool = False) -> Path:
    """INPUT__0 FP32 [batch, width] -> ``depth`` Relu nodes -> OUTPUT__0, each step's tensor
    read only by the next; with ``residual`` the input is added back at the end, so it stays
    alive through the chain (as a skip connection keeps it)."""
    names = ["INPUT__0"] + [f"r{i}" for i in range(depth)]
    nodes = [helper.make_node("Relu", [names[i]], [names[i + 1]]) for i in range(depth)]
    nodes.append(helper.make_node("Add" if residual else "Relu",
                                  ["INPUT__0", names[-1]] if residual else [names[-1]],
                                  ["OUTPUT__0"]))
    graph = helper.make_graph(
        nodes, "relu_chain",
        [helper.make_tensor_value_info("INPUT__0", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("OUTPUT__0", TensorProto.FLOAT, ["batch", width])])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model_dir)
