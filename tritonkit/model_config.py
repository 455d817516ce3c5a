"""Triton model configs from an exported graph, tuned per GPU profile.

The config is Triton's own protobuf (``model_config_pb2.ModelConfig``), written with
``text_format`` — never a string template. Names, dtypes and dims come from the
ONNX graph (-1 for every symbolic axis); the batch limit from the export, bounded
by what fits the card; batching, instances, accelerators and warm-up from the
profile. ``configure`` writes ``config.pbtxt`` (the default profile) and
``configs/<gpu>.pbtxt`` for every known profile, so one model folder serves on
either card with ``--model-config-name=<gpu>``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf import text_format
from onnx import helper, shape_inference
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import np_to_triton_dtype

from tritonkit.errors import UsageError, shell_word
from tritonkit.fileio import (GIB, MIB, STATE_DIRNAME, atomic_write, check_regular, read_stamp,
                              read_user_file, read_user_text, refuse_overwrite, sha256_of,
                              stamp_digest)
from tritonkit.profiles import GpuProfile, available_profiles, load_profile
from tritonkit.repository import ONNX_FILENAME, REPORT_FILENAME

DEFAULT_GPU = "a10"
#: A model config or export report is a few KiB (a large ensemble's, some hundreds).
CONFIG_MAX_BYTES = 16 * MIB
# Dynamic non-batch axes are warmed up at these sizes when the export names none.
DEFAULT_BUCKETS = (16, 64, 128)
# Where ONNX Runtime's TensorRT accelerator keeps its engines inside the serving container;
# the compose and k8s files mount a volume here so a restart does not rebuild them.
ORT_TRT_CACHE_ROOT = "/tmp/tritonkit-trt-cache"
# ONNX Runtime's CUDA memory arena grows by the next power of two (arena_extend_strategy 0,
# its default), so what it reserves for a batch's activations can be up to twice their
# live peak: the batch bound counts them twice.
ARENA_GROWTH = 2
# The config's max_batch_size is an int32: protobuf cannot hold a larger one.
MAX_BATCH_SIZE = 2**31 - 1
# The first Triton whose ONNX Runtime backend takes the trt_profile_{min,opt,max}_shapes
# accelerator parameters: onnxruntime_backend#237 added them after 24.03 (2.44), which
# refuses them ("unknown parameter ... for TensorRT Execution Accelerator", server#7156);
# 24.05 (2.46) is the first release known to carry them.
TRT_PROFILE_KEYS_SINCE = (2, 46, 0)


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output: name, Triton dtype, dims (-1 = dynamic, batch included)."""

    name: str
    data_type: str            # "TYPE_FP32", ...
    dims: tuple[int, ...]


@dataclass(frozen=True)
class GraphSpec:
    """What the config generator needs from an exported model."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    weight_bytes: int
    activation_bytes_per_sample: int
    # Dynamic non-batch axes: input name -> {axis: label}; label -> lengths to warm up.
    axis_labels: dict[str, dict[int, str]] = field(default_factory=dict)
    lengths: dict[str, list[int]] = field(default_factory=dict)
    lengths_source: str = ""      # "verified", "example" or "default" (see warmup_lengths)
    digest: str = ""              # sha256 of the model file (keys ONNX Runtime's engine cache)
    opset: int = 0                # the ai.onnx opset, and the IR version, the file is stamped with
    ir_version: int = 0
    # The weights with every floating-point one in 16 bits, as an FP16/BF16 engine holds them:
    # an FP32 weight halves, an FP16 one stays as it is.
    half_weight_bytes: int = 0
    verified_batch: int = 0       # the export's batch limit (verified up to it); 0: no report


def triton_data_type(elem_type: int) -> str:
    """ONNX tensor element type → Triton config data type ("TYPE_FP32")."""
    if elem_type == onnx.TensorProto.BFLOAT16:  # NumPy has no bfloat16 for tritonclient to map
        return "TYPE_BF16"
    np_dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    triton = np_to_triton_dtype(np_dtype)
    return "TYPE_STRING" if triton == "BYTES" else f"TYPE_{triton}"


def _tensor_spec(value: onnx.ValueInfoProto, kind: str, onnx_path: Path) -> TensorSpec:
    """A graph input or output as Triton serves it; a UsageError for one Triton cannot (a
    sequence or map, a float8 or complex tensor): Triton has no data type for it."""
    what = value.type.WhichOneof("value")
    elem_type = value.type.tensor_type.elem_type if what == "tensor_type" else 0
    try:
        data_type = triton_data_type(elem_type) if elem_type else None
    except (KeyError, ValueError):
        data_type = None
    if data_type is None or data_type not in mc.DataType.keys():
        spelled = onnx.TensorProto.DataType.Name(elem_type) if elem_type else {
            "sequence_type": "a sequence", "map_type": "a map", "optional_type": "an optional",
            "sparse_tensor_type": "a sparse tensor"}.get(what or "", "untyped")
        raise UsageError(f"{kind} '{value.name}' of {onnx_path} is {spelled}, which Triton has "
                         "no data type for (it serves tensors of bool, integers, FP16/BF16/"
                         "FP32/FP64 and bytes)",
                         hint="return or take a tensor of one of those (cast it in the "
                              "model's forward) and export again")
    return TensorSpec(value.name, data_type, _dims(value))


def _dims(value_info: onnx.ValueInfoProto) -> tuple[int, ...]:
    shape = value_info.type.tensor_type.shape
    return tuple(d.dim_value if d.HasField("dim_value") else -1 for d in shape.dim)


def read_graph(onnx_path: Path, report: dict | None = None,
               loaded: onnx.ModelProto | None = None) -> GraphSpec:
    """Inputs, outputs, weight size and per-sample activation size of an ONNX model
    (``loaded``: the file's model, where the caller holds it already)."""
    model = loaded if loaded is not None else _load_graph(onnx_path)
    graph = model.graph
    initializers = {init.name for init in graph.initializer}
    inputs = tuple(_tensor_spec(i, "input", onnx_path) for i in graph.input
                   if i.name not in initializers)
    outputs = tuple(_tensor_spec(o, "output", onnx_path) for o in graph.output)
    weight_bytes = sum(_tensor_bytes(init) for init in graph.initializer)
    half_weight_bytes = sum(_tensor_bytes(init, at_most=2 if _is_float(init.data_type) else None)
                            for init in graph.initializer)
    labels = _axis_labels(graph, initializers)
    lengths, source = warmup_lengths(report or {}, labels)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    return GraphSpec(inputs, outputs, weight_bytes,
                     _activation_bytes_per_sample(model, labels, lengths), labels, lengths, source,
                     _digest(onnx_path, report or {}), opset, model.ir_version, half_weight_bytes,
                     int((report or {}).get("max_batch_size") or 0))


def _load_graph(onnx_path: Path) -> onnx.ModelProto:
    """The ONNX model at ``onnx_path``, its external data (past 2 GiB) left unread."""
    if not os.path.lexists(onnx_path):
        raise UsageError(f"no ONNX model at {onnx_path}",
                         hint="export one first: tritonkit export SPEC --name NAME")
    # A protobuf holds at most 2 GiB: larger weights live in external data files.
    check_regular(onnx_path, what="ONNX model", limit=2 * GIB,
                  hint="re-export it with tritonkit export --force")
    try:
        return onnx.load(str(onnx_path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError and friends
        raise UsageError(f"{onnx_path} is not a readable ONNX model ({exc})",
                         hint="re-export it with tritonkit export --force") from None


def _digest(onnx_path: Path, report: dict) -> str:
    """One sha256 for the model's files (the graph, and past 2 GiB its weights beside it):
    the export report's hash of each file it recorded, else read."""
    files = report.get("files") or {}
    combined = hashlib.sha256()
    for path in sorted(onnx_path.parent.glob(onnx_path.name + "*")):
        recorded = files.get(f"{path.parent.name}/{path.name}") or {}
        if recorded.get("sha256") and recorded.get("bytes") == path.stat().st_size:
            combined.update(recorded["sha256"].encode())
            continue
        combined.update(sha256_of(path).encode())
    return combined.hexdigest()


def _tensor_bytes(init: onnx.TensorProto, at_most: int | None = None) -> int:
    count = int(np.prod(init.dims)) if init.dims else 1
    itemsize = helper.tensor_dtype_to_np_dtype(init.data_type).itemsize
    return count * min(itemsize, at_most or itemsize)


def _is_float(elem_type: int) -> bool:
    return elem_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE,
                         onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


def _axis_labels(graph: onnx.GraphProto, initializers: set[str]) -> dict[str, dict[int, str]]:
    """The dynamic non-batch axes of each input, by the graph's dim names (shared names vary
    together: input_ids and attention_mask along ``sequence``)."""
    labels: dict[str, dict[int, str]] = {}
    for value in graph.input:
        if value.name in initializers:
            continue
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if axis > 0 and not dim.HasField("dim_value"):
                labels.setdefault(value.name, {})[axis] = dim.dim_param or f"{value.name}_dim{axis}"
    return labels


def warmup_lengths(report: dict, labels: dict[str, dict[int, str]]) -> tuple[dict[str, list[int]], str]:
    """The lengths to warm each dynamic axis label at, and where they come from.

    A warm-up request that fails makes Triton refuse to load the model, so the lengths are
    those the export verified against PyTorch (a position table may end at 64); without a
    verification, the example's; without an export report, DEFAULT_BUCKETS, unverified.
    A TensorRT plan's optimization profile bounds them too.
    """
    wanted = {label for axes in labels.values() for label in axes.values()}
    if not wanted:
        return {}, ""
    found: dict[str, set[int]] = {}
    for case in (report.get("verification") or {}).get("cases") or []:
        for label, size in (case.get("lengths") or {}).items():
            found.setdefault(label, set()).add(int(size))
    source = "verified"
    if not wanted <= set(found):
        found, source = {}, "example"
        for spec in report.get("inputs", []):
            example = spec.get("example_shape") or []
            for axis, label in labels.get(spec.get("name"), {}).items():
                if axis < len(example):
                    found.setdefault(label, set()).add(int(example[axis]))
    if not wanted <= set(found):
        found, source = {label: set(DEFAULT_BUCKETS) for label in wanted}, "default"
    limit = _plan_limits(report, labels)
    return {label: sorted(n for n in found[label] if n <= limit.get(label, n))
            or [limit[label]] for label in sorted(wanted)}, source


def _plan_limits(report: dict, labels: dict[str, dict[int, str]]) -> dict[str, int]:
    """The longest length per label a TensorRT plan's optimization profile accepts."""
    build = report.get("tensorrt_build") or report.get("tensorrt_recipe") or {}
    if not isinstance(build, dict):             # a recipe given as its command line alone
        return {}
    limits: dict[str, int] = {}
    for name, shapes in (build.get("shapes") or {}).items():
        for axis, label in labels.get(name, {}).items():
            if axis < len(shapes.get("max", [])):
                limits[label] = min(limits.get(label, shapes["max"][axis]), shapes["max"][axis])
    return limits


def _activation_bytes_per_sample(model: onnx.ModelProto, labels: dict[str, dict[int, str]],
                                 lengths: dict[str, list[int]]) -> int:
    """The most activation memory (the weights are not) one sample holds at once, at a long
    length: the peak of the tensors alive together as the graph runs in its order.

    A tensor lives from the node that makes it (a request's input from the start) to the
    last node that reads it, a graph output to the end. ONNX Runtime and TensorRT free or
    reuse a buffer once nothing reads it, so a deep model needs about one layer's
    tensors, not the sum of every layer's: that sum cut a 12-layer encoder's batch limit
    about tenfold. What a runtime adds (workspace, fragmentation) is the profile's
    memory_headroom. Sizes come from ONNX shape inference with the batch axis at 1 and
    other dynamic axes at the longest warm-up length or DEFAULT_BUCKETS' longest,
    whichever is longer (production inputs may be longer than any example).
    """
    fixed = _without_weights(model)
    for inp in fixed.graph.input:
        for axis, dim in enumerate(inp.type.tensor_type.shape.dim):
            if not dim.HasField("dim_value"):
                label = labels.get(inp.name, {}).get(axis)
                dim.dim_value = 1 if axis == 0 else max(DEFAULT_BUCKETS[-1],
                                                        *lengths.get(label, []))
    try:
        inferred = shape_inference.infer_shapes(fixed)
    except Exception:  # shape inference is best effort; fall back to the I/O alone
        inferred = fixed
    # The dynamo exporter lists the weights in value_info too: they are no sample's.
    weights = {init.name for init in model.graph.initializer}
    graph = inferred.graph
    sizes = {vi.name: _value_bytes(vi) for vi in
             list(graph.input) + list(graph.value_info) + list(graph.output)
             if vi.name not in weights}
    outputs = {o.name for o in graph.output}
    last_read: dict[str, int] = {}
    for step, node in enumerate(graph.node):
        for name in _names_read(node):
            last_read[name] = step
    alive = {i.name for i in graph.input if i.name in sizes}
    peak = held = sum(sizes[name] for name in alive)
    for step, node in enumerate(graph.node):
        for name in node.output:
            if name in sizes and name not in alive:
                alive.add(name)
                held += sizes[name]
        peak = max(peak, held)
        for name in list(alive):
            if name not in outputs and last_read.get(name, -1) <= step:
                alive.discard(name)
                held -= sizes[name]
    return max(peak, 1)


# An initializer this small may be a shape or an index that shape inference reads.
_VALUE_READ_BYTES = 4096


def _without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of the graph for shape inference, its weights as inputs of their type and
    shape: inference needs their shapes, not their values, and copying (then serialising)
    a 440 MB BERT twice cost export seconds. Small initializers keep their values."""
    graph = model.graph
    fixed = onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import,
                            functions=model.functions)
    fixed.graph.node.extend(graph.node)
    fixed.graph.input.extend(graph.input)
    fixed.graph.output.extend(graph.output)
    fixed.graph.value_info.extend(graph.value_info)
    fixed.graph.sparse_initializer.extend(graph.sparse_initializer)
    inputs = {value.name for value in graph.input}
    for init in graph.initializer:
        if _tensor_bytes(init) <= _VALUE_READ_BYTES:
            fixed.graph.initializer.append(init)
        elif init.name not in inputs:
            fixed.graph.input.append(helper.make_tensor_value_info(init.name, init.data_type,
                                                                   list(init.dims)))
    return fixed


def _value_bytes(vi: onnx.ValueInfoProto) -> int:
    """A tensor's size in bytes (an unknown axis counted as 1, an untyped value as 0)."""
    elem = vi.type.tensor_type.elem_type
    if elem == 0:
        return 0
    dims = [d.dim_value if d.HasField("dim_value") else 1
            for d in vi.type.tensor_type.shape.dim]
    itemsize = 8 if elem == onnx.TensorProto.STRING else \
        helper.tensor_dtype_to_np_dtype(elem).itemsize
    return int(np.prod(dims)) * itemsize if dims else itemsize


def _names_read(node: onnx.NodeProto) -> set[str]:
    """The values a node reads: its inputs, and those its subgraphs (If, Loop, Scan) take
    from the enclosing graph, which stay alive until the node has run."""
    names = {name for name in node.input if name}
    for attr in node.attribute:
        for sub in list(attr.g.node if attr.HasField("g") else []) + \
                [n for g in attr.graphs for n in g.node]:
            names |= _names_read(sub)
    return names


def memory_bound_batch(graph: GraphSpec, profile: GpuProfile, instances: int, *,
                       growth: int = ARENA_GROWTH) -> int:
    """The largest batch whose weights and activations fit the card with headroom, each
    instance holding its own weights and its batch's activations (``growth`` times their
    live peak: ONNX Runtime's arena, ARENA_GROWTH; a TensorRT plan's context holds its
    activations exactly, 1)."""
    usable = profile.memory.bytes * (1.0 - profile.serving.memory_headroom)
    free_for_activations = usable - instances * _served_weight_bytes(graph, profile)
    if free_for_activations <= 0:
        return 0
    return int(free_for_activations // (instances * growth * graph.activation_bytes_per_sample))


def _served_weight_bytes(graph: GraphSpec, profile: GpuProfile) -> int:
    """The weights as the card holds them: halved in an FP16 or BF16 engine."""
    half = profile.serving.precision in ("fp16", "bf16")
    return graph.half_weight_bytes if half else graph.weight_bytes


def _memory_sum(graph: GraphSpec, profile: GpuProfile, instances: int, growth: int,
                batch: int) -> str:
    """The sum memory_bound_batch bounds, in words and MiB, for ``batch`` samples."""
    per = "" if instances == 1 else f" x {instances} instances"
    arena = "" if growth == 1 else f", x {growth} for ONNX Runtime's memory arena"
    return (f"(weights {_served_weight_bytes(graph, profile) / 2**20:.3g} MiB + {batch} x "
            f"{graph.activation_bytes_per_sample / 2**20:.3g} MiB of activations a "
            f"sample{arena}){per} must fit {(1 - profile.serving.memory_headroom) * 100:.0f}% "
            f"of {profile.memory.gib:g} GiB")


def warmup_batch_sizes(max_batch_size: int) -> list[int]:
    """The batch sizes to warm beside 1: powers of two up to the limit (the limit itself
    included), at most four of them. The dynamic batcher forms any size up to the limit;
    these spread the warm-up over that range at a bounded cost."""
    if max_batch_size < 2:
        return []
    sizes = [2**k for k in range(1, max_batch_size.bit_length()) if 2**k < max_batch_size]
    sizes.append(max_batch_size)
    return sizes[-4:]


@dataclass(frozen=True)
class Tuning:
    """The choices behind a generated config, and why (written as the file's comment block)."""

    profile: str
    notes: tuple[str, ...]
    command: str = ""             # the tritonkit command that chose them, when not `config`


def _refuse_unloadable(name: str, graph: GraphSpec, profile: GpuProfile) -> None:
    """A UsageError if the ONNX Runtime in the profile's Triton cannot load the model:
    Triton would fail its load on the card, long after this config was written."""
    why = profile.onnx_refusal(graph.opset, graph.ir_version)
    if why is None:
        return
    newest = profile.stack.onnx_max_opset
    raise UsageError(
        f"model '{name}' is ONNX opset {graph.opset}, IR version {graph.ir_version}: {why}",
        hint=(f"re-export it with --opset {newest} or lower (the exporter stamps the IR "
              "version from the opset)" if newest else "re-export it with a lower --opset"))


def build_config(name: str, graph: GraphSpec, profile: GpuProfile, *,
                 max_batch_size: int, plans: dict | None = None) -> tuple[mc.ModelConfig, Tuning]:
    """The production ModelConfig for ``profile`` and the reasons for its choices."""
    notes: list[str] = [f"profile {profile.name}: {profile.display_name}, " + (
        f"compute capability {profile.cc_key}, {profile.memory.gib:g} GiB" if profile.has_gpu
        else f"{profile.memory.gib:g} GiB of host memory for the models")]
    config = mc.ModelConfig(name=name)
    plans = plans or {}
    use_plan = bool(plans) and profile.stack.tensorrt_plans and profile.cc_key in plans
    if use_plan:
        config.platform = "tensorrt_plan"
        for cc, filename in sorted(plans.items()):
            config.cc_model_filenames[cc] = filename
        notes.append(f"TensorRT plan for cc {profile.cc_key} ({plans[profile.cc_key]})")
    else:
        config.platform = "onnxruntime_onnx"
        config.default_model_filename = ONNX_FILENAME
        _refuse_unloadable(name, graph, profile)
        if plans and not profile.stack.tensorrt_plans:
            notes.append("TensorRT plans exist but this card cannot run TensorRT >= 10: "
                         "served by ONNX Runtime" if profile.has_gpu else
                         "TensorRT plans exist but need a GPU: served by ONNX Runtime on the CPU")

    instances = profile.serving.instance_count
    if graph.weight_bytes > 0.25 * profile.memory.bytes and instances > 1:
        instances = 1
        notes.append("one instance: the weights take over a quarter of the card")
    batching = graph.inputs and all(len(t.dims) > 0 and t.dims[0] == -1
                                    for t in graph.inputs + graph.outputs)
    if batching and max_batch_size > 0:
        growth = 1 if config.platform == "tensorrt_plan" else ARENA_GROWTH
        bound = memory_bound_batch(graph, profile, instances, growth=growth)
        if bound < 1:
            raise UsageError(
                f"model '{name}' does not fit on the {profile.display_name}: "
                + _memory_sum(graph, profile, instances, growth, 1).replace(" must fit ",
                                                                            " exceeds "),
                hint="use a card with more memory, or fewer instances")
        if bound < max_batch_size:
            notes.append(f"max_batch_size {max_batch_size} lowered to {bound}: "
                         + _memory_sum(graph, profile, instances, growth, bound))
            max_batch_size = bound
        config.max_batch_size = max_batch_size
    else:
        config.max_batch_size = 0
        notes.append("max_batch_size 0: " + ("no batching asked for (each request carries the "
                                             "graph's whole shape)" if batching else
                                             "no batch axis shared by every input and output"))

    strip = 1 if config.max_batch_size > 0 else 0
    for specs, tensors in ((graph.inputs, config.input), (graph.outputs, config.output)):
        for spec in specs:
            target = tensors.add(name=spec.name, data_type=mc.DataType.Value(spec.data_type))
            target.dims.extend(spec.dims[strip:])
            if not target.dims and strip:
                # One value per sample ([batch]): Triton wants dims, so [1], and a reshape
                # to no dims at all so the model still sees (and returns) [batch].
                target.dims.append(1)
                target.reshape.SetInParent()
                notes.append(f"{spec.name}: one value per sample, dims [1] reshaped to [] "
                             "(the graph's shape is [batch])")
            elif not target.dims:
                # A scalar in a model without batching: Triton refuses an empty reshape there
                # ("scalar tensors are not supported"); the ONNX Runtime backend takes dims
                # [1] for a scalar of the graph and feeds (and returns) it as one.
                target.dims.append(1)
                notes.append(f"{spec.name}: a scalar, dims [1] (no batching: Triton refuses "
                             "a reshape to [])")

    if config.max_batch_size > 1:
        # Triton's recommended start: batches as large as the queue holds, no preferred
        # sizes (its docs: most models should not set them) and no delay unless measured to
        # pay. Measured on the local server: preferred sizes with a 100 us delay halved
        # the throughput of a lone client and gained nothing under load.
        config.dynamic_batching.SetInParent()
        config.dynamic_batching.max_queue_delay_microseconds = profile.serving.max_queue_delay_us
        notes.append(f"dynamic batching: as large as the queue holds up to {config.max_batch_size}, "
                     f"queue delay {profile.serving.max_queue_delay_us} us (raise it only if Triton's "
                     "statistics show small batches under load and `tritonkit loadtest` shows p99 headroom)")

    group = config.instance_group.add()
    group.kind = mc.ModelInstanceGroup.KIND_GPU if profile.has_gpu else \
        mc.ModelInstanceGroup.KIND_CPU
    group.count = instances
    if profile.has_gpu:
        notes.append(f"{instances} GPU instance(s)" + (" (no MIG on this card: share it with "
                                                         "instances)" if not profile.mig else ""))
    else:
        notes.append(f"{instances} CPU instance(s): ONNX Runtime spreads a run over the "
                     "cores itself")

    _add_acceleration(config, profile, use_plan, notes, graph)
    _add_warmup(config, graph, notes)
    return config, Tuning(profile=profile.name, notes=tuple(notes))


def _add_acceleration(config: mc.ModelConfig, profile: GpuProfile, use_plan: bool,
                      notes: list[str], graph: GraphSpec) -> None:
    precision = profile.serving.precision.upper()
    if use_plan:
        if profile.serving.cuda_graphs:
            # Without graph_spec the TensorRT backend captures its default graphs: batch 1
            # and max_batch_size when dynamic batching sets no preferred sizes (1 alone at
            # max_batch_size 1), every other dynamic axis at the plan's opt size; a request
            # of any other shape runs the plan without a graph, nothing is refused
            # (triton-inference-server/tensorrt_backend src/instance_state.cc,
            # InitializeGraphSpecs and TRTv3Interface::SetCudaGraphShape). Graph specs for
            # every warm-up shape would cost a capture and its memory per shape and instance.
            config.optimization.cuda.graphs = True
            batches = sorted({1, config.max_batch_size}) if config.max_batch_size else [0]
            notes.append(f"CUDA graphs on: the TensorRT backend captures batch "
                         f"{' and '.join(map(str, batches))}, other dynamic axes at the plan's "
                         "opt sizes; other shapes run without a graph")
        return
    if profile.serving.accelerator == "tensorrt":
        accel = config.optimization.execution_accelerators.gpu_execution_accelerator.add()
        accel.name = "tensorrt"
        accel.parameters["precision_mode"] = precision
        accel.parameters["max_workspace_size_bytes"] = str(1 << 30)
        accel.parameters["trt_engine_cache_enable"] = "1"
        accel.parameters["trt_engine_cache_path"] = engine_cache_path(config.name, graph.digest,
                                                                      profile.stack.triton_image)
        # One folder for every instance: Triton's config has no per-instance accelerator
        # parameters. The ONNX Runtime backend loads instances in parallel (Triton 23.08 on),
        # and ONNX Runtime builds an engine for a dynamic shape at run time under a lock of
        # its session alone, writing the cache file in place (std::ofstream): two instances
        # warming up build the same engines and can write one file at once. A torn file fails
        # the next load ("could not deserialize engine from cache"; microsoft/onnxruntime
        # #10412 asked whether a shared cache is safe and got no answer).
        shared = (f"; its {config.instance_group[0].count} instances share the folder, which "
                  "ONNX Runtime locks per instance only: if a load fails to deserialize an "
                  "engine from it, empty it") if config.instance_group[0].count > 1 else ""
        notes.append(f"ONNX Runtime TensorRT accelerator, {precision}, engine cache on, kept "
                     "across restarts and keyed by the model file and image (the first load "
                     f"builds engines{shared})")
        _add_trt_profile(accel, config, graph, profile, notes)
    elif profile.serving.accelerator == "cpu":
        notes.append(f"ONNX Runtime CPU provider, {precision} (no GPU: no TensorRT, no pinned "
                     "memory)")
    else:
        why = "" if profile.stack.tensorrt_plans else \
            f"; TensorRT >= 10 cannot target compute capability {profile.cc_key}"
        notes.append(f"ONNX Runtime CUDA provider, {precision}{why}"
                     + ("" if profile.compute.tensor_cores else " (no Tensor Cores)"))


def engine_cache_path(name: str, digest: str, image: str) -> str:
    """Where ONNX Runtime keeps this model's TensorRT engines in the container.

    The cache outlives containers (a volume), and ONNX Runtime names engines from the
    graph's structure, not its weights, and reuses them across its own and TensorRT's
    versions only at its peril: a re-export or another image gets a folder of its own.
    One level under the root, which the volume provides: ONNX Runtime creates the last
    folder of the path only, not its parents.
    """
    key = hashlib.sha256(f"{digest}\n{image}".encode()).hexdigest()[:12]
    return f"{ORT_TRT_CACHE_ROOT}/{name}-{key}"


def _lead_sizes(config: mc.ModelConfig, graph: GraphSpec) -> list[int]:
    """The sizes warm-up and the TensorRT shape range take along the inputs' first axis:
    with batching, the batch sizes from 1 to max_batch_size (``warmup_batch_sizes``);
    without, where that axis is dynamic, 1 and the largest batch the export verified (1
    without an export report), else 1. Ascending: the first is the least, the last the most."""
    if config.max_batch_size > 0:
        return sorted({1, *warmup_batch_sizes(config.max_batch_size)})
    if _dynamic_first_axis(graph):
        return sorted({1, max(graph.verified_batch, 1)})
    return [1]


def _dynamic_first_axis(graph: GraphSpec) -> bool:
    return any(spec.dims[:1] == (-1,) for spec in graph.inputs)


def trt_profile_shapes(config: mc.ModelConfig, graph: GraphSpec) -> dict[str, tuple[tuple[int, ...], ...]]:
    """(min, opt, max) full shape of each input with a dynamic axis, as ONNX Runtime's
    TensorRT accelerator takes them (trt_profile_*_shapes): the first axis over
    ``_lead_sizes``, every other dynamic axis from the shortest to the longest warm-up
    length of its label, the bounds warm-up itself sends (so both ends are shapes the
    export verified, and the engine build cannot fail on a shape the model cannot take).

    Opt is the max: TensorRT picks its kernels for the opt shape and they run any shape of
    the range; the largest batches, which the dynamic batcher forms when the server is
    busy, and the longest inputs are the slowest requests and set the p99 (the TensorRT
    plans' recipe puts its batch opt at the maximum too).
    """
    leads = _lead_sizes(config, graph)
    shapes = {}
    for spec in graph.inputs:
        if -1 not in spec.dims:
            continue
        bounds = [(d, d) if d != -1 else (leads[0], leads[-1]) if axis == 0 else
                  _length_bounds(graph, spec.name, axis) for axis, d in enumerate(spec.dims)]
        low, high = (tuple(b[0] for b in bounds), tuple(b[1] for b in bounds))
        shapes[spec.name] = (low, high, high)
    return shapes


def _length_bounds(graph: GraphSpec, name: str, axis: int) -> tuple[int, int]:
    lengths = graph.lengths[graph.axis_labels[name][axis]]
    return min(lengths), max(lengths)


def _profile_spec(shapes: dict[str, tuple[tuple[int, ...], ...]], which: int) -> str:
    """``name:1x16,name2:1x6``: ONNX Runtime's format (ParseProfileShapes)."""
    return ",".join(f"{name}:{'x'.join(map(str, r[which]))}" for name, r in shapes.items())


def _unrangeable(config: mc.ModelConfig, graph: GraphSpec,
                shapes: dict[str, tuple[tuple[int, ...], ...]]) -> str | None:
    """Why the served shapes cannot be given ONNX Runtime as a range, or None.

    A range is a promise: ONNX Runtime refuses a request outside it ("failed to call
    nvinfer1::IExecutionContext::setInputShape()") where without one it builds its engine
    again. Only the batch axis has a bound Triton enforces (max_batch_size); a sequence
    axis has none (the export verified lengths around its example's, and clients send
    what they send), nor has the first axis of a model without batching. And ONNX
    Runtime's format splits at every ',' and a name from its shape at the first ':',
    quoting nothing (MakeInputNameShapePair): a name holding either names another input.
    """
    if graph.lengths:
        labels = ", ".join(graph.lengths)
        return (f"the {labels} axis has no bound Triton enforces, and ONNX Runtime would refuse "
                "a request outside a range instead of building for it")
    if config.max_batch_size == 0:
        return ("without batching the first axis has no bound Triton enforces, and ONNX "
                "Runtime would refuse a request outside a range instead of building for it")
    odd = [name for name in shapes if "," in name or ":" in name]
    if odd:
        return (f"input {odd[0]!r} holds ',' or ':', which ONNX Runtime's trt_profile_*_shapes "
                "cannot hold (rename it with tritonkit export --input-names to get the range)")
    return None


def _version(text: str) -> tuple[int, ...]:
    numbers = []
    for part in text.split("."):
        if not part.isdigit():
            break
        numbers.append(int(part))
    return tuple(numbers)


def trt_range_left_out(profile: GpuProfile) -> str | None:
    """Why ``profile`` writes no TensorRT shape range, or None: it does (where an input has
    a dynamic axis)."""
    if profile.serving.accelerator != "tensorrt":
        return "no TensorRT accelerator"
    if not profile.serving.trt_profile_shapes:
        return "the profile's trt_profile_shapes is false"
    if _version(profile.stack.triton_server) < TRT_PROFILE_KEYS_SINCE:
        return (f"Triton {profile.stack.triton_server}'s ONNX Runtime backend may not take "
                "trt_profile_* (24.03 refuses them)")
    return None


def _add_trt_profile(accel: mc.ModelOptimizationPolicy.ExecutionAccelerators.Accelerator,
                     config: mc.ModelConfig, graph: GraphSpec, profile: GpuProfile,
                     notes: list[str]) -> None:
    """The served shape range as ONNX Runtime's TensorRT accelerator parameters.

    Without it ONNX Runtime builds an engine for the shapes it has seen and builds it
    again (seconds, the instance blocked) for any request outside them: a larger batch the
    dynamic batcher forms, a longer input. With it, every dynamic input named, ONNX
    Runtime builds one engine for the whole range when the model loads (or takes it from
    the engine cache when the cached range is the same) and answers a request outside the
    range with an error ("failed to call nvinfer1::IExecutionContext::setInputShape()"),
    never with a build: so a range is written only where Triton bounds every dynamic axis,
    the batch (``_unrangeable``). Each dynamic input must be named, or ONNX Runtime refuses
    the load ("has no associated shape profiles provided"); a TensorRT subgraph whose
    inputs are tensors of the graph's own cannot be, hence ``serving.trt_profile_shapes``.
    """
    shapes = trt_profile_shapes(config, graph)
    if not shapes:
        return                  # every shape fixed: ONNX Runtime builds its engine at load
    why_not = trt_range_left_out(profile) or _unrangeable(config, graph, shapes)
    if why_not is not None:
        notes.append(f"no TensorRT shape range ({why_not}): ONNX Runtime builds engines for "
                     "the shapes it sees, and again mid-traffic for any shape outside them")
        return
    for which, key in enumerate(("min", "opt", "max")):
        accel.parameters[f"trt_profile_{key}_shapes"] = _profile_spec(shapes, which)
    notes.append(_trt_profile_note(config))


def _trt_profile_note(config: mc.ModelConfig) -> str:
    return (f"TensorRT shape range (trt_profile_*_shapes): batch 1 to {config.max_batch_size}, "
            "opt at the max (a busy server's largest batches set the p99); ONNX Runtime builds "
            "the engine for it at load, not again mid-traffic for the first larger batch")


def _add_warmup(config: mc.ModelConfig, graph: GraphSpec, notes: list[str]) -> None:
    """One warm-up entry per first-axis size (``_lead_sizes``) and length step: unwarmed
    shapes are slow.

    Step i sets every dynamic label to its i-th warm-up length (its longest once it has
    no more), so inputs sharing a label always agree. The smallest shape runs first and
    the largest second: they are the ends of the TensorRT shape range
    (``trt_profile_shapes``), run before traffic; and ONNX Runtime's TensorRT accelerator,
    given no shape range, builds an engine for the range of shapes it has seen and builds
    it again whenever a shape falls outside — in ascending order every entry would be a
    build, this way two are.
    """
    leads = _lead_sizes(config, graph)
    steps = max((len(v) for v in graph.lengths.values()), default=0)
    strip = 1 if config.max_batch_size > 0 else 0
    shapes = [(lead, step) for lead in leads
              for step in (range(steps) if steps else [None])]
    shapes = [shapes[0], *shapes[-1:], *shapes[1:-1]] if len(shapes) > 1 else shapes
    for lead, step in shapes:
        chosen = {} if step is None else \
            {label: v[min(step, len(v) - 1)] for label, v in graph.lengths.items()}
        # Without batching a request is one whole tensor: named by its first axis, since
        # "batch_0" read as a batch of none (its batch_size is 1, as Triton asks there)
        name = f"batch_{lead}" if strip else "unbatched" + (
            f"_first_axis_{lead}" if _dynamic_first_axis(graph) else "")
        warm = config.model_warmup.add(name=f"{name}{_length_suffix(chosen)}",
                                       batch_size=lead if strip else 1, count=1)
        for spec in graph.inputs:
            dims = []
            for axis, d in enumerate(spec.dims[strip:], start=strip):
                if d != -1:
                    dims.append(d)
                elif axis == 0:
                    dims.append(lead)
                else:
                    dims.append(chosen[graph.axis_labels[spec.name][axis]])
            entry = warm.inputs[spec.name]
            entry.data_type = mc.DataType.Value(spec.data_type)
            entry.dims.extend(dims or [1])          # the config's dims (a reshape to [] is [1])
            # Integer inputs are often indices (token ids): zeros are always in range.
            if spec.data_type.startswith(("TYPE_FP", "TYPE_BF")):
                entry.random_data = True
            else:
                entry.zero_data = True
    spelled = "; ".join(f"{label} {v}" for label, v in graph.lengths.items())
    batch_sizes = leads if strip else [0]
    first = f" (first axis {leads[0]} and {leads[-1]})" if not strip and len(leads) > 1 else ""
    notes.append(f"model_warmup: batch sizes {batch_sizes}{first}"
                 + (f" x {spelled} ({_LENGTHS_SOURCE[graph.lengths_source]})" if spelled else ""))


# Where a GraphSpec's warm-up lengths come from (``warmup_lengths``), as the notes say it.
_LENGTHS_SOURCE = {"verified": "the lengths the export verified",
                   "example": "the example's length (the export was not verified)",
                   "default": "default lengths, unverified (no export report): check they are valid"}


def _length_suffix(chosen: dict[str, int]) -> str:
    if len(chosen) == 1:
        return f"_len_{next(iter(chosen.values()))}"
    return "".join(f"_{label}_{size}" for label, size in chosen.items())


def config_to_text(config: mc.ModelConfig, tuning: Tuning | None = None) -> str:
    """Serialize with text_format; a comment block carries the reasons."""
    body = text_format.MessageToString(config)
    if config.max_batch_size == 0:
        # proto3 drops zero scalars; Triton's auto-complete would then guess a batch
        # dimension. Say it explicitly (Model Navigator does the same).
        body = "max_batch_size: 0\n" + body
    header = ""
    if tuning:
        by = f"tritonkit {tuning.command}" if tuning.command else "tritonkit"
        header = f"# Generated by {by} for profile '{tuning.profile}'. Choices:\n"
        header += "".join(f"#  - {note}\n" for note in tuning.notes)
        header += f"# {_DIGEST_LABEL} {stamp_digest(body)}\n"
    return header + body


_DIGEST_LABEL = "sha256 of the config below, to tell an edit by hand:"
_EDITED = {"foreign": "not written by tritonkit",
           "undigested": "written by a tritonkit that recorded no digest, so an edit by hand "
                         "cannot be told",
           "edited": "edited since tritonkit wrote it"}


# The header's first line as config_to_text writes it: the profile it names.
_PROFILE_LINE = re.compile(r"^# Generated by tritonkit(?: \w+)? for profile '([^']+)'", re.M)


def _stamped_text(path: Path) -> str | None:
    """The text of the config at ``path``, read as ``read_config`` bounds it (a regular file
    of at most ``CONFIG_MAX_BYTES``), for its stamp; None where it cannot be read."""
    try:
        return read_user_file(path, what="model config", limit=CONFIG_MAX_BYTES,
                              hint="").decode("utf-8", "replace")
    except UsageError:
        return None


def edited_by_hand(path: Path) -> str | None:
    """Why the config at ``path`` may not be as tritonkit wrote it (edited since, never
    tritonkit's, or from a tritonkit that recorded no digest), or None: as written."""
    text = _stamped_text(path)
    if text is None:
        return None
    why, _, _ = read_stamp(text, _DIGEST_LABEL)
    return None if why is None else _EDITED[why]


def stamped_profile(path: Path) -> str | None:
    """The profile the header of the config at ``path`` names (None: it names none, or the
    file cannot be read)."""
    text = _stamped_text(path)
    match = _PROFILE_LINE.search(text) if text is not None else None
    return match[1] if match else None


def read_config(path: Path) -> mc.ModelConfig:
    """Parse a config.pbtxt with Triton's schema. An error names the file, the line and
    what is wrong there (a field Triton does not know by its name), never the file's text
    or a value in it (a config.pbtxt may be a link to any file)."""
    if not os.path.lexists(path):
        raise UsageError(f"no model config at {path}",
                         hint="generate one: tritonkit config NAME --repository DIR")
    text = read_user_text(path, what="model config", limit=CONFIG_MAX_BYTES,
                          hint=_config_hint(Path(path)))
    try:
        return text_format.Parse(text, mc.ModelConfig())
    except text_format.ParseError as exc:
        # A link may lead to any file: not even the name of a field it does not know is said.
        linked = Path(path).is_symlink()
        raise UsageError(f"{path}{' (a link to another file)' if linked else ''} is not a valid "
                         f"Triton model config: line {exc.GetLine()}, column {exc.GetColumn()}: "
                         f"{parse_problem(exc, names=not linked)}",
                         hint=_config_hint(Path(path))) from None


def _config_hint(path: Path) -> str:
    model = path.parent.name if path.name == "config.pbtxt" else path.parent.parent.name
    return ("fix it there against Triton's schema (model_config.proto), or write it anew: "
            f"tritonkit config {shell_word(model)} --force")


# protobuf's text-format errors, said without the text they quote: (pattern, words).
_PARSE_PROBLEMS = (
    (r'Message type "inference\.([\w.]+)" has no field named "([A-Za-z_]\w{0,63})"',
     'Triton\'s {0} has no field named "{1}"'),
    (r'Message type "inference\.([\w.]+)" has no field named', "a field Triton's {0} does not have"),
    (r'Message type "inference\.([\w.]+)" should not have multiple "(\w+)" fields',
     "field '{1}' of {0} given twice"),
    (r"Couldn't parse integer", "a value that is not an integer"),
    (r"Couldn't parse (?:float|double)", "a value that is not a number"),
    (r'Enum type "inference\.([\w.]+)" has no value named', "a value Triton's {0} does not have"),
    (r"Value out of range", "a number out of its field's range"),
    (r"Expected string", "a value that is not a quoted string"),
    (r"String missing ending quote", "a string without its closing quote"),
)


def parse_problem(exc: text_format.ParseError, names: bool = True) -> str:
    """What is wrong where a config stopped parsing, in the schema's words: the name of a
    field it does not know (unless ``names`` is false), never a value or the text around it."""
    for pattern, words in _PARSE_PROBLEMS[0 if names else 1:]:
        found = re.search(pattern, str(exc))
        if found:
            return words.format(*found.groups())
    return "text the model-config format cannot read"


def config_problems(config: mc.ModelConfig) -> list[str]:
    """What Triton would refuse in a config its schema parses: an input or output with no
    dims (Triton: "must specify 'dims'"; one value per sample is dims [1] reshaped to []),
    and a reshape to [] without batching (Triton: "cannot have empty reshape for
    non-batching model as scalar tensors are not supported")."""
    problems = []
    for kind, tensors in (("input", config.input), ("output", config.output)):
        for tensor in tensors:
            if not tensor.dims:
                problems.append(f"{kind} '{tensor.name}' has no dims (Triton refuses it): give "
                                "dims [1] and reshape { shape: [] } for one value per sample")
            elif (config.max_batch_size == 0 and tensor.HasField("reshape")
                  and not tensor.reshape.shape):
                problems.append(f"{kind} '{tensor.name}' is reshaped to [] in a model without "
                                "batching (Triton refuses it): drop the reshape, dims [1] "
                                "serve a scalar")
    return problems


def read_report(model_dir: Path) -> dict:
    path = model_dir / REPORT_FILENAME
    if not os.path.lexists(path):
        return {}
    text = read_user_text(path, what="export report", limit=CONFIG_MAX_BYTES,
                          hint="re-export the model with --force")
    try:
        report = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not valid JSON ({exc})",
                         hint="re-export the model with --force") from None
    except RecursionError:      # arrays or objects nested thousands deep
        raise UsageError(f"{path} is no export report: it nests deeper than a JSON parser follows",
                         hint="re-export the model with --force") from None
    _check_report(report, path)
    return report


def _check_report(report: Any, path: Path) -> None:
    """A UsageError naming the first field of an export report that is not what the config
    generator reads it as (a file edited by hand, or not a report at all)."""
    def expect(value: Any, kind: type | tuple, field: str) -> Any:
        if value is None and field != "the report":
            return value
        if isinstance(value, bool) and kind is int or not isinstance(value, kind):
            want = {dict: "an object", list: "a list", str: "a string", int: "a whole number"}
            raise UsageError(f"{path}: {field} is {type(value).__name__} {_shown(value)}, not "
                             f"{want.get(kind, kind)}", hint="re-export the model with --force")
        return value

    expect(report, dict, "the report")
    batch = expect(report.get("max_batch_size"), int, "max_batch_size")
    if batch is not None and not 0 <= batch <= MAX_BATCH_SIZE:
        raise UsageError(f"{path}: max_batch_size {batch} is not a batch limit (0 to "
                         f"{MAX_BATCH_SIZE})", hint="re-export the model with --force")
    expect(report.get("gpu"), str, "gpu")
    expect(report.get("plans"), dict, "plans")
    for name, record in (expect(report.get("files"), dict, "files") or {}).items():
        expect(expect(record, dict, f"files.{name}").get("sha256") if record else None,
               str, f"files.{name}.sha256")
    verification = expect(report.get("verification"), dict, "verification") or {}
    for i, case in enumerate(expect(verification.get("cases"), list, "verification.cases") or []):
        lengths = (expect(case, dict, f"verification.cases[{i}]") or {}).get("lengths")
        for label, size in (expect(lengths, dict, f"verification.cases[{i}].lengths") or {}).items():
            expect(size, int, f"verification.cases[{i}].lengths.{label}")
    for i, spec in enumerate(expect(report.get("inputs"), list, "inputs") or []):
        spec = expect(spec, dict, f"inputs[{i}]") or {}
        expect(spec.get("name"), str, f"inputs[{i}].name")
        for axis, size in enumerate(expect(spec.get("example_shape"), list,
                                           f"inputs[{i}].example_shape") or []):
            expect(size, int, f"inputs[{i}].example_shape[{axis}]")
    for key in ("tensorrt_build", "tensorrt_recipe"):     # a recipe may be a command line
        build = report.get(key)
        if key == "tensorrt_build":
            expect(build, dict, key)
        if not isinstance(build, dict):
            continue
        for name, shapes in (expect(build.get("shapes"), dict, f"{key}.shapes") or {}).items():
            shapes = expect(shapes, dict, f"{key}.shapes.{name}") or {}
            for axis, size in enumerate(expect(shapes.get("max"), list,
                                               f"{key}.shapes.{name}.max") or []):
                expect(size, int, f"{key}.shapes.{name}.max[{axis}]")


def _shown(value: Any) -> str:
    """A value as an error shows it: its JSON, cut short."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:39] + "…"


@dataclass(frozen=True)
class Configured:
    """What ``configure`` wrote, and the profiles it left out (the model does not fit them)."""

    written: list[Path]
    skipped: dict[str, str]       # profile name -> why
    notes: list[str] = field(default_factory=list)
    profile: str = DEFAULT_GPU    # the profile config.pbtxt (Triton's default config) is for


def configure(repository: Path, name: str, *, gpu: str | None = None,
              max_batch_size: int | None = None, force: bool = False,
              loaded: onnx.ModelProto | None = None) -> Configured:
    """Write ``DIR/NAME/config.pbtxt`` (for ``gpu``: by default the one the model was
    exported for, else DEFAULT_GPU) and ``configs/<profile>.pbtxt`` for each profile.

    Reads ``DIR/NAME/1/model.onnx`` (unless ``loaded`` is its model, as export has it)
    and ``DIR/NAME/export-report.json``. An existing
    config.pbtxt is replaced only with ``force`` (export passes it for its own fresh folder).
    Every config is built before any is written; a profile other than ``gpu`` that the
    model does not fit is left out (and said), not a failure.
    """
    model_dir = Path(repository) / name
    if not model_dir.is_dir():
        raise UsageError(f"no model '{name}' in {repository}",
                         hint=f"export it first: tritonkit export SPEC --name {shell_word(name)} "
                              f"--repository {shell_word(repository)}")
    report = read_report(model_dir)
    onnx_path = _find_onnx(model_dir)
    graph = read_graph(onnx_path, report, loaded)
    exported = int(report.get("max_batch_size", 0))
    limit = max_batch_size if max_batch_size is not None else exported
    if not 0 <= limit <= MAX_BATCH_SIZE:
        raise UsageError(f"--max-batch-size {limit} is not a batch limit Triton takes "
                         f"(0 to {MAX_BATCH_SIZE}, the largest its config holds)",
                         hint=f"use a limit from 1 to {MAX_BATCH_SIZE}, or 0 for no batching")
    plans = report.get("plans") or {}
    notes = []
    if not report and max_batch_size is None:
        notes.append(f"no export report in {model_dir} gives a batch limit: max_batch_size 0, "
                     "no dynamic batching; pass --max-batch-size N for a batch-first graph")
    if report and limit > exported > 0:
        if plans:
            raise UsageError(f"--max-batch-size {limit} is above the {exported} the TensorRT plan "
                             f"of '{name}' was built for", hint=f"use at most {exported}, or "
                             f"re-export with --max-batch-size {limit}")
        notes.append(f"max_batch_size {limit} is above the {exported} the export verified: "
                     f"re-export with --max-batch-size {limit} to verify it")
    # Regenerating a P100 export's configs must not make its config.pbtxt the A10's.
    default = load_profile(gpu or report.get("gpu") or DEFAULT_GPU)
    profiles = {default.name: default}
    for other in available_profiles():
        profiles.setdefault(other, load_profile(other))
    targets = [model_dir / "config.pbtxt",
               *(model_dir / "configs" / f"{p}.pbtxt" for p in profiles)]
    _refuse_folders_leaving(Path(repository), {target.parent for target in targets})
    for target in targets:                       # refuse before anything is written
        refuse_overwrite(target, force=force, what="model config")
    # With --force a config tuned by hand is replaced too: said, so the tuning is not lost unseen.
    edited = {target: why for target in targets if target.exists() and (why := edited_by_hand(target))}
    texts, skipped = {}, {}
    for profile in profiles.values():
        try:
            config, tuning = build_config(name, graph, profile, max_batch_size=limit, plans=plans)
        except UsageError as exc:
            if profile is default:
                raise
            skipped[profile.name] = exc.message
            continue
        texts[profile.name] = config_to_text(config, tuning)
    for target, why in edited.items():
        gone = target.stem in skipped and target.parent.name == "configs"
        notes.append(f"{'removed' if gone else 'replaced'} {target.relative_to(model_dir)}: {why}"
                     + (f" (no config for {target.stem}: {skipped[target.stem]})" if gone else ""))
    written = [atomic_write(model_dir / "config.pbtxt", texts[default.name])]
    written += [atomic_write(model_dir / "configs" / f"{p}.pbtxt", text) for p, text in texts.items()]
    for stale in skipped:                        # a config from before would mis-serve
        (model_dir / "configs" / f"{stale}.pbtxt").unlink(missing_ok=True)
    return Configured(written, skipped, notes, profile=default.name)


def _refuse_folders_leaving(repository: Path, folders: set[Path]) -> None:
    """A UsageError for a folder configs would be written in that is a link out of the
    repository (or into its state folder), as the local mirror refuses to read one."""
    inside = Path(os.path.realpath(repository))
    for folder in sorted(folders):
        real = Path(os.path.realpath(folder))
        if not real.is_relative_to(inside) or real.is_relative_to(inside / STATE_DIRNAME):
            raise UsageError(f"{folder} is a link to {real}, outside the model repository "
                             f"{repository}: configs are written only inside it",
                             hint=f"replace the link with a folder of its own: rm {shell_word(folder)}")


def _find_onnx(model_dir: Path) -> Path:
    versions = sorted((p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()),
                      key=lambda p: int(p.name))
    for version in reversed(versions):
        if os.path.lexists(version / ONNX_FILENAME):   # read_graph names one that is no file
            return version / ONNX_FILENAME
    raise UsageError(f"no {ONNX_FILENAME} in any version folder of {model_dir}",
                     hint="export the model first: tritonkit export SPEC --name NAME")
