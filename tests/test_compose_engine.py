"""`tritonkit deploy --target compose --gpu cpu` on a real Docker engine, end to end.

The engine is the one that answers, or one the run starts (the ``engine`` fixture of
tests/conftest.py, tests/docker_engine.py); the image is the stand-in
``docker/standin/build.sh`` builds (tritonserver 2.51.0 with the python backend alone), so
ONNX models are served with ``--onnx-backend python``. One deployment is shared by the
cases that read it (vfs makes each container's creation and removal cost seconds); the
case that kills its server and the one that takes it down come last, in this file's order
(the engine tests run on one xdist worker, in order). Every Docker object is named from
``tk-test-`` and removed at the end.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from tests import onnx_graphs
from tests.conftest import BUSY_HOST_STEADY, EXAMPLE_REPOSITORY, default_signals, run_cli, unused_ports
from tests.docker_engine import PREFIX, Engine
from tritonkit.model_config import configure
from tritonkit.server.compose import project_name
from tritonkit.server.state import load_deployment, read_secret

pytestmark = pytest.mark.engine

HEADER = "tritonkit-repository-key"


def cpu_repository(repo: Path, *, onnx: bool = True) -> Path:
    """The example python-backend model and (``onnx``) an ONNX MLP configured for the CPU."""
    shutil.copytree(EXAMPLE_REPOSITORY / "example", repo / "example",
                    ignore=shutil.ignore_patterns("__pycache__"))
    if onnx:
        onnx_graphs.mlp(repo / "mlp")
        (repo / "mlp" / "export-report.json").write_text(json.dumps(
            {"max_batch_size": 8, "inputs": [{"name": "INPUT__0", "example_shape": [4, 16]}]}))
        configure(repo, "mlp", gpu="cpu")
    return repo


def deploy_argv(engine: Engine, repo: Path, out: Path, *args: str) -> list[str]:
    ports = [a for role, port in zip(("http", "grpc", "metrics"), unused_ports(3))
             for a in (f"--{role}-port", str(port))]
    return ["deploy", "--target", "compose", "--gpu", "cpu", "--repository", str(repo),
            "--out", str(out), "--image", engine.image, *ports, "--timeout", "300", *args]


def cli(*args: str) -> tuple[int, str, str]:
    """The CLI in-process: its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_cli(*args)
    return code, out.getvalue(), err.getvalue()


def inspect(container: str, what: str) -> object:
    done = subprocess.run(["docker", "inspect", "--format", "{{json %s}}" % what, container],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (found := condition()):
            return found
        time.sleep(0.5)
    pytest.fail(f"{what} within {timeout:g} s")


@dataclass
class Deployed:
    repo: Path
    out: Path
    project: str
    code: int
    stdout: str
    stderr: str
    second: tuple[int, str, str]     # a second deploy while the first held the repository

    @property
    def container(self) -> str:
        from tests.docker_engine import _docker

        found = _docker("ps", "-q", "--filter", f"label=com.docker.compose.project={self.project}",
                        "--filter", "label=com.docker.compose.service=tritonserver").stdout.split()
        assert len(found) == 1, found
        return found[0]

    def client(self) -> httpclient.InferenceServerClient:
        return httpclient.InferenceServerClient(load_deployment(self.repo).http_url)


@pytest.fixture(scope="module")
def deployed(engine, tmp_path_factory):
    """One CPU deployment of an ONNX and a python-backend model, made by `tritonkit deploy`
    in a process of its own; while it holds the repository, a second deploy is tried."""
    root = tmp_path_factory.mktemp("compose")
    repo = cpu_repository(root / f"{PREFIX}models")
    project = project_name(repo)
    engine.add_project(project)
    argv = deploy_argv(engine, repo, root / "docker", "--onnx-backend", "python")
    first = subprocess.Popen([sys.executable, "-m", "tritonkit", *argv], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=default_signals)
    try:
        # Recorded before `docker compose up`, under the deploy lock it holds to its end.
        wait_for(lambda: (repo / ".tritonkit" / "server.json").exists() or first.poll() is not None,
                 120, "the first deploy did not record its deployment")
        second = cli(*argv)
        stdout, stderr = first.communicate(timeout=400)
        yield Deployed(repo, root / "docker", project, first.returncode, stdout, stderr, second)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        if (repo / ".tritonkit" / "server.json").exists():
            run_cli("down", "--repository", repo)
        engine.remove_project(project)


def test_a_cpu_deploy_starts_healthy_containers_serving_warm_models_on_the_published_port(
        deployed):
    assert deployed.code == 0, deployed.stderr
    assert "Triton is up" in deployed.stdout
    health = wait_for(lambda: inspect(deployed.container, ".State.Health.Status") == "healthy",
                      60, "the container did not turn healthy")
    assert health
    client = deployed.client()
    try:
        assert client.is_model_ready("example") and client.is_model_ready("mlp")
        assert client.get_model_config("mlp")["backend"] == "python"   # the adapter serves it
    finally:
        client.close()
    warmed = {w["model"]: w for w in load_deployment(deployed.repo).extra["warmup"]}
    assert set(warmed) == {"example", "mlp"}
    for model, w in warmed.items():
        assert w["warmed"] and w["cold"] and w["first_ms"] > 0 and w["error"] is None, w
        # steady or not is the host's to decide (two cores shared with the tests beside
        # this one; steadiness has timing tests of its own): the output says which it was
        said = f"{model}: worst cold start" if w["steady"] else f"{model}: not steady within"
        assert said in deployed.stdout, deployed.stdout


def test_a_second_deploy_of_the_repository_is_refused_while_one_runs(deployed):
    code, _, err = deployed.second
    assert code == 2
    assert f"another tritonkit deploy of {deployed.repo}" in err
    # and a local server would take the running deployment's secret over: refused too
    code, _, err = cli("deploy", "--repository", deployed.repo, "--http-port", "0",
                       "--grpc-port", "0", "--metrics-port", "0")
    assert code == 2 and "compose" in err
    assert load_deployment(deployed.repo).target == "compose"


def test_the_ports_are_published_on_loopback_only(deployed):
    recorded = load_deployment(deployed.repo)
    bindings = inspect(deployed.container, ".NetworkSettings.Ports")
    published = {container: [(b["HostIp"], int(b["HostPort"])) for b in hosts or []]
                 for container, hosts in bindings.items()}
    assert published == {"8000/tcp": [("127.0.0.1", recorded.http_port)],
                         "8001/tcp": [("127.0.0.1", recorded.grpc_port)],
                         "8002/tcp": [("127.0.0.1", recorded.metrics_port)]}


def index(deployed: Deployed, secret: str | None) -> tuple[int, object]:
    import http.client

    recorded = load_deployment(deployed.repo)
    conn = http.client.HTTPConnection(recorded.host, recorded.http_port, timeout=30)
    try:
        conn.request("POST", "/v2/repository/index", body="{}",
                     headers={HEADER: secret} if secret is not None else {})
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read() or b"null")
    finally:
        conn.close()


def test_the_model_repository_api_takes_the_secret_from_the_env_file_and_refuses_a_wrong_one(
        deployed):
    env = (deployed.out / ".env").read_text()
    [secret] = [line.split("=", 1)[1] for line in env.splitlines()
                if line.startswith("TRITONKIT_REPOSITORY_KEY=")]
    assert secret == read_secret(deployed.repo)
    assert index(deployed, secret)[0] == 200
    for wrong in (secret[:-1] + ("x" if secret[-1] != "x" else "y"), None):
        status, answer = index(deployed, wrong)
        assert status == 403, (status, answer)


def test_the_repository_index_lists_the_models_and_not_tritonkits_state(deployed):
    status, answer = index(deployed, read_secret(deployed.repo))
    assert status == 200
    assert sorted(m["name"] for m in answer) == ["example", "mlp"]     # no ".tritonkit"
    assert (deployed.repo / ".tritonkit").is_dir()
    # the python model through its link into the repository, the ONNX one the adapter's copy
    served = deployed.repo / ".tritonkit" / "compose" / "models"
    assert os.readlink(served / "example") == "/repository/example"
    assert (served / "mlp" / "1" / "model.py").is_file()


def test_a_load_test_of_the_compose_deployment_gives_its_sla_verdict(deployed, tmp_path):
    report = tmp_path / "loadtest.json"
    code, out, err = cli("loadtest", "--repository", deployed.repo, "--model", "mlp",
                         "--concurrency", "1,4", "--duration", "2", "--warmup-s", "0.5",
                         "--sla-p99-ms", "2000", "--json", report)
    assert code == 0, err
    verdict = json.loads(report.read_text())["verdict"]
    assert verdict["outcome"] == "pass" and verdict["exit_code"] == 0
    assert "SLA met" in out


def test_a_killed_server_is_restarted_by_docker_and_warmup_warms_it_again(deployed, tmp_path):
    """Killed as the OOM killer or a crash would kill it (its process, not `docker kill`,
    which Docker counts as a stop): `restart: unless-stopped` starts it again, cold."""
    container = deployed.container
    before = inspect(container, ".RestartCount")
    os.kill(int(inspect(container, ".State.Pid")), signal.SIGKILL)
    wait_for(lambda: inspect(container, ".RestartCount") > before
             and inspect(container, ".State.Running"), 90, "Docker did not restart it")
    report = tmp_path / "warmup.json"
    # Up to 1,000 requests to become steady, by a busy host's rule: this test runs beside
    # others (a CI run's MLP was not steady in the default 500 there).
    code, out, err = cli("warmup", "--repository", deployed.repo, "--timeout", "120",
                         "--requests", "1000", *BUSY_HOST_STEADY, "--json", report)
    assert code == 0, err
    warmed = {m["model"]: m for m in json.loads(report.read_text())["models"]}
    assert set(warmed) == {"example", "mlp"}
    # the restarted server loaded them as it started and served nothing since: cold
    assert all(m["steady"] and m["cold"] for m in warmed.values()), warmed


def test_down_after_the_compose_files_were_deleted_removes_everything_and_says_how_it_ended(
        deployed, engine):
    """The compose folder deleted (git clean, a new checkout): `down` stops the project by
    its name, its models unloaded first through the published port. Its last line says how
    the server ended, as a local server's does: here a client holds a connection open,
    Triton waits for it (its exit timeout is 30 s), and Docker kills it at down's --timeout."""
    import socket

    shutil.rmtree(deployed.out)
    recorded = load_deployment(deployed.repo)
    logs = subprocess.Popen(["docker", "logs", "--follow", "--tail", "0", deployed.container],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with socket.create_connection((recorded.host, recorded.http_port), timeout=30) as held:
            held.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: triton\r\n\r\n")
            assert held.recv(4096).startswith(b"HTTP/1.1 200")       # open, kept alive
            code, out, err = cli("down", "--repository", deployed.repo, "--timeout", "4")
        logged = logs.communicate(timeout=60)[0]
    finally:
        if logs.poll() is None:
            logs.kill()
            logs.wait()
    assert code == 0, err
    before_the_signal = logged[:logged.index("Signal (2) received")]
    for model in ("example", "mlp"):
        assert f"successfully unloaded '{model}'" in before_the_signal, logged[-3000:]
    last = out.strip().splitlines()[-1]
    assert last == (f"stopped the Triton server for {deployed.repo}: it was still running when "
                    "the 4 s timeout ran out, so it was killed (SIGKILL) while Triton waited "
                    "for 1 HTTP service connections"), last
    # the CPU profile has no engine-cache volume: nothing of the project is left
    assert engine.project_objects(deployed.project) == {"containers": [], "networks": [],
                                                        "volumes": []}
    assert not (deployed.repo / ".tritonkit" / "server.json").exists()
