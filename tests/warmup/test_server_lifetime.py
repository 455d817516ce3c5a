"""`tritonkit warmup` waiting for its server: none running, one not live yet, one that is
gone, dies or restarts mid warm-up."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from tests.conftest import run_cli, unused_port, unused_ports
from tests.warmup.conftest import ECHO_CONFIG, _deploy, _echo_model, _python_model, _ready
from tritonkit.deploy import deploy_local
from tritonkit.errors import ServerError
from tritonkit.server.local import _alive
from tritonkit.server.state import Deployment, load_deployment, save_deployment, state_dir
from tritonkit.warmup import SteadyRule, warm_up


@pytest.mark.slow
def test_no_server_running_is_one_clear_line_at_the_deadline(tmp_path, capsys):
    port = unused_port()
    started = time.monotonic()
    code = run_cli("warmup", "--url", f"127.0.0.1:{port}", "--timeout", "1.5")
    err = capsys.readouterr().err
    assert code == 1
    waiting, error = err.splitlines()[:2]
    said = re.fullmatch(rf"waiting up to ([\d.]+) s for Triton at 127\.0\.0\.1:{port} to answer "
                        r"\(Connection refused\) …", waiting)
    assert said and 1.0 <= float(said[1]) <= 1.5, waiting   # what is left of it, to a tenth
    assert error.startswith(f"error: no Triton server answers at 127.0.0.1:{port} (waited 1.5 s")
    assert "Traceback" not in err
    assert time.monotonic() - started < 5
    assert run_cli("warmup", "--repository", tmp_path) == 2
    assert "no deployment recorded" in capsys.readouterr().err


@pytest.mark.slow
def test_an_address_given_alone_that_refuses_every_connection_fails_after_the_grace(
        monkeypatch, capsys):
    """Nothing listening at --url: it said nothing and waited the whole timeout (120 s by
    default). Now it says at once what it waits for, and gives up once every connection
    has been refused for REFUSED_GRACE_S."""
    monkeypatch.setattr("tritonkit.warmup._run.REFUSED_GRACE_S", 1.0)
    port = unused_port()
    started = time.monotonic()
    code = run_cli("warmup", "--url", f"127.0.0.1:{port}", "--timeout", "30")
    err = capsys.readouterr().err
    assert code == 1 and time.monotonic() - started < 5
    waiting, error, hint = err.splitlines()
    assert waiting == (f"waiting up to 30 s for Triton at 127.0.0.1:{port} to answer (Connection "
                       "refused); giving up after 1 s if every connection is refused …")
    assert error.startswith(f"error: nothing listens at 127.0.0.1:{port}: connection refused "
                            "for 1.")
    assert hint.startswith("hint: is the server up, and is this its HTTP port")


@pytest.mark.slow
def test_a_port_that_accepts_connections_but_is_not_live_is_waited_for_to_the_timeout(
        monkeypatch, capsys):
    """A server that is starting has its port open: not a refused address."""
    import socket as socketlib

    monkeypatch.setattr("tritonkit.warmup._run.REFUSED_GRACE_S", 0.3)
    with socketlib.socket() as listener:           # accepts (the backlog), never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        started = time.monotonic()
        code = run_cli("warmup", "--url", f"127.0.0.1:{port}", "--timeout", "2")
    assert code == 1 and time.monotonic() - started >= 1.9
    assert f"\nerror: no Triton server answers at 127.0.0.1:{port}" in capsys.readouterr().err


@pytest.mark.slow
def test_a_port_that_stops_answering_and_then_refuses_fails_after_the_grace_not_the_timeout(
        monkeypatch, capsys):
    """A server killed while it was checked: the first try found its port open with nothing
    answering (or the connection reset), the next ones refused. Gone, as an address that
    refused from the start is: a tune's warm-up waited its whole 120 s for it."""
    import socket as socketlib

    monkeypatch.setattr("tritonkit.warmup._run.REFUSED_GRACE_S", 0.3)
    listener = socketlib.socket()                  # accepts (the backlog), never answers
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    closing = threading.Timer(1.0, listener.close)     # the server gone: its port refuses
    closing.start()
    try:
        started = time.monotonic()
        code = run_cli("warmup", "--url", f"127.0.0.1:{port}", "--timeout", "60")
        took = time.monotonic() - started
    finally:
        closing.cancel()
        listener.close()
    err = capsys.readouterr().err
    assert code == 1 and took < 20, (took, err)
    assert f"\nerror: nothing listens at 127.0.0.1:{port}: connection refused for 0." in err


@pytest.mark.slow
def test_a_recorded_deployments_server_is_waited_for_though_its_port_refuses(
        tmp_path, monkeypatch, capsys):
    """A deploy recorded here may be starting (or restarting): the timeout is its to use."""
    from tritonkit.server.state import new_secret

    monkeypatch.setattr("tritonkit.warmup._run.REFUSED_GRACE_S", 0.3)
    port, grpc, metrics = unused_ports(3)
    new_secret(tmp_path)
    save_deployment(Deployment(target="compose", repository=str(tmp_path), host="127.0.0.1",
                               http_port=port, grpc_port=grpc, metrics_port=metrics,
                               secret_header="x-key", models=["example"], started_at=0.0))
    for url in ((), ("--url", f"127.0.0.1:{port}")):
        started = time.monotonic()
        assert run_cli("warmup", "--repository", tmp_path, *url, "--timeout", "1.5") == 1
        assert time.monotonic() - started >= 1.4
        err = capsys.readouterr().err
        assert f"\nerror: no Triton server answers at 127.0.0.1:{port}" in err
        assert "giving up" not in err


@pytest.mark.server
@pytest.mark.parametrize("signum, how", [
    (signal.SIGKILL, "its log ends with no shutdown (killed"),
    (signal.SIGINT, "it was stopped by SIGINT"),
], ids=["killed", "stopped"])
def test_a_recorded_local_server_that_is_gone_fails_at_once_saying_so_and_to_deploy_again(
        example_repository, signum, how, capsys):
    """Nothing restarts a local server by itself: waiting the timeout out (120 s by
    default) only hid that behind 'no Triton server answers'."""
    repo = example_repository
    deployment = _deploy(repo, "--no-warmup")
    try:
        os.kill(deployment.pid, signum)
        while _alive(deployment.pid):
            time.sleep(0.05)
        started = time.monotonic()
        code = run_cli("warmup", "--repository", repo)
        err = capsys.readouterr().err
        assert time.monotonic() - started < 10      # at once: not the 120 s timeout
        assert code == 1
        assert err.startswith(f"error: the local server recorded in {repo.resolve()} (pid "
                              f"{deployment.pid}) is no longer running: {how}")
        assert f"hint: start it again: tritonkit deploy --repository {repo.resolve()}" in err
        assert "Traceback" not in err
        # A server given by --url is no record's: it may be restarting, so it is waited for.
        url = deployment.http_url
        assert run_cli("warmup", "--repository", repo, "--url", url, "--timeout", "1") == 1
        assert f"\nerror: no Triton server answers at {url}" in capsys.readouterr().err
    finally:
        os.killpg(deployment.pid, signal.SIGKILL) if _alive(deployment.pid) else None
        run_cli("down", "--repository", repo)


SLOW_MODEL = '''
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.02)
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT__0", pb_utils.get_input_tensor_by_name(r, "INPUT__0").as_numpy())])
            for r in requests]
'''


@pytest.mark.server
def test_a_server_that_dies_during_deploys_warm_up_fails_the_deploy_at_once(tmp_path):
    """Deploy started that server: it is not coming back, so waiting the timeout out
    would only hide Triton's last words."""
    repo = tmp_path / "repo"
    _python_model(repo, "slow", ECHO_CONFIG, _echo_model("        time.sleep(0.05)"))
    outcome: dict = {}

    def deploy() -> None:
        try:
            deploy_local(repo, http_port=0, grpc_port=0, metrics_port=0, timeout=60)
        except Exception as exc:  # handed to the test thread
            outcome["error"], outcome["at"] = exc, time.monotonic()

    thread = threading.Thread(target=deploy)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not (state_dir(repo) / "server.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = load_deployment(repo).pid
        # Killed once every model is READY (the warm-up runs), not while it starts.
        while (load_deployment(repo).status != "running" or not _ready(load_deployment(repo), "slow")) \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        killed = time.monotonic()
        os.killpg(pid, signal.SIGKILL)
        thread.join(timeout=60)
    finally:
        run_cli("down", "--repository", repo)
    error = outcome.get("error")
    assert isinstance(error, ServerError), error
    assert "tritonserver exited with code -9 after it started" in str(error)
    assert outcome["at"] - killed < 10                   # not the 60 s timeout
    assert not (state_dir(repo) / "server.json").exists()


def _until_warming(deployment: Deployment, model: str = "slow") -> None:
    """Until the server has answered ``model`` a request (warm-up's: nothing else sends
    any), within 30 s: what the test does next lands in the warm-up, however late a busy
    host started it."""
    client = httpclient.InferenceServerClient(deployment.http_url)
    try:
        deadline = time.monotonic() + 30
        while not sum(int(m["inference_stats"]["success"]["count"])
                      for m in client.get_inference_statistics(model)["model_stats"]):
            assert time.monotonic() < deadline, "the warm-up sent no request"
            time.sleep(0.05)
    finally:
        client.close()


def _warming_in_a_thread(repo: Path, **options) -> tuple[threading.Thread, dict]:
    """warm_up of ``repo``'s slow model, started in a thread: 4 shapes x 80 requests x 20 ms,
    about 6 s, so what the test does once the first is answered (``_until_warming``) lands
    in the middle. The outcome dict gets its results or its error, and when it ended.
    ``options`` go to warm_up."""
    outcome: dict = {}

    def warm() -> None:
        try:
            outcome["results"] = warm_up(repo, timeout=60, rule=SteadyRule(window=40, tolerance=1.0),
                                         **options)
        except Exception as exc:  # handed to the test thread
            outcome["error"] = exc
        outcome["ended"] = time.monotonic()

    thread = threading.Thread(target=warm)
    thread.start()
    return thread, outcome


@pytest.mark.server
def test_a_recorded_local_server_that_dies_mid_warmup_and_is_not_restarted_fails_after_the_grace(
        tmp_path, monkeypatch):
    """An out-of-memory kill on the first big batch, say: the warm-up waited out its whole
    timeout (120 s by default) for a restart that nothing was going to make, then said
    only that no server answered."""
    import tritonkit.warmup._record as record

    monkeypatch.setattr(record, "RESTART_GRACE_S", 1.0)
    repo = tmp_path / "repo"
    _python_model(repo, "slow", ECHO_CONFIG + "dynamic_batching { }\n", SLOW_MODEL)
    first = _deploy(repo, "--no-warmup")
    thread, outcome = _warming_in_a_thread(repo)
    try:
        _until_warming(first)
        os.killpg(first.pid, signal.SIGKILL)
        killed = time.monotonic()
        thread.join(timeout=60)
    finally:
        run_cli("down", "--repository", repo)
    error = outcome.get("error")
    assert isinstance(error, ServerError), outcome
    assert outcome["ended"] - killed < 5                  # the grace and a poll, not the timeout
    assert error.message.startswith(
        f"the local server recorded in {repo.resolve()} (pid {first.pid}) stopped during the "
        "warm-up and no deploy replaced it within 1 s: its log ends with no shutdown (killed")
    assert error.hint.startswith(f"start it again: tritonkit deploy --repository {repo.resolve()}")


@pytest.mark.server
def test_a_server_restarted_mid_warmup_is_waited_for_and_warmed_again(tmp_path):
    repo = tmp_path / "repo"
    (repo / "slow" / "1").mkdir(parents=True)
    (repo / "slow" / "config.pbtxt").write_text(
        'name: "slow"\nbackend: "python"\nmax_batch_size: 8\n'
        'input { name: "INPUT__0" data_type: TYPE_FP32 dims: 4 }\n'
        'output { name: "OUTPUT__0" data_type: TYPE_FP32 dims: 4 }\n'
        'dynamic_batching { preferred_batch_size: [2, 4] }\n')
    (repo / "slow" / "1" / "model.py").write_text(SLOW_MODEL)
    first = _deploy(repo, "--no-warmup")
    # The restart's warm-up starts its series anew: on a busy host 454 requests did not make
    # it steady once, so it may take up to 1,000 (it stops once steady)
    thread, outcome = _warming_in_a_thread(repo, requests=1000)
    try:
        _until_warming(first)
        os.killpg(first.pid, signal.SIGKILL)                 # a crash...
        while _alive(first.pid):
            time.sleep(0.05)
        second = _deploy(repo, "--no-warmup")                 # ...and a restart: new ports, new secret
        thread.join(timeout=60)
    finally:
        run_cli("down", "--repository", repo)
    assert "error" not in outcome, outcome.get("error")
    [result] = outcome["results"]
    assert result.steady and "server restarted 1x" in result.note
    assert second.http_port != first.http_port
    # Warmed again, every shape, on the new server (which loaded the model at start).
    assert result.requests >= 4 * 40 and result.load_s is None
