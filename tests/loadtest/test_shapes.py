"""`tritonkit loadtest --shape`: dynamic dimensions sized, shapes the model (or ONNX Runtime)
refuses told before the run, shapes never warmed warned of."""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.conftest import run_cli
from tests.loadtest.conftest import _loadtest_model
from tritonkit.client import Endpoint
from tritonkit.errors import EXIT_USAGE, UsageError


@pytest.mark.server
def test_a_dynamic_dimension_no_flag_sizes_is_refused_with_the_flags_its_warm_up_verified(
        encoder_served, capsys):
    """Sent at size 1 it would judge an encoder's SLA at sequence length 1 (perf_analyzer
    refuses too); the hint spells the flags, at the lengths the export verified."""
    assert _loadtest_model(encoder_served, "enc") == EXIT_USAGE
    err = capsys.readouterr().err
    first, hint = err.splitlines()[:2]
    assert first == ("error: model 'enc' has inputs of dynamic size that neither --shape nor "
                     "--input-data gives: input_ids [-1], attention_mask [-1] without the batch axis")
    assert hint.startswith("hint: pass --shape input_ids:18 --shape attention_mask:18 (")
    assert "it also warms 6, 12" in hint

    assert _loadtest_model(encoder_served, "enc", "--shape", "input_ids:12") == EXIT_USAGE
    assert "gives: attention_mask [-1]" in capsys.readouterr().err     # each input its own

    assert _loadtest_model(encoder_served, "bare") == EXIT_USAGE     # nothing to suggest
    assert ("hint: pass --shape input_ids:N --shape attention_mask:N, N the size your clients send"
            in capsys.readouterr().err)


@pytest.mark.server
def test_shape_sizes_the_dynamic_dimension_in_every_request_the_header_and_the_json(
        encoder_served, tmp_path, capsys):
    from tritonkit.loadtest import request_template

    template = request_template(Endpoint.from_deployment(encoder_served), "enc", batch_size=2,
                                shapes={"input_ids": [12], "attention_mask": [12]})
    assert [(name, data.shape) for name, _, data in template.inputs] == [
        ("input_ids", (2, 12)), ("attention_mask", (2, 12))]

    code = _loadtest_model(encoder_served, "enc", "--shape", "input_ids:12", "--shape",
                           "attention_mask:12", "--json", tmp_path / "run.json")
    out = capsys.readouterr().out
    assert code == 0
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["request"] == "input_ids INT64[1, 12], attention_mask INT64[1, 12]"
    assert data["spec"]["shapes"] == {"input_ids": [12], "attention_mask": [12]}
    assert data["levels"][0]["ok"] > 0 and data["levels"][0]["errors"] == {}
    header = " ".join(out.split())          # the table's title, however the terminal wraps it
    assert "(input_ids INT64[1, 12], attention_mask INT64[1, 12])" in header


@pytest.mark.server
def test_real_data_sizes_a_dynamic_dimension_as_a_shape_would(encoder_served, tmp_path):
    from tritonkit.loadtest import request_template

    data = tmp_path / "ids.json"
    data.write_text(json.dumps({"input_ids": list(range(9))}))
    template = request_template(Endpoint.from_deployment(encoder_served), "enc", input_data=data,
                                shapes={"attention_mask": [9]})
    assert [data.shape for _, _, data in template.inputs] == [(1, 9), (1, 9)]


@pytest.mark.server
@pytest.mark.parametrize("model, shapes, says", [
    ("enc", ["ids:12", "attention_mask:12"], "--shape names inputs the model does not have: ids"),
    ("enc", ["input_ids:12,2", "attention_mask:12"],
     r"--shape input_ids:12,2 gives 2 dims; input input_ids has 1 without the batch axis"),
    ("enc", ["input_ids:0", "attention_mask:12"], "--shape input_ids:0: every dim of input input_ids"),
    ("enc", ["input_ids:-3", "attention_mask:12"], "--shape input_ids:-3: every dim of input input_ids"),
    ("enc", ["input_ids:-1", "attention_mask:12"], "--shape input_ids:-1: every dim of input input_ids"),
    ("example", ["INPUT__0:5"], "--shape INPUT__0:5 sets dim 0 of input INPUT__0 to 5; the model "
                                "fixes it at 4"),
], ids=["unknown input", "dim count", "zero dim", "negative dim", "dynamic dim", "fixed dim"])
def test_a_shape_the_model_cannot_take_is_a_usage_error_that_names_the_input(
        encoder_served, capsys, model, shapes, says):
    code = _loadtest_model(encoder_served, model, *[a for s in shapes for a in ("--shape", s)])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert err.startswith(f"error: {says}"), err
    assert err.splitlines()[1].startswith("hint: ") and "Traceback" not in err


def _requests_seen(deployment, model: str) -> int:
    """The requests the server has seen for ``model``, answered or failed (a python-backend
    model's error response counts as a success in Triton's statistics)."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(deployment.http_url)
    try:
        stats = client.get_inference_statistics(model)["model_stats"]
    finally:
        client.close()
    return sum(int(m["inference_stats"][k]["count"]) for m in stats for k in ("success", "fail"))


def _requests_settled(deployment, model: str, before: int, timeout: float = 5.0) -> int:
    """_requests_seen once it has moved past ``before`` (Triton counts a request in its
    statistics after it answers it: read at once, the count may not have moved yet), and
    a moment more for any request that would follow."""
    deadline = time.monotonic() + timeout
    while _requests_seen(deployment, model) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    return _requests_seen(deployment, model)


@pytest.mark.server
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_shapes_the_model_refuses_are_a_usage_error_before_the_run_in_the_servers_words(
        encoder_served, capsys, protocol):
    """Two inputs that share a dynamic axis, given two sizes: the server refuses the first
    request (HTTP 400, gRPC INVALID_ARGUMENT), so nothing is measured — one line naming the
    model, what was sent and the server's words, exit 2; the run never starts."""
    before = _requests_seen(encoder_served, "pair")
    code = _loadtest_model(encoder_served, "pair", "--protocol", protocol, "--duration", "30",
                           "--shape", "input_ids:128", "--shape", "attention_mask:64")
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    word = "HTTP 400" if protocol == "http" else "gRPC INVALID_ARGUMENT"
    first, hint = err.splitlines()[:2]
    assert first == ("error: model 'pair' (input_ids INT64[1, 128], attention_mask INT64[1, 64]) "
                     f"refused the request: {word}: input_ids [1, 128] and attention_mask [1, 64] "
                     "must share their sequence length")
    assert hint.startswith("hint: send what the model takes: check --shape and --input-data")
    assert "Traceback" not in err and len(err.splitlines()) == 2
    assert _requests_settled(encoder_served, "pair", before) - before == 1      # the probe alone: no level ran


@pytest.mark.server
def test_inputs_onnx_runtime_cannot_run_are_a_usage_error_with_the_sizes_the_model_was_warmed_at(
        encoder_served, capsys):
    """The encoder itself does not check its inputs: ONNX Runtime fails on two sizes for one
    axis (the local target's python-backend adapter answers HTTP 500 with its words). The
    input is wrong, nothing was measured: a usage error (exit 2), ONNX Runtime's reason
    without its source location, and the sizes the export verified and warmed."""
    before = _requests_seen(encoder_served, "enc")
    code = _loadtest_model(encoder_served, "enc", "--shape", "input_ids:12", "--shape", "attention_mask:6")
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    first, hint = err.splitlines()
    # ONNX Runtime's reason depends on the node the exporter made of the mask (an Add that
    # broadcasts, a Reshape): its words with both sizes, never where in its source it failed.
    said = re.fullmatch(re.escape("error: model 'enc' (input_ids INT64[1, 12], attention_mask INT64[1, 6]) "
                                  "refused the request: HTTP 500: ONNX Runtime FAIL in ")
                        + r"\w+ node '[^']+': (?P<reason>[^\n]+)", first)
    assert said, first
    assert re.search(r"\b6\b", said["reason"]) and re.search(r"\b12\b", said["reason"]), first
    assert "onnxruntime_src" not in first and "was false" not in first and ".cc:" not in first
    assert hint == ("hint: its model_warmup warms it at --shape input_ids:18 --shape attention_mask:18, "
                    "also at 6, 12 (a tritonkit export's: the sizes it verified); check --shape and "
                    "--input-data (inputs that share a dynamic axis take the same size) and --batch-size")
    assert _requests_settled(encoder_served, "enc", before) - before == 1      # the probe alone: no level ran


@pytest.mark.parametrize("flag, says", [
    ("input_ids", "--shape input_ids is not NAME:D1,D2,..."),
    ("input_ids:12,x", "--shape input_ids:12,x is not NAME:D1,D2,..."),
    (":12", "--shape :12 is not NAME:D1,D2,..."),
])
def test_a_shape_flag_that_is_not_name_and_dims_is_refused_before_reaching_the_server(
        capsys, flag, says):
    assert run_cli("loadtest", "--url", "127.0.0.1:1", "--model", "m", "-c", "1",
                   "--shape", flag) == EXIT_USAGE
    assert capsys.readouterr().err.startswith(f"error: {says}")


def test_a_shape_below_one_is_refused_as_it_was_typed():
    from tritonkit.loadtest import parse_shapes

    for typed in ("input_ids:-1", "input_ids:12,-1", "input_ids:+0"):
        with pytest.raises(UsageError) as refused:
            parse_shapes([typed])
        assert str(refused.value) == f"--shape {typed}: every dim of input input_ids must be a size >= 1"


@pytest.mark.server
def test_tunes_hints_name_only_the_flags_tune_has(encoder_served, capsys):
    """tune sizes a dynamic dimension with --shape alone: it has no --input-data."""
    code = run_cli("tune", "enc", "--repository", encoder_served.repository, "--sla-p99-ms", "50",
                   "--budget-s", "30")
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    first, hint = err[err.index("error: "):].splitlines()[:2]
    assert first == ("error: model 'enc' has inputs of dynamic size that --shape does not give: "
                     "input_ids [-1], attention_mask [-1] without the batch axis")
    assert hint.startswith("hint: pass --shape input_ids:18 --shape attention_mask:18 (")
    assert "--input-data" not in err and "--batch-size" not in err


def test_a_load_tests_hints_name_the_running_commands_flags():
    from tritonkit.loadtest import LoadSpec
    from tritonkit.loadtest._run import _protocol_url
    from tritonkit.tune._trial import TUNE_FLAGS

    assert TUNE_FLAGS.sizes() == "--shape does not give"
    assert TUNE_FLAGS.inputs_check() == ("check --shape (inputs that share a dynamic axis take the "
                                         "same size)")
    spec = LoadSpec(model="m", concurrency=(1,), protocol="grpc", flags=TUNE_FLAGS)
    with pytest.raises(UsageError) as refused:
        _protocol_url(Endpoint("127.0.0.1:1"), spec)
    assert "--grpc-url" not in refused.value.hint and "--repository" in refused.value.hint


def test_a_shape_given_twice_is_refused_and_a_name_may_hold_a_colon():
    from tritonkit.loadtest import parse_shapes

    assert parse_shapes(["x:0:3,4"]) == (("x:0", (3, 4)),)       # a TensorFlow tensor name
    with pytest.raises(UsageError, match="gives input x twice"):
        parse_shapes(["x:3", "x:4"])


@pytest.mark.server
def test_a_shape_the_model_never_warmed_is_warned_of_before_the_run_and_kept_in_the_json(
        encoder_served, tmp_path, capsys):
    """The encoder's model_warmup sends the lengths its export verified (6, 12, 18): length 24
    was never warmed, so its first requests are cold — said once, before the run, which goes
    on. A warmed length, or a model without model_warmup, says nothing."""
    long = ("--shape", "input_ids:24", "--shape", "attention_mask:24")
    assert _loadtest_model(encoder_served, "enc", *long, "--json", tmp_path / "run.json") == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warned == [
        "warning: model 'enc' was never warmed at the size sent: input input_ids, sent as [1, 24]: "
        "dim 1 at 24 (warmed: 6, 12, 18); input attention_mask, sent as [1, 24]: dim 1 at 24 "
        "(warmed: 6, 12, 18); its first requests at it are cold. Export it with an example at the serving size (so it is "
        "verified and warmed), or add model_warmup entries at that size"]
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["unwarmed"] == [
        {"input": "input_ids", "axis": 1, "size": 24, "warmed": [6, 12, 18], "shape": [1, 24]},
        {"input": "attention_mask", "axis": 1, "size": 24, "warmed": [6, 12, 18], "shape": [1, 24]}]
    assert data["levels"][0]["ok"] > 0

    assert _loadtest_model(encoder_served, "enc", "--shape", "input_ids:12", "--shape",
                           "attention_mask:12", "--json", tmp_path / "warm.json") == 0
    assert "warning:" not in capsys.readouterr().err
    assert json.loads((tmp_path / "warm.json").read_text())["unwarmed"] == []
    assert _loadtest_model(encoder_served, "bare", *long) == 0
    assert "warning:" not in capsys.readouterr().err


def test_each_dynamic_dimension_is_compared_with_the_sizes_model_warmup_sends_for_it():
    """A vision model exported with dynamic height and width, warmed at the sizes its export
    verified, as Triton reports its config (dims as strings): 224x224 is neither height nor
    width it warmed; a warmed height beside an unwarmed width names the width alone."""
    from tritonkit.loadtest._inputs import UnwarmedSize, unwarmed_sizes

    warmup = [{"name": f"batch_1_h_{h}_w_{w}", "batch_size": 1,
               "inputs": {"INPUT__0": {"data_type": "TYPE_FP32", "dims": ["3", str(h), str(w)],
                                       "random_data": True}}}
              for h, w in ((32, 24), (64, 48), (96, 72))]
    dims = {"INPUT__0": [3, -1, -1]}
    assert unwarmed_sizes(dims, {"INPUT__0": [3, 224, 224]}, warmup) == (
        UnwarmedSize("INPUT__0", 1, 224, (32, 64, 96)), UnwarmedSize("INPUT__0", 2, 224, (24, 48, 72)))
    assert unwarmed_sizes(dims, {"INPUT__0": [3, 64, 100]}, warmup) == (
        UnwarmedSize("INPUT__0", 2, 100, (24, 48, 72)),)
    assert unwarmed_sizes(dims, {"INPUT__0": [3, 96, 24]}, warmup) == ()
    assert unwarmed_sizes(dims, {"INPUT__0": [3, 224, 224]}, []) == ()     # nothing warmed: nothing said


@pytest.mark.server
@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("ids, mask, why", [
    (300, 300, (128, 300)),             # past the encoder's position table
    (16, 17, (16, 17)),                 # two sizes for the axis the inputs share
], ids=["past the position table", "two sizes"])
def test_a_shape_the_onnx_graph_refuses_is_a_usage_error_in_one_line_and_nothing_more_is_sent(
        encoder_served, capsys, protocol, ids, mask, why):
    """A shape the exported graph cannot run, over either protocol (gRPC: INTERNAL): one line
    with what was sent and ONNX Runtime's reason, a hint with the sizes the export verified
    and warmed, exit 2 — and the run never starts. ``why`` holds the sizes ONNX Runtime's
    reason names (its words depend on the node the exporter made: Add, Reshape …)."""
    before = _requests_seen(encoder_served, "enc")
    code = _loadtest_model(encoder_served, "enc", "--protocol", protocol, "--duration", "30",
                           "--shape", f"input_ids:{ids}", "--shape", f"attention_mask:{mask}")
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    first, hint = err.splitlines()
    word = "HTTP 500" if protocol == "http" else "gRPC INTERNAL"
    assert first.startswith(f"error: model 'enc' (input_ids INT64[1, {ids}], attention_mask "
                            f"INT64[1, {mask}]) refused the request: {word}: ONNX Runtime FAIL in "), first
    said = re.search(r"ONNX Runtime FAIL in \w+ node '[^']+': (?P<reason>.+)$", first)
    assert said, first
    assert all(re.search(rf"\b{size}\b", said["reason"]) for size in why), first
    assert "onnxruntime_src" not in first and "was false" not in first
    assert hint.startswith("hint: its model_warmup warms it at --shape input_ids:18 --shape "
                           "attention_mask:18, also at 6, 12 (a tritonkit export's: the sizes it "
                           "verified); check --shape")
    assert _requests_settled(encoder_served, "enc", before) - before == 1      # the probe alone


@pytest.mark.slow
@pytest.mark.parametrize("said, reads", [
    ("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions for input: input_ids for "
     "the following indices\n index: 1 Got: 300 Expected: 128\n Please fix either the inputs or the model.",
     "ONNX Runtime INVALID_ARGUMENT: Got invalid dimensions for input: input_ids for the following indices"),
    ("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Non-zero status code returned while running Gather "
     "node. Name:'/embed/Gather' Status Message: indices element out of data bounds, idx=300 must be "
     "within the inclusive range [-128,127]",
     "ONNX Runtime INVALID_ARGUMENT in Gather node '/embed/Gather': indices element out of data "
     "bounds, idx=300 must be within the inclusive range [-128,127]"),
    ("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while running MatMul "
     "node. Name:'/mm' Status Message: Failed to allocate memory for requested buffer of size 4194304", None),
    ("[ONNXRuntimeError] : 1 : FAIL : Load model from /m/model.onnx failed: Protobuf parsing failed.", None),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", None),
], ids=["invalid dimensions", "index past a table", "out of memory", "unreadable graph", "no ORT"])
def test_onnx_runtime_refusing_the_inputs_is_told_from_its_other_failures(said, reads):
    from tritonkit.loadtest._inputs import input_refusal

    assert input_refusal(said) == reads
