"""The config space: which knobs a served model has, the values each is tried at, and a
point of the space (``Candidate``) made into a config Triton loads.

The space is data: a GPU profile's ``[tune]`` table on its card, the CPU profile's
(``configs/gpus/cpu.toml``) on a server that runs the model on the CPU (the local target's
copy), either narrowed or widened by ``--space FILE.toml``. A
knob the served model has no use for (batching knobs of a model that does not batch, the
GPU accelerator on the CPU copy) is left out, and said."""

from __future__ import annotations

import copy
import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc

from tritonkit.datafiles import dataclass_from_table, load_toml
from tritonkit.errors import UsageError
from tritonkit.model_config import warmup_batch_sizes
from tritonkit.profiles import TuneSpace, check_tune_space, load_profile
from tritonkit.warmup import RELOAD_PARAMETER

#: The knobs in the order a search walks them: the ones that move throughput most first.
KNOBS = ("instance_count", "max_batch_size", "max_queue_delay_us", "intra_op_thread_count",
         "preferred_batch_size", "accelerator")
#: ONNX Runtime's threads per run, as Triton's ONNX Runtime backend (and our CPU copy) read it.
THREADS_PARAMETER = "intra_op_thread_count"
#: The profile whose [tune] space a model served on the CPU is searched with.
CPU_PROFILE = "cpu"
_ONNX_PLATFORMS = ("onnxruntime_onnx",)
_TRT_SHAPES = ("trt_profile_min_shapes", "trt_profile_opt_shapes", "trt_profile_max_shapes")


@dataclass(frozen=True)
class Candidate:
    """One point of the space: each knob's value. ``bare`` is Triton's bare default: the
    served config without dynamic batching, instance groups or thread parameters."""

    instance_count: int | None = None
    max_batch_size: int | None = None
    max_queue_delay_us: int | None = None
    intra_op_thread_count: int | None = None
    preferred_batch_size: bool | None = None
    accelerator: str | None = None
    bare: bool = False

    def with_knob(self, knob: str, value) -> "Candidate":
        return dataclasses.replace(self, **{knob: value})

    @property
    def label(self) -> str:
        """``i2 b32 d500 t0`` (+p: preferred sizes; trt/cuda: the GPU accelerator)."""
        if self.bare:
            return "bare default"
        parts = [f"{short}{value}" for short, value in (
            ("i", self.instance_count), ("b", self.max_batch_size), ("d", self.max_queue_delay_us),
            ("t", self.intra_op_thread_count)) if value is not None]
        if self.preferred_batch_size:
            parts.append("+p")
        if self.accelerator:
            parts.append("trt" if self.accelerator == "tensorrt" else self.accelerator)
        return " ".join(parts) or "as served"

    def knobs(self) -> dict:
        return {k: getattr(self, k) for k in KNOBS if getattr(self, k) is not None}


LABEL_LEGEND = ("i instances, b max batch, d queue delay µs, t threads (0: one a core), "
                "+p preferred sizes")


def read_space_file(path: Path) -> TuneSpace:
    """``--space FILE.toml``: top-level lists named as the knobs (a ``[tune]`` table too)."""
    table = load_toml(Path(path))
    table = table.get("tune", table)
    space = dataclass_from_table(TuneSpace, table, source=str(path))
    check_tune_space(space, str(path))
    return space


def cpu_space() -> TuneSpace:
    """The space on a server that runs the model on the CPU: the CPU profile's."""
    return load_profile(CPU_PROFILE).tune


def merged(base: TuneSpace, override: TuneSpace | None, given: set[str] | None = None) -> TuneSpace:
    """``base`` with each list ``override`` gives (``given``: the keys its file named; an
    empty list there turns the knob off)."""
    if override is None:
        return base
    names = given if given is not None else {k for k in KNOBS if getattr(override, k)}
    return dataclasses.replace(base, **{k: getattr(override, k) for k in names})


def space_keys(path: Path) -> set[str]:
    table = load_toml(Path(path))
    return set(table.get("tune", table))


# -- the served config ---------------------------------------------------------------------------

def parse_served(config: dict) -> mc.ModelConfig:
    """The server's JSON of a model's config as Triton's protobuf."""
    return json_format.ParseDict(config, mc.ModelConfig(), ignore_unknown_fields=True)


def as_json(config: mc.ModelConfig) -> dict:
    """A config as Triton's load API takes it (its JSON, the proto's own field names)."""
    return json_format.MessageToDict(config, preserving_proto_field_name=True)


def is_onnx_runtime(config: mc.ModelConfig) -> bool:
    """ONNX Runtime serves it: Triton's backend, or our CPU copy's python adapter."""
    return (config.platform in _ONNX_PLATFORMS or config.backend == "onnxruntime"
            or (config.backend == "python" and "onnx_model" in config.parameters))


def on_gpu(config: mc.ModelConfig) -> bool:
    return any(g.kind == mc.ModelInstanceGroup.KIND_GPU for g in config.instance_group)


def _tensorrt(config: mc.ModelConfig) -> list:
    return [a for a in config.optimization.execution_accelerators.gpu_execution_accelerator
            if a.name == "tensorrt"]


def served_point(config: mc.ModelConfig, space: TuneSpace) -> Candidate:
    """The served config as a point of ``space`` (its own values, in the space or not)."""
    values = {}
    if space.instance_count:
        values["instance_count"] = sum(g.count for g in config.instance_group) or 1
    if space.max_batch_size:
        values["max_batch_size"] = config.max_batch_size
    if space.max_queue_delay_us:
        values["max_queue_delay_us"] = config.dynamic_batching.max_queue_delay_microseconds
    if space.intra_op_thread_count:
        threads = config.parameters.get(THREADS_PARAMETER)
        values["intra_op_thread_count"] = int(threads.string_value or 0) if threads else 0
    if space.preferred_batch_size:
        preferred = list(config.dynamic_batching.preferred_batch_size)
        # Triton fills in [max_batch_size] where none is set, which means the same as none.
        values["preferred_batch_size"] = preferred not in ([], [config.max_batch_size])
    if space.accelerator:
        values["accelerator"] = "tensorrt" if _tensorrt(config) else "cuda"
    return Candidate(**values)


def applicable(config: mc.ModelConfig, space: TuneSpace, *, local: bool) -> tuple[TuneSpace, list[str]]:
    """``space`` less the knobs the served model has no use for, and why each was left out."""
    notes, off = [], {}
    batching = config.max_batch_size > 0 and not config.HasField("sequence_batching")
    if not batching:
        why = ("the model is stateful (sequence batching)" if config.HasField("sequence_batching")
               else "the model does not batch (max_batch_size 0)")
        for knob in ("max_batch_size", "max_queue_delay_us", "preferred_batch_size"):
            if getattr(space, knob):
                off[knob] = why
    if space.intra_op_thread_count and not is_onnx_runtime(config):
        off["intra_op_thread_count"] = "ONNX Runtime does not serve the model"
    if space.accelerator:
        if local or not on_gpu(config):
            off["accelerator"] = "no GPU serves the model here"
        elif not is_onnx_runtime(config):
            off["accelerator"] = "ONNX Runtime does not serve the model"
        elif "tensorrt" in space.accelerator and not _tensorrt(config):
            space = dataclasses.replace(space, accelerator=tuple(
                a for a in space.accelerator if a != "tensorrt"))
            notes.append("accelerator tensorrt left out: the served config has no TensorRT "
                         "accelerator to turn on (tritonkit config writes it where the card has one)")
    for knob, why in off.items():
        notes.append(f"{knob} left out: {why}")
    return dataclasses.replace(space, **{k: () for k in off}), notes


def candidate_config(served: mc.ModelConfig, point: Candidate) -> mc.ModelConfig:
    """The served config with ``point``'s values: a config Triton loads."""
    config = mc.ModelConfig()
    config.CopyFrom(served)
    config.parameters.pop(RELOAD_PARAMETER, None)
    if point.bare:
        config.ClearField("dynamic_batching")
        del config.instance_group[:]
        config.parameters.pop(THREADS_PARAMETER, None)
        return config
    apply_knobs(config, point)
    return config


def apply_knobs(config: mc.ModelConfig, point: Candidate) -> None:
    """Set ``point``'s knobs on ``config`` in place (a knob it leaves None is kept)."""
    served_batch = config.max_batch_size
    if point.instance_count is not None:
        if not config.instance_group:
            config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_AUTO)
        for group in config.instance_group:
            group.count = point.instance_count
    if point.max_batch_size is not None and point.max_batch_size != config.max_batch_size:
        config.max_batch_size = point.max_batch_size
        _retarget_warmup(config, point.max_batch_size)
        _retarget_trt_shapes(config, point.max_batch_size)
    if point.max_queue_delay_us is not None:
        config.dynamic_batching.max_queue_delay_microseconds = point.max_queue_delay_us
    if config.HasField("dynamic_batching"):
        preferred = list(config.dynamic_batching.preferred_batch_size)
        del config.dynamic_batching.preferred_batch_size[:]
        if point.preferred_batch_size:
            config.dynamic_batching.preferred_batch_size.extend(
                warmup_batch_sizes(config.max_batch_size) or [config.max_batch_size])
        elif point.preferred_batch_size is None and preferred != [served_batch]:
            # kept where they still fit; [max_batch_size] is Triton's own fill-in for none
            config.dynamic_batching.preferred_batch_size.extend(
                p for p in preferred if p <= config.max_batch_size)
    if point.intra_op_thread_count is not None:
        if point.intra_op_thread_count:
            config.parameters[THREADS_PARAMETER].string_value = str(point.intra_op_thread_count)
        else:
            config.parameters.pop(THREADS_PARAMETER, None)
    if point.accelerator == "cuda":
        accelerators = config.optimization.execution_accelerators.gpu_execution_accelerator
        kept = [copy.deepcopy(a) for a in accelerators if a.name != "tensorrt"]
        del accelerators[:]
        accelerators.extend(kept)


_WARMUP_NAME = re.compile(r"^batch_(\d+)(.*)$")


def _retarget_warmup(config: mc.ModelConfig, max_batch_size: int) -> None:
    """Warm-up entries for the new batch limit: Triton refuses a load whose warm-up sends a
    batch above it, and a larger limit needs its largest batch warmed. Each shape keeps its
    entries' inputs, at batch 1 and ``warmup_batch_sizes``, smallest and largest first (as
    the generator orders them)."""
    shapes: dict[str, mc.ModelWarmup] = {}
    others = []
    for entry in config.model_warmup:
        match = _WARMUP_NAME.match(entry.name)
        if match is None:
            if entry.batch_size <= max_batch_size:
                others.append(copy.deepcopy(entry))
            continue
        suffix = match[2]
        if suffix not in shapes or entry.batch_size > shapes[suffix].batch_size:
            shapes[suffix] = entry
    sizes = sorted({1, *warmup_batch_sizes(max_batch_size)})
    sizes = [sizes[0], *sizes[-1:], *sizes[1:-1]] if len(sizes) > 1 else sizes
    entries = []
    for suffix, template in shapes.items():
        for size in sizes:
            entry = copy.deepcopy(template)
            entry.batch_size, entry.name = size, f"batch_{size}{suffix}"
            entries.append(entry)
    del config.model_warmup[:]
    config.model_warmup.extend(entries + others)


def _retarget_trt_shapes(config: mc.ModelConfig, max_batch_size: int) -> None:
    """ONNX Runtime's TensorRT shape range (``name:BxD,...``) to the new batch limit: opt and
    max at it (a request above the range's max is refused)."""
    for accel in _tensorrt(config):
        for key in _TRT_SHAPES[1:]:
            if key in accel.parameters:
                accel.parameters[key] = ",".join(
                    re.sub(r":\d+", f":{max_batch_size}", item, count=1)
                    for item in accel.parameters[key].split(","))


def check_space(space: TuneSpace) -> None:
    """A UsageError for a space with nothing to try."""
    if not any(getattr(space, k) for k in KNOBS):
        raise UsageError("the space to tune holds no knob this model has",
                         hint="list values in --space FILE.toml, e.g. instance_count = [1, 2, 3]")
