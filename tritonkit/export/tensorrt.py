"""TensorRT plans: built on the target GPU, or a recipe recorded for building them there.

A plan is specific to one GPU architecture and one TensorRT version, and the builder
times kernels on the card itself, so a plan is only built where the target GPU is
present. Elsewhere the report carries the exact ``trtexec`` command for the profile's
Triton/TensorRT container. TensorRT 10 cannot target compute capability 6.0 at all: a
P100 is served through ONNX Runtime instead (``profile.stack.tensorrt_plans`` is false).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tritonkit.errors import ExportError, UsageError
from tritonkit.export.spec import BATCH_AXIS_NAME, ModelInputs
from tritonkit.profiles import GpuProfile

# Non-batch dynamic axes need a range too; the recipe allows up to this many times the
# example's length (edit the recorded command for longer inputs).
DYNAMIC_AXIS_HEADROOM = 4


def plan_filename(profile: GpuProfile) -> str:
    """``model_<gpu>.plan``: one plan per compute capability in Triton's cc_model_filenames."""
    return f"model_{profile.name}.plan"


def refuse_unsupported(profile: GpuProfile) -> None:
    """A UsageError for a card TensorRT plans cannot run on (the P100)."""
    if not profile.stack.tensorrt_plans:
        raise UsageError(
            f"--format tensorrt is not supported on {profile.display_name} (compute capability "
            f"{profile.cc_key}): TensorRT 10 cannot target it and "
            f"TensorRT {profile.stack.tensorrt_version} only deprecates it",
            hint=f"export with --format onnx: Triton serves it with ONNX Runtime on CUDA, the "
                 f"supported path for --gpu {profile.name}")


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
                 version: str = "1", onnx_name: str = "model.onnx") -> dict:
    """The trtexec command that builds this model's plan on the target, for the report.

    The command runs in the model's folder (``DIR/NAME``), as ``tritonkit deploy`` runs it
    in a one-shot container before Triton starts; the plan lands beside the ONNX file.
    """
    ranges = shape_ranges(inputs, max_batch_size)
    plan = plan_filename(profile)

    def shapes(which: int) -> str:
        return ",".join(f"{name}:{'x'.join(str(d) for d in r[which])}" for name, r in ranges.items())

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
        # By hand: from the model's folder, on a machine with the target GPU.
        "docker": ["docker", "run", "--rm", "--gpus", "all", "-v", "$PWD:/work", "-w", "/work",
                   image, *argv],
        "shapes": {name: {"min": list(r[0]), "opt": list(r[1]), "max": list(r[2])}
                   for name, r in ranges.items()},
        "note": "a plan must be built on the target GPU with the TensorRT of the container "
                "that serves it; tritonkit deploy runs this command there, in the model's folder",
    }


def trtexec_image(profile: GpuProfile) -> str:
    """NGC's TensorRT image of the release whose Triton serves plans on this card.

    It has ``trtexec`` on its PATH and the same TensorRT as that Triton image.
    """
    return profile.stack.triton_image_tensorrt.replace("/tritonserver:", "/tensorrt:", 1)


def can_build_here(profile: GpuProfile) -> tuple[bool, str]:
    """Whether a plan for ``profile`` can be built on this machine, and why not."""
    if importlib.util.find_spec("tensorrt") is None:
        return False, "TensorRT's Python package is not installed here"
    import torch

    if not torch.cuda.is_available():
        return False, "no CUDA GPU here"
    major, minor = torch.cuda.get_device_capability()
    here = f"{major}.{minor}"
    if here != profile.cc_key:
        return False, (f"the GPU here ({torch.cuda.get_device_name()}, compute capability "
                       f"{here}) is not the target ({profile.display_name}, {profile.cc_key})")
    return True, ""


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
    fp16 = uses_fp16(profile) and builder.platform_has_fast_fp16
    if fp16:
        config.set_flag(trt.BuilderFlag.FP16)
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
