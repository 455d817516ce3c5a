"""`tritonkit warmup` of stateful models (whole sequences, ids, slots, sequences ended on
refusal) and decoupled models (streamed to their final response)."""

from __future__ import annotations

import itertools
import json
import queue
import time

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.conftest import BUSY_HOST_RULE, run_cli
from tests.warmup.conftest import STATEFUL_CONFIG, STATEFUL_MODEL, _deploy, _input, _python_model
from tritonkit.client import Endpoint, triton_message
from tritonkit.server.local import Deadline
from tritonkit.warmup import sequence_ids, sequence_slots, warm_up, warmup_shapes
from tritonkit.warmup._requests import Driver


def test_a_stateful_models_requests_are_batch_1_only_whatever_its_max_batch_size():
    """Triton's sequence batcher refuses a request of batch > 1 ('must specify batch-size 1
    due to requirements of sequence batcher'): it batches concurrent sequences instead."""
    config = {"max_batch_size": 8, "input": [_input("INPUT__0", "TYPE_FP32", [-1])],
              "sequence_batching": {},
              "model_warmup": [{"batch_size": 8, "inputs": {"INPUT__0": {"dims": [32]}}}]}
    assert [s["INPUT__0"] for s in warmup_shapes(config)] == [("FP32", [1, 32])]


def _corrid(data_type):
    return {"sequence_batching": {"control_input": [{"name": "CORRID", "control": [
        {"kind": "CONTROL_SEQUENCE_CORRID", "data_type": data_type}]}]}}


@pytest.mark.parametrize("data_type, low, high", [
    (None, 2**62, 2**63), ("TYPE_UINT64", 2**62, 2**63), ("TYPE_INT64", 2**62, 2**63),
    ("TYPE_UINT32", 2**31, 2**32), ("TYPE_INT32", 2**30, 2**31)])
def test_warm_up_sequence_ids_are_in_the_upper_half_of_what_the_corrid_input_holds(
        data_type, low, high):
    """Far from the small counters clients use, and never cut by a 32-bit CORRID input into
    one of them; below 2**63, as tritonclient's gRPC client sends an ID as int64."""
    config = {} if data_type is None else _corrid(data_type)
    ids = sequence_ids(config)
    first, second = next(ids), next(ids)
    assert low <= first < high and second == first + 1
    assert next(sequence_ids(config)) != first            # a warm-up of its own: other IDs


def test_a_string_corrid_input_gets_string_sequence_ids():
    first, second = itertools.islice(sequence_ids(_corrid("TYPE_STRING")), 2)
    assert first.startswith("tritonkit-warmup-") and first != second and len(first) <= 128


def test_sequence_slots_are_max_batch_size_or_the_oldest_strategys_candidates():
    assert sequence_slots({"max_batch_size": 0, "sequence_batching": {}}) == 1
    assert sequence_slots({"max_batch_size": 8, "sequence_batching": {"direct": {}}}) == 8
    assert sequence_slots({"max_batch_size": 8, "sequence_batching": {
        "oldest": {"max_candidate_sequences": 3}}}) == 3


def _sequences_of_a_user(http_url: str, count: int) -> tuple[list[float], int]:
    """A user's ``count`` sequences of three requests, each step for all of them before the
    next (so all are open at once, in as many sequence slots): every request's seconds, and
    how many sequences the model holds open at the end."""
    inputs = [httpclient.InferInput("INPUT__0", [1, 4], "FP32")]
    inputs[0].set_data_from_numpy(np.ones((1, 4), np.float32))
    client = httpclient.InferenceServerClient(http_url, network_timeout=10)
    latencies, open_sequences = [], None
    try:
        for flags in ({"sequence_start": True}, {}, {"sequence_end": True}):
            for sequence_id in range(1, count + 1):
                started = time.perf_counter()
                result = client.infer("stateful", inputs, sequence_id=sequence_id, **flags)
                latencies.append(time.perf_counter() - started)
                open_sequences = int(result.as_numpy("OPEN").ravel()[0])
    finally:
        client.close()
    return latencies, open_sequences


@pytest.mark.server
def test_a_stateful_model_is_warmed_with_whole_sequences_in_every_slot(stateful_and_decoupled):
    figures = {r["model"]: r for r in stateful_and_decoupled.extra["warmup"]}["stateful"]
    assert figures["warmed"] and figures["steady"]
    assert figures["shapes"] == ["INPUT__0:1x4"]          # batch 1: the batcher's own rule
    assert figures["requests"] % 3 == 0                  # whole sequences of three
    assert "stateful: each sample a whole sequence of 3 requests" in figures["note"]
    # Its cold start was paid by warm-up and measured like any model's ...
    assert figures["cold"] and figures["first_ms"] >= 300 and figures["ratio"] > 5
    assert figures["after"]["first_ms"] < 100
    # ... and in every sequence slot: a user with four sequences open at once fills both
    # slots of both instances (batches of 2) and meets no cold start; each sequence finds
    # its slot free at once (a warm-up sequence left open would hold one for a minute), and
    # the model holds none of warm-up's sequences open.
    latencies, open_sequences = _sequences_of_a_user(stateful_and_decoupled.http_url, 4)
    assert max(latencies) < 0.2, latencies
    assert open_sequences == 0


def _streamed_first_request_s(grpc_url: str) -> float:
    """A fresh gRPC client's first streamed request: seconds until its final response."""
    import tritonclient.grpc as grpcclient

    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(grpc_url)
    answered = False
    try:
        client.is_model_ready("streaming")
        client.start_stream(callback=lambda result, error: responses.put((result, error)))
        inputs = [grpcclient.InferInput("INPUT__0", [1, 4], "FP32")]
        inputs[0].set_data_from_numpy(np.ones((1, 4), np.float32))
        started = time.perf_counter()
        client.async_stream_infer("streaming", inputs, enable_empty_final_response=True)
        while True:
            result, error = responses.get(timeout=10)
            assert error is None, error
            if result.get_response().parameters["triton_final_response"].bool_param:
                answered = True
                return time.perf_counter() - started
    finally:
        # Cancelled only if unanswered: a cancelled stream can hold the server's stop (see
        # test_a_stream_answered_in_full_is_ended_not_cancelled).
        client.stop_stream(cancel_requests=not answered)
        client.close()


@pytest.mark.server
def test_a_stream_answered_in_full_is_ended_not_cancelled(stateful_and_decoupled):
    """Triton 2.51 holds a decoupled model for a moment after a client cancels its stream:
    a server stopped then waits out its whole exit timeout (30 s) for it. Here a `down`
    right after 20 cancelled streams took 30 s in 7 stops of 17, and none of 10 after as
    many streams ended gracefully. Warm-up's streams are answered in full: it ends them."""
    driver = Driver(Endpoint.from_deployment(stateful_and_decoupled), "streaming",
                    Deadline(30), decoupled=True)
    inputs = driver.inputs({"INPUT__0": ("FP32", [1, 4])}, np.random.default_rng(0))
    connection = driver.connect()
    try:
        driver.sample(connection, inputs)
    finally:
        connection.close()
    # A cancelled stream tells its callback so, after the last response.
    told = [triton_message(error) for _, error, _ in connection.responses.queue]
    assert told == []


@pytest.mark.server
def test_a_decoupled_model_is_warmed_over_grpc_streaming_to_its_final_response(
        stateful_and_decoupled):
    figures = {r["model"]: r for r in stateful_and_decoupled.extra["warmup"]}["streaming"]
    assert figures["warmed"] and figures["steady"]
    assert f"streamed over gRPC at {stateful_and_decoupled.grpc_url}" in figures["note"]
    # The cold start comes after the first response: the first figure holds it, since
    # warm-up waits for the final response, and the first response came before it ...
    assert figures["first_ms"] >= 300 and figures["ratio"] > 5
    assert figures["first_response_ms"] < figures["first_ms"] - 250
    # ... and a user's first streamed request after warm-up meets none of it.
    assert _streamed_first_request_s(stateful_and_decoupled.grpc_url) < 0.2


@pytest.mark.server
def test_a_decoupled_models_cold_first_token_is_measured_apart_from_its_final_response(
        stateful_and_decoupled):
    """A streaming user waits for the first response (the first token): a cold start
    before it is that user's, and warm-up measures it there, against its own p50."""
    figures = {r["model"]: r for r in stateful_and_decoupled.extra["warmup"]}["slow_first_token"]
    assert figures["warmed"] and figures["steady"]
    assert figures["first_response_ms"] >= 300 and figures["first_response_ratio"] > 5
    assert figures["first_response_p50_ms"] <= figures["steady_p50_ms"]
    assert figures["after"]["first_response_ms"] < 100      # a fresh client's, once warm


@pytest.mark.server
def test_with_only_an_http_url_a_decoupled_model_is_skipped_and_told_to_add_grpc_url(
        stateful_and_decoupled, tmp_path, capsys):
    secret_file = tmp_path / "secret"
    secret_file.write_text(stateful_and_decoupled.secret() + "\n")
    out = tmp_path / "warm.json"
    code = run_cli("warmup", "--url", stateful_and_decoupled.http_url, "--secret-file",
                   secret_file, "--json", out)
    assert code == 0, capsys.readouterr().err
    records = {r["model"]: r for r in json.loads(out.read_text())["models"]}
    assert records["stateful"]["warmed"] and records["stateful"]["steady"]   # HTTP is enough
    assert not records["streaming"]["warmed"]
    assert "over gRPC streaming only" in records["streaming"]["note"]
    assert "add --grpc-url HOST:PORT" in capsys.readouterr().out
    # With the server's gRPC address it is warmed.
    # (steady within 100 %: a busy host's streams are too noisy for 25 % within 500 requests)
    code = run_cli("warmup", "--url", stateful_and_decoupled.http_url, "--grpc-url",
                   stateful_and_decoupled.grpc_url, "--secret-file", secret_file,
                   "--model", "streaming", "--json", out, "--force", "--steady-tolerance", "1.0")
    assert code == 0, capsys.readouterr().err
    [record] = json.loads(out.read_text())["models"]
    assert record["warmed"] and record["steady"] and record["requests"] > 0
    assert "streaming: time to first token: first " in capsys.readouterr().out


@pytest.mark.server
def test_a_sequence_the_model_refuses_midway_is_ended_so_it_holds_no_slot(tmp_path):
    """A guessed shape the stateful model refuses after its start is skipped, and warm-up
    goes on: the sequence it left open is ended, not left to hold its slot."""
    config = (STATEFUL_CONFIG.replace("dims: 4", "dims: -1")
              .replace("instance_group { count: 2", "instance_group { count: 1"))
    refuses_short_continues = STATEFUL_MODEL.replace(
        "            corrid = int(control(\"CORRID\"))",
        "            corrid = int(control(\"CORRID\"))\n"
        "            x = pb_utils.get_input_tensor_by_name(r, \"INPUT__0\").as_numpy()\n"
        "            if x.shape[-1] == 1 and not control(\"START\") and not control(\"END\"):\n"
        "                raise pb_utils.TritonModelException(\"too short to continue\")")
    repo = tmp_path / "repo"
    _python_model(repo, "stateful", config, refuses_short_continues)
    deployment = _deploy(repo)
    try:
        [figures] = deployment.extra["warmup"]
        assert figures["warmed"] and "skipped: refused" in figures["note"]
        inputs = [httpclient.InferInput("INPUT__0", [1, 4], "FP32")]
        inputs[0].set_data_from_numpy(np.ones((1, 4), np.float32))
        client = httpclient.InferenceServerClient(deployment.http_url, network_timeout=10)
        try:
            for flags in ({"sequence_start": True}, {}, {"sequence_end": True}):
                result = client.infer("stateful", inputs, sequence_id=7, **flags)
        finally:
            client.close()
        assert int(result.as_numpy("OPEN").ravel()[0]) == 0     # nothing of warm-up's still open
    finally:
        run_cli("down", "--repository", repo)


@pytest.mark.server
def test_a_sequence_the_model_refuses_at_its_start_is_ended_too_for_triton_holds_its_slot(
        tmp_path):
    """Triton's sequence batcher gives a START its slot before the model runs it, so a START
    the model refuses still holds that slot, until max_sequence_idle_microseconds (a minute
    here), unless warm-up ends the sequence. With one slot, the next shape's sequence
    would wait for it past the timeout, and so would a user's."""
    config = (STATEFUL_CONFIG.replace("dims: 4", "dims: -1")
              .replace("max_batch_size: 2", "max_batch_size: 1")          # one sequence slot
              .replace("instance_group { count: 2", "instance_group { count: 1"))
    refuses_short_starts = STATEFUL_MODEL.replace(
        "            corrid = int(control(\"CORRID\"))",
        "            corrid = int(control(\"CORRID\"))\n"
        "            x = pb_utils.get_input_tensor_by_name(r, \"INPUT__0\").as_numpy()\n"
        "            if x.shape[-1] == 1 and control(\"START\"):\n"
        "                raise pb_utils.TritonModelException(\"too short to start\")")
    repo = tmp_path / "repo"
    _python_model(repo, "stateful", config, refuses_short_starts)
    deployment = _deploy(repo, "--no-warmup")
    try:
        [result] = warm_up(repo, timeout=30, rule=BUSY_HOST_RULE)   # about the refusal
        assert result.steady and "shape INPUT__0:1x1 skipped: refused" in result.note
        assert result.series_ms.keys() == {"INPUT__0:1x16"}
        latencies, open_sequences = _sequences_of_a_user(deployment.http_url, 1)
        assert max(latencies) < 1.0, latencies          # the one slot is free at once
        assert open_sequences == 0
    finally:
        run_cli("down", "--repository", repo)
