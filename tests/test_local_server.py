"""The embedded local Triton: deploy, serve, refuse what it should, stop cleanly."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import (BUSY_HOST_STEADY, ROOT, add_broken_model, default_signals, error_lines,
                            load_example_forward, run_cli, unused_port, unused_ports)
from tests.warmup.conftest import _deploy
from tritonkit.errors import Interrupted, UsageError
from tritonkit.server import local
from tritonkit.server.local import _alive, check_port_free, signals_interrupt
from tritonkit.server.state import (
    Deployment,
    load_deployment,
    redeploy_command,
    new_secret,
    read_secret,
    save_deployment,
    state_dir,
)

pytestmark = pytest.mark.server


def _no_server_for(repo: Path) -> bool:
    return not (state_dir(repo) / "server.json").exists()


def add_python_model(repository: Path, name: str, model_py: str) -> None:
    """A python-backend model X -> Y (FP32[1]) whose model.py is ``model_py``."""
    (repository / name / "1").mkdir(parents=True)
    (repository / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        'input { name: "X" data_type: TYPE_FP32 dims: 1 }\n'
        'output { name: "Y" data_type: TYPE_FP32 dims: 1 }\n')
    (repository / name / "1" / "model.py").write_text(model_py)


LOADS_FOR_A_MINUTE = """
import time
class TritonPythonModel:
    def initialize(self, args):
        time.sleep(60)
    def execute(self, requests):
        return []
"""

EXECUTES_FOR_A_MINUTE = """
import os, pathlib, time
class TritonPythonModel:
    def execute(self, requests):
        pathlib.Path(os.path.dirname(__file__), "executing").touch()
        time.sleep(60)
        return []
"""

EXECUTE_FAILS = """
class TritonPythonModel:
    def execute(self, requests):
        raise RuntimeError("execute is broken")
"""


def _servers_of(repo: Path) -> list[int]:
    """Live tritonserver processes whose command line names ``repo``'s folders.

    A server forking a python-backend stub has a child that still reads as tritonserver
    until it execs: children of a server found are not servers of their own.
    """
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if (b"tritonserver" in argv[0] and any(str(repo).encode() in a for a in argv)
                and _alive(int(entry.name))):
            parents[int(entry.name)] = ppid
    return sorted(pid for pid, ppid in parents.items() if ppid not in parents)


def _kill_servers_of(repo: Path) -> None:
    for pid in _servers_of(repo):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _deploy_in_background(repo: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tritonkit", "deploy", "--repository", str(repo),
         "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        preexec_fn=default_signals)


def _wait_recorded(repo: Path, timeout: float = 30.0) -> Deployment:
    end = time.monotonic() + timeout
    while not (state_dir(repo) / "server.json").exists():
        assert time.monotonic() < end, "no deployment recorded while the server starts"
        time.sleep(0.05)
    return load_deployment(repo)


def _listening(port: int) -> set[str]:
    """The addresses something listens on at TCP ``port`` (this network namespace)."""
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, port_hex = local.split(":")
            if state != "0A" or int(port_hex, 16) != port:      # 0A: LISTEN
                continue
            if table == "tcp":
                found.add(socket.inet_ntoa(struct.pack("<I", int(address, 16))))
            else:
                words = struct.pack("<4I", *(int(address[i:i + 8], 16) for i in range(0, 32, 8)))
                # a v4-mapped address (gRPC's socket) listens on that IPv4 address only
                found.add(socket.inet_ntop(socket.AF_INET6, words).removeprefix("::ffff:"))
    return found


def _wait_for(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry.name))
    return kids


def test_deploy_serves_the_example_model_and_down_stops_it(deployed):
    client = httpclient.InferenceServerClient(deployed.http_url)
    assert client.is_server_ready()
    assert client.is_model_ready("example")

    x = np.array([[1, 2, 3, 4], [-1, 0.5, 2, -3]], dtype=np.float32)
    inp = httpclient.InferInput("INPUT__0", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer("example", [inp]).as_numpy("OUTPUT__0")

    np.testing.assert_allclose(result, load_example_forward()(x), rtol=1e-6)
    np.testing.assert_allclose(result.sum(axis=1), 1.0, rtol=1e-5)
    client.close()      # Triton waits for open connections (its exit timeout) when it stops

    pid = deployed.pid
    assert run_cli("down", "--repository", deployed.repository) == 0
    assert not _alive(pid)
    assert _no_server_for(Path(deployed.repository))


def test_down_says_what_a_stopping_triton_waits_for_an_open_client_connection(deployed):
    """Triton 2.51 drains open HTTP connections for up to its exit timeout (30 s) when it
    stops: a `down` that takes half a minute because a client is still connected says so
    while it waits, instead of hanging without a word."""
    from tritonkit.deploy import down

    client = httpclient.InferenceServerClient(deployed.http_url)
    assert client.is_server_ready()             # a keep-alive connection, left open
    said: list[str] = []
    started = time.monotonic()
    try:
        assert down(Path(deployed.repository), timeout=4, progress=said.append)
    finally:
        client.close()
    assert time.monotonic() - started < 6       # killed within its timeout all the same
    assert any("Triton waits for 1 HTTP service connections" in s and "exit timeout" in s
               for s in said), said
    assert not _alive(deployed.pid)


def test_a_down_that_has_to_kill_leaves_no_stub_and_no_shared_memory_behind(deployed):
    """A server still draining a client's connection when `down`'s timeout ends is killed
    with its process group: its python-backend stubs die before they can remove their
    regions from /dev/shm (RAM, a megabyte or more per instance, until a reboot). `down`
    removes them itself."""
    from tritonkit.deploy import down
    from tritonkit.server.local import SHM, shm_prefix

    prefix = shm_prefix(deployed.argv)
    assert prefix and list(SHM.glob(prefix + "*"))        # the stub's regions, while it serves
    stubs = [pid for pid in _stubs() if prefix in " ".join(_cmdline_of(pid))]
    assert stubs
    client = httpclient.InferenceServerClient(deployed.http_url)
    assert client.is_server_ready()        # Triton would drain this for 30 s: down kills
    try:
        assert down(Path(deployed.repository), timeout=2)
    finally:
        client.close()
    _wait_for(lambda: not any(_alive(pid) for pid in stubs), "the stubs to be gone", timeout=5)
    assert not list(SHM.glob(prefix + "*"))


def test_leftovers_are_cleared_only_under_the_gone_servers_own_shm_prefix(tmp_path):
    """A recorded pid the OS has since given to another server: that server's stubs share
    the process group id, so only a stub whose command line names the gone server's own
    shared-memory prefix is killed, and only that prefix's regions are removed."""
    from tritonkit.server import local

    mine, theirs = "tritonkit_8000_0123abcd_", "tritonkit_8000_fedc4321_"
    # a process whose command line reads as another server's stub: a python-backend stub's
    # name, the model file, its shared-memory region
    other = subprocess.Popen(["bash", "-c", 'exec -a "$0" bash -c "sleep 60; true" "$@"',
                              str(tmp_path / "triton_python_backend_stub"), "model.py",
                              theirs + "uuid"], start_new_session=True)
    regions = [local.SHM / (mine + "a-test-region"), local.SHM / (theirs + "a-test-region")]
    try:
        for region in regions:
            region.write_bytes(b"")
        local._clear_leftovers(other.pid, mine)
        time.sleep(0.2)
        assert other.poll() is None, "another server's stub was killed"
        assert not regions[0].exists() and regions[1].exists()
        local._clear_leftovers(other.pid, theirs)
        assert other.wait(timeout=5) == -signal.SIGKILL
        assert not regions[1].exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(other.pid, signal.SIGKILL)      # its sleep too
        for region in regions:
            region.unlink(missing_ok=True)


def test_a_deploy_over_a_killed_servers_record_clears_what_it_left_behind(deployed):
    """A server killed with its stubs (kill -9 of its process group: the OOM killer, a
    reboot of the container) leaves its regions in /dev/shm and its record; the next deploy
    replaces the record and removes them."""
    from tritonkit.server.local import SHM, shm_prefix

    prefix = shm_prefix(deployed.argv)
    os.killpg(deployed.pid, signal.SIGKILL)
    _wait_for(lambda: not _alive(deployed.pid), "the server to die")
    assert list(SHM.glob(prefix + "*"))                   # what the killed stubs left
    again = _deploy(Path(deployed.repository), "--no-warmup")
    try:
        assert not list(SHM.glob(prefix + "*"))
        assert shm_prefix(again.argv) != prefix
    finally:
        run_cli("down", "--repository", deployed.repository)


def _stubs() -> list[int]:
    return [int(e.name) for e in Path("/proc").iterdir()
            if e.name.isdigit() and _cmdline_of(int(e.name))[:1] != []
            and _cmdline_of(int(e.name))[0].endswith("triton_python_backend_stub")
            and _alive(int(e.name))]


def _cmdline_of(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def test_a_server_left_running_by_an_in_process_deploy_raises_no_resource_warning(example_repository):
    """deploy_local returns with the server running, as it should: its Popen must not be
    collected with a "subprocess is still running" ResourceWarning (the Python API's
    users, and this suite, saw one per deploy)."""
    import gc
    import warnings

    from tritonkit.deploy import deploy_local, down

    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always", ResourceWarning)
        deploy_local(example_repository, http_port=0, grpc_port=0, metrics_port=0,
                     timeout=60, warmup=False)
        try:
            gc.collect()
        finally:
            down(example_repository)
    assert not [w for w in warned if "still running" in str(w.message)], \
        [str(w.message) for w in warned]


def test_deploy_binds_to_loopback_and_records_its_state(example_server):
    assert example_server.host == "127.0.0.1"
    for role in ("http", "grpc", "metrics"):
        assert f"--{role}-address=127.0.0.1" in example_server.argv
    # What the server really listens on, not only what it was told.
    for port in (example_server.http_port, example_server.grpc_port, example_server.metrics_port):
        assert _listening(port) == {"127.0.0.1"}, port
    assert "--model-control-mode=explicit" in example_server.argv
    assert example_server.status == "running"
    # its own python-backend shared memory, so local servers can run side by side
    assert any(re.fullmatch(rf"--backend-config=python,shm-region-prefix-name=tritonkit_"
                            rf"{example_server.http_port}_[0-9a-f]{{8}}_", arg)
               for arg in example_server.argv)
    # The secret never lands in the state file, only in its 0600 file.
    state = (state_dir(Path(example_server.repository)) / "server.json").read_text()
    assert example_server.secret() not in state
    mode = os.stat(state_dir(Path(example_server.repository)) / "secret").st_mode & 0o777
    assert mode == 0o600


def test_serving_a_python_backend_model_leaves_its_production_folder_unchanged(example_server):
    """The python backend's stub writes __pycache__ beside the model.py it imports: into the
    mirror the server reads, never into the user's model folder."""
    repo = Path(example_server.repository)
    files = {str(p.relative_to(repo)) for p in repo.rglob("*") if state_dir(repo) not in p.parents
             and p != state_dir(repo)}
    assert files == {"example", "example/config.pbtxt", "example/1", "example/1/model.py"}
    assert list((state_dir(repo) / "local").rglob("__pycache__/model.*.pyc"))  # it was imported


def test_model_repository_api_needs_the_secret_header(example_server):
    client = httpclient.InferenceServerClient(example_server.http_url)
    with pytest.raises(InferenceServerException, match="restricted"):
        client.unload_model("example")
    assert client.is_model_ready("example")
    with pytest.raises(InferenceServerException, match="restricted"):
        client.unload_model("example", headers={example_server.secret_header: "wrong"})
    index = client.get_model_repository_index(headers=example_server.repository_headers())
    assert {"name": "example", "version": "1", "state": "READY"} in index


def test_a_port_in_use_is_one_clear_error_and_no_server(example_repository, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = run_cli("deploy", "--repository", example_repository, "--http-port", port,
                       "--grpc-port", "0", "--metrics-port", "0")
    err = capsys.readouterr().err
    assert code == 2                      # bad input: a flag fixes it
    assert f"http port {port} on 127.0.0.1 is already in use" in err
    assert "Traceback" not in err
    assert _no_server_for(example_repository)


def test_a_missing_repository_is_a_usage_error(tmp_path, capsys):
    code = run_cli("deploy", "--repository", tmp_path / "nope", "--http-port", "0")
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: model repository ") and "does not exist" in err


def test_an_empty_repository_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code = run_cli("deploy", "--repository", tmp_path / "empty", "--http-port", "0")
    assert code == 2
    assert "holds no models" in capsys.readouterr().err


def test_a_model_that_fails_to_load_reports_tritons_message_and_leaves_no_server(
        example_repository, capsys):
    add_broken_model(example_repository)
    started = time.monotonic()
    code = run_cli("deploy", "--repository", example_repository, "--http-port", "0",
                   "--grpc-port", "0", "--metrics-port", "0", "--timeout", "60")
    err = capsys.readouterr().err
    assert code != 0
    assert "failed to load 'broken'" in err
    assert "weights file is corrupt" in err
    assert "server.log" in err                      # the hint names the log
    assert time.monotonic() - started < 30          # fails fast, not at the deadline
    assert _no_server_for(example_repository)
    log = (state_dir(example_repository) / "server.log").read_text()
    assert "weights file is corrupt" in log


def test_a_model_file_that_fails_to_load_is_named_where_the_user_keeps_it(tmp_path, capsys):
    """A truncated model.onnx: Triton names the file it read, in the mirror under
    .tritonkit/local; the error names the user's own file, the one to replace."""
    import torch

    import tritonkit

    repo = tmp_path / "repo"
    tritonkit.export(torch.nn.Linear(4, 2).eval(), torch.randn(2, 4), name="cut", repository=repo)
    model = repo / "cut" / "1" / "model.onnx"
    with model.open("r+b") as f:
        f.truncate(model.stat().st_size // 2)
    code = run_cli("deploy", "--repository", repo, "--http-port", "0", "--grpc-port", "0",
                   "--metrics-port", "0", "--timeout", "60")
    err = capsys.readouterr().err
    assert code != 0
    assert str(model.resolve()) in err, err
    assert "/.tritonkit/local/" not in err.split("hint:")[0]
    assert _no_server_for(repo)


def test_a_second_deploy_of_the_same_repository_is_refused(example_server, capsys):
    code = run_cli("deploy", "--repository", example_server.repository, "--http-port", "0",
                   "--grpc-port", "0", "--metrics-port", "0")
    assert code == 2
    assert "already running" in capsys.readouterr().err
    assert load_deployment(Path(example_server.repository)).pid == example_server.pid


def test_the_local_server_listens_on_the_settings_bind_address(example_repository, tmp_path):
    settings = tmp_path / "server.toml"
    settings.write_text((ROOT / "configs" / "server.toml").read_text().replace(
        'bind_address = "127.0.0.1"', 'bind_address = "127.0.0.2"'))
    deployment = _deploy(example_repository, "--server-config", settings, "--no-warmup")
    try:
        assert deployment.host == "127.0.0.2" and "--grpc-address=127.0.0.2" in deployment.argv
        assert _listening(deployment.http_port) == {"127.0.0.2"}
        client = httpclient.InferenceServerClient(deployment.http_url)
        try:
            assert client.is_model_ready("example")
        finally:
            client.close()
    finally:
        run_cli("down", "--repository", example_repository)


def _deploy_local_in_a_thread(repo: Path) -> tuple[threading.Thread, dict]:
    """deploy_local running in a thread (started); what it raises lands in outcome['error']."""
    from tritonkit.deploy import deploy_local

    outcome: dict = {}

    def deploy():
        try:
            deploy_local(repo, http_port=0, grpc_port=0, metrics_port=0, timeout=60)
        except Exception as exc:  # handed to the test thread
            outcome["error"] = exc

    thread = threading.Thread(target=deploy)
    thread.start()
    return thread, outcome


def test_a_server_killed_while_it_starts_is_said_to_be_killed_not_quoted_from_its_log(
        example_repository):
    from tritonkit.errors import ServerError

    thread, outcome = _deploy_local_in_a_thread(example_repository)
    try:
        end = time.monotonic() + 30
        while not (state_dir(example_repository) / "server.json").exists():
            assert time.monotonic() < end
            time.sleep(0.01)
        os.killpg(load_deployment(example_repository).pid, signal.SIGKILL)
        thread.join(timeout=60)
    finally:
        run_cli("down", "--repository", example_repository)
    error = outcome.get("error")
    assert isinstance(error, ServerError), error
    assert "before its models were READY: killed by SIGKILL" in error.message, error.message
    assert "OOM killer" in error.message
    assert _no_server_for(example_repository)


# What Triton's own crash handler writes for SIGSEGV and SIGABRT before it raises the signal
# again (the log of a real tritonserver 2.51.0 sent SIGABRT after its start), then what a
# python backend stub writes once its server is gone.
CRASHED_LOG = """\
I1203 15:08:01.790000 716 model_lifecycle.cc:472] "loading: example:1"
I1203 15:08:01.818756 716 http_server.cc:4713] "Started HTTPService at 127.0.0.1:47827"
I1203 15:08:01.860731 716 http_server.cc:362] "Started Metrics Service at 127.0.0.1:57209"
Signal ({signum}) received.
 0# 0x00005652F9F6E52D in /opt/tritonserver/bin/tritonserver
 1# 0x00007FC171A5A050 in /lib/x86_64-linux-gnu/libc.so.6

I1203 15:08:04.107115 743 pb_stub.cc:2145]  Non-graceful termination detected.
"""


def _gone_server(tmp_path: Path, log: str) -> Deployment:
    (tmp_path / "server.log").write_text(log)
    return Deployment(target="local", repository=str(tmp_path), host="127.0.0.1",
                      http_port=1, grpc_port=2, metrics_port=3, secret_header="h",
                      models=["example"], started_at=0.0, pid=None,
                      log_path=str(tmp_path / "server.log"))


@pytest.mark.parametrize("signum", [signal.SIGSEGV, signal.SIGABRT])
def test_a_server_that_crashed_is_said_to_have_crashed_with_its_last_words_not_stopped_from_outside(
        tmp_path, signum):
    from tritonkit.server.local import _exit_failure, _startup_failure, how_it_ended

    name = signal.Signals(signum).name
    gone = _gone_server(tmp_path, CRASHED_LOG.format(signum=int(signum)))
    last = "Started Metrics Service at 127.0.0.1:57209"
    for error in (_startup_failure(gone, -signum), _exit_failure(gone, -signum)):
        assert f"crashed ({name}): " in error.message and last in error.message, error.message
        assert "from outside" not in error.message and "stopped" not in error.message
        assert "0x00005652F9F6E52D" not in error.message          # the trace stays in the log
        assert "Non-graceful" not in error.message                 # a stub's, not the server's
        assert "stack trace" in error.hint and str(tmp_path / "server.log") in error.hint
    ended = how_it_ended(gone)
    assert ended.startswith(f"it crashed ({name}): ") and last in ended, ended
    # a crash before Triton's handler is set (while the start-up models load) logs no
    # 'Signal (N) received.': its last error line is quoted, as for any other exit
    loading = _gone_server(tmp_path, "I1203 loading: example:1\nerror: backend segfaulted\n")
    assert _startup_failure(loading, -signal.SIGBUS).message.endswith(
        "before its models were READY: crashed (SIGBUS): backend segfaulted")


# A start-up model failed, so tritonserver shut down, and crashed unloading the rest (seen
# once in a suite run on a busy host; abridged from that log).
CRASHED_ON_THE_WAY_OUT = """\
I1205 08:03:08.410000 16560 model_lifecycle.cc:472] "loading: broken:1"
E1205 08:03:08.574458 16560 model_lifecycle.cc:642] "failed to load 'broken' version 1: \
Internal: RuntimeError: weights file is corrupt\\n\\nAt:\\n  {repo}/broken/1/model.py(1): <module>"
I1205 08:03:08.574491 16560 model_lifecycle.cc:777] "failed to load 'broken'"
I1205 08:03:10.005903 16560 model_lifecycle.cc:839] "successfully loaded 'example'"
I1205 08:03:10.006405 16560 server.cc:305] "Waiting for in-flight requests to complete."
I1205 08:03:10.006492 16560 server.cc:336] "All models are stopped, unloading models"
I1205 08:03:10.006497 16560 server.cc:345] "Timeout 30: Found 1 live models and 0 in-flight \
non-inference requests"
"""


def test_a_crash_as_the_server_shuts_down_after_a_failed_load_is_said_as_the_failed_load(tmp_path):
    from tritonkit.errors import ModelLoadError
    from tritonkit.server.local import _startup_failure

    gone = _gone_server(tmp_path, CRASHED_ON_THE_WAY_OUT.format(repo=tmp_path))
    error = _startup_failure(gone, -signal.SIGSEGV)
    assert isinstance(error, ModelLoadError)
    assert error.message == (
        "Triton could not load a model: failed to load 'broken' version 1: Internal: "
        "RuntimeError: weights file is corrupt (tritonserver then crashed as it shut down: "
        "SIGSEGV)"), error.message
    # the same crash with no failed load, or before the shutdown began, is the crash
    loading_only = CRASHED_ON_THE_WAY_OUT.format(repo=tmp_path).split("I1205 08:03:10.0064")[0]
    for log in ("I1205 loading: example:1\n", loading_only):
        error = _startup_failure(_gone_server(tmp_path, log), -signal.SIGSEGV)
        assert "before its models were READY: crashed (SIGSEGV)" in error.message, error.message


@pytest.mark.parametrize("signum, said, quotes_log", [
    (signal.SIGINT, "stopped by SIGINT from outside", False),
    (signal.SIGTERM, "stopped by SIGTERM from outside", False),
    (signal.SIGHUP, "stopped by SIGHUP from outside", False),
    (signal.SIGKILL, "killed by SIGKILL (by hand, or by the kernel's OOM killer", False),
    (signal.SIGFPE, "crashed (SIGFPE): ", True),
    (signal.SIGILL, "crashed (SIGILL): ", True),
    (signal.SIGUSR1, "ended by SIGUSR1: ", True),
])
def test_only_sigint_sigterm_and_sighup_read_as_stopped_from_outside(tmp_path, signum, said,
                                                                     quotes_log):
    from tritonkit.server.local import _exit_failure

    gone = _gone_server(tmp_path, CRASHED_LOG.split("Signal")[0])    # no crash handler's words
    message = _exit_failure(gone, -signum).message
    assert f"after it started: {said}" in message
    assert ("Started Metrics Service" in message) is quotes_log


def test_a_server_that_crashes_while_its_models_load_is_said_to_have_crashed(example_repository):
    """A backend that segfaults during the start-up load ends tritonserver before Triton's
    crash handler is set: exit code -11, no 'Signal (11) received.' in its log."""
    from tritonkit.errors import ServerError

    add_python_model(example_repository, "slow_load", LOADS_FOR_A_MINUTE)
    thread, outcome = _deploy_local_in_a_thread(example_repository)
    try:
        pid = _wait_recorded(example_repository).pid
        log = state_dir(example_repository) / "server.log"
        _wait_for(lambda: "ModelInstanceInitialize: slow_load" in log.read_text(),
                  "slow_load to initialize")
        os.kill(pid, signal.SIGSEGV)
        thread.join(timeout=60)
    finally:
        _kill_servers_of(example_repository)
        run_cli("down", "--repository", example_repository)
    error = outcome.get("error")
    assert isinstance(error, ServerError), error
    assert "before its models were READY: crashed (SIGSEGV): " in error.message, error.message
    assert "from outside" not in error.message and "Non-graceful" not in error.message
    assert _no_server_for(example_repository)


def test_a_local_server_that_crashed_after_its_start_is_said_to_have_crashed_by_warmup(
        example_repository, capsys):
    deployment = _deploy(example_repository, "--no-warmup")
    try:
        os.kill(deployment.pid, signal.SIGABRT)         # Triton's crash handler logs it
        _wait_for(lambda: not _alive(deployment.pid), "the server to end")
        capsys.readouterr()
        assert run_cli("warmup", "--repository", example_repository) == 1
        err = capsys.readouterr().err
        assert "is no longer running: it crashed (SIGABRT): " in err, err
        assert "stopped" not in err
    finally:
        _kill_servers_of(example_repository)
        run_cli("down", "--repository", example_repository)


def test_a_server_bound_to_every_interface_says_so_when_deployed(example_repository, tmp_path,
                                                                 capsys):
    settings = tmp_path / "server.toml"
    settings.write_text((ROOT / "configs" / "server.toml").read_text().replace(
        'bind_address = "127.0.0.1"', 'bind_address = "0.0.0.0"'))
    deployment = _deploy(example_repository, "--server-config", settings, "--no-warmup")
    try:
        out = " ".join(capsys.readouterr().out.split())
        assert _listening(deployment.http_port) == {"0.0.0.0"}
        assert "listening on every interface (bind_address '0.0.0.0'" in out
    finally:
        run_cli("down", "--repository", example_repository)


def test_a_bind_address_the_local_server_cannot_listen_on_is_one_line_not_an_internal_error(
        example_repository, tmp_path, capsys):
    settings = tmp_path / "server.toml"
    settings.write_text((ROOT / "configs" / "server.toml").read_text().replace(
        'bind_address = "127.0.0.1"', 'bind_address = "::"'))
    code = run_cli("deploy", "--repository", example_repository, "--http-port", "0",
                   "--grpc-port", "0", "--metrics-port", "0", "--server-config", settings)
    err = capsys.readouterr().err
    assert code == 2 and "'bind_address' = '::' is not an IPv4 address" in err
    assert "internal error" not in err
    assert _no_server_for(example_repository)


@pytest.mark.parametrize("signum,said", [(signal.SIGINT, "interrupted"),
                                         (signal.SIGTERM, "stopped by SIGTERM"),
                                         (signal.SIGHUP, "stopped by SIGHUP")])
def test_a_deploy_stopped_by_a_signal_while_starting_leaves_no_server_and_no_state(
        example_repository, signum, said):
    add_python_model(example_repository, "slow_load", LOADS_FOR_A_MINUTE)
    deploy = _deploy_in_background(example_repository, "--timeout", "90")
    try:
        # Recorded as soon as the process exists: `down` could stop it from here on.
        recorded = _wait_recorded(example_repository)
        assert recorded.status == "starting" and _alive(recorded.pid)
        deploy.send_signal(signum)
        _, err = deploy.communicate(timeout=30)
        assert deploy.returncode == 128 + signum
        assert f"error: {said}" in err
        assert not _alive(recorded.pid)
        assert _no_server_for(example_repository)
        assert _servers_of(example_repository) == []
    finally:
        deploy.kill()
        deploy.communicate()
        _kill_servers_of(example_repository)


def test_a_second_deploy_while_one_is_in_progress_fails_at_once_and_changes_nothing(
        example_repository, capsys):
    add_python_model(example_repository, "slow_load", LOADS_FOR_A_MINUTE)
    first = _deploy_in_background(example_repository, "--timeout", "90")
    try:
        recorded = _wait_recorded(example_repository)
        secret = read_secret(example_repository)
        started = time.monotonic()
        code = run_cli("deploy", "--repository", example_repository, "--http-port", "0",
                       "--grpc-port", "0", "--metrics-port", "0", "--timeout", "10")
        err = capsys.readouterr().err
        assert code == 2 and time.monotonic() - started < 5
        assert error_lines(err)[0] == (f"error: another tritonkit deploy of {example_repository} "
                                       "is in progress")
        assert load_deployment(example_repository).pid == recorded.pid
        assert read_secret(example_repository) == secret
        assert _servers_of(example_repository) == [recorded.pid]
    finally:
        first.send_signal(signal.SIGTERM)
        try:
            first.communicate(timeout=30)
        finally:
            first.kill()
            _kill_servers_of(example_repository)


def _leave_time_wait_on(port: int) -> None:
    """A connection to 127.0.0.1:``port`` that the listening side closed first, as a
    stopped server's are: the port's end lingers in TIME_WAIT."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = listener.accept()
        conn.close()
        assert client.recv(1) == b""          # the FIN arrived; now close this end too
        client.close()
    time.sleep(0.05)


def test_connections_in_time_wait_do_not_make_a_port_in_use():
    port = unused_port()
    _leave_time_wait_on(port)
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))       # what the old check did: a false "in use"
    check_port_free("127.0.0.1", port, "http")


class _KernelPorts:
    """socket.socket as Linux hands out port 0: the lowest port no open socket holds, so a
    port released is the next one given (ephemeral picks do repeat, less often)."""

    held: set[int] = set()

    def __init__(self, *args) -> None:
        self.port = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.held.discard(self.port)

    def setsockopt(self, *args) -> None:
        pass

    def bind(self, address) -> None:
        port = address[1] or min(set(range(40000, 40010)) - self.held)
        if port in self.held:
            raise OSError(98, "Address already in use")
        self.held.add(port)
        self.port = port

    def getsockname(self):
        return ("127.0.0.1", self.port)


def test_ports_left_to_pick_are_distinct_even_where_the_os_gives_a_released_port_again(
        monkeypatch):
    """Every port given as 0 is picked while the others picked are still held, and none is
    a port given outright. Each pick closed before the next let one port be given for two
    roles, and `deploy` refused its own choice ("the HTTP and metrics ports are both …")."""
    kernel = {name: getattr(socket, name) for name in dir(socket) if not name.startswith("__")}
    monkeypatch.setattr(local, "socket", type(socket)("fake_socket"))
    vars(local.socket).update(kernel, socket=_KernelPorts)
    monkeypatch.setattr(_KernelPorts, "held", set())
    from tritonkit.server.settings import Ports

    chosen = local.resolve_ports("127.0.0.1", Ports(http=0, grpc=0, metrics=0))
    assert sorted(chosen.as_dict().values()) == [40000, 40001, 40002]
    chosen = local.resolve_ports("127.0.0.1", Ports(http=0, grpc=40000, metrics=0))
    assert chosen.grpc == 40000 and {chosen.http, chosen.metrics} == {40001, 40002}


def test_a_port_that_cannot_be_bound_says_why_instead_of_in_use():
    with pytest.raises(UsageError) as raised:
        check_port_free("192.0.2.1", unused_port(), "http")   # TEST-NET-1: not this host's
    assert "in use" not in raised.value.message
    assert "cannot assign requested address" in raised.value.message


def test_a_redeploy_on_the_same_fixed_ports_right_after_down_succeeds(example_repository):
    ports = unused_ports(3)
    flags = ["--http-port", ports[0], "--grpc-port", ports[1], "--metrics-port", ports[2]]
    for _ in range(2):
        assert run_cli("deploy", "--repository", example_repository, *flags,
                       "--timeout", "60") == 0
        assert run_cli("down", "--repository", example_repository) == 0


def test_a_model_that_fails_its_warm_up_is_one_line_and_deploy_leaves_no_server(
        example_repository, capsys, monkeypatch):
    monkeypatch.delenv("TRITONKIT_DEBUG", raising=False)
    # a busy host's deploy can outlast the mark of a plain progress line (tested elsewhere)
    monkeypatch.setattr("tritonkit.cli.deploy.PHASE_LINES_EVERY_S", 3600.0)
    add_python_model(example_repository, "fails", EXECUTE_FAILS)
    code = run_cli("deploy", "--repository", example_repository, "--http-port", "0",
                   "--grpc-port", "0", "--metrics-port", "0", "--timeout", "60")
    err = capsys.readouterr().err
    # The error and its hint last (the other model is warmed first: a progress line may
    # come before them), and no traceback from Triton.
    error, hint = err.strip().splitlines()[-2:]
    assert "At:" not in err and "Traceback" not in err
    assert code == 1
    assert error.startswith("error: a warm-up request to 'fails' failed: ")
    assert error.endswith("RuntimeError: execute is broken")
    assert "deploy stopped the server" in hint and "--no-warmup" in hint
    assert _no_server_for(example_repository) and _servers_of(example_repository) == []

    monkeypatch.setenv("TRITONKIT_DEBUG", "1")        # the rest of Triton's message
    assert run_cli("deploy", "--repository", example_repository, "--http-port", "0",
                   "--grpc-port", "0", "--metrics-port", "0", "--timeout", "60") == 1
    err = capsys.readouterr().err
    assert "At:" in err and "model.py" in err


def test_a_local_deploy_refuses_a_repository_with_a_recorded_compose_deployment(
        example_repository, capsys):
    compose = Deployment(
        target="compose", repository=str(example_repository.resolve()), host="127.0.0.1",
        http_port=8000, grpc_port=8001, metrics_port=8002,
        secret_header="tritonkit-repository-key", models=["example"], started_at=0.0,
        extra={"compose": ["docker", "compose"], "project": "tritonkit-repo"})
    save_deployment(compose)
    secret = new_secret(example_repository)
    try:
        code = run_cli("deploy", "--repository", example_repository, "--http-port", "0",
                       "--grpc-port", "0", "--metrics-port", "0", "--timeout", "60")
        assert code == 2
        assert "a compose deployment is recorded" in capsys.readouterr().err
        assert load_deployment(example_repository) == compose
        assert read_secret(example_repository) == secret
    finally:
        if load_deployment(example_repository).target == "local":
            run_cli("down", "--repository", example_repository)


def test_down_never_signals_a_process_that_took_over_the_servers_pid(example_repository, capsys):
    # Named tritonserver, but serving another folder: not ours, whatever the pid says.
    impostor = subprocess.Popen(["bash", "-c", "exec -a tritonserver " + sys.executable +
                                 " -c 'import time; time.sleep(60)' --model-repository=/elsewhere"])
    try:
        end = time.monotonic() + 10
        while not Path(f"/proc/{impostor.pid}/cmdline").read_bytes().startswith(b"tritonserver"):
            assert time.monotonic() < end
            time.sleep(0.01)
        save_deployment(Deployment(
            target="local", repository=str(example_repository.resolve()), host="127.0.0.1",
            http_port=8000, grpc_port=8001, metrics_port=8002,
            secret_header="tritonkit-repository-key", models=["example"], started_at=0.0,
            pid=impostor.pid,
            extra={"served_repository": str(state_dir(example_repository.resolve()) / "local")}))
        assert run_cli("down", "--repository", example_repository) == 0
        assert "no running server" in capsys.readouterr().out
        time.sleep(0.2)
        assert impostor.poll() is None
    finally:
        impostor.kill()
        impostor.wait()


def _ignore_errors(call):
    """``call`` with whatever it raises dropped (a request the test's server stop cuts off)."""
    def run(*args):
        with contextlib.suppress(Exception):
            call(*args)
    return run


def test_down_stops_a_server_that_ignores_sigint_within_its_timeout_stubs_included(
        example_repository):
    add_python_model(example_repository, "stuck", EXECUTES_FOR_A_MINUTE)
    deployment = _deploy(example_repository, "--no-warmup")
    stubs = _children(deployment.pid)
    assert len(stubs) == 2                     # the python backend's stub per model instance
    client = httpclient.InferenceServerClient(deployment.http_url, network_timeout=120)
    try:
        inp = httpclient.InferInput("X", [1], "FP32")
        inp.set_data_from_numpy(np.ones(1, np.float32))
        # In flight: Triton waits for it on SIGINT. A thread of its own, since the client's
        # async_infer is a greenlet that runs only when this thread yields to gevent's hub.
        threading.Thread(target=_ignore_errors(client.infer), args=("stuck", [inp]),
                         daemon=True).start()
        _wait_for(lambda: list(Path(deployment.extra["served_repository"]).glob(
            "stuck/*/executing")), "the request to reach the model")
        started = time.monotonic()
        assert run_cli("down", "--repository", example_repository, "--timeout", "3") == 0
        assert time.monotonic() - started < 3 + 1          # the kill at the deadline, then reaped
        assert not _alive(deployment.pid)
        _wait_for(lambda: not any(_alive(pid) for pid in stubs), "the stubs to exit", timeout=5)
    finally:
        client.close()
        _kill_servers_of(example_repository)


def test_signals_the_caller_ignores_stay_ignored_and_a_second_one_cannot_cut_the_clean_up(
        default_sigint):
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)      # as under nohup
    try:
        with signals_interrupt():
            os.kill(os.getpid(), signal.SIGHUP)                  # ignored: no Interrupted
            with pytest.raises(Interrupted) as caught:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1)
            assert caught.value.signum == signal.SIGTERM
            os.kill(os.getpid(), signal.SIGINT)                  # during the clean-up: ignored
            time.sleep(0.1)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_a_relative_repository_is_recorded_and_served_by_its_absolute_path(
        example_repository, monkeypatch):
    monkeypatch.chdir(example_repository.parent)
    relative = example_repository.name
    assert run_cli("deploy", "--repository", relative, "--http-port", "0", "--grpc-port", "0",
                   "--metrics-port", "0", "--no-warmup") == 0
    try:
        deployment = load_deployment(example_repository)
        served = [a for a in deployment.argv if a.startswith("--model-repository=")]
        assert served == [f"--model-repository={example_repository.resolve()}/.tritonkit/local"]
        assert deployment.repository == str(example_repository.resolve())
    finally:
        assert run_cli("down", "--repository", relative) == 0


def test_health_goes_straight_to_the_server_past_a_proxy_and_says_why_not(
        example_server, monkeypatch):
    """A proxy in the environment (common on corporate hosts) must not answer, or fail to
    answer, for a server on loopback; a miss says why in a few words."""
    from tritonkit.client import health

    dead = unused_port()
    for variable in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(variable, f"http://127.0.0.1:{dead}")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)

    assert health(example_server.http_url) is None
    assert health(example_server.http_url, "/v2/models/example/ready") is None
    assert health(example_server.http_url, "/v2/models/no_such_model/ready") == \
        "HTTP 400 from /v2/models/no_such_model/ready"
    assert "refused" in health(f"127.0.0.1:{dead}").lower()


def test_a_wait_backs_off_and_ends_on_success_or_with_the_last_reason(monkeypatch):
    """On a clock of its own: each pause the wait asks for, not how long a busy host's
    sleeps took, is what the backoff promises."""
    from types import SimpleNamespace

    from tritonkit import client, deadline
    from tritonkit.client import wait_until
    from tritonkit.deadline import Deadline

    now, slept = [100.0], []

    def sleep(seconds: float) -> None:
        slept.append(round(seconds, 6))
        now[0] += seconds

    clock = SimpleNamespace(monotonic=lambda: now[0], sleep=sleep)
    monkeypatch.setattr(client, "time", clock)
    monkeypatch.setattr(deadline, "time", clock)

    answers = iter(["refused", "refused", None])
    assert wait_until(lambda: next(answers), Deadline(10), first_delay=0.05, max_delay=1) is None
    assert slept == [0.05, 0.1]                            # twice the pause after each miss

    calls: list[float] = []

    def never() -> str:
        calls.append(now[0])
        return f"refused ({len(calls)})"

    slept.clear()
    started = now[0]
    assert wait_until(never, Deadline(0.5), first_delay=0.05, max_delay=0.1) == f"refused ({len(calls)})"
    assert slept == [0.05, 0.1, 0.1, 0.1, 0.1, 0.05]       # capped at max_delay, cut at the deadline
    assert now[0] - started == pytest.approx(0.5)          # asked once more at the deadline, then done
    assert calls[-1] == pytest.approx(started + 0.5)


def test_a_state_file_from_a_later_tritonkit_still_lets_down_stop_its_server(deployed, capsys):
    import json

    state = state_dir(Path(deployed.repository)) / "server.json"
    data = json.loads(state.read_text())
    state.write_text(json.dumps({**data, "a_field_from_the_future": {"x": 1}}))
    assert run_cli("down", "--repository", deployed.repository) == 0
    assert not _alive(deployed.pid)


def test_a_repository_moved_after_deploy_is_stopped_from_its_new_place_and_only_its_record_cleared(
        deployed, tmp_path, capsys):
    old = Path(deployed.repository)
    moved = tmp_path / "moved"
    old.rename(moved)
    # a new repository at the old path, with a deployment record of its own
    old.mkdir()
    save_deployment(Deployment(
        target="local", repository=str(old), host="127.0.0.1", http_port=1, grpc_port=2,
        metrics_port=3, secret_header="tritonkit-repository-key", models=["example"],
        started_at=0.0))
    try:
        assert load_deployment(moved).secret() == (state_dir(moved) / "secret").read_text().strip()
    finally:
        assert run_cli("down", "--repository", moved) == 0
    assert "stopped the Triton server" in capsys.readouterr().out
    assert not _alive(deployed.pid)
    assert _no_server_for(moved)                       # its own record cleared...
    assert (state_dir(old) / "server.json").exists()   # ...never the new repository's


def test_a_server_whose_state_file_was_removed_blocks_a_second_server_and_down_still_stops_it(
        deployed, capsys):
    repo = Path(deployed.repository)
    (state_dir(repo) / "server.json").unlink()
    try:
        code = run_cli("deploy", "--repository", repo, "--http-port", "0", "--grpc-port", "0",
                       "--metrics-port", "0", "--no-warmup")
        err = capsys.readouterr().err
        assert code == 2 and f"pid {deployed.pid}" in err and "tritonkit down" in err
        assert _no_server_for(repo)
    finally:
        assert run_cli("down", "--repository", repo) == 0
    # how it ended, as for a recorded one
    assert re.search(r"stopped the Triton server for .*: it exited on its own [\d.]+ s after "
                     "SIGINT", " ".join(capsys.readouterr().out.split()))
    assert not _alive(deployed.pid)


def test_the_repository_a_local_server_serves_is_recovered_from_its_mirror(tmp_path):
    from tritonkit.server.local import mirror_dir, repository_of_mirror

    repo = tmp_path / "repo"
    assert mirror_dir(repo) == repo / ".tritonkit" / "local"
    assert repository_of_mirror(mirror_dir(repo)) == repo
    # a server given the repository itself (not its mirror) serves that folder
    assert repository_of_mirror(repo) == repo
    assert repository_of_mirror(repo / ".tritonkit" / "backends") == repo / ".tritonkit" / "backends"


# A process that reads as a tritonserver whose record was deleted: its command line is all
# unrecorded_servers looks at. On SIGINT it lingers as a draining Triton does, then exits.
FAKE_SERVER = """
import signal, sys, time
signal.signal(signal.SIGINT, lambda *_: (time.sleep({linger}), sys.exit(0)))
print("ready", flush=True)
time.sleep(60)
"""


def _fake_unrecorded_server(repo: Path, linger: float = 0.0) -> subprocess.Popen:
    from tritonkit.server.local import mirror_dir

    fake = subprocess.Popen(["tritonserver", "-c", FAKE_SERVER.format(linger=linger),
                             f"--model-repository={mirror_dir(repo)}"],
                            executable=sys.executable, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert fake.stdout.readline() == "ready\n"           # its SIGINT handler is set
    return fake


def test_without_proc_no_unrecorded_server_is_found_and_nothing_fails_on_it(tmp_path, monkeypatch,
                                                                          capsys):
    """macOS has no /proc: a compose deploy (which refuses a repository a local server still
    serves) and `down` with no record raised FileNotFoundError there."""
    from tritonkit.server import local

    monkeypatch.setattr(local, "PROC", tmp_path / "no-proc")
    assert local.unrecorded_servers(tmp_path) == []
    local.refuse_if_running(tmp_path)
    assert run_cli("down", "--repository", tmp_path) == 0
    out, err = capsys.readouterr()
    assert f"nothing to stop for {tmp_path}: no deployment recorded" in out
    assert "internal error" not in err


def test_down_names_a_server_of_another_user_it_may_not_signal_and_still_stops_its_own(
        tmp_path, monkeypatch, capsys):
    import errno
    import pwd

    from tritonkit.server import local

    ours, theirs = _fake_unrecorded_server(tmp_path), _fake_unrecorded_server(tmp_path)
    real_kill = os.kill

    def kill(pid, signum):                  # the kernel's answer for another user's process
        if pid == theirs.pid:
            raise PermissionError(errno.EPERM, "Operation not permitted")
        real_kill(pid, signum)

    monkeypatch.setattr(local.os, "kill", kill)
    try:
        code = run_cli("down", "--repository", tmp_path, "--timeout", "10")
        err = capsys.readouterr().err
        user = pwd.getpwuid(os.getuid()).pw_name
        assert code == 1 and "Traceback" not in err and "internal error" not in err
        assert err.startswith(f"error: not allowed to stop the tritonserver serving {tmp_path}: "
                              f"pid {theirs.pid} (user {user})"), err
        assert f"sudo kill -INT {theirs.pid}" in err
        assert ours.wait(timeout=5) is not None              # its own stopped all the same
        assert theirs.poll() is None
    finally:
        monkeypatch.undo()
        for fake in (ours, theirs):
            fake.kill()
            fake.wait()


def test_down_says_what_a_server_no_record_names_waits_for(tmp_path):
    from tritonkit.deploy import down

    log = state_dir(tmp_path) / "server.log"
    log.parent.mkdir(parents=True)
    log.write_text('I1203 server.cc:345] "Timeout 14: Found 1 HTTP service connections"\n')
    stray = _fake_unrecorded_server(tmp_path, linger=1.5)
    heard: list[str] = []
    try:
        assert down(tmp_path, timeout=10, progress=heard.append)
        assert (f"stopping tritonserver (pid {stray.pid}): Triton waits for 1 HTTP service "
                "connections (14 s left of its exit timeout)") in heard, heard
    finally:
        stray.kill()
        stray.wait()


@pytest.mark.parametrize("content", [b"\xff\xfe not json", b'{"target": "local"}', b"[1, 2]"])
def test_a_corrupt_state_file_is_one_line_naming_it(tmp_path, capsys, content):
    state = state_dir(tmp_path) / "server.json"
    state.parent.mkdir(parents=True)
    state.write_bytes(content)
    assert run_cli("down", "--repository", tmp_path) == 2
    err = capsys.readouterr().err
    assert f"deployment state {state} is corrupt" in err and "internal error" not in err


def test_a_repository_that_is_a_file_is_one_line(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    assert run_cli("down", "--repository", afile) == 2
    assert f"model repository {afile} is not a folder" in capsys.readouterr().err


def test_a_python_without_a_shared_libpython_is_told_which_package_or_build_gives_one(
        monkeypatch, tmp_path):
    from tritonkit.server import binary
    monkeypatch.setattr(binary.sysconfig, "get_config_var",
                        lambda name: str(tmp_path) if name == "LIBDIR" else None)
    with pytest.raises(binary.ServerError) as raised:
        binary.server_environment(binary.TritonInstall.__new__(binary.TritonInstall))
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert f"libpython{version}.so.1.0" in str(raised.value) and str(tmp_path) in str(raised.value)
    assert f"apt install libpython{version}" in raised.value.hint
    assert "PYTHON_CONFIGURE_OPTS=--enable-shared" in raised.value.hint


def test_a_python_backend_model_is_served_locally_with_the_gpus_own_config(example_repository):
    """`deploy --gpu a10` serves each model with its configs/a10.pbtxt, as Triton's
    --model-config-name does on the GPU host: a python-backend model too, not its
    config.pbtxt."""
    configs = example_repository / "example" / "configs"
    configs.mkdir()
    config = (example_repository / "example" / "config.pbtxt").read_text()
    (configs / "a10.pbtxt").write_text(config.replace("max_batch_size: 8", "max_batch_size: 4"))
    deployment = _deploy(example_repository, "--gpu", "a10", "--no-warmup")
    try:
        client = httpclient.InferenceServerClient(deployment.http_url)
        try:
            assert client.get_model_config("example")["max_batch_size"] == 4
        finally:
            client.close()
    finally:
        run_cli("down", "--repository", example_repository)


def _deploy_with_exit_timeout(repo: Path, tmp_path: Path, seconds: int) -> Deployment:
    """The example repository served with Triton's --exit-timeout-secs at ``seconds``."""
    settings = tmp_path / "server.toml"
    settings.write_text((ROOT / "configs" / "server.toml").read_text().replace(
        "exit_timeout_secs = 30", f"exit_timeout_secs = {seconds}"))
    return _deploy(repo, "--server-config", settings, "--no-warmup")


def _down_piped(repo: Path, *extra: str) -> subprocess.CompletedProcess:
    """`tritonkit down` with its output to pipes, as in a CI log."""
    return subprocess.run(
        [sys.executable, "-m", "tritonkit", "down", "--repository", str(repo), *extra],
        capture_output=True, text=True, cwd=ROOT, timeout=60, preexec_fn=default_signals)


@pytest.mark.parametrize("timeout, ended", [
    ("20", "Triton's exit timeout expired and it exited"),
    ("7", "it was still running when the 7 s timeout ran out, so it was killed (SIGKILL)"),
])
def test_a_piped_down_that_waits_says_once_what_for_and_how_the_server_ended(
        example_repository, tmp_path, timeout, ended):
    """Off a terminal there is no spinner: a `down` held up by a client's open connection
    (Triton drains it for its whole exit timeout, 8 s here) says once on stderr what it
    waits for, after a few seconds — not a line per poll — and its last line says whether
    Triton gave up on its own or `down` had to kill it when --timeout ran out."""
    deployment = _deploy_with_exit_timeout(example_repository, tmp_path, 8)
    client = httpclient.InferenceServerClient(deployment.http_url)
    try:
        assert client.is_server_ready()          # a keep-alive connection, left open
        done = _down_piped(example_repository, "--timeout", timeout)
    finally:
        client.close()
        run_cli("down", "--repository", example_repository)
    assert done.returncode == 0, done.stderr
    waiting = done.stderr.splitlines()
    assert len(waiting) == 1, done.stderr
    assert re.fullmatch(rf"stopping tritonserver \(pid {deployment.pid}\): Triton waits for 1 "
                        r"HTTP service connections \(\d+ s left of its exit timeout\)",
                        waiting[0]), waiting
    said = done.stdout.strip()
    assert said.startswith(f"stopped the Triton server for {example_repository}: {ended}"), said
    assert said.endswith(" 1 HTTP service connections"), said
    assert not _alive(deployment.pid)


def test_a_piped_down_that_stops_at_once_prints_no_waiting_line(deployed):
    """At once: before the waiting line is due (DOWN_PLAIN_AFTER_S). Triton takes 2-3 s to
    stop on a busy 2-core host, so one slower yet may pass the mark: then the one line."""
    from tritonkit.cli.deploy import DOWN_PLAIN_AFTER_S

    started = time.monotonic()
    done = _down_piped(Path(deployed.repository))
    took = time.monotonic() - started           # the interpreter's start too: at least the wait
    assert done.returncode == 0, done.stderr
    if took < DOWN_PLAIN_AFTER_S:
        assert done.stderr == "", done.stderr
    else:
        assert len(done.stderr.splitlines()) <= 1, done.stderr
    said = done.stdout.strip()
    assert re.fullmatch(rf"stopped the Triton server for {re.escape(deployed.repository)}: it "
                        r"exited on its own \d+\.\d s after SIGINT", said), said


def test_a_model_exported_again_is_served_as_deployed_until_the_next_deploy(
        tmp_path, capsys, exported_mlp):
    """A re-export renames a new model folder into place: the local server keeps the graph
    and the config it was deployed with (a reload included), `export` warns that it does,
    and the next deploy serves the new model, nothing of the old one left in its mirror."""
    repo, mlp = tmp_path / "repo", f"{ROOT / 'examples' / 'mlp.py'}:build"
    exported_mlp(repo)
    deployment = _deploy(repo)
    x = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
    try:
        capsys.readouterr()
        assert run_cli("export", mlp, "--name", "mlp", "--repository", repo, "--no-verify",
                       "--input-names", "features", "--force") == 0
        err = capsys.readouterr().err
        assert (f"warning: the local server deployed from {repo} keeps serving the 'mlp' it "
                f"loaded, not this export; to serve this one, redeploy: "
                f"{redeploy_command(repo)}") in err
        assert f"--http-port {deployment.http_port}" in err      # as it was deployed
        assert run_cli("warmup", "--repository", repo, "--model", "mlp", "--reload",
                       *BUSY_HOST_STEADY) == 0
        client = httpclient.InferenceServerClient(deployment.http_url)
        try:
            assert [i["name"] for i in client.get_model_config("mlp")["input"]] == ["INPUT__0"]
            inp = httpclient.InferInput("INPUT__0", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            assert client.infer("mlp", [inp]).as_numpy("OUTPUT__0").shape == (2, 10)
        finally:
            client.close()
    finally:
        started = time.monotonic()
        assert run_cli("down", "--repository", repo) == 0
        assert time.monotonic() - started < 15          # no model stuck in a failed load
    redeployed = _deploy(repo)
    client = httpclient.InferenceServerClient(redeployed.http_url)
    try:
        assert [i["name"] for i in client.get_model_config("mlp")["input"]] == ["features"]
        # the new graph itself, hard-linked: the snapshot costs no disk
        mirrored = state_dir(repo) / "local" / "mlp" / "1" / "model.onnx"
        assert mirrored.stat().st_ino == (repo / "mlp" / "1" / "model.onnx").stat().st_ino
    finally:
        client.close()
        run_cli("down", "--repository", repo)
    assert _no_server_for(repo)


def _files_of(repo: Path) -> dict[str, tuple[bytes, int]]:
    """Each file of a repository (its state folder aside): its bytes and its inode."""
    return {str(path.relative_to(repo)): (path.read_bytes(), path.stat().st_ino)
            for path in sorted(repo.rglob("*"))
            if path.is_file() and ".tritonkit" not in path.relative_to(repo).parts}


def test_down_removes_the_mirror_it_served_and_the_next_deploy_builds_it_again(
        tmp_path, exported_mlp):
    """The mirror holds hard-linked snapshots of the ONNX models (a re-exported graph's
    old bytes stay on disk while it does): `down` removes it once the server is stopped,
    a recorded one or one whose record was deleted, and nothing of the repository itself."""
    repo = tmp_path / "repo"
    exported_mlp(repo)
    before = _files_of(repo)
    onnx, mirror = repo / "mlp" / "1" / "model.onnx", state_dir(repo) / "local"
    for stray in (False, True):
        deployment = _deploy(repo, "--no-warmup")
        try:
            assert (mirror / "mlp" / "1" / "model.onnx").stat().st_ino == onnx.stat().st_ino
            client = httpclient.InferenceServerClient(deployment.http_url)
            try:
                assert client.is_model_ready("mlp")
            finally:
                client.close()
            if stray:
                (state_dir(repo) / "server.json").unlink()   # `down` finds it by its argv
        finally:
            assert run_cli("down", "--repository", repo) == 0
        assert not _alive(deployment.pid)
        assert not mirror.exists()
        assert _files_of(repo) == before
        assert onnx.stat().st_nlink == 1            # the snapshot's link is gone with it
        assert (state_dir(repo) / "server.log").is_file()    # the log stays, to be read
    assert _no_server_for(repo)


def test_the_mirror_stays_while_a_server_or_a_deploy_may_read_it(deployed):
    """Never under a live server — recorded, or serving it with no record — nor while a
    deploy holds the lock (it is building or serving that mirror)."""
    from tritonkit.server.local import remove_mirror
    from tritonkit.server.state import deploy_lock

    repo = Path(deployed.repository)
    mirror = state_dir(repo) / "local"
    assert remove_mirror(repo) is False
    record = state_dir(repo) / "server.json"
    kept = record.read_bytes()
    record.unlink()
    try:
        assert remove_mirror(repo) is False          # it still serves it, unrecorded
    finally:
        record.write_bytes(kept)
    assert (mirror / "example" / "config.pbtxt").exists()
    client = httpclient.InferenceServerClient(deployed.http_url)
    try:
        assert client.is_model_ready("example")
    finally:
        client.close()
    assert run_cli("down", "--repository", repo) == 0
    (mirror / "example").mkdir(parents=True)           # as a deploy under way builds it
    with deploy_lock(repo):
        assert remove_mirror(repo) is False
    assert (mirror / "example").is_dir()
    assert remove_mirror(repo) is True and not mirror.exists()


def test_a_mirror_that_is_a_link_is_not_followed(tmp_path):
    """Nothing outside DIR/.tritonkit/local is removed: a mirror replaced by a link to
    another folder leaves that folder, and the link, as they are."""
    from tritonkit.server.local import remove_mirror

    repo, elsewhere = tmp_path / "repo", tmp_path / "elsewhere"
    (elsewhere / "model").mkdir(parents=True)
    (elsewhere / "model" / "kept.txt").write_text("mine")
    state_dir(repo).mkdir(parents=True)
    (state_dir(repo) / "local").symlink_to(elsewhere)
    assert remove_mirror(repo) is False
    assert (elsewhere / "model" / "kept.txt").read_text() == "mine"
    assert (state_dir(repo) / "local").is_symlink()
