"""`tritonkit loadtest` of stateful models: whole sequences, each with an id no other live
sequence has, start and end flags, sequence options checked."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import EXAMPLE_REPOSITORY, run_cli
from tests.loadtest.conftest import _result
from tritonkit import report
from tritonkit.deploy import deploy_local, down
from tritonkit.errors import EXIT_USAGE, UsageError
from tritonkit.loadtest import LoadSpec, LoadTestResult


def test_every_live_sequence_has_an_id_no_other_has_across_workers_and_in_range():
    """Slot g of S numbers its n-th sequence g + S*n from the level's start: IDs never
    repeat among the slots of every worker, however many sequences each runs."""
    from tritonkit.loadtest._sequences import Sequencing, plan_sequences

    model = Sequencing(string_ids=False, id_limit=2**63, batcher_slots=4)
    plans = plan_sequences(model, [3, 2, 2], 5, 0.0, None, seed=1)
    ids = [plan.sequence_id(slot, n) for plan, slots in zip(plans, [3, 2, 2])
           for slot in range(slots) for n in range(50)]
    assert len(set(ids)) == len(ids) == 7 * 50
    # the second quarter of what the CORRID input holds: warm-up takes the upper half
    assert all(2**61 <= i < 2**62 for i in ids)
    # a level of its own draws another start: its IDs are not the last level's
    assert plan_sequences(model, [3, 2, 2], 5, 0.0, None, seed=1)[0].sequence_id(0, 0) != ids[0]


def test_a_32_bit_or_string_corrid_input_gets_ids_it_holds():
    from tritonkit.loadtest._sequences import plan_sequences, sequencing

    def corrid(data_type: str) -> dict:
        return {"max_batch_size": 4, "instance_group": [{"count": 2}], "sequence_batching": {
            "control_input": [{"name": "CORRID", "control": [
                {"kind": "CONTROL_SEQUENCE_CORRID", "data_type": data_type}]}]}}

    int32 = sequencing(corrid("TYPE_INT32"))
    assert int32.id_limit == 2**31 and int32.batcher_slots == 8 and not int32.string_ids
    assert 2**29 <= plan_sequences(int32, [1], 5, 0.0, None, 0)[0].sequence_id(0, 0) < 2**30
    text = sequencing(corrid("TYPE_STRING"))
    first, second = (plan_sequences(text, [2], 5, 0.0, None, 0)[0].sequence_id(s, 0) for s in (0, 1))
    assert first.startswith("tritonkit-loadtest-") and first != second
    assert sequencing({"max_batch_size": 4}) is None


def test_a_sequence_id_range_is_used_from_its_start_and_must_hold_every_live_sequence():
    from tritonkit.loadtest._sequences import Sequencing, parse_id_range, plan_sequences

    model = Sequencing(string_ids=False, id_limit=2**63, batcher_slots=4)
    plan, = plan_sequences(model, [2], 5, 0.0, parse_id_range("100:104"), seed=0)
    assert [plan.sequence_id(slot, n) for n in range(3) for slot in range(2)] == [100, 101, 102, 103, 100, 101]
    with pytest.raises(UsageError, match="holds 2 IDs for 3 sequences live at once"):
        plan_sequences(model, [3], 5, 0.0, parse_id_range("100:102"), seed=0)
    with pytest.raises(UsageError, match="past what the model's CORRID input holds"):
        plan_sequences(Sequencing(False, 2**31, 1), [1], 5, 0.0, (1, 2**32), seed=0)
    for text in ("0:5", "9:9", "a:b"):
        with pytest.raises(UsageError, match="is not START"):
            parse_id_range(text)
    assert parse_id_range("7") == (7, None)


def test_a_live_sequence_says_start_on_its_first_request_and_end_on_its_last():
    from tritonkit.loadtest._sequences import LiveSequence, Sequencing, plan_sequences

    plan, = plan_sequences(Sequencing(False, 2**63, 1), [1], 3, 0.0, (10, 1000), seed=0)
    live = LiveSequence(plan, 0)
    steps = []
    for _ in range(7):
        steps.append(live.next())
        live.answered(True)
    assert steps == [(10, True, False), (10, False, False), (10, False, True),
                     (11, True, False), (11, False, False), (11, False, True), (12, True, False)]
    assert live.open and live.completed == 2
    assert live.close() == (12, False, True)     # the run is over: one more request ends it
    live.answered(True)
    assert not live.open and live.completed == 3 and live.cut_short == 1
    live.next(), live.answered(True), live.next(), live.answered(True)
    live.close()                                 # the one left to send anyway: not cut short
    assert live.cut_short == 1


def test_sequence_lengths_vary_within_the_variation_and_a_failed_end_may_leave_one_open():
    from tritonkit.loadtest._sequences import LiveSequence, Sequencing, plan_sequences

    plan, = plan_sequences(Sequencing(False, 2**63, 1), [1], 20, 20.0, None, seed=3)
    live, lengths, length = LiveSequence(plan, 0), [], 0
    for _ in range(2000):
        _, start, end = live.next()
        length = 1 if start else length + 1
        if end:
            lengths.append(length)
        live.answered(True)
    assert min(lengths) == 16 and max(lengths) == 24       # 20 +/- 20 %, perf_analyzer's
    live.close()
    live.answered(False)
    assert live.failed_ends == 1 and not live.open


class _RecordingSocket:
    """A socket that keeps what is sent and answers every request with an empty 200."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.sent.append(data)

    def recv(self, size: int) -> bytes:
        return b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"

    def close(self) -> None:
        pass


@pytest.mark.parametrize("sequence_id", [2**61 + 5, "tritonkit-loadtest-ab-7"])
def test_an_http_sequence_request_carries_its_id_and_flags_in_its_json_header(monkeypatch, sequence_id):
    from tritonkit.loadtest import _transport
    from tritonkit.loadtest._inputs import RequestTemplate
    from tritonkit.loadtest._sequences import Sequencing

    sock = _RecordingSocket()
    monkeypatch.setattr(_transport, "open_socket", lambda *args: sock)
    template = RequestTemplate(model="acc", inputs=(("INPUT", "FP32", np.ones((1, 3), np.float32)),),
                               outputs=("SUM",), batch_size=1,
                               sequencing=Sequencing(isinstance(sequence_id, str), 2**63, 1))
    send = _transport.http_sender("127.0.0.1:1", template, 1.0)
    for step in ((sequence_id, True, False), (sequence_id, False, True)):
        send(step)
        head, _, body = sock.sent[-1].partition(b"\r\n\r\n")
        headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
        assert int(headers["Content-Length"]) == len(body)
        header = json.loads(body[:int(headers["Inference-Header-Content-Length"])])
        assert header["parameters"] == {"sequence_id": sequence_id, "sequence_start": step[1],
                                        "sequence_end": step[2]}
        assert body[int(headers["Inference-Header-Content-Length"]):] == np.ones(3, np.float32).tobytes()


@pytest.mark.parametrize("sequence_id", [2**61 + 5, "tritonkit-loadtest-ab-7"])
def test_a_grpc_sequence_request_is_the_request_with_its_sequence_parameters_merged_in(sequence_id):
    from tritonclient.grpc import service_pb2

    from tritonkit.loadtest._transport import _sequence_parameters

    base = service_pb2.ModelInferRequest(model_name="acc", raw_input_contents=[b"\x00" * 12])
    merged = service_pb2.ModelInferRequest.FromString(
        base.SerializeToString() + _sequence_parameters((sequence_id, False, True)))
    assert merged.model_name == "acc" and merged.raw_input_contents == [b"\x00" * 12]
    param = merged.parameters["sequence_id"]
    assert (param.string_param if isinstance(sequence_id, str) else param.int64_param) == sequence_id
    assert not merged.parameters["sequence_start"].bool_param and merged.parameters["sequence_end"].bool_param


def test_sequence_flags_out_of_range_are_refused_with_a_hint():
    with pytest.raises(UsageError, match="--sequence-length takes"):
        LoadSpec(model="m", concurrency=(1,), sequence_length=0)
    with pytest.raises(UsageError, match="--sequence-length-variation is a percentage"):
        LoadSpec(model="m", concurrency=(1,), sequence_length_variation=150)
    with pytest.raises(UsageError, match="--num-of-sequences is for open loop"):
        LoadSpec(model="m", concurrency=(1,), num_sequences=4)


def _stateful_level(live: int, batcher_slots: int, left_open: int = 0) -> LoadTestResult:
    result = _result()
    result.levels[0].sequences = {"length": 20, "variation_pct": 20.0, "live": live,
                                  "batcher_slots": batcher_slots, "completed": 40,
                                  "ended_at_the_end": 2, "left_open": left_open}
    return result


def test_more_live_sequences_than_the_sequence_batcher_runs_is_a_warning_and_so_is_one_left_open(tmp_path):
    assert not report.judge(_stateful_level(4, 4), report.Sla()).warnings
    queued = report.judge(_stateful_level(8, 4), report.Sla())
    assert any("8 sequences live at once, more than the 4 the model's sequence batcher runs"
               in w for w in queued.warnings)
    left = report.judge(_stateful_level(4, 4, left_open=3), report.Sla())
    assert any("3 sequences may be left open" in w for w in left.warnings)
    report.write_json(tmp_path / "run.json", _stateful_level(4, 4), queued)
    level = json.loads((tmp_path / "run.json").read_text())["levels"][0]
    assert level["sequences"]["completed"] == 40 and level["sequences"]["length"] == 20


# An accumulator, as a stateful model is driven by Triton's sequence batcher: the running
# sum of INPUT per correlation ID. It refuses a request of a sequence it never saw start
# and a START of an ID still open (two live sequences sharing an ID), and logs each START
# and each END with the sequence's length, so a test sees what the server saw.
_ACCUMULATOR_CONFIG = """name: "accumulator"
backend: "python"
max_batch_size: 2
input { name: "INPUT" data_type: TYPE_FP32 dims: 1 }
output { name: "SUM" data_type: TYPE_FP32 dims: 1 }
instance_group { count: 1 kind: KIND_CPU }
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  control_input { name: "START" control { kind: CONTROL_SEQUENCE_START fp32_false_true: [0, 1] } }
  control_input { name: "END" control { kind: CONTROL_SEQUENCE_END fp32_false_true: [0, 1] } }
  control_input { name: "READY" control { kind: CONTROL_SEQUENCE_READY fp32_false_true: [0, 1] } }
  control_input { name: "CORRID" control { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } }
}
"""


_ACCUMULATOR_MODEL = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums, self.lengths = {}, {}
        self.log = open(LOG, "a", buffering=1)

    def execute(self, requests):
        responses = []
        for r in requests:
            def control(name):
                return pb_utils.get_input_tensor_by_name(r, name).as_numpy().ravel()[0]
            x = pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy()
            if not control("READY"):
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", np.zeros_like(x))]))
                continue
            corrid = int(control("CORRID"))
            if control("START"):
                if corrid in self.sums:
                    raise pb_utils.TritonModelException(f"sequence {corrid} started while open")
                self.sums[corrid], self.lengths[corrid] = np.zeros_like(x), 0
                self.log.write(f"S {corrid}\\n")
            elif corrid not in self.sums:
                raise pb_utils.TritonModelException(f"sequence {corrid} never started")
            self.sums[corrid] = self.sums[corrid] + x
            self.lengths[corrid] += 1
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", self.sums[corrid])]))
            if control("END"):
                self.log.write(f"E {corrid} {self.lengths.pop(corrid)}\\n")
                del self.sums[corrid]
        return responses
"""


@pytest.fixture(scope="module")
def stateful_served(tmp_path_factory):
    """The accumulator served by the real Triton (not warmed: its log holds only the load
    test's sequences), beside the example model (stateless)."""
    root = tmp_path_factory.mktemp("stateful")
    repo, log = root / "repo", root / "seen.log"
    shutil.copytree(EXAMPLE_REPOSITORY, repo, ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    (repo / "accumulator" / "1").mkdir(parents=True)
    (repo / "accumulator" / "config.pbtxt").write_text(_ACCUMULATOR_CONFIG)
    (repo / "accumulator" / "1" / "model.py").write_text(_ACCUMULATOR_MODEL.replace("LOG", repr(str(log))))
    deployment = deploy_local(repo, http_port=0, grpc_port=0, metrics_port=0, timeout=120, warmup=False)
    deployment.extra["log"] = log
    yield deployment
    down(repo)


def _sequences_seen(log: Path, since: int) -> tuple[dict[int, int | None], int]:
    """From the model's log after byte ``since``: each correlation ID's length (None: never
    ended), and where the log ends. An ID started twice fails the test."""
    text = log.read_text()
    seen: dict[int, int | None] = {}
    for line in text[since:].splitlines():
        kind, corrid, *length = line.split()
        if kind == "S":
            assert int(corrid) not in seen, f"sequence ID {corrid} used twice"
            seen[int(corrid)] = None
        else:
            assert seen[int(corrid)] is None
            seen[int(corrid)] = int(length[0])
    return seen, len(text)


@pytest.mark.server
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_stateful_model_is_sent_whole_sequences_each_with_an_id_of_its_own(stateful_served, tmp_path,
                                                                             protocol, capsys):
    """Closed loop, three users in two workers on a model whose batcher runs two sequences
    at once: every sequence the server saw started once, with an ID no other had, ran its
    five requests START to END in order (the model refuses any other), and none is left
    open — the ones cut by the end of the run were ended by one more request."""
    log = stateful_served.extra["log"]
    _, since = _sequences_seen(log, 0) if log.exists() else ({}, 0)
    code = run_cli("loadtest", "--repository", stateful_served.repository, "--model", "accumulator",
                   "--protocol", protocol, "--concurrency", "3", "--workers", "2", "--duration", "1",
                   "--warmup-s", "0.2", "--sequence-length", "5", "--sequence-length-variation", "0",
                   "--json", tmp_path / "run.json")
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0, out
    data = json.loads((tmp_path / "run.json").read_text())
    level = data["levels"][0]
    assert level["errors"] == {} and level["ok"] > 0
    seen, _ = _sequences_seen(log, since)
    probe = [i for i, n in seen.items() if n == 1]          # the check before the run: START and END
    assert len(probe) == 1
    assert all(length is not None for length in seen.values())          # none left open
    assert all(2**61 <= i < 2**62 for i in seen)
    lengths = [n for i, n in seen.items() if i not in probe]
    figures = level["sequences"]
    assert figures["live"] == 3 and figures["batcher_slots"] == 2 and figures["left_open"] == 0
    assert figures["completed"] == len(lengths) and lengths.count(5) >= figures["completed"] - 3
    assert figures["ended_at_the_end"] == sum(n < 5 for n in lengths)
    assert any("3 sequences live at once, more than the 2 the model's sequence batcher runs" in w
               for w in data["verdict"]["warnings"])
    assert f"concurrency 3: {figures['completed']} sequences completed" in out


@pytest.mark.timing
@pytest.mark.server
def test_open_loop_sends_each_arrival_on_a_live_sequence_with_no_request_out(stateful_served, tmp_path):
    """perf_analyzer's request rate mode: --num-of-sequences live at once (here over two
    workers), each request of a sequence after the one before it came back."""
    log = stateful_served.extra["log"]
    _, since = _sequences_seen(log, 0) if log.exists() else ({}, 0)
    code = run_cli("loadtest", "--repository", stateful_served.repository, "--model", "accumulator",
                   "--rate", "300", "--num-of-sequences", "3", "--workers", "2", "--duration", "1",
                   "--warmup-s", "0.2", "--sequence-length", "4", "--sequence-length-variation", "0",
                   "--json", tmp_path / "run.json")
    assert code == 0
    level = json.loads((tmp_path / "run.json").read_text())["levels"][0]
    assert level["errors"] == {} and level["max_in_flight"] == 3
    figures = level["sequences"]
    assert figures["live"] == 3 and figures["left_open"] == 0
    seen, _ = _sequences_seen(log, since)
    assert all(length is not None for length in seen.values())
    assert figures["completed"] == len(seen) - 1 >= 300 * 1.2 / 4 - 3


@pytest.mark.server
def test_a_stateful_model_refuses_a_batch_up_front(stateful_served, capsys):
    """Triton's sequence batcher takes batch 1 only: said up front, in one line."""
    assert run_cli("loadtest", "--repository", stateful_served.repository, "--model", "accumulator",
                   "--concurrency", "1", "--batch-size", "2") == EXIT_USAGE
    assert "is stateful (sequence_batching): Triton's sequence batcher takes requests of batch 1 " \
        "only" in capsys.readouterr().err


@pytest.mark.server
def test_sequence_flags_for_a_stateless_model_are_refused(stateful_served, capsys):
    assert run_cli("loadtest", "--repository", stateful_served.repository, "--model", "example",
                   "--concurrency", "1", "--sequence-length", "5") == EXIT_USAGE
    assert "model 'example' is stateless (no sequence_batching): --sequence-length applies only " \
        "to a stateful model" in capsys.readouterr().err
