"""`tritonkit loadtest` when the server or model fails: unknown models, no server, a server
that dies or is gone, models that crash."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_REPOSITORY, run_cli
from tests.loadtest.conftest import _At, _loadtest_model
from tritonkit import report
from tritonkit.client import Endpoint
from tritonkit.deploy import deploy_local, down
from tritonkit.errors import EXIT_ERROR, EXIT_RUN_ERRORS, EXIT_USAGE
from tritonkit.loadtest import LoadSpec, run_loadtest


@pytest.mark.server
def test_an_unknown_model_is_one_clear_line(served, capsys):
    code = run_cli("loadtest", "--repository", served.repository, "--model", "nope",
                   "--concurrency", "1", "--duration", "0.5")
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert err.startswith(f"error: the server at {served.http_url} has no model 'nope' (its models: example")
    assert "hint: check the name given to --model" in err and "Traceback" not in err


@pytest.mark.server
def test_a_model_added_after_the_deploy_is_told_to_redeploy_and_one_unloaded_to_warm_up(served, capsys):
    """The local server serves the mirror made at the deploy: a model exported into the folder
    since is not in its repository, and `warmup --model` could not load it either."""
    repo = Path(served.repository)
    shutil.copytree(repo / "example", repo / "cnn", ignore=shutil.ignore_patterns("__pycache__"))
    try:
        assert run_cli("loadtest", "-r", repo, "-m", "cnn", "-c", "1") == EXIT_USAGE
    finally:
        shutil.rmtree(repo / "cnn")
    assert capsys.readouterr().err.splitlines() == [
        f"error: model 'cnn' is in {repo} but was added after the deploy: the server at "
        f"{served.http_url} does not know it",
        f"hint: redeploy: tritonkit down -r {repo} && tritonkit deploy -r {repo} --http-port "
        f"{served.http_port} --grpc-port {served.grpc_port} --metrics-port {served.metrics_port}"]

    endpoint = Endpoint.from_deployment(served)
    client = endpoint.http()
    client.unload_model("example", headers=endpoint.repository_headers)
    try:
        assert run_cli("loadtest", "-r", repo, "-m", "example", "-c", "1") == EXIT_USAGE
    finally:
        client.load_model("example", headers=endpoint.repository_headers)
        client.close()
    first, hint = capsys.readouterr().err.splitlines()[:2]
    assert first.startswith("error: model 'example' is not loaded on the server")
    assert hint == f"hint: load it: tritonkit warmup --repository {repo} --model example"


def test_no_server_is_one_clear_line_and_an_error_exit(capsys):
    from tests.conftest import unused_port

    code = run_cli("loadtest", "--url", f"127.0.0.1:{unused_port()}", "--model", "example",
                   "--concurrency", "1", "--duration", "0.5")
    err = capsys.readouterr().err
    assert code == EXIT_ERROR and err.startswith("error: could not read model 'example'")
    assert "internal error" not in err and "Traceback" not in err and "hint: is a Triton server" in err


@pytest.mark.server
def test_a_server_that_dies_mid_run_ends_it_with_what_was_measured(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE_REPOSITORY, repo, ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    deployment = deploy_local(repo, http_port=0, grpc_port=0, metrics_port=0, timeout=120,
                              warmup=False)
    # The server's whole process group: a stub orphaned by killing the server alone would
    # outlive the test.
    kill = _At(1.5, 0.3, lambda: os.killpg(deployment.pid, signal.SIGKILL))
    try:
        result = run_loadtest(Endpoint.from_deployment(deployment),
                              LoadSpec(model="example", concurrency=(2,), duration_s=8, warmup_s=0.3),
                              progress=kill)
    finally:
        kill.join()
        down(repo)
    assert kill.ran
    level = result.levels[0]
    assert "server gone at t=" in result.ended_early
    assert level.ok > 50                                  # what was measured is kept
    assert 1.0 < level.duration_s < 8
    verdict = report.judge(result, report.Sla(p99_ms=1000))
    assert verdict.exit_code == EXIT_RUN_ERRORS and "stopped answering" in verdict.reasons[0]
    report.write_json(tmp_path / "died.json", result, verdict)
    assert json.loads((tmp_path / "died.json").read_text())["levels"][0]["ended_early"]


def _stale_record(repo: Path) -> None:
    """A local deployment recorded in ``repo`` whose server is gone (its pid is no
    tritonserver: this test process)."""
    from tests.conftest import unused_ports
    from tritonkit.server.state import Deployment, new_secret, save_deployment

    repo.mkdir(parents=True, exist_ok=True)
    new_secret(repo)
    http, grpc, metrics = unused_ports(3)
    save_deployment(Deployment(target="local", repository=str(repo.resolve()), host="127.0.0.1",
                               http_port=http, grpc_port=grpc, metrics_port=metrics,
                               secret_header="x-tritonkit-secret", models=["mlp"], started_at=0.0,
                               pid=os.getpid(), log_path=str(repo / "missing.log")))


def test_a_recorded_local_server_that_is_gone_is_said_as_warmup_says_it(tmp_path, capsys):
    repo = tmp_path / "repo"
    _stale_record(repo)
    code = run_cli("loadtest", "-r", repo, "-m", "mlp", "-c", "1", "--duration", "0.5")
    err = capsys.readouterr().err
    assert code == EXIT_ERROR, err
    first, hint = err.splitlines()[:2]
    assert first.startswith(f"error: the local server recorded in {repo.resolve()} (pid {os.getpid()}) "
                            "is no longer running")
    assert hint.startswith(f"hint: start it again: tritonkit deploy --repository {repo.resolve()}")


def test_no_server_at_a_url_names_the_url_and_no_placeholder(capsys):
    from tests.conftest import unused_port

    url = f"127.0.0.1:{unused_port()}"
    assert run_cli("loadtest", "--url", url, "--model", "example", "--concurrency", "1") == EXIT_ERROR
    err = capsys.readouterr().err
    assert f"hint: is a Triton server listening at {url}? check --url" in err
    assert "DIR" not in err and "NAME" not in err


def test_no_answer_from_a_deployments_server_names_its_folder(tmp_path, capsys):
    """A record that is not local (compose): this host cannot tell whether its server runs,
    so the request is tried, and the hint names the folder to deploy again."""
    from tritonkit.server.state import load_deployment, save_deployment

    repo = tmp_path / "repo"
    _stale_record(repo)
    import dataclasses
    save_deployment(dataclasses.replace(load_deployment(repo), target="compose", pid=None))
    assert run_cli("loadtest", "-r", repo, "-m", "mlp", "-c", "1") == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith("error: could not read model 'mlp'")
    assert f"hint: is the server up? start it: tritonkit deploy --repository {repo}" in err
    assert "DIR" not in err


@pytest.mark.server
def test_a_first_request_the_model_fails_on_names_the_servers_log_file(encoder_served, capsys):
    code = _loadtest_model(encoder_served, "crash")
    assert code == EXIT_RUN_ERRORS
    hint = capsys.readouterr().err.splitlines()[1]
    assert hint.endswith(f"the server's log says more: {encoder_served.log_path}"), hint
    assert Path(encoder_served.log_path).is_file()


@pytest.mark.server
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_model_that_crashes_on_the_first_request_is_still_a_run_error(encoder_served, capsys, protocol):
    """A model failing on whatever it is sent is not the user's input: exit 4 with the
    server's words, as before."""
    code = _loadtest_model(encoder_served, "crash", "--protocol", protocol)
    err = capsys.readouterr().err
    assert code == EXIT_RUN_ERRORS, err
    word = "HTTP 500" if protocol == "http" else "gRPC INTERNAL"
    first, hint = err.splitlines()[:2]
    assert first.startswith(f"error: the first request to model 'crash' (X FP32[4]) failed: {word}: ")
    assert first.endswith("CUDA error: an illegal memory access was encountered"), first
    assert hint.startswith("hint: check the model's inputs")
