"""GPU profiles: what a card is and what runs on it, read from ``configs/gpus/<name>.toml``.

A profile carries the card's facts (compute capability, memory, precisions, bus,
MIG), the software stack that runs on it (Triton image, TensorRT, CUDA, driver,
onnxruntime-gpu) and the serving defaults tritonkit tunes configs with. Users add
a card by adding a file; ``--gpu <name>`` picks it.

A profile of ``kind = "cpu"`` (``configs/gpus/cpu.toml``) is a host without an NVIDIA
GPU: KIND_CPU instances on ONNX Runtime's CPU provider, no pinned memory, no GPU
reservation. It has no card facts (compute capability, compute, bus) and no GPU stack
(TensorRT, CUDA, driver); its ``memory`` is what the models may take of the host's.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from tritonkit.datafiles import configs_dir, dataclass_from_table, load_toml
from tritonkit.errors import ProfileError
from tritonkit.server.settings import ServerSettings

PRECISIONS = ("fp32", "fp16", "bf16", "int8")
KINDS = ("gpu", "cpu")
# The ONNX Runtime execution provider each kind of profile may serve with.
ACCELERATORS = {"gpu": ("cuda", "tensorrt"), "cpu": ("cpu",)}
# A profile's name names files (configs/<name>.pbtxt of every model) and is a Kubernetes
# label value: a plain name, no path.
PLAIN_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
# What a GPU profile must say and a CPU profile has no use for.
GPU_FIELDS = ("compute_capability", "compute", "bus")
GPU_STACK_FIELDS = ("triton_image_tensorrt", "tensorrt_version", "cuda_major", "min_driver",
                    "onnxruntime_gpu")


@dataclass(frozen=True)
class Memory:
    gib: float                       # a CPU profile: what the models may take of the host's
    kind: str
    bandwidth_gb_s: float | None = None

    @property
    def bytes(self) -> int:
        return int(self.gib * 1024**3)


@dataclass(frozen=True)
class Compute:
    fp32_tflops: float
    fp16_tflops: float
    tensor_cores: bool
    fp16: bool
    bf16: bool
    int8: bool
    sparsity: bool


@dataclass(frozen=True)
class Bus:
    pcie_gen: int
    pcie_lanes: int
    link_gb_s: float
    power_w: float


@dataclass(frozen=True)
class Stack:
    triton_image: str
    triton_server: str
    tensorrt_plans: bool
    # GPU profiles only (GPU_STACK_FIELDS):
    triton_image_tensorrt: str | None = None
    tensorrt_version: str | None = None
    cuda_major: int | None = None
    min_driver: int | None = None    # the CUDA major's own floor (CUDA toolkit release notes)
    onnxruntime_gpu: str | None = None
    # The driver the profile's Triton image asks for (its release notes' "Driver
    # Requirements"); below it only NGC's forward-compatible branches run the image. Unset:
    # min_driver.
    image_driver: int | None = None
    # The ONNX Runtime inside triton_image (Triton's compatibility matrix) and the newest
    # ONNX it loads: a model past either fails to load on the card, and nothing here would
    # say so (the embedded server runs this machine's onnxruntime). Unset: unchecked.
    onnxruntime_server: str | None = None
    onnx_max_opset: int | None = None
    onnx_max_ir_version: int | None = None


@dataclass(frozen=True)
class Serving:
    precision: str
    accelerator: str
    instance_count: int
    max_queue_delay_us: int
    memory_headroom: float
    cuda_graphs: bool = False
    # accelerator "tensorrt": give ONNX Runtime the served shape range (trt_profile_*_shapes),
    # so it builds one engine for it at load. false: it builds for the shapes it has seen and
    # again, mid-traffic, for each shape outside them (for a graph that loads only so: its
    # TensorRT subgraphs take dynamic tensors of its own, which the range cannot name).
    trt_profile_shapes: bool = True


@dataclass(frozen=True)
class TuneSpace:
    """The values `tritonkit tune` tries for each knob of a model's config (an empty list:
    that knob is kept as served). A profile's ``[tune]`` table is the space on its card;
    ``--space FILE.toml`` replaces any of these lists."""

    instance_count: tuple[int, ...] = ()
    max_batch_size: tuple[int, ...] = ()
    max_queue_delay_us: tuple[int, ...] = ()
    # dynamic batching's preferred sizes: false none, true the warm-up's batch sizes
    preferred_batch_size: tuple[bool, ...] = ()
    intra_op_thread_count: tuple[int, ...] = ()     # ONNX Runtime's own parameter; 0: its default
    accelerator: tuple[str, ...] = ()               # "tensorrt" (the profile's, as generated), "cuda"


@dataclass(frozen=True)
class GpuProfile:
    """One GPU model (or, ``kind = "cpu"``, a host without one) and the stack tritonkit
    deploys on it."""

    name: str
    display_name: str
    architecture: str
    memory: Memory
    stack: Stack
    serving: Serving
    kind: str = "gpu"
    mig: bool = False
    # GPU profiles only (GPU_FIELDS):
    compute_capability: float = 0.0
    compute: Compute | None = None
    bus: Bus | None = None
    sources: dict = field(default_factory=dict)
    path: str = ""
    tune: TuneSpace = field(default_factory=TuneSpace)

    @property
    def has_gpu(self) -> bool:
        """Whether the profile serves on an NVIDIA GPU (``kind`` "gpu"), not on the CPU."""
        return self.kind == "gpu"

    @property
    def cc_key(self) -> str:
        """The compute capability as Triton's cc_model_filenames keys spell it ("8.6")."""
        return f"{self.compute_capability:.1f}"

    def supports(self, precision: str) -> bool:
        if self.compute is None:          # a CPU profile: ONNX Runtime's CPU provider, FP32
            return precision == "fp32"
        return {"fp32": True, "fp16": self.compute.fp16, "bf16": self.compute.bf16,
                "int8": self.compute.int8}[precision]

    def onnx_refusal(self, opset: int, ir_version: int | None = None) -> str | None:
        """Why the ONNX Runtime in this profile's Triton image cannot load a model of
        ``opset`` (and ``ir_version``), or None when it can (or the profile does not say)."""
        stack = self.stack
        past = []
        if stack.onnx_max_opset is not None and opset > stack.onnx_max_opset:
            past.append(f"opset {stack.onnx_max_opset}")
        if ir_version and stack.onnx_max_ir_version is not None and \
                ir_version > stack.onnx_max_ir_version:
            past.append(f"IR version {stack.onnx_max_ir_version}")
        if not past:
            return None
        runtime = f"ONNX Runtime {stack.onnxruntime_server}" if stack.onnxruntime_server \
            else "the ONNX Runtime"
        return (f"{runtime} in the {self.name} profile's Triton ({stack.triton_image}) loads "
                f"{' and '.join(past)} at most")

    def server_settings(self, base: ServerSettings) -> ServerSettings:
        """Server settings for this card: Triton must not ignore it (>= 2.52 defaults to
        7.5). Without a GPU, no pinned memory pool: it only stages copies to a GPU (and
        Triton warns that it cannot allocate it)."""
        if not self.has_gpu:
            return base.replace(pinned_memory_pool_byte_size=0)
        return base.replace(min_supported_compute_capability=self.compute_capability)


def gpus_dir() -> Path:
    return configs_dir() / "gpus"


def available_profiles(kind: str | None = None) -> list[str]:
    """The profiles in ``configs/gpus/``, by name; ``kind`` ("gpu", "cpu") keeps those of
    that kind (a file that does not load is left out then)."""
    names = sorted(p.stem for p in gpus_dir().glob("*.toml"))
    if kind is None:
        return names
    kept = []
    for name in names:
        try:
            if load_profile(name).kind == kind:
                kept.append(name)
        except ProfileError:
            continue
    return kept


def load_profile(name_or_path: str | Path) -> GpuProfile:
    """Read a GPU profile by name (``configs/gpus/<name>.toml``) or from a file path."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" or candidate.is_file():
        path = candidate
    else:
        path = gpus_dir() / f"{name_or_path}.toml"
        if not os.path.lexists(path):       # there but no file (a FIFO, a link): load_toml says
            known = ", ".join(available_profiles()) or "none"
            raise ProfileError(f"no GPU profile named '{name_or_path}' (known: {known})",
                               hint=f"use one of those, or add {path}")
    table = load_toml(path)
    table.setdefault("path", str(path))
    profile = dataclass_from_table(GpuProfile, table, source=str(path))
    _check_name(profile, Path(path))
    _validate(profile)
    return profile


def _check_name(profile: GpuProfile, path: Path) -> None:
    """A profile's name is a plain name; one in the profiles folder is its file's name, by
    which ``--gpu`` and every ``config`` know it (another would write, or remove, the
    configs of a profile it is not)."""
    if not PLAIN_NAME.fullmatch(profile.name):
        raise ProfileError(f"{path}: field 'name' = {profile.name!r} is not a plain name "
                           "(letters, digits, '.', '_', '-'; at most 63)",
                           hint=f'e.g. name = "{path.stem}"' if PLAIN_NAME.fullmatch(path.stem)
                           else 'e.g. name = "l4"')
    in_folder = os.path.realpath(path.parent) == os.path.realpath(gpus_dir())
    if in_folder and profile.name != path.stem:
        raise ProfileError(f"{path}: field 'name' = '{profile.name}' is not the file's name "
                           f"'{path.stem}'",
                           hint=f'set name = "{path.stem}", or name the file {profile.name}.toml')


INT32_MAX = 2**31 - 1


def check_tune_space(space: TuneSpace, where: str) -> None:
    """A ProfileError naming ``where`` and the field for a value no config can take."""
    lowest = {"instance_count": 1, "max_batch_size": 1, "max_queue_delay_us": 0,
              "intra_op_thread_count": 0}
    # The largest each field of Triton's config holds (int32; the queue delay a uint64).
    highest = {"instance_count": INT32_MAX, "max_batch_size": INT32_MAX,
               "max_queue_delay_us": 2**64 - 1, "intra_op_thread_count": INT32_MAX}
    for name, least in lowest.items():
        bad = [v for v in getattr(space, name) if v < least]
        if bad:
            raise ProfileError(f"{where}: field 'tune.{name}' holds {bad[0]}, below {least}",
                               hint=f"list values of at least {least}, e.g. {name} = [{least + 1}]")
        bad = [v for v in getattr(space, name) if v > highest[name]]
        if bad:
            raise ProfileError(f"{where}: field 'tune.{name}' holds {bad[0]}, more than Triton's "
                               f"config holds ({highest[name]})",
                               hint=f"list values from {least} to {highest[name]}")
    odd = [a for a in space.accelerator if a not in ACCELERATORS["gpu"]]
    if odd:
        raise ProfileError(f"{where}: field 'tune.accelerator' holds '{odd[0]}', not one of "
                           f"{', '.join(ACCELERATORS['gpu'])}",
                           hint='e.g. accelerator = ["tensorrt", "cuda"]')


def _validate(profile: GpuProfile) -> None:
    where = profile.path
    _validate_kind(profile)
    check_tune_space(profile.tune, where)
    if profile.serving.precision not in PRECISIONS:
        raise ProfileError(f"{where}: field 'serving.precision' = '{profile.serving.precision}' "
                           f"is not one of {', '.join(PRECISIONS)}", hint="fix the value")
    if not profile.supports(profile.serving.precision):
        raise ProfileError(f"{where}: field 'serving.precision' = '{profile.serving.precision}' "
                           f"but the card has no {profile.serving.precision} support (compute.*)",
                           hint="choose a precision the card has")
    accelerators = ACCELERATORS[profile.kind]
    if profile.serving.accelerator not in accelerators:
        raise ProfileError(f"{where}: field 'serving.accelerator' = "
                           f"'{profile.serving.accelerator}' is not one of "
                           f"{', '.join(accelerators)} (kind = \"{profile.kind}\")",
                           hint="fix the value")
    if profile.serving.accelerator in ("cuda", "cpu") and profile.serving.precision != "fp32":
        # The CUDA and CPU providers run the graph in the precision it was exported in;
        # only the TensorRT accelerator has a precision to set.
        raise ProfileError(f"{where}: field 'serving.precision' = '{profile.serving.precision}' "
                           f"but 'serving.accelerator' = '{profile.serving.accelerator}' has no "
                           "precision setting (it runs the exported graph's own)",
                           hint="use precision = \"fp32\"" + (", or accelerator = \"tensorrt\""
                                                              if profile.has_gpu else ""))
    if profile.serving.accelerator == "tensorrt" and not profile.stack.tensorrt_plans:
        raise ProfileError(f"{where}: field 'serving.accelerator' = 'tensorrt' but "
                           "'stack.tensorrt_plans' is false for this card",
                           hint="use accelerator = \"cuda\"")
    if not 0 <= profile.serving.memory_headroom < 1:
        raise ProfileError(f"{where}: field 'serving.memory_headroom' must be in [0, 1)",
                           hint="e.g. 0.2 keeps a fifth of the memory free")
    if profile.serving.max_queue_delay_us < 0:
        # Triton's max_queue_delay_microseconds is unsigned: the config could not be built.
        raise ProfileError(f"{where}: field 'serving.max_queue_delay_us' must be >= 0",
                           hint="e.g. 0, Triton's recommended start")
    if profile.memory.gib <= 0:
        raise ProfileError(f"{where}: field 'memory.gib' must be more than 0",
                           hint="the card's memory in GiB, e.g. 24")
    if profile.serving.instance_count < 1:
        raise ProfileError(f"{where}: field 'serving.instance_count' must be >= 1",
                           hint="e.g. 1")
    if profile.stack.image_driver is not None and profile.stack.min_driver is not None and \
            profile.stack.image_driver < profile.stack.min_driver:
        raise ProfileError(f"{where}: field 'stack.image_driver' = {profile.stack.image_driver} "
                           f"is below 'stack.min_driver' = {profile.stack.min_driver}, the "
                           f"floor of CUDA {profile.stack.cuda_major} itself",
                           hint="take image_driver from the image's release notes "
                                "(\"Driver Requirements\")")
    if profile.has_gpu and profile.compute_capability < 3.0:
        raise ProfileError(f"{where}: field 'compute_capability' = {profile.compute_capability} "
                           "is not a CUDA compute capability", hint="e.g. 8.6")
    _check_ranges(profile)


# The range of each number of a profile: what the config field it becomes holds
# (instance_count an int32, the queue delay a uint64), or past any card or host (1 PiB).
# nan and inf are refused as every file's are (dataclass_from_table).
_RANGES = {"memory.gib": (0, 2**20), "serving.instance_count": (1, INT32_MAX),
           "serving.max_queue_delay_us": (0, 2**64 - 1), "compute_capability": (0, 99.9)}
# The card's figures and the stack's versions: 0 or more, an int32 at most.
_COUNTED = ("memory.bandwidth_gb_s", "compute.fp32_tflops", "compute.fp16_tflops",
            "bus.pcie_gen", "bus.pcie_lanes", "bus.link_gb_s", "bus.power_w",
            "stack.cuda_major", "stack.min_driver", "stack.image_driver",
            "stack.onnx_max_opset", "stack.onnx_max_ir_version")


def _check_ranges(profile: GpuProfile) -> None:
    """A ProfileError naming the field for a number past what it can be."""
    for dotted in (*_RANGES, *_COUNTED):
        value = profile
        for part in dotted.split("."):
            value = getattr(value, part, None) if value is not None else None
        if value is None:
            continue
        least, most = _RANGES.get(dotted, (0, INT32_MAX))
        if not least <= value <= most:
            raise ProfileError(f"{profile.path}: field '{dotted}' = {value} is not from {least} "
                               f"to {most}", hint=f"give {dotted.rpartition('.')[2]} a value "
                                                  f"from {least} to {most}")


def _validate_kind(profile: GpuProfile) -> None:
    """A GPU profile names its card and its GPU stack; a CPU profile has neither (a field
    of them there would be taken for a GPU it does not describe)."""
    where = profile.path
    if profile.kind not in KINDS:
        raise ProfileError(f"{where}: field 'kind' = '{profile.kind}' is not one of "
                           f"{', '.join(KINDS)}", hint="\"gpu\" (the default) or \"cpu\"")
    defaults = GpuProfile.__dataclass_fields__
    card = [(name, getattr(profile, name) != defaults[name].default) for name in GPU_FIELDS]
    stack = [(f"stack.{name}", getattr(profile.stack, name) is not None)
             for name in GPU_STACK_FIELDS]
    if profile.has_gpu:
        missing = [name for name, given in card + stack if not given]
        if missing:
            raise ProfileError(f"{where}: missing field '{missing[0]}' (a GPU profile needs it)",
                               hint="add it, or kind = \"cpu\" for a host without a GPU")
        return
    given = [name for name, present in card + stack if present]
    if profile.mig:
        given.insert(0, "mig")
    if given:
        raise ProfileError(f"{where}: field '{given[0]}' describes a GPU, and kind = \"cpu\"",
                           hint=f"remove {', '.join(repr(g) for g in given)}, or make it a GPU "
                                "profile (kind = \"gpu\")")
    if profile.stack.tensorrt_plans:
        raise ProfileError(f"{where}: field 'stack.tensorrt_plans' = true, and kind = \"cpu\": "
                           "TensorRT plans need a GPU", hint="tensorrt_plans = false")
    if profile.serving.cuda_graphs:
        raise ProfileError(f"{where}: field 'serving.cuda_graphs' = true, and kind = \"cpu\"",
                           hint="cuda_graphs = false (or leave it out)")
