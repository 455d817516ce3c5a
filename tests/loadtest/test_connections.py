"""A load test's connections: as many as the host and the server can hold, refused up front
where they cannot; a server that takes no more is said at once, every connection closed;
a server that dies mid-run is tried again once per user per back-off, and said gone; a
failed run's verdict is an error on stderr."""

from __future__ import annotations

import math
import os
import resource
import shutil
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_REPOSITORY, run_cli
from tritonkit.errors import EXIT_RUN_ERRORS, EXIT_USAGE


@pytest.fixture
def served(tmp_path):
    """The real local Triton on a private copy of the example repository, stopped after."""
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE_REPOSITORY, repo, ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    assert run_cli("deploy", "--repository", repo, "--http-port", "0", "--grpc-port", "0",
                   "--metrics-port", "0", "--no-warmup", "--timeout", "60") == 0
    from tritonkit.server.state import load_deployment

    yield repo, load_deployment(repo)
    run_cli("down", "--repository", repo)


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def open_sockets() -> set[str]:
    """This process's open sockets, by inode: a set, so that one an earlier test left and the
    collector closes meanwhile is not taken for one closed by the code under test."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            found.add(target)
    return found


def test_more_connections_than_the_local_server_may_open_are_refused_before_any_worker(
        capsys, served):
    repo, deployment = served
    limit = open_files(deployment.pid) + 400             # room for ~300 connections
    resource.prlimit(deployment.pid, resource.RLIMIT_NOFILE, (limit, limit))
    code = run_cli("loadtest", "--repository", repo, "--model", "example",
                   "--concurrency", "600", "--duration", "2")
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert (f"error: the server (pid {deployment.pid}) may open {limit} files and holds "
            in err), err
    assert "600 connections do not fit" in err
    assert "hint: lower --concurrency (or --max-in-flight) to " in err and "ulimit -n" in err
    # what fits runs
    assert run_cli("loadtest", "--repository", repo, "--model", "example",
                   "--concurrency", "2", "--duration", "1", "--warmup-s", "0") == 0


@pytest.mark.server
def test_deploy_gives_the_server_the_hard_open_files_limit(tmp_path):
    """A soft 1024 (a common default) would stop the server near a thousand connections
    where the hard limit allows more: the server gets the hard one."""
    import subprocess
    import sys

    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE_REPOSITORY, repo, ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= 256:
        pytest.skip("needs a finite hard open-files limit above 256")
    low = 256

    def lower_soft() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))

    deployed = subprocess.run(
        [sys.executable, "-m", "tritonkit", "deploy", "--repository", str(repo), "--http-port",
         "0", "--grpc-port", "0", "--metrics-port", "0", "--no-warmup", "--timeout", "60"],
        preexec_fn=lower_soft, capture_output=True, text=True, timeout=120)
    try:
        assert deployed.returncode == 0, deployed.stderr
        from tritonkit.server.state import load_deployment

        pid = load_deployment(repo).pid
        assert resource.prlimit(pid, resource.RLIMIT_NOFILE) == (hard, hard)
    finally:
        run_cli("down", "--repository", repo)


def test_more_connections_than_local_ports_are_refused_before_anything(tmp_path, monkeypatch):
    from tritonkit.client import Endpoint
    from tritonkit.errors import UsageError
    from tritonkit.loadtest import LoadSpec, _run

    ports = tmp_path / "ip_local_port_range"
    ports.write_text("60000\t60999\n")                  # 1000 ports
    monkeypatch.setattr(_run, "_PORT_RANGE", str(ports))
    with pytest.raises(UsageError, match=r"1000 connections to one server take as many local "
                                         r"ports; this host has 1000 \(60000-60999"):
        # nothing listens there: the refusal comes before any connection
        _run.run_loadtest(Endpoint("127.0.0.1:1"), LoadSpec(model="m", concurrency=(1000,)))


def test_a_server_that_takes_no_more_connections_is_said_at_once_and_none_are_left_open():
    """A listener that never accepts, its backlog full: each further connection's handshake
    is dropped. The worker says so within the connect timeout, not the request timeout, and
    closes what it opened."""
    from tritonkit.loadtest._inputs import RequestTemplate
    from tritonkit.loadtest._worker import WorkerPlan, _senders

    import numpy as np

    before = open_sockets()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    host, port = listener.getsockname()
    template = RequestTemplate(model="m", inputs=(("X", "FP32", np.zeros((1, 4), np.float32)),),
                               outputs=("Y",), batch_size=1)
    plan = WorkerPlan(index=0, protocol="http", url=f"{host}:{port}", template=template,
                      slots=50, offsets_ns=None, warmup_ns=0, duration_ns=1, window_ns=1,
                      timeout_s=120.0)
    started = time.monotonic()
    try:
        with pytest.raises(Exception, match=rf"of its 50 to {host}:{port} did not open "
                                             r"\(TimeoutError"):
            _senders(plan)
    finally:
        listener.close()
    assert time.monotonic() - started < plan.timeout_s / 4
    assert open_sockets() - before == set()         # every socket it opened, closed


def test_a_server_that_dies_mid_run_is_tried_once_per_user_per_backoff_and_said_gone(
        capsys, served):
    repo, deployment = served
    users, duration = 4, 6.0
    killed = threading.Event()

    def kill_once_serving() -> None:
        """SIGKILL the server (its whole group) once it has served 300 requests of the run."""
        from tritonkit.client import Endpoint

        client = Endpoint.from_deployment(deployment).http()
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                stats = client.get_inference_statistics("example")["model_stats"]
                if sum(int(s.get("inference_count", 0)) for s in stats) >= 300:
                    break
                time.sleep(0.05)
        finally:
            client.close()
        os.killpg(deployment.pid, signal.SIGKILL)
        killed.set()

    killer = threading.Thread(target=kill_once_serving, daemon=True)
    killer.start()
    json_path = Path(str(repo)) / "run.json"
    code = run_cli("loadtest", "--repository", repo, "--model", "example", "--concurrency",
                   str(users), "--workers", "1", "--duration", str(duration), "--warmup-s", "0",
                   "--json", json_path)
    killer.join(timeout=60)
    captured = capsys.readouterr()
    assert killed.is_set()
    assert code == EXIT_RUN_ERRORS
    import json

    level = json.loads(json_path.read_text())["levels"][0]
    assert level["ended_early"].startswith("server gone at t=")
    # Each user: the request in flight when it died, then one try per back-off (50 ms,
    # doubled to 1 s) for what was left of the run: never more.
    tries = 1 + math.ceil(math.log2(1.0 / 0.05)) + math.ceil(duration)
    assert sum(level["errors"].values()) <= users * (1 + tries), level["errors"]
    assert "error: run failed: server gone at t=" in captured.err
    assert "run failed" not in captured.out
