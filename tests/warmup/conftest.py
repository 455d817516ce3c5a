"""`tritonkit warmup`'s tests: the servers, models and helpers its behaviour files share."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.conftest import EXAMPLE_REPOSITORY, run_cli
from tritonkit.server.state import Deployment, load_deployment


def _input(name, data_type, dims):
    return {"name": name, "data_type": data_type, "dims": dims}


ENSEMBLE = """name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input { name: "X" data_type: TYPE_FP32 dims: 4 }
output { name: "Y" data_type: TYPE_FP32 dims: 3 }
ensemble_scheduling { step {
  model_name: "example" model_version: -1
  input_map { key: "INPUT__0" value: "X" } output_map { key: "OUTPUT__0" value: "Y" } } }
"""


def _deploy(repo: Path, *extra: str) -> Deployment:
    code = run_cli("deploy", "--repository", repo, "--http-port", "0", "--grpc-port", "0",
                   "--metrics-port", "0", "--timeout", "60", *extra)
    assert code == 0, "tritonkit deploy failed"
    return load_deployment(repo)


def _served(deployment: Deployment) -> Path:
    return Path(deployment.extra.get("served_repository") or deployment.repository)


@pytest.fixture(scope="package")
def warm_server(tmp_path_factory):
    """One real server for the tests that change nothing: the example and an ensemble of it."""
    repo = tmp_path_factory.mktemp("warm") / "repo"
    shutil.copytree(EXAMPLE_REPOSITORY, repo, ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    (repo / "pipeline" / "1").mkdir(parents=True)
    (repo / "pipeline" / "config.pbtxt").write_text(ENSEMBLE)
    deployment = _deploy(repo)
    yield deployment
    run_cli("down", "--repository", repo)


def _ready(deployment: Deployment, model: str = "example") -> bool:
    client = httpclient.InferenceServerClient(deployment.http_url)
    try:
        return client.is_model_ready(model)
    finally:
        client.close()


def _user_inputs(batch: int = 1) -> list:
    inp = httpclient.InferInput("INPUT__0", [batch, 4], "FP32")
    inp.set_data_from_numpy(np.ones((batch, 4), np.float32))
    return [inp]


def _touch_model_file(deployment: Deployment, model: str = "example") -> None:
    """A model update: its file changes, so Triton's next load of it is a real reload."""
    model_file = _served(deployment) / model / "1" / "model.py"
    later = max(time.time(), model_file.stat().st_mtime) + 2
    os.utime(model_file, (later, later))


def _python_model(repo: Path, name: str, config: str, model_py: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n' + config)
    (repo / name / "1" / "model.py").write_text(model_py)


ECHO_CONFIG = ('max_batch_size: 8\n'
               'input { name: "INPUT__0" data_type: TYPE_FP32 dims: 4 }\n'
               'output { name: "OUTPUT__0" data_type: TYPE_FP32 dims: 4 }\n')


def _echo_model(body: str = "", init: str = "") -> str:
    """A python-backend model answering its input, running ``body`` in execute first."""
    return f"""
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.calls = 0
{init or "        pass"}

    def execute(self, requests):
        self.calls += 1
{body or "        pass"}
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT__0", pb_utils.get_input_tensor_by_name(r, "INPUT__0").as_numpy())])
            for r in requests]
"""


# A stateful model as Triton's sequence batcher drives it: the control inputs come from the
# batcher, never from the client. It refuses a request that continues a sequence it never
# saw start and answers how many sequences it holds open (OPEN). Each instance's first
# execution of each batch size is slow (its cold start, as an engine built per shape):
# the batcher forms a batch of 2 only from two sequences at once in an instance's two
# slots (max_batch_size 2). A minute of idle time: a sequence warm-up left open would hold
# its slot that long.
STATEFUL_CONFIG = """max_batch_size: 2
input { name: "INPUT__0" data_type: TYPE_FP32 dims: 4 }
output { name: "OUTPUT__0" data_type: TYPE_FP32 dims: 4 }
output { name: "OPEN" data_type: TYPE_INT64 dims: 1 }
instance_group { count: 2 kind: KIND_CPU }
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  control_input { name: "START" control { kind: CONTROL_SEQUENCE_START fp32_false_true: [0, 1] } }
  control_input { name: "END" control { kind: CONTROL_SEQUENCE_END fp32_false_true: [0, 1] } }
  control_input { name: "READY" control { kind: CONTROL_SEQUENCE_READY fp32_false_true: [0, 1] } }
  control_input { name: "CORRID" control { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } }
}
"""


STATEFUL_MODEL = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.batch_sizes = set()
        self.open = set()

    def execute(self, requests):
        if len(requests) not in self.batch_sizes:
            self.batch_sizes.add(len(requests))
            time.sleep(0.3)
        responses = []
        for r in requests:
            def control(name):
                return pb_utils.get_input_tensor_by_name(r, name).as_numpy().ravel()[0]
            corrid = int(control("CORRID"))
            if control("READY"):
                if control("START"):
                    self.open.add(corrid)
                elif corrid not in self.open:
                    raise pb_utils.TritonModelException(f"sequence {corrid} never started")
                if control("END"):
                    self.open.discard(corrid)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT__0", pb_utils.get_input_tensor_by_name(r, "INPUT__0").as_numpy()),
                pb_utils.Tensor("OPEN", np.array([[len(self.open)]], np.int64))]))
        return responses
"""


# A decoupled model: two responses, then the final flag on its own (an empty final response
# to a client that asks for one). Its first execution is slow after its first response
# (AFTER: only a client that waits for the final response meets that cold start) or
# before it (BEFORE: a streaming user's time to first token holds it).
DECOUPLED_MODEL = """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.calls = 0

    def execute(self, requests):
        self.calls += 1
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT__0").as_numpy()
            sender = r.get_response_sender()
            if self.calls == 1:
                time.sleep(BEFORE)
            sender.send(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT__0", x)]))
            if self.calls == 1:
                time.sleep(AFTER)
            sender.send(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT__0", x + 1)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


DECOUPLED_CONFIG = ECHO_CONFIG + "model_transaction_policy { decoupled: true }\n"


@pytest.fixture(scope="package")
def stateful_and_decoupled(tmp_path_factory):
    """One real server, deployed (so warmed), with a stateful and a decoupled model."""
    repo = tmp_path_factory.mktemp("stateful") / "repo"
    _python_model(repo, "stateful", STATEFUL_CONFIG, STATEFUL_MODEL)
    _python_model(repo, "streaming", DECOUPLED_CONFIG,
                  DECOUPLED_MODEL.replace("BEFORE", "0").replace("AFTER", "0.3"))
    _python_model(repo, "slow_first_token", DECOUPLED_CONFIG,
                  DECOUPLED_MODEL.replace("BEFORE", "0.3").replace("AFTER", "0"))
    deployment = _deploy(repo)
    yield deployment
    run_cli("down", "--repository", repo)


def _slow_to_load(marker: Path) -> str:
    """An echo model whose initialize sleeps the seconds ``marker`` holds, while it exists
    (a deploy without it is quick; one with it has a slow phase)."""
    return _echo_model(init=f"        import pathlib\n"
                            f"        marker = pathlib.Path({str(marker)!r})\n"
                            f"        if marker.exists():\n"
                            f"            time.sleep(float(marker.read_text()))")
