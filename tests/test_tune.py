"""`tritonkit tune` against the real local Triton: configs swapped through the load API,
measured, the served config put back, the winner written — each run kept small (a space
of two or three points, short probes, a low concurrency ceiling)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests import onnx_graphs
from tests.conftest import default_signals, run_cli
from tritonkit.client import SECRET_ENV
from tritonkit.model_config import configure, edited_by_hand, read_config
from tritonkit.server.state import load_deployment

pytestmark = [pytest.mark.server, pytest.mark.slow]      # a search each: up to minutes

# A python model that refuses to load with a batch limit of 16, as a model whose weights
# or kernels do not fit a config would: Triton's load fails with the model's own words.
PICKY = '''
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        if json.loads(args["model_config"])["max_batch_size"] == 16:
            raise ValueError("picky refuses max_batch_size 16")

    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT__0", pb_utils.get_input_tensor_by_name(r, "INPUT__0").as_numpy() * 2)])
            for r in requests]
'''
PICKY_CONFIG = '''name: "picky"
backend: "python"
max_batch_size: 8
input { name: "INPUT__0" data_type: TYPE_FP32 dims: 4 }
output { name: "OUTPUT__0" data_type: TYPE_FP32 dims: 4 }
dynamic_batching { }
instance_group { count: 1 kind: KIND_CPU }
'''
# instances 1 and 2, the rest as served
TWO_POINTS = ("instance_count = [1, 2]\nmax_batch_size = [32]\nmax_queue_delay_us = [0]\n"
              "intra_op_thread_count = [0]\n")
# Short enough that a tune of a few points takes about a minute here.
QUICK = ("--probe-s", "0.3", "--max-concurrency", "2", "--budget-s", "60")


@pytest.fixture
def deployed_mlp(tmp_path: Path):
    """An exported-looking MLP (config generated for the A10, served on the CPU copy) and
    the picky python model, deployed on free ports."""
    repo = tmp_path / "repo"
    onnx_graphs.mlp(repo / "mlp")
    (repo / "mlp" / "export-report.json").write_text(json.dumps(
        {"max_batch_size": 32, "inputs": [{"name": "INPUT__0", "example_shape": [4, 16]}]}))
    configure(repo, "mlp", gpu="a10")
    (repo / "picky" / "1").mkdir(parents=True)
    (repo / "picky" / "1" / "model.py").write_text(PICKY)
    (repo / "picky" / "config.pbtxt").write_text(PICKY_CONFIG)
    assert run_cli("deploy", "--repository", repo, "--http-port", "0", "--grpc-port", "0",
                   "--metrics-port", "0", "--timeout", "90") == 0
    yield repo, load_deployment(repo)
    # A config that failed to load holds Triton's exit for its whole exit timeout (30 s):
    # what stops it is not what these tests are about.
    run_cli("down", "--repository", repo, "--timeout", "10")


def _space(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "space.toml"
    path.write_text(text)
    return path


def _served(deployment, model: str = "mlp") -> dict:
    client = httpclient.InferenceServerClient(deployment.http_url)
    try:
        assert client.is_model_ready(model)
        return client.get_model_config(model)
    finally:
        client.close()


def _knobs(config: dict) -> tuple:
    return (config["max_batch_size"], [g["count"] for g in config.get("instance_group", [])],
            config.get("dynamic_batching"), sorted(config.get("parameters", {})))


def test_tune_finds_a_config_meeting_a_generous_sla_and_writes_it(deployed_mlp, tmp_path, capsys):
    repo, deployment = deployed_mlp
    before = _served(deployment)
    space = _space(tmp_path, TWO_POINTS)
    # a budget that holds the baselines and the one other point however slow the host is
    code = run_cli("tune", "mlp", "-r", repo, "--sla-p99-ms", "5000", "--space", space, *QUICK,
                   "--budget-s", "150", "--json", tmp_path / "tune.json", "--csv", tmp_path / "tune.csv",
                   "--plot", tmp_path / "tune.png", "--write")
    out = capsys.readouterr().out
    assert code == 0, out
    report = json.loads((tmp_path / "tune.json").read_text())
    assert report["winner"] and report["exit_code"] == 0
    assert not [(t["config"], t["skipped"]) for t in report["trials"] if t["skipped"]]
    roles = [t["role"] for t in report["trials"]]
    assert roles[:2] == ["served", "bare default"]
    assert any(t["knobs"].get("instance_count") == 2 for t in report["trials"])
    assert all(t["throughput_at_sla"] > 0 for t in report["trials"] if t["meets_sla"])
    assert report["comparisons"] and all(c["interval"] for c in report["comparisons"])
    said = " ".join(out.split())
    assert "SLA met" in said, out
    assert all(f"vs {c['baseline']}: " in said for c in report["comparisons"]), out
    # the winner is in the config of the profile a local deployment serves, the CPU's,
    # stamped as tune's, its digest intact
    written = repo / "mlp" / "configs" / "cpu.pbtxt"
    text = written.read_text()
    assert text.startswith("# Generated by tritonkit tune for profile 'cpu'")
    assert edited_by_hand(written) is None
    config = read_config(written)
    assert config.platform == "onnxruntime_onnx"          # the production config, not the CPU copy
    winner = next(t for t in report["trials"] if report["winner"].startswith(t["config"]))
    if winner["bare"]:          # Triton's bare default won: written as it is, none of our knobs
        assert not config.instance_group and not config.HasField("dynamic_batching"), text
    else:
        assert [g.count for g in config.instance_group] == [winner["knobs"]["instance_count"]], text
    # ...which the deployment (no --gpu: config.pbtxt) serves once redeployed with --gpu cpu
    assert f"to serve the tuned config: tritonkit down -r {repo} && tritonkit deploy -r {repo} " \
           f"--gpu cpu" in said, out
    # ...and the server serves what it served before the tune
    assert _knobs(_served(deployment)) == _knobs(before)
    assert (tmp_path / "tune.csv").read_text().count("\n") == len(report["trials"]) + 1
    assert (tmp_path / "tune.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_impossible_sla_exits_3_and_names_the_closest_config(deployed_mlp, tmp_path, capsys):
    repo, deployment = deployed_mlp
    before = _served(deployment)
    space = _space(tmp_path, TWO_POINTS)
    code = run_cli("tune", "mlp", "-r", repo, "--sla-p99-ms", "0.001", "--space", space, *QUICK,
                   "--json", tmp_path / "tune.json")
    out = " ".join(capsys.readouterr().out.split())
    assert code == 3
    report = json.loads((tmp_path / "tune.json").read_text())
    assert report["winner"] is None and report["closest"]
    assert f"no config met the SLA; closest: {report['closest']}" in out
    closest = min((t for t in report["trials"] if t["best_p99_ms"]), key=lambda t: t["best_p99_ms"])
    assert report["closest"].startswith(closest["config"])
    assert not report["comparisons"]
    assert _knobs(_served(deployment)) == _knobs(before)


def test_write_never_replaces_a_config_edited_by_hand_without_force(deployed_mlp, tmp_path, capsys):
    repo, deployment = deployed_mlp
    path = repo / "mlp" / "configs" / "cpu.pbtxt"
    edited = path.read_text().replace("max_batch_size: 32", "max_batch_size: 24")
    path.write_text(edited)
    space = _space(tmp_path, "instance_count = [1]\nmax_batch_size = [32]\n"
                             "max_queue_delay_us = [0]\nintra_op_thread_count = [0]\n")
    started = time.monotonic()
    code = run_cli("tune", "mlp", "-r", repo, "--sla-p99-ms", "5000", "--space", space, *QUICK,
                   "--write")
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2
    assert f"error: {path} was edited since tritonkit wrote it: --write would replace it" in err
    assert "hint: pass --force" in err
    assert time.monotonic() - started < 10, "refused before any config was tried"
    assert path.read_text() == edited
    assert run_cli("tune", "mlp", "-r", repo, "--sla-p99-ms", "5000", "--space", space, *QUICK,
                   "--write", "--force") == 0
    assert path.read_text().startswith("# Generated by tritonkit tune")
    assert read_config(path).max_batch_size == 24     # the knobs tune did not change stay


def test_a_config_that_fails_to_load_is_skipped_with_its_reason_and_the_search_goes_on(
        deployed_mlp, tmp_path, capsys):
    repo, deployment = deployed_mlp
    space = _space(tmp_path, "instance_count = [1]\nmax_batch_size = [16, 4]\n"
                             "max_queue_delay_us = [0]\n")
    code = run_cli("tune", "picky", "-r", repo, "--sla-p99-ms", "5000", "--space", space, *QUICK,
                   "--json", tmp_path / "tune.json")
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0, out
    trials = {t["config"]: t for t in json.loads((tmp_path / "tune.json").read_text())["trials"]}
    assert "picky refuses max_batch_size 16" in trials["i1 b16 d0"]["skipped"]
    assert not trials["i1 b16 d0"]["probes"]
    assert trials["i1 b4 d0"]["skipped"] is None and trials["i1 b4 d0"]["probes"]
    assert "picky refuses max_batch_size 16" in out
    assert _served(deployment, "picky")["max_batch_size"] == 8


def test_ctrl_c_in_the_middle_of_a_search_puts_the_served_config_back(deployed_mlp, tmp_path):
    repo, deployment = deployed_mlp
    before = _served(deployment)
    space = _space(tmp_path, "instance_count = [2, 3]\nmax_batch_size = [32]\n"
                             "max_queue_delay_us = [0]\nintra_op_thread_count = [0]\n")
    run = subprocess.Popen(
        [sys.executable, "-m", "tritonkit", "tune", "mlp", "-r", str(repo), "--sla-p99-ms", "5000",
         "--space", str(space), "--probe-s", "2", "--max-concurrency", "2", "--budget-s", "300"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=default_signals)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and run.poll() is None:
            counts = [g["count"] for g in _served(deployment).get("instance_group", [])]
            if counts and counts[0] in (2, 3):       # a point of the search is served now
                break
            time.sleep(0.2)
        assert run.poll() is None, run.communicate()
        os.killpg(run.pid, signal.SIGINT)
        _, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 130, stderr
    assert "error: interrupted" in stderr and "Traceback" not in stderr
    assert _knobs(_served(deployment)) == _knobs(before)


def test_the_config_override_is_refused_without_the_secret(deployed_mlp, tmp_path, capsys,
                                                           monkeypatch):
    repo, deployment = deployed_mlp
    before = _served(deployment)
    changed = dict(before, instance_group=[{"kind": "KIND_CPU", "count": 3}])
    client = httpclient.InferenceServerClient(deployment.http_url)
    try:
        with pytest.raises(InferenceServerException) as refused:
            client.load_model("mlp", config=json.dumps(changed))
        assert refused.value.status() == "403"
        with pytest.raises(InferenceServerException):
            client.load_model("mlp", config=json.dumps(changed),
                              headers={deployment.secret_header: "not-the-secret"})
    finally:
        client.close()
    monkeypatch.delenv(SECRET_ENV, raising=False)
    code = run_cli("tune", "mlp", "--url", deployment.http_url, "--sla-p99-ms", "10", *QUICK)
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2
    assert "refused the model-repository API with no secret" in err
    monkeypatch.setenv(SECRET_ENV, "not-the-secret")
    assert run_cli("tune", "mlp", "--url", deployment.http_url, "--sla-p99-ms", "10", *QUICK) == 2
    assert "with a wrong secret" in " ".join(capsys.readouterr().err.split())
    assert _knobs(_served(deployment)) == _knobs(before)


def test_a_server_gone_before_a_trials_warm_up_is_a_run_error_at_once(deployed):
    """Killed between a config's load and its warm-up (a full run once hit that moment): the
    warm-up does not wait for a server to come up (its 120 s timeout), nor call the config
    refused and go on to the next; the server is said gone."""
    from tritonkit.client import Endpoint
    from tritonkit.errors import ServerError
    from tritonkit.tune._trial import ServedModel

    trial = ServedModel(Endpoint.from_deployment(deployed), "example")
    os.killpg(deployed.pid, signal.SIGKILL)
    # Its port held at once, bound but not listening: another test's server or peer given
    # it meanwhile would answer in its place (a full run met one).
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        deadline = time.monotonic() + 10
        while True:
            try:
                held.bind((deployed.host, deployed.http_port))
                break
            except OSError:                 # not closed yet
                assert time.monotonic() < deadline, "the killed server's port stayed taken"
                time.sleep(0.01)
        started = time.monotonic()
        with pytest.raises(ServerError, match="stopped answering while 'example' was warmed "
                                              r"\(.*Connection refused"):
            trial.warm()
        assert time.monotonic() - started < 30      # at once, not the load timeout (120 s)


def test_a_config_swapped_in_again_straight_after_is_not_loaded_or_warmed_again(deployed):
    """The comparison's rounds run A B, then B A: the side that ends a round starts the next,
    served and warm already. Another config between, or a failed measurement, loads it anew."""
    from tritonkit.client import Endpoint
    from tritonkit.tune._space import Candidate, candidate_config, parse_served
    from tritonkit.errors import UsageError
    from tritonkit.tune._trial import ServedModel

    trial = ServedModel(Endpoint.from_deployment(deployed), "example", probe_s=0.2,
                        probe_warmup_s=0.1)
    original = trial.served_config()
    four = candidate_config(parse_served(original), Candidate(max_batch_size=4))
    log = Path(deployed.log_path)

    def loads() -> int:
        return log.read_text().count("successfully loaded 'example'")

    before = loads()
    assert trial.swap(four) > 0 and loads() == before + 1
    assert trial.swap(four) == 0.0 and loads() == before + 1
    trial.restore(original)
    assert trial.swap(four) > 0 and loads() == before + 3
    trial.shapes = (("INPUT__0", (5,)),)            # a measurement that fails
    with pytest.raises(UsageError, match="INPUT__0"):
        trial.measure("closed", 1)
    trial.shapes = ()
    assert trial.swap(four) > 0 and loads() == before + 4
    trial.restore(original)


def test_a_probes_untimed_warm_up_is_half_a_second_or_as_long_as_a_shorter_probe(monkeypatch):
    from tritonkit.client import Endpoint
    from tritonkit.tune import _trial

    seen = []

    def run_loadtest(endpoint, spec, **_):
        seen.append((spec.duration_s, spec.warmup_s))
        raise _trial.Refused("not measured here")

    monkeypatch.setattr(_trial, "run_loadtest", run_loadtest)
    endpoint = Endpoint(http_url="127.0.0.1:1")
    for probe_s in (2.0, 0.3):
        with pytest.raises(_trial.Refused):
            _trial.ServedModel(endpoint, "m", probe_s=probe_s).measure("closed", 1)
    with pytest.raises(_trial.Refused):
        _trial.ServedModel(endpoint, "m", probe_s=0.3, probe_warmup_s=1.0).measure("closed", 1)
    assert seen == [(2.0, 0.5), (0.3, 0.3), (0.3, 1.0)]


def test_a_server_that_dies_in_the_middle_is_a_run_error(deployed_mlp, tmp_path):
    repo, deployment = deployed_mlp
    space = _space(tmp_path, "instance_count = [2, 3]\nmax_batch_size = [32]\n"
                             "max_queue_delay_us = [0]\nintra_op_thread_count = [0]\n")
    run = subprocess.Popen(
        [sys.executable, "-m", "tritonkit", "tune", "mlp", "-r", str(repo), "--sla-p99-ms", "5000",
         "--space", str(space), "--probe-s", "2", "--max-concurrency", "2", "--budget-s", "300"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=default_signals)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and run.poll() is None:
            if [g["count"] for g in _served(deployment).get("instance_group", [])][:1] in ([2], [3]):
                break
            time.sleep(0.2)
        os.killpg(deployment.pid, signal.SIGKILL)      # the server and its stubs, as the OOM killer
        killed = time.monotonic()
        _, stderr = run.communicate(timeout=180)
        ended_after = time.monotonic() - killed
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 4, stderr
    # at once, not after waiting out a restart (warm-up waits for one up to its 120 s timeout)
    assert ended_after < 60, (ended_after, stderr)
    # (gevent's hub may print a refused connection of the client's pool above it: left, see
    # the report of the tune branch)
    assert "\nerror: " in "\n" + stderr and "stopped answering" in stderr, stderr
