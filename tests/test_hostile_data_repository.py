"""A repository of data alone (ONNX files, configs, reports; no Python), from anywhere, runs
nothing when deployed. The third adversarial pass ran commands through three fields that
reach a shell or a container: an ONNX model's config parameter EXECUTION_ENV_PATH (the
local adapter's python backend sourced the environment's bin/activate, and its tar
extraction wrote outside the repository), a python model's default_model_filename (put
unquoted on the stub's shell line) and the export report's plan recipe (its image and
command became a compose service and a Kubernetes initContainer)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests import onnx_graphs
from tests.conftest import error_lines, run_cli
from tritonkit.model_config import configure, read_config
from tritonkit.server.local_repository import local_config

PORTS = ("--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")


def _onnx_repository(tmp_path, parameters: str = ""):
    repo = tmp_path / "repo"
    onnx_graphs.mlp(repo / "mlp")
    configure(repo, "mlp")
    config = repo / "mlp" / "config.pbtxt"
    config.write_text(config.read_text() + parameters)
    return repo


def test_the_adapter_serves_an_onnx_model_with_only_the_parameters_it_reads(tmp_path):
    repo = _onnx_repository(tmp_path, (
        'parameters { key: "EXECUTION_ENV_PATH" value { string_value: "$$TRITON_MODEL_DIRECTORY/env" } }\n'
        'parameters { key: "intra_op_thread_count" value { string_value: "2" } }\n'
        'parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value { string_value: "no" } }\n'))
    served = local_config(read_config(repo / "mlp" / "config.pbtxt"))
    assert dict((k, v.string_value) for k, v in served.parameters.items()) == {
        "intra_op_thread_count": "2", "onnx_model": "model.onnx"}


@pytest.mark.server
def test_an_onnx_models_execution_environment_is_not_run_by_a_local_deploy(tmp_path, capsys):
    marker = tmp_path / "ran"
    repo = _onnx_repository(tmp_path, (
        'parameters { key: "EXECUTION_ENV_PATH" value { string_value: "$$TRITON_MODEL_DIRECTORY/env" } }\n'))
    activate = repo / "mlp" / "env" / "bin" / "activate"
    activate.parent.mkdir(parents=True)
    activate.write_text(f"touch {marker}\n")
    try:
        assert run_cli("deploy", "--repository", repo, *PORTS, "--timeout", "60") == 0
    finally:
        run_cli("down", "--repository", repo)
    assert not marker.exists()


@pytest.mark.parametrize("field, says", [
    ('default_model_filename: "$(touch${IFS}ran).py"',
     "default_model_filename '$(touch${IFS}ran).py' of python model 'pym' is not a plain .py "
     "file name"),
    ('parameters { key: "EXECUTION_ENV_PATH" value { string_value: "$$TRITON_MODEL_DIRECTORY/$(touch${IFS}ran)" } }',
     "EXECUTION_ENV_PATH '$$TRITON_MODEL_DIRECTORY/$(touch${IFS}ran)' of 'pym' is not a plain path"),
])
@pytest.mark.parametrize("target", ["local", "compose", "k8s"])
def test_a_python_models_fields_that_reach_a_shell_are_refused_before_the_server_starts(
        tmp_path, capsys, field, says, target):
    """In a container too: Triton's image starts the stub the same way."""
    repo = tmp_path / "repo"
    (repo / "pym" / "1").mkdir(parents=True)
    (repo / "pym" / "1" / "model.py").write_text("raise SystemExit('never imported')\n")
    config = repo / "pym" / "config.pbtxt"
    config.write_text(f'name: "pym"\nbackend: "python"\nmax_batch_size: 0\n{field}\n'
                      'input { name: "X" data_type: TYPE_FP32 dims: 1 }\n'
                      'output { name: "Y" data_type: TYPE_FP32 dims: 1 }\n')
    args = ((*PORTS, "--timeout", "20") if target == "local" else
            ("--target", target, "--gpu", "cpu", "--out", tmp_path / "out",
             *(("--no-up",) if target == "compose" else ())))
    code = run_cli("deploy", "--repository", repo, *args)
    error = error_lines(capsys.readouterr().err)[0]
    assert code == 2
    assert error.startswith(f"error: {config}: {says}")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.y*ml"))
    assert not list(tmp_path.rglob("ran"))


def test_a_python_model_without_its_code_is_not_served(tmp_path, capsys):
    """No model.py: a folder of data, which the python backend would still start a stub
    for (and source an execution environment's activate)."""
    repo = tmp_path / "repo"
    (repo / "pym" / "1").mkdir(parents=True)
    (repo / "pym" / "config.pbtxt").write_text(
        'name: "pym"\nbackend: "python"\nmax_batch_size: 0\n'
        'input { name: "X" data_type: TYPE_FP32 dims: 1 }\n'
        'output { name: "Y" data_type: TYPE_FP32 dims: 1 }\n')
    assert run_cli("deploy", "--repository", repo, *PORTS, "--timeout", "20") == 2
    assert error_lines(capsys.readouterr().err)[0] == (
        f"error: python model 'pym' has no model.py in any version folder of {repo / 'pym'}: "
        "nothing to serve")


def _plan_repository(tmp_path, recipe) -> object:
    repo = _onnx_repository(tmp_path)
    a10 = repo / "mlp" / "configs" / "a10.pbtxt"
    text = a10.read_text()
    a10.write_text(text.replace('backend: "onnxruntime"', 'platform: "tensorrt_plan"')
                   .replace('platform: "onnxruntime_onnx"', 'platform: "tensorrt_plan"'))
    (repo / "mlp" / "1" / "model.plan").write_bytes(b"")
    report = repo / "mlp" / "export-report.json"
    data = json.loads(report.read_text()) if report.exists() else {}
    report.write_text(json.dumps({**data, "tensorrt_recipe": recipe}))
    return repo


@pytest.mark.parametrize("recipe, says", [
    ({"image": "docker.io/attacker/evil:latest", "command": ["sh", "-c", "cp /etc/passwd ."]},
     "runs sh, not trtexec"),
    (["trtexec", "--onnx=1/model.onnx", "--plugins=/models/mlp/evil.so"],
     "passes --plugins=/models/mlp/evil.so"),
    ("trtexec --onnx=1/model.onnx --saveEngine=/etc/cron.d/x", "gives --saveEngine=/etc/cron.d/x, "
     "a path outside the model's folder"),
    ("trtexec --onnx=../../other/model.onnx", "gives --onnx=../../other/model.onnx, a path "
     "outside the model's folder"),
])
@pytest.mark.parametrize("target", ["compose", "k8s"])
def test_a_plan_recipe_from_a_report_runs_only_trtexec_in_the_profiles_image(
        tmp_path, capsys, recipe, says, target):
    repo = _plan_repository(tmp_path, recipe)
    out = tmp_path / "out"
    extra = ("--no-up",) if target == "compose" else ()
    code = run_cli("deploy", "--target", target, "--gpu", "a10", "--repository", repo,
                   "--out", out, *extra)
    error = error_lines(capsys.readouterr().err)[0]
    assert code == 2
    assert error.startswith(f"error: {repo / 'mlp' / 'export-report.json'}: 'tensorrt_recipe' {says}")
    assert not out.exists() or not any(out.iterdir())


def test_a_recipes_image_is_the_profiles_whatever_the_report_names(tmp_path):
    repo = _plan_repository(tmp_path, {"image": "docker.io/attacker/evil:latest",
                                       "command": ["trtexec", "--onnx=1/model.onnx",
                                                   "--saveEngine=1/model.plan", "--fp16"]})
    out = tmp_path / "out"
    assert run_cli("deploy", "--target", "k8s", "--gpu", "a10", "--repository", repo,
                   "--out", out) == 0
    docs = [doc for path in out.rglob("*.yaml") for doc in yaml.safe_load_all(path.read_text())]
    assert "attacker" not in json.dumps(docs)
    builders = [c for doc in docs if doc and doc.get("kind") == "Deployment"
                for c in doc["spec"]["template"]["spec"].get("initContainers", [])
                if c.get("command", [""])[0] == "trtexec"]
    assert [c["image"] for c in builders] == ["nvcr.io/nvidia/tensorrt:25.12-py3"]
