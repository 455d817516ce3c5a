"""`tritonkit warmup` loading models: ensembles and their steps, explicit model control, a
model that fails to load or was added after the deploy, one deadline for all loads."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from tests.conftest import BUSY_HOST_STEADY, EXAMPLE_REPOSITORY, add_broken_model, run_cli, unused_ports
from tests.warmup.conftest import (
    ECHO_CONFIG, ENSEMBLE, _deploy, _python_model, _ready, _served, _slow_to_load)
from tritonkit.client import Endpoint
from tritonkit.errors import ServerError, UsageError
from tritonkit.server.local import Deadline, _alive
from tritonkit.server.state import redeploy_command
from tritonkit.warmup import load_and_warm, load_order


def test_ensemble_steps_are_loaded_before_the_ensemble():
    configs = {"pipeline": {"platform": "ensemble", "ensemble_scheduling": {"step": [
        {"model_name": "tokenize"}, {"model_name": "encoder"}]}},
        "encoder": {}, "tokenize": {}}
    assert load_order(["pipeline", "encoder"], configs) == ["tokenize", "encoder", "pipeline"]
    with pytest.raises(UsageError, match="one of its own steps"):
        load_order(["a"], {"a": {"ensemble_scheduling": {"step": [{"model_name": "a"}]}}})


@pytest.mark.server
def test_a_name_that_does_not_exist_is_a_usage_error(warm_server, capsys):
    code = run_cli("warmup", "--repository", warm_server.repository, "--model", "nope")
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: no model named 'nope' in the server's repository")
    assert "models there: example, pipeline" in err
    assert _ready(warm_server)


@pytest.mark.server
def test_a_repository_moved_after_its_deploy_is_refused_before_any_load_naming_both_places(
        tmp_path, capsys):
    """The server reads the mirror under the old place: every load failed, and warm-up said
    'the server went away during warm-up 4 time(s)'."""
    old, moved = tmp_path / "repo", tmp_path / "moved"
    shutil.copytree(EXAMPLE_REPOSITORY, old, ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    deployment = _deploy(old, "--no-warmup")
    try:
        old.rename(moved)
        for reload in ((), ("--reload",)):
            code = run_cli("warmup", "--repository", moved, *reload)
            err = capsys.readouterr().err
            assert code == 1
            assert err.startswith(f"error: the server recorded in {moved} serves this repository "
                                  f"from its old place, {old} (it was moved after its deploy)")
            assert (f"hint: restart it from here: tritonkit down --repository {moved}, then "
                    f"tritonkit deploy --repository {moved}") in err
        assert _alive(deployment.pid)          # the hint's first step stops it from here
        assert run_cli("down", "--repository", moved) == 0
        assert not _alive(deployment.pid)
    finally:
        os.killpg(deployment.pid, signal.SIGKILL) if _alive(deployment.pid) else None
        run_cli("down", "--repository", moved if moved.exists() else old)


@pytest.mark.server
def test_a_model_that_fails_to_load_reports_tritons_message_and_the_others_are_still_warmed(
        deployed, tmp_path, capsys):
    add_broken_model(_served(deployed), name="aaa_broken")        # first in name order
    out = tmp_path / "warm.json"
    # steady by a busy host's rule: the test is about the failed load, not steadiness (beside
    # other tests 'example' was once not steady within 500 requests by the default rule)
    code = run_cli("warmup", "--repository", deployed.repository, "--model", "aaa_broken",
                   "--model", "example", "--timeout", "60", "--json", out, *BUSY_HOST_STEADY)
    captured = capsys.readouterr()
    assert code == 1
    assert captured.err.startswith("error: Triton could not load 'aaa_broken'")
    assert "weights file is corrupt" in captured.err
    assert "the other models were warmed: example" in captured.err
    broken, example = json.loads(out.read_text())["models"]      # each one's figures or failure
    assert broken["model"] == "aaa_broken" and "weights file is corrupt" in broken["error"]
    assert example["model"] == "example" and example["steady"] and example["requests"] > 0
    assert _ready(deployed, "example")


@pytest.mark.timing
@pytest.mark.server
def test_warmup_of_a_deployment_warms_its_own_models_not_whatever_else_its_folder_holds(
        deployed, capsys):
    add_broken_model(_served(deployed))
    assert run_cli("warmup", "--repository", deployed.repository, "--timeout", "60") == 0
    assert "broken" not in capsys.readouterr().out


@pytest.mark.server
def test_a_model_added_to_the_folder_after_a_local_deploy_is_said_so_with_how_to_redeploy(
        warm_server, capsys):
    """The local server serves a mirror made at the deploy: asked for a model added since,
    warm-up said "no model named 'cnn' in the server's repository", though cnn was there."""
    repo = Path(warm_server.repository)
    (repo / "cnn").mkdir()
    (repo / "cnn" / "config.pbtxt").write_text((repo / "example" / "config.pbtxt").read_text())
    try:
        assert run_cli("warmup", "-r", repo, "--model", "cnn") == 2
        error, hint = capsys.readouterr().err.splitlines()
        assert error == (f"error: model 'cnn' was added to {repo} after the deploy: its server "
                         "serves the models deployed then (example, pipeline)")
        # as it was deployed: on the ports it serves on (a bare deploy takes 8000-8002)
        assert hint == f"hint: redeploy: {redeploy_command(repo)}"
        assert f"--http-port {warm_server.http_port}" in hint
        # Warming the deployment's models says it leaves cnn out, and why.
        assert run_cli("warmup", "-r", repo) == 0
        [warning] = capsys.readouterr().err.splitlines()
        assert warning == (f"warning: model 'cnn' was added to {repo} after the deploy: its "
                           "server does not serve it, and nothing warms it; redeploy: "
                           f"{redeploy_command(repo)}")
    finally:
        shutil.rmtree(repo / "cnn")


OUTER = """name: "outer"
platform: "ensemble"
max_batch_size: 8
input { name: "X" data_type: TYPE_FP32 dims: 4 }
output { name: "Y" data_type: TYPE_FP32 dims: 3 }
ensemble_scheduling { step {
  model_name: "pipeline" model_version: -1
  input_map { key: "X" value: "X" } output_map { key: "Y" value: "Y" } } }
"""


@pytest.mark.server
def test_an_ensemble_named_alone_at_a_url_warms_the_steps_triton_loaded_with_it_nested_too(
        example_repository, tmp_path, monkeypatch):
    """No folder to read its config from: its steps were warmed only through it (no burst
    for their instances, no figures of their own). Up to 1,000 requests a model: through
    two ensembles a busy host once kept 'pipeline' from steady within the default 500."""
    repo = example_repository
    for name, config in (("pipeline", ENSEMBLE), ("outer", OUTER)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
    deployment = _deploy(repo, "--no-warmup")
    try:
        client = httpclient.InferenceServerClient(deployment.http_url)
        try:
            for name in ("outer", "pipeline", "example"):
                client.unload_model(name, headers=deployment.repository_headers())
            deadline = time.monotonic() + 30
            while any(client.is_model_ready(n) for n in ("outer", "pipeline", "example")):
                assert time.monotonic() < deadline, "the models did not unload"
                time.sleep(0.1)
        finally:
            client.close()
        monkeypatch.setenv("TRITONKIT_REPOSITORY_SECRET", deployment.secret())
        out = tmp_path / "warm.json"
        assert run_cli("warmup", "--url", deployment.http_url, "--model", "outer",
                       "--json", out, "--timeout", "90", "--requests", "1000") == 0
        records = {r["model"]: r for r in json.loads(out.read_text())["models"]}
        assert list(records) == ["example", "pipeline", "outer"]          # steps first
        assert all(r["steady"] and r["requests"] > 0 and r["cold"] for r in records.values())
        assert records["outer"]["loaded"] and not records["example"]["loaded"]
        assert records["pipeline"]["note"].startswith("loaded by Triton with ensemble 'outer'")
        assert records["example"]["note"].startswith("loaded by Triton with ensemble 'pipeline'")
    finally:
        run_cli("down", "--repository", repo)


@pytest.mark.server
def test_a_load_on_a_server_not_in_explicit_model_control_says_so_and_how_to_start_it(
        example_repository, tmp_path, monkeypatch, capsys):
    """Triton's words ("... not allowed if polling is enabled", in mode none too) with
    "read the server's log" sent the user to a log that says nothing more."""
    import dataclasses
    import secrets
    import subprocess

    from tritonkit.client import health
    from tritonkit.fileio import OwnedFolder
    from tritonkit.server.binary import find_install, prepare_backends, server_environment
    from tritonkit.server.settings import Ports, load_server_settings, tritonserver_argv

    install = find_install()
    ports = Ports(*unused_ports(3))
    with OwnedFolder(tmp_path, "backends", create=True) as backends:
        backend_directory = prepare_backends(install, backends)
    argv = tritonserver_argv(
        dataclasses.replace(load_server_settings(), model_control_mode="none"),
        binary=str(install.binary), model_repository=str(example_repository), ports=ports,
        models=[], secret="s3cret", bind_address="127.0.0.1",
        backend_directory=str(backend_directory),
        gpu_metrics=False, python_shm_prefix=f"tritonkit_test_{secrets.token_hex(4)}_")
    with open(tmp_path / "server.log", "wb") as log:
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                  env=server_environment(install), start_new_session=True)
    url = f"127.0.0.1:{ports.http}"
    try:
        deadline = time.monotonic() + 60
        while health(url, "/v2/health/ready") is not None:
            assert server.poll() is None and time.monotonic() < deadline, "no server"
            time.sleep(0.2)
        monkeypatch.setenv("TRITONKIT_REPOSITORY_SECRET", "s3cret")
        assert run_cli("warmup", "--url", url, "--reload", "--timeout", "60") == 1
        err = capsys.readouterr().err
        assert err.startswith(f"error: the server at {url} is not in explicit model-control "
                              "mode, so it loads no model on request ('example'; Triton: "
                              "explicit model load / unload is not allowed")
        assert "hint: start it with --model-control-mode=explicit" in err
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@pytest.mark.server
def test_loads_one_after_another_share_one_fixed_deadline(tmp_path):
    """Under one fixed deadline (compose's) each load is bounded by the time left when it
    is sent, not when warm-up began: ten models that take 30 s each to load must not
    stretch a 120 s timeout to 300 s. (Warm-up's own deadline bounds a stall instead:
    test_stall_deadline.)"""
    repo = tmp_path / "repo"
    # a's load (2 s, and its stub's start: 2 s more on a busy 2-core host) ends well within
    # the timeout, b's (7 s) cannot end in what is left of it (6 s at most). Slow once their
    # markers are written: the deploy before the warm-up loads them at once.
    slow = {"a_slow": (tmp_path / "a_sleeps", 2), "b_slower": (tmp_path / "b_sleeps", 7)}
    for name, (marker, _) in slow.items():                          # loaded in name order
        _python_model(repo, name, ECHO_CONFIG, _slow_to_load(marker))
    deployment = _deploy(repo, "--no-warmup")
    try:
        client = httpclient.InferenceServerClient(deployment.http_url)
        try:
            for name in slow:
                client.unload_model(name, headers=deployment.repository_headers())
            while any(client.is_model_ready(name) for name in slow):
                time.sleep(0.1)
        finally:
            client.close()
        for marker, load_s in slow.values():
            marker.write_text(str(load_s))
        started = time.monotonic()
        with pytest.raises(ServerError, match="loading 'b_slower' did not finish within"):
            load_and_warm(Endpoint.from_deployment(deployment), ["a_slow", "b_slower"],
                          deadline=Deadline(8), check=False)
        # Without the bound: b's load waited 8 s more after a's, from its start (10 s and more).
        assert time.monotonic() - started < 9.5
    finally:
        run_cli("down", "--repository", repo, "--timeout", "2")   # not b's load's end


@pytest.mark.server
def test_a_refused_load_of_a_recorded_deployment_names_its_server_log(deployed, capsys):
    add_broken_model(_served(deployed), name="broken_logged")
    code = run_cli("warmup", "--repository", deployed.repository, "--model", "broken_logged",
                   "--timeout", "60")
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("error: Triton could not load 'broken_logged'")
    assert deployed.log_path and f"hint: read the server's log: {deployed.log_path}" in err
