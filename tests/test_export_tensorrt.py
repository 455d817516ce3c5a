"""tritonkit export --format tensorrt: refused on a P100, a recipe for the target without
its GPU, a plan built with TensorRT's Python API where the GPU is here."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest
import torch

import tritonkit
from tests.conftest import ROOT, run_cli
from tests.test_export_errors import export_fails
from tritonkit.errors import EXIT_USAGE, UsageError
from tritonkit.export import tensorrt
from tritonkit.export.spec import load_factory, normalize_inputs
from tritonkit.model_config import read_config
from tritonkit.profiles import load_profile
from tritonkit.server.container import container_spec

MLP = ROOT / "examples" / "mlp.py"


def test_p100_profile_refuses_tensorrt_plan_and_names_onnx_runtime(capsys, tmp_path):
    code, line, hint = export_fails(capsys, tmp_path, f"{MLP}:build", "--name", "mlp",
                                    "--gpu", "p100", "--format", "tensorrt")
    assert code == EXIT_USAGE
    assert "--format tensorrt is not supported on Tesla P100" in line
    assert "compute capability 6.0" in line and "TensorRT 10 cannot target it" in line
    assert "--format onnx" in hint and "ONNX Runtime" in hint


def test_tensorrt_needs_a_target_gpu(capsys, tmp_path):
    code, line, _ = export_fails(capsys, tmp_path, f"{MLP}:build", "--name", "mlp",
                                 "--format", "tensorrt")
    assert code == EXIT_USAGE and "needs --gpu" in line


@pytest.fixture
def recipe_export(tmp_path, monkeypatch, capsys) -> tuple[Path, str]:
    """The MLP exported for an A10 on a machine without one; the repository and stdout."""
    monkeypatch.setattr(tensorrt, "can_build_here", lambda profile: (False, "no CUDA GPU here"))
    code = run_cli("export", f"{MLP}:build", "--name", "mlp", "--repository", tmp_path,
                   "--gpu", "a10", "--format", "tensorrt", "--exporter", "torchscript")
    assert code == 0
    return tmp_path, capsys.readouterr().out


def test_without_the_target_gpu_the_exact_trtexec_recipe_is_recorded(recipe_export):
    repository, out = recipe_export
    report = json.loads((repository / "mlp" / "export-report.json").read_text())
    recipe = report["tensorrt_recipe"]
    assert recipe["command"] == [
        "trtexec", "--onnx=1/model.onnx", "--saveEngine=1/model_a10.plan", "--fp16",
        "--minShapes=INPUT__0:1x16", "--optShapes=INPUT__0:32x16", "--maxShapes=INPUT__0:32x16"]
    assert recipe["compute_capability"] == "8.6"
    assert recipe["container"] == "nvcr.io/nvidia/tensorrt:25.12-py3"
    assert not list((repository / "mlp").rglob("*.plan")), "a plan is only built on the target"
    assert "must be built on the target" in " ".join(out.split())


def test_the_recipes_docker_line_is_for_a_shell_in_the_model_folder(recipe_export):
    # It was an argv holding a literal $PWD: run as a list, docker got "$PWD:/work";
    # joined for a shell, the quoting kept the shell from filling it in.
    repository, _ = recipe_export
    recipe = json.loads((repository / "mlp" / "export-report.json").read_text())["tensorrt_recipe"]
    assert isinstance(recipe["docker"], str) and "shell command line" in recipe["note"]
    echo = recipe["docker"].replace("docker ", "printf '%s\\n' ", 1)     # each argument a line
    echoed = subprocess.run(["bash", "-c", echo], cwd=repository / "mlp", capture_output=True,
                            text=True, check=True)
    assert echoed.stdout.splitlines() == [
        "run", "--rm", "--gpus", "all", "-v", f"{repository / 'mlp'}:/work", "-w", "/work",
        recipe["container"], *recipe["command"]]


def test_a_plans_config_says_which_shapes_get_cuda_graphs(recipe_export):
    # Without graph_spec the TensorRT backend captures batch 1 and max_batch_size at the
    # plan's opt shapes (tensorrt_backend's InitializeGraphSpecs); "CUDA graphs on" had read
    # as if every shape got one.
    repository, _ = recipe_export
    a10 = (repository / "mlp" / "configs" / "a10.pbtxt").read_text()
    assert read_config(repository / "mlp" / "configs" / "a10.pbtxt").optimization.cuda.graphs
    assert ("CUDA graphs on: the TensorRT backend captures batch 1 and 32, other dynamic axes "
            "at the plan's opt sizes; other shapes run without a graph") in a10


def test_the_recipe_is_what_deploy_runs_on_the_target(recipe_export):
    repository, _ = recipe_export
    a10 = read_config(repository / "mlp" / "configs" / "a10.pbtxt")
    assert a10.platform == "tensorrt_plan"
    assert dict(a10.cc_model_filenames) == {"8.6": "model_a10.plan"}
    assert read_config(repository / "mlp" / "configs" / "p100.pbtxt").platform == "onnxruntime_onnx"
    report = json.loads((repository / "mlp" / "export-report.json").read_text())
    (recipe,) = container_spec(repository, "a10").recipes
    assert list(recipe.argv) == report["tensorrt_recipe"]["command"]


def test_optimization_profile_spans_the_batch_range_and_grows_dynamic_axes():
    inputs = normalize_inputs({"input_ids": torch.zeros(2, 12, dtype=torch.int64)},
                              dynamic_axes={"input_ids": {1: "sequence"}})
    assert tensorrt.shape_ranges(inputs, 16) == {
        "input_ids": ((1, 1), (16, 12), (16, 12 * tensorrt.DYNAMIC_AXIS_HEADROOM))}


def test_an_input_name_with_a_colon_is_quoted_in_the_trtexec_shapes():
    # trtexec --help: "Input names can be wrapped with escaped single quotes (ex: 'Input:0')"
    inputs = normalize_inputs({"input:0": torch.zeros(2, 16), "mask": torch.zeros(2, 16)})
    command = tensorrt.build_recipe(load_profile("a10"), inputs, 8)["command"]
    assert "--minShapes='input:0':1x16,mask:1x16" in command
    assert "--maxShapes='input:0':8x16,mask:8x16" in command


@pytest.mark.parametrize("name,says", [("ids,mask", "','"), ("it's", "\"'\"")])
def test_an_input_name_trtexec_shapes_cannot_hold_is_refused_before_the_export(
        tmp_path, name, says):
    # trtexec splits its shape lists on ',' before anything else and takes ' as the quotes:
    # the recipe would have built a plan for another input's name, or failed on the target.
    with pytest.raises(UsageError) as caught:
        tritonkit.export(torch.nn.Linear(16, 4), {name: torch.randn(2, 16)}, name="m",
                         repository=tmp_path / "repo", gpu="a10", format="tensorrt")
    assert caught.value.message == (
        f"input name {name!r} holds {says}, which trtexec's --minShapes/--optShapes/--maxShapes "
        "cannot hold (it splits them at commas and takes single quotes for a name's quotes)")
    assert "--input-names" in caught.value.hint
    assert not (tmp_path / "repo").exists()


def test_a_plan_is_built_only_with_the_tensorrt_release_the_target_triton_serves():
    a10 = load_profile("a10")
    here = ("NVIDIA A10", "8.6")
    assert tensorrt.why_not_build_here(a10, tensorrt_version="10.14.1.48", gpu=here) is None
    why = tensorrt.why_not_build_here(a10, tensorrt_version="11.4.0.106", gpu=here)
    assert why == ("TensorRT 11.4.0.106 is installed here, but nvcr.io/nvidia/tritonserver:25.12-py3 "
                   "serves plans built with TensorRT 10, and a plan loads only in the TensorRT "
                   "release that built it")
    assert tensorrt.same_release("10.14.1.48", "10.14.1")
    assert not tensorrt.same_release("10.13.3.9", "10.14.1")
    assert not tensorrt.same_release("1.0", "10")


def test_a_plan_is_built_only_on_the_target_card_with_tensorrt_installed():
    a10 = load_profile("a10")
    assert tensorrt.why_not_build_here(a10, tensorrt_version=None, gpu=("NVIDIA A10", "8.6")) == \
        "TensorRT's Python package is not installed here"
    assert tensorrt.why_not_build_here(a10, tensorrt_version="10.14.1", gpu=None) == \
        "no CUDA GPU here"
    assert tensorrt.why_not_build_here(a10, tensorrt_version="10.14.1",
                                       gpu=("NVIDIA H200", "9.0")) == (
        "the GPU here (NVIDIA H200, compute capability 9.0) is not the target "
        "(NVIDIA A10 24 GB, 8.6)")


def test_a_release_mismatch_on_the_target_records_the_recipe_and_says_why(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tensorrt, "_installed_tensorrt", lambda: "11.4.0.106")
    monkeypatch.setattr(tensorrt, "_cuda_gpu", lambda: ("NVIDIA A10", "8.6"))
    code = run_cli("export", f"{MLP}:build", "--name", "mlp", "--repository", tmp_path,
                   "--gpu", "a10", "--format", "tensorrt", "--exporter", "torchscript")
    assert code == 0
    report = json.loads((tmp_path / "mlp" / "export-report.json").read_text())
    assert report["tensorrt_recipe"]["container"] == "nvcr.io/nvidia/tensorrt:25.12-py3"
    assert "tensorrt_build" not in report
    assert not list((tmp_path / "mlp").rglob("*.plan"))
    out = " ".join(capsys.readouterr().out.split())
    assert "TensorRT 11.4.0.106 is installed here" in out and "must be built on the target" in out


# --- on a CUDA GPU with TensorRT -------------------------------------------------------

def _why_no_tensorrt() -> str | None:
    if not torch.cuda.is_available():
        return "needs a CUDA GPU: torch sees none here"
    if importlib.util.find_spec("tensorrt") is None:
        return "needs TensorRT's Python package (pip install 'tensorrt-cu12>=10,<11')"
    import tensorrt as trt

    serving = load_profile("a10").stack.tensorrt_version
    if not tensorrt.same_release(trt.__version__, serving):
        return (f"needs the TensorRT {serving} that Triton serves plans with "
                f"(pip install 'tensorrt-cu12>=10,<11'); this is {trt.__version__}")
    return None


requires_tensorrt = pytest.mark.skipif(_why_no_tensorrt() is not None,
                                       reason=_why_no_tensorrt() or "")


@pytest.fixture
def this_gpu_profile(tmp_path) -> Path:
    """A profile for the card in this machine (the A10's, with this card's capability)."""
    major, minor = torch.cuda.get_device_capability()
    text = (ROOT / "configs" / "gpus" / "a10.toml").read_text()
    text = re.sub(r'(?m)^name = "a10"', 'name = "here"', text)
    text = re.sub(r"(?m)^compute_capability = 8\.6", f"compute_capability = {major}.{minor}", text)
    path = tmp_path / "here.toml"
    path.write_text(text)
    return path


def _run_plan(plan: Path, x: torch.Tensor) -> torch.Tensor:
    import tensorrt as trt

    engine = trt.Runtime(trt.Logger(trt.Logger.WARNING)).deserialize_cuda_engine(plan.read_bytes())
    context = engine.create_execution_context()
    context.set_input_shape("INPUT__0", tuple(x.shape))
    out = torch.empty(tuple(context.get_tensor_shape("OUTPUT__0")), device="cuda")
    context.set_tensor_address("INPUT__0", x.data_ptr())
    context.set_tensor_address("OUTPUT__0", out.data_ptr())
    stream = torch.cuda.current_stream()
    assert context.execute_async_v3(stream.cuda_stream)
    stream.synchronize()
    return out


@pytest.mark.gpu
@requires_tensorrt
def test_plan_is_built_here_for_this_cards_compute_capability_and_matches_pytorch(
        tmp_path, this_gpu_profile):
    code = run_cli("export", f"{MLP}:build", "--name", "mlp", "--repository", tmp_path / "repo",
                   "--gpu", this_gpu_profile, "--format", "tensorrt", "--max-batch-size", "8")
    assert code == 0
    model_dir = tmp_path / "repo" / "mlp"
    report = json.loads((model_dir / "export-report.json").read_text())
    major, minor = torch.cuda.get_device_capability()
    cc = f"{major}.{minor}"
    assert report["plans"] == {cc: "model_here.plan"}
    assert "tensorrt_recipe" not in report
    assert report["tensorrt_build"]["shapes"]["INPUT__0"] == {
        "min": [1, 16], "opt": [8, 16], "max": [8, 16]}
    plan = model_dir / "1" / "model_here.plan"
    assert report["files"]["1/model_here.plan"]["bytes"] == plan.stat().st_size
    config = read_config(model_dir / "config.pbtxt")
    assert config.platform == "tensorrt_plan" and dict(config.cc_model_filenames) == {
        cc: "model_here.plan"}

    module = load_factory(f"{MLP}:build")[0]
    tolerance = 2e-2 if report["tensorrt_build"]["fp16"] else 1e-4
    for batch in (1, 5, 8):
        x = torch.randn(batch, 16)
        with torch.no_grad():
            want = module(x)
        got = _run_plan(plan, x.cuda()).cpu()
        torch.testing.assert_close(got, want, atol=tolerance, rtol=tolerance)
