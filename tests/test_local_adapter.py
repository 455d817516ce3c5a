"""Generated configs load READY in the real local Triton, served through the ONNX Runtime adapter."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient

from tests import onnx_graphs
from tests.conftest import run_cli
from tritonkit.model_config import configure
from tritonkit.profiles import load_profile
from tritonkit.server.state import load_deployment, redeploy_command, state_dir

pytestmark = pytest.mark.server


@pytest.fixture
def exported_repo(tmp_path: Path) -> Path:
    onnx_graphs.mlp(tmp_path / "mlp")
    onnx_graphs.token_encoder(tmp_path / "encoder")
    for name, mbs, examples in [("mlp", 16, {"INPUT__0": [4, 16]}),
                                ("encoder", 4, {"input_ids": [2, 12]})]:
        (tmp_path / name / "export-report.json").write_text(json.dumps(
            {"max_batch_size": mbs,
             "inputs": [{"name": n, "example_shape": s} for n, s in examples.items()]}))
        configure(tmp_path, name, gpu="a10")
    return tmp_path


def _infer(client, model, arrays: dict[str, np.ndarray], output: str) -> np.ndarray:
    inputs = []
    for name, value in arrays.items():
        inp = httpclient.InferInput(name, list(value.shape),
                                    "FP32" if value.dtype == np.float32 else "INT64")
        inp.set_data_from_numpy(value)
        inputs.append(inp)
    return client.infer(model, inputs).as_numpy(output)


@pytest.mark.parametrize("gpu", ["a10", "p100"])
def test_generated_configs_load_ready_and_answer_like_onnx_runtime(exported_repo, gpu, capsys):
    before = {p: p.read_bytes() for p in exported_repo.rglob("*") if p.is_file()}
    assert run_cli("deploy", "--repository", exported_repo, "--gpu", gpu, "--http-port", "0",
                   "--grpc-port", "0", "--metrics-port", "0", "--timeout", "90") == 0
    deployment = load_deployment(exported_repo)
    # the profile served is said, and recorded: a redeploy hint names it again
    assert f"serving each model's configs/{gpu}.pbtxt" in " ".join(capsys.readouterr().out.split())
    assert f"--gpu {gpu}" in redeploy_command(exported_repo)
    # Closed before `down`: Triton drains open HTTP connections for up to its exit timeout.
    client = httpclient.InferenceServerClient(deployment.http_url, concurrency=16)
    try:
        assert client.is_model_ready("mlp") and client.is_model_ready("encoder")
        served = client.get_model_config("mlp")
        assert served["backend"] == "python"
        assert served["instance_group"][0]["kind"] == "KIND_CPU"
        serving = load_profile(gpu).serving           # the profile's batching made it through
        assert served["dynamic_batching"]["max_queue_delay_microseconds"] == serving.max_queue_delay_us
        # none generated; Triton fills in max_batch_size itself, which means the same
        assert served["dynamic_batching"].get("preferred_batch_size", []) in ([], [served["max_batch_size"]])
        # on the CPU one instance: ONNX Runtime spreads each run over the cores itself
        assert [g["count"] for g in served["instance_group"]] == [1]

        rng = np.random.default_rng(7)
        x = rng.standard_normal((3, 16)).astype(np.float32)
        ref = ort.InferenceSession(str(exported_repo / "mlp" / "1" / "model.onnx")).run(
            None, {"INPUT__0": x})[0]
        np.testing.assert_allclose(_infer(client, "mlp", {"INPUT__0": x}, "OUTPUT__0"), ref,
                                   rtol=1e-5, atol=1e-6)

        ids = rng.integers(0, 100, size=(2, 9)).astype(np.int64)   # a length nobody warmed
        mask = np.ones_like(ids)
        mask[:, 6:] = 0
        got = _infer(client, "encoder", {"input_ids": ids, "attention_mask": mask}, "hidden")
        ref = ort.InferenceSession(str(exported_repo / "encoder" / "1" / "model.onnx")).run(
            None, {"input_ids": ids, "attention_mask": mask})[0]
        np.testing.assert_allclose(got, ref, rtol=1e-6)
        assert np.all(got[:, 6:] == 0)
    finally:
        client.close()
        run_cli("down", "--repository", exported_repo)
    # The production repository is untouched by the local mirror.
    after = {p: p.read_bytes() for p in exported_repo.rglob("*")
             if p.is_file() and state_dir(exported_repo) not in p.parents}
    assert after == before


def test_concurrent_requests_are_batched_by_the_server(exported_repo):
    assert run_cli("deploy", "--repository", exported_repo, "--http-port", "0",
                   "--grpc-port", "0", "--metrics-port", "0", "--timeout", "90") == 0
    try:
        deployment = load_deployment(exported_repo)
        x = np.ones((1, 16), np.float32)
        # 16 users, each with its connection open, send at once, round after round until
        # the server ran some requests as one batch: requests queue only while the model
        # runs, and on a busy host 16 sends may reach it one by one (96 requests never
        # queued, in 2 of 9 suite runs). 20 rounds at most. (A tritonclient client stays
        # on the thread that made it.)
        before, seen = _stats(deployment.http_url), {"sent": 0, "batched": False}

        def judge():
            seen["sent"] += 16
            seen["after"] = _stats(deployment.http_url)
            executions = seen["after"]["execution_count"] - before["execution_count"]
            seen["batched"] = executions < seen["sent"]

        together, answered = threading.Barrier(16), threading.Barrier(16, action=judge)

        def user(_):
            client = httpclient.InferenceServerClient(deployment.http_url)
            answers = []
            try:
                for _ in range(20):
                    together.wait(timeout=60)
                    answers.append(_infer(client, "mlp", {"INPUT__0": x}, "OUTPUT__0"))
                    answered.wait(timeout=60)
                    if seen["batched"]:
                        break
            finally:
                client.close()
            return answers

        with ThreadPoolExecutor(16) as pool:
            results = [answer for answers in pool.map(user, range(16)) for answer in answers]
        after, sent = seen["after"], seen["sent"]
        assert all(np.array_equal(r, results[0]) for r in results)
        inferences = after["inference_count"] - before["inference_count"]
        executions = after["execution_count"] - before["execution_count"]
        assert inferences == sent
        assert executions < inferences          # several requests ran as one batch
    finally:
        run_cli("down", "--repository", exported_repo)


def _stats(url: str) -> dict:
    stats = httpclient.InferenceServerClient(url).get_inference_statistics("mlp")
    return stats["model_stats"][0]


def _scorer(repository: Path) -> None:
    onnx_graphs.scorer(repository / "scorer")
    (repository / "scorer" / "export-report.json").write_text(json.dumps(
        {"max_batch_size": 8, "inputs": [{"name": "x", "example_shape": [2, 8]},
                                         {"name": "weight", "example_shape": [2]}]}))
    configure(repository, "scorer", gpu="a10")


def test_a_model_with_one_value_per_sample_loads_and_answers(tmp_path, capsys):
    """A [batch] input or output (a regression score): Triton refuses a tensor with no
    dims, so the config says dims [1] reshaped to [], and the model still sees [batch]."""
    _scorer(tmp_path)
    assert run_cli("config", "scorer", "--repository", tmp_path, "--check") == 0
    assert run_cli("deploy", "--repository", tmp_path, "--http-port", "0", "--grpc-port", "0",
                   "--metrics-port", "0", "--timeout", "90") == 0     # warm-up included
    client = httpclient.InferenceServerClient(load_deployment(tmp_path).http_url)
    try:
        rng = np.random.default_rng(3)
        x = rng.standard_normal((3, 8)).astype(np.float32)
        weight = rng.standard_normal((3, 1)).astype(np.float32)
        got = _infer(client, "scorer", {"x": x, "weight": weight}, "score")
        ref = ort.InferenceSession(str(tmp_path / "scorer" / "1" / "model.onnx")).run(
            None, {"x": x, "weight": weight[:, 0]})[0]
        assert got.shape == (3, 1)
        np.testing.assert_allclose(got[:, 0], ref, rtol=1e-5, atol=1e-6)
    finally:
        client.close()
        run_cli("down", "--repository", tmp_path)


def test_a_config_with_a_tensor_without_dims_fails_the_check(tmp_path, capsys):
    _scorer(tmp_path)
    config = tmp_path / "scorer" / "config.pbtxt"
    text = config.read_text()
    config.write_text(text.replace("dims: 1\n  reshape {\n  }\n", "", 1))
    assert "dims: 1" in text and config.read_text() != text
    assert run_cli("config", "scorer", "--repository", tmp_path, "--check") == 2
    assert "has no dims (Triton refuses it)" in capsys.readouterr().err


def test_an_onnx_model_whose_output_has_a_label_file_serves_its_labels(tmp_path):
    """Triton opens an output's label_filename from the model's folder when it loads the
    model (the classification extension answers with those labels): the local mirror
    must hold it too, or the model fails to load locally while the GPU host serves it."""
    onnx_graphs.mlp(tmp_path / "mlp")
    (tmp_path / "mlp" / "export-report.json").write_text(json.dumps(
        {"max_batch_size": 8, "inputs": [{"name": "INPUT__0", "example_shape": [4, 16]}]}))
    configure(tmp_path, "mlp", gpu="a10")
    (tmp_path / "mlp" / "labels.txt").write_text("".join(f"class{i}\n" for i in range(10)))
    config = tmp_path / "mlp" / "config.pbtxt"
    output = '  name: "OUTPUT__0"\n  data_type: TYPE_FP32\n  dims: 10\n'
    assert output in config.read_text()
    config.write_text(config.read_text().replace(output,
                                                 output + '  label_filename: "labels.txt"\n'))
    assert run_cli("deploy", "--repository", tmp_path, "--http-port", "0", "--grpc-port", "0",
                   "--metrics-port", "0", "--timeout", "90", "--no-warmup") == 0
    client = httpclient.InferenceServerClient(load_deployment(tmp_path).http_url)
    try:
        x = np.random.default_rng(5).standard_normal((1, 16)).astype(np.float32)
        inp = httpclient.InferInput("INPUT__0", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        top = httpclient.InferRequestedOutput("OUTPUT__0", class_count=1)
        [[best]] = client.infer("mlp", [inp], outputs=[top]).as_numpy("OUTPUT__0")
        scores = ort.InferenceSession(str(tmp_path / "mlp" / "1" / "model.onnx")).run(
            None, {"INPUT__0": x})[0][0]
        assert best.decode().endswith(f":{scores.argmax()}:class{scores.argmax()}")
    finally:
        client.close()
        run_cli("down", "--repository", tmp_path)


@pytest.mark.parametrize("edit, says", [
    (('name: "INPUT__0"', 'name: "image"'),
     "the config's input 'image' is not in the graph (its inputs: 'INPUT__0'); "
     "the graph's input 'INPUT__0' is not in the config"),
    (('  name: "OUTPUT__0"\n  data_type: TYPE_FP32', '  name: "OUTPUT__0"\n  data_type: TYPE_FP16'),
     "output 'OUTPUT__0' is TYPE_FP16 in the config, TYPE_FP32 in the graph"),
])
def test_a_graph_that_does_not_match_its_config_fails_its_load_naming_the_difference(
        tmp_path, capsys, edit, says):
    """Not at the warm-up sample with "'NoneType' object has no attribute 'as_numpy'"."""
    onnx_graphs.mlp(tmp_path / "mlp")
    (tmp_path / "mlp" / "export-report.json").write_text(json.dumps(
        {"max_batch_size": 8, "inputs": [{"name": "INPUT__0", "example_shape": [4, 16]}]}))
    configure(tmp_path, "mlp", gpu="a10")
    config = tmp_path / "mlp" / "config.pbtxt"
    assert edit[0] in config.read_text()
    config.write_text(config.read_text().replace(edit[0], edit[1]))
    code = run_cli("deploy", "--repository", tmp_path, "--http-port", "0", "--grpc-port", "0",
                   "--metrics-port", "0", "--timeout", "90")
    if code == 0:                             # served a model it should have refused
        run_cli("down", "--repository", tmp_path)
    err = capsys.readouterr().err
    assert code != 0
    assert "failed to load 'mlp'" in err
    assert says in err
    assert "tritonkit config mlp --force, or export it again) and redeploy" in err
    assert "as_numpy" not in err
    assert not (state_dir(tmp_path) / "server.json").exists()
