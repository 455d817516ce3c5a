"""TensorRT plans: built on the target GPU, or a recipe recorded for building them there.

A plan is specific to one GPU architecture and one TensorRT version, and the builder
times kernels on the card itself, so a plan is only built where the target GPU is
present. Elsewhere the report carries the exact ``trtexec`` command for the profile's
Triton/TensorRT container. TensorRT 10 cannot target compute capability 6.0 at all: a
P100 is served through ONNX Runtime instead (``profile.stack.tensorrt_plans`` is false).
"""

from __future__ import annotations

import importlib.util
import shlex
from pathlib import Path

from tritonkit.errors import ExportError, UsageError, shell_word
from tritonkit.export.spec import BATCH_AXIS_NAME, ModelInputs
from tritonkit.profiles import GpuProfile
from tritonkit.repository import ONNX_FILENAME

# Non-batch dynamic axes need a range too; the recipe allows up to this many times the
# example's length (edit the recorded command for longer inputs).
DYNAMIC_AXIS_HEADROOM = 4


def plan_filename(profile: GpuProfile) -> str:
    """``model_<gpu>.plan``: one plan per compute capability in Triton's cc_model_filenames."""
    return f"model_{profile.name}.plan"


def refuse_unsupported(profile: GpuProfile) -> None:
    """A UsageError for a card TensorRT plans cannot run on (the P100), or no card."""
    if not profile.has_gpu:
        raise UsageError(f"--format tensorrt needs a GPU: the {profile.name} profile has none",
                         hint=f"export with --format onnx: Triton serves it with ONNX Runtime "
                              f"on the CPU, the path for --gpu {shell_word(profile.name)}")
    if not profile.stack.tensorrt_plans:
        raise UsageError(
            f"--format tensorrt is not supported on {profile.display_name} (compute capability "
            f"{profile.cc_key}): TensorRT 10 cannot target it and "
            f"TensorRT {profile.stack.tensorrt_version} only deprecates it",
            hint=f"export with --format onnx: Triton serves it with ONNX Runtime on CUDA, the "
                 f"supported path for --gpu {shell_word(profile.name)}")


def refuse_unshapeable_names(names: tuple[str, ...]) -> None:
    """A UsageError for an input name trtexec's --minShapes/--optShapes/--maxShapes cannot
    hold: they split the list on ',' before anything else and take ' as the quotes around
    a name (TensorRT's samples/common/sampleOptions.cpp, getShapesBuild and
    splitNameAndValue), so a name holding either would name another input, or none. A ':'
    is quoted (trtexec --help: "Input names can be wrapped with escaped single quotes (ex:
    'Input:0')")."""
    for name in names:
        bad = [char for char in (",", "'") if char in name]
        if bad:
            raise UsageError(
                f"input name {name!r} holds {' and '.join(repr(c) for c in bad)}, which "
                "trtexec's --minShapes/--optShapes/--maxShapes cannot hold (it splits them "
                "at commas and takes single quotes for a name's quotes)",
                hint="rename the input for --format tensorrt (--input-names), or export "
                     "--format onnx")


def _shape_name(name: str) -> str:
    """An input's name as a trtexec shape spec holds it: quoted where it holds a ':'."""
    return f"'{name}'" if ":" in name else name


def uses_fp16(profile: GpuProfile) -> bool:
    """FP16 only where it pays: the card has FP16 and Tensor Cores to run it on."""
    return profile.supports("fp16") and profile.compute.tensor_cores


def shape_ranges(inputs: ModelInputs, max_batch_size: int) -> dict[str, tuple[tuple[int, ...], ...]]:
    """(min, opt, max) shape per input: the batch from 1 to the maximum (opt at the maximum,
    where a dynamic batcher runs a busy server); other dynamic axes from 1 to
    DYNAMIC_AXIS_HEADROOM × the example's length, opt at the example's."""
    ranges = {}
    for name, tensor in zip(inputs.names, inputs.tensors):
        low, opt, high = list(tensor.shape), list(tensor.shape), list(tensor.shape)
        for axis, label in inputs.axes_of(name).items():
            if label == BATCH_AXIS_NAME:
                low[axis], opt[axis], high[axis] = 1, max_batch_size, max_batch_size
            else:
                low[axis], high[axis] = 1, tensor.shape[axis] * DYNAMIC_AXIS_HEADROOM
        ranges[name] = (tuple(low), tuple(opt), tuple(high))
    return ranges


def build_recipe(profile: GpuProfile, inputs: ModelInputs, max_batch_size: int, *,
                 version: str = "1", onnx_name: str = ONNX_FILENAME) -> dict:
    """The trtexec command that builds this model's plan on the target, for the report.

    The command runs in the model's folder (``DIR/NAME``), as ``tritonkit deploy`` runs it
    in a one-shot container before Triton starts; the plan lands beside the ONNX file.
    """
    ranges = shape_ranges(inputs, max_batch_size)
    plan = plan_filename(profile)

    def shapes(which: int) -> str:
        return ",".join(f"{_shape_name(name)}:{'x'.join(str(d) for d in r[which])}"
                        for name, r in ranges.items())

    argv = ["trtexec", f"--onnx={version}/{onnx_name}", f"--saveEngine={version}/{plan}"]
    if uses_fp16(profile):
        argv.append("--fp16")
    argv += [f"--minShapes={shapes(0)}", f"--optShapes={shapes(1)}", f"--maxShapes={shapes(2)}"]
    image = trtexec_image(profile)
    return {
        "gpu": profile.name,
        "compute_capability": profile.cc_key,
        "plan": f"{version}/{plan}",
        "container": image,
        "tensorrt_version": profile.stack.tensorrt_version,
        "fp16": uses_fp16(profile),
        "command": argv,
        # By hand, a shell command line: from the model's folder, on a machine with the
        # target GPU. A shell fills in $PWD (the folder may have moved since the export);
        # the rest is quoted for it.
        "docker": f'docker run --rm --gpus all -v "$PWD":/work -w /work '
                  f"{shlex.join([image, *argv])}",
        "shapes": {name: {"min": list(r[0]), "opt": list(r[1]), "max": list(r[2])}
                   for name, r in ranges.items()},
        "note": "a plan must be built on the target GPU with the TensorRT of the container "
                "that serves it; tritonkit deploy runs this command there, in the model's folder "
                "(by hand: 'docker', a shell command line, in that folder)",
    }


def trtexec_image(profile: GpuProfile) -> str:
    """NGC's TensorRT image of the release whose Triton serves plans on this card.

    It has ``trtexec`` on its PATH and the same TensorRT as that Triton image.
    """
    return profile.stack.triton_image_tensorrt.replace("/tritonserver:", "/tensorrt:", 1)


def can_build_here(profile: GpuProfile) -> tuple[bool, str]:
    """Whether a plan for ``profile`` can be built on this machine, and why not."""
    try:
        installed = _installed_tensorrt()
    except (ImportError, OSError) as exc:  # the bindings without their libraries
        return False, f"TensorRT's Python package is installed but cannot be imported ({exc})"
    why = why_not_build_here(profile, tensorrt_version=installed, gpu=_cuda_gpu())
    return why is None, why or ""


def why_not_build_here(profile: GpuProfile, *, tensorrt_version: str | None,
                       gpu: tuple[str, str] | None) -> str | None:
    """Why a plan for ``profile`` cannot be built with this TensorRT on this GPU, or None.

    ``gpu`` is (name, compute capability) of the CUDA device here, None without one. A plan
    loads only in a TensorRT of the release that built it, so the TensorRT here must be the
    one the profile's Triton image serves plans with: a plan from a newer pip ``tensorrt``
    would not load there, and the recipe builds it in the matching container instead.
    """
    if tensorrt_version is None:
        return "TensorRT's Python package is not installed here"
    if gpu is None:
        return "no CUDA GPU here"
    name, here = gpu
    if here != profile.cc_key:
        return (f"the GPU here ({name}, compute capability {here}) is not the target "
                f"({profile.display_name}, {profile.cc_key})")
    serving = profile.stack.tensorrt_version
    if not same_release(tensorrt_version, serving):
        return (f"TensorRT {tensorrt_version} is installed here, but "
                f"{profile.stack.triton_image_tensorrt} serves plans built with TensorRT "
                f"{serving}, and a plan loads only in the TensorRT release that built it")
    return None


def same_release(installed: str, serving: str) -> bool:
    """Whether ``installed`` (``10.14.1.48``) is the ``serving`` release (``10`` or ``10.14.1``)."""
    want = serving.split(".")
    return installed.split(".")[:len(want)] == want


def _installed_tensorrt() -> str | None:
    if importlib.util.find_spec("tensorrt") is None:
        return None
    import tensorrt as trt

    return trt.__version__


def _cuda_gpu() -> tuple[str, str] | None:
    import torch

    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return torch.cuda.get_device_name(), f"{major}.{minor}"


def build_plan(onnx_path: Path, plan_path: Path, profile: GpuProfile, inputs: ModelInputs,
               max_batch_size: int) -> dict:
    """Build a plan with TensorRT's Python API: FP16 where it pays, one optimization profile
    over the batch range. Returns the build's record for the report."""
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    major = int(trt.__version__.split(".")[0])
    # TensorRT 10 networks are always explicit-batch; 8.x needs the flag.
    flags = 0 if major >= 10 else 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        problems = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise ExportError(f"TensorRT cannot parse the ONNX graph: {problems or 'unknown error'}",
                          hint="export with --format onnx and serve it with ONNX Runtime")
    config = builder.create_builder_config()
    # TensorRT 11 builds strongly typed networks only: it has no FP16 flag (precision comes
    # from the graph's own types) and no platform_has_fast_fp16.
    fp16_flag = getattr(trt.BuilderFlag, "FP16", None)
    fp16 = (uses_fp16(profile) and fp16_flag is not None
            and getattr(builder, "platform_has_fast_fp16", True))
    if fp16:
        config.set_flag(fp16_flag)
    optimization = builder.create_optimization_profile()
    ranges = shape_ranges(inputs, max_batch_size)
    for name, (low, opt, high) in ranges.items():
        optimization.set_shape(name, low, opt, high)
    config.add_optimization_profile(optimization)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise ExportError("TensorRT could not build a plan for the graph (see its log above)",
                          hint="export with --format onnx and serve it with ONNX Runtime")
    plan_path.write_bytes(bytes(serialized))
    return {"tensorrt": trt.__version__, "fp16": fp16, "plan": plan_path.name,
            "shapes": {name: {"min": list(r[0]), "opt": list(r[1]), "max": list(r[2])}
                       for name, r in ranges.items()}}
