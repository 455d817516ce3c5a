"""`tritonkit warmup`: which requests it sends (batch sizes, dynamic dimensions, every dtype,
every instance and version) and what it does with a shape the model refuses."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.conftest import run_cli
from tests.warmup.conftest import (
    DECOUPLED_CONFIG, DECOUPLED_MODEL, ECHO_CONFIG, _deploy, _echo_model, _input,
    _python_model, _touch_model_file, _user_inputs)
from tritonkit.client import example_input
from tritonkit.server.state import load_deployment, state_dir
from tritonkit.warmup import model_instances, warm_up, warmup_shapes


def test_batched_model_warms_one_preferred_and_max_batch_size():
    config = {"max_batch_size": 8, "input": [_input("INPUT__0", "TYPE_FP32", [4])],
              "dynamic_batching": {"preferred_batch_size": [4, 2]}}
    shapes = warmup_shapes(config)
    assert [s["INPUT__0"] for s in shapes] == [
        ("FP32", [1, 4]), ("FP32", [2, 4]), ("FP32", [4, 4]), ("FP32", [8, 4])]


def test_batch_sizes_also_come_from_the_config_model_warmup_entries():
    config = {"max_batch_size": 32, "input": [_input("INPUT__0", "TYPE_FP32", [4])],
              "dynamic_batching": {},
              "model_warmup": [{"name": f"batch_{b}", "batch_size": b,
                                "inputs": {"INPUT__0": {"data_type": "TYPE_FP32", "dims": [4]}}}
                               for b in (1, 4, 8)]}
    assert [s["INPUT__0"][1][0] for s in warmup_shapes(config)] == [1, 4, 8, 32]


def test_dynamic_dims_take_their_buckets_from_the_model_warmup_entries():
    config = {
        "max_batch_size": 4,
        "input": [_input("ids", "TYPE_INT64", [-1]), _input("mask", "TYPE_BOOL", [-1]),
                  _input("lang", "TYPE_STRING", [1])],
        "model_warmup": [
            {"name": "len_128", "batch_size": 1,
             "inputs": {"ids": {"data_type": "TYPE_INT64", "dims": [128]},
                        "mask": {"data_type": "TYPE_BOOL", "dims": [128]}}},
            {"name": "len_16", "batch_size": 1,
             "inputs": {"ids": {"data_type": "TYPE_INT64", "dims": [16]},
                        "mask": {"data_type": "TYPE_BOOL", "dims": [16]}}},
            {"name": "len_16_again", "batch_size": 4,
             "inputs": {"ids": {"data_type": "TYPE_INT64", "dims": [16]},
                        "mask": {"data_type": "TYPE_BOOL", "dims": [16]}}},
        ]}
    shapes = warmup_shapes(config)
    assert [(s["ids"][1], s["mask"][1], s["lang"]) for s in shapes] == [
        ([1, 16], [1, 16], ("BYTES", [1, 1])), ([1, 128], [1, 128], ("BYTES", [1, 1])),
        ([4, 16], [4, 16], ("BYTES", [4, 1])), ([4, 128], [4, 128], ("BYTES", [4, 1]))]
    assert shapes[0]["ids"][0] == "INT64" and shapes[0]["mask"][0] == "BOOL"


def test_dynamic_dims_without_model_warmup_get_a_small_default_and_no_batch_dim():
    config = {"max_batch_size": 0, "input": [_input("x", "TYPE_FP16", [-1, 3])]}
    assert [s["x"] for s in warmup_shapes(config)] == [("FP16", [1, 3]), ("FP16", [16, 3])]


@pytest.mark.parametrize("datatype", ["FP32", "FP16", "INT64", "INT8", "UINT8", "BOOL", "BYTES"])
def test_every_dtype_builds_an_input_tritonclient_accepts(datatype):
    tensor = example_input(datatype, [2, 3], np.random.default_rng(0))
    inp = httpclient.InferInput("x", [2, 3], datatype)
    inp.set_data_from_numpy(tensor)  # raises if dtype and datatype disagree
    assert tensor.shape == (2, 3)


def test_instances_count_per_group_and_per_listed_gpu():
    assert model_instances({}) == 1                                            # an ensemble
    assert model_instances({"instance_group": [{"count": 2, "kind": "KIND_CPU"}]}) == 2
    assert model_instances({"instance_group": [
        {"count": 2, "kind": "KIND_GPU", "gpus": [0, 1]}, {"count": 1, "kind": "KIND_CPU"}]}) == 5


@pytest.mark.server
def test_every_shape_gets_its_first_request_before_any_shape_spends_the_budget(warm_server):
    """Three requests cannot make a shape steady, but each shape (batch 1 and 8) meets its
    cold start: a budget spent on the first shape would leave batch 8 cold."""
    _touch_model_file(warm_server)
    [result] = warm_up(Path(warm_server.repository), models=["example"], reload=True,
                       requests=3, check=False)
    assert not result.steady and result.requests == 3
    # no steady p50 to speak of, so no cold-start ratio (a p50 of the cold request reads 1.0x)
    assert result.steady_p50_ms is None and result.ratio is None
    client = httpclient.InferenceServerClient(warm_server.http_url)
    try:
        [stats] = client.get_inference_statistics("example")["model_stats"]
    finally:
        client.close()
    assert {int(b["batch_size"]) for b in stats["batch_stats"]} >= {1, 8}
    assert "not steady within --requests 3 (2 shapes;" in result.note
    assert {"INPUT__0:1x4", "INPUT__0:8x4"} <= set(result.series_ms)


@pytest.mark.server
def test_a_refused_guessed_shape_is_skipped_and_said_not_failed(tmp_path, capsys):
    """A guessed size for a dynamic dimension the model refuses is skipped, the sizes it
    takes warmed."""
    repo = tmp_path / "repo"
    picky_config = ECHO_CONFIG.replace("dims: 4", "dims: -1")
    picky = _echo_model("""        for r in requests:
            if pb_utils.get_input_tensor_by_name(r, "INPUT__0").as_numpy().shape[1] < 4:
                raise pb_utils.TritonModelException("sequences shorter than 4 are refused")""")
    _python_model(repo, "picky", picky_config, picky)
    assert run_cli("deploy", "--repository", repo, "--http-port", "0", "--grpc-port", "0",
                   "--metrics-port", "0", "--timeout", "60") == 0
    try:
        [figures] = load_deployment(repo).extra["warmup"]
    finally:
        run_cli("down", "--repository", repo)
    assert figures["steady"]
    assert "shape INPUT__0:1x1 skipped" in figures["note"]
    assert "INPUT__0:8x16" in figures["shapes"]
    assert "skipped" in capsys.readouterr().out


@pytest.mark.server
@pytest.mark.parametrize("config, model_py", [
    (ECHO_CONFIG, _echo_model("        if self.calls == 1:\n            time.sleep(6)")),
    (DECOUPLED_CONFIG, DECOUPLED_MODEL.replace("BEFORE", "0").replace("AFTER", "6"))],
    ids=["plain", "streamed"])
def test_a_warm_up_request_that_outlives_the_timeout_is_said_so_not_blamed_on_the_input(
        config, model_py, tmp_path, capsys):
    repo = tmp_path / "repo"
    _python_model(repo, "slowfirst", config, model_py)
    _deploy(repo, "--no-warmup")
    try:
        started = time.monotonic()
        code = run_cli("warmup", "--repository", repo, "--timeout", "3")
        took = time.monotonic() - started
    finally:
        run_cli("down", "--repository", repo)
    err = capsys.readouterr().err
    assert code == 1
    assert "'slowfirst' did not answer a warm-up request within" in err
    assert "raise --timeout" in err and "refused an input" not in err
    assert took < 5


@pytest.mark.server
def test_a_model_that_refuses_every_guessed_shape_fails_the_deploy(tmp_path, capsys):
    """Skipping a refused guess is for a model that takes some other size: one that takes
    none refuses what its own config describes."""
    repo = tmp_path / "repo"
    _python_model(repo, "refuses", ECHO_CONFIG.replace("dims: 4", "dims: -1"), _echo_model(
        '        raise pb_utils.TritonModelException("this model takes no input at all")'))
    code = run_cli("deploy", "--repository", repo, "--http-port", "0", "--grpc-port", "0",
                   "--metrics-port", "0", "--timeout", "60")
    err = capsys.readouterr().err
    assert code == 1
    assert "a warm-up request to 'refuses' failed" in err and "takes no input" in err
    assert not (state_dir(repo) / "server.json").exists()


@pytest.mark.server
def test_every_version_a_model_serves_is_warmed_not_only_the_latest(tmp_path):
    repo = tmp_path / "repo"
    cold_first = _echo_model("        if self.calls == 1:\n            time.sleep(0.3)")
    _python_model(repo, "versioned", ECHO_CONFIG + "version_policy { all { } }\n", cold_first)
    (repo / "versioned" / "2").mkdir()
    (repo / "versioned" / "2" / "model.py").write_text(cold_first)
    deployment = _deploy(repo)
    try:
        [figures] = deployment.extra["warmup"]
        assert {s.split()[0] for s in figures["shapes"]} == {"v1", "v2"}
        client = httpclient.InferenceServerClient(deployment.http_url)
        for version in ("1", "2"):
            started = time.perf_counter()
            client.infer("versioned", _user_inputs(), model_version=version)
            assert time.perf_counter() - started < 0.2, f"version {version} was cold"
        client.close()
    finally:
        run_cli("down", "--repository", repo)
