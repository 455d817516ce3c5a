"""The embedded local Triton: deploy, serve, refuse what it should, stop cleanly."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import add_broken_model, load_example_forward, run_cli
from tritonkit.errors import ServerError
from tritonkit.server.local import _alive, check_port_free, free_port
from tritonkit.server.state import load_deployment, state_dir

pytestmark = pytest.mark.server


def _no_server_for(repo: Path) -> bool:
    return not (state_dir(repo) / "server.json").exists()


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

    pid = deployed.pid
    assert run_cli("down", "--repository", deployed.repository) == 0
    assert not _alive(pid)
    assert _no_server_for(Path(deployed.repository))


def test_deploy_binds_to_loopback_and_records_its_state(deployed):
    assert deployed.host == "127.0.0.1"
    assert any(a == "--http-address=127.0.0.1" for a in deployed.argv)
    assert "--model-control-mode=explicit" in deployed.argv
    # its own python-backend shared memory, so local servers can run side by side
    assert f"--backend-config=python,shm-region-prefix-name=tritonkit_{deployed.http_port}_" in deployed.argv
    # The secret never lands in the state file, only in its 0600 file.
    state = (state_dir(Path(deployed.repository)) / "server.json").read_text()
    assert deployed.secret() not in state
    mode = os.stat(state_dir(Path(deployed.repository)) / "secret").st_mode & 0o777
    assert mode == 0o600


def test_model_repository_api_needs_the_secret_header(deployed):
    client = httpclient.InferenceServerClient(deployed.http_url)
    with pytest.raises(InferenceServerException, match="restricted"):
        client.unload_model("example")
    assert client.is_model_ready("example")
    with pytest.raises(InferenceServerException, match="restricted"):
        client.unload_model("example", headers={deployed.secret_header: "wrong"})
    index = client.get_model_repository_index(headers=deployed.repository_headers())
    assert {"name": "example", "version": "1", "state": "READY"} in index


def test_a_port_in_use_is_one_clear_error_and_no_server(example_repository, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = run_cli("deploy", "--repository", example_repository, "--http-port", port,
                       "--grpc-port", "0", "--metrics-port", "0")
    err = capsys.readouterr().err
    assert code != 0
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


def test_a_second_deploy_of_the_same_repository_is_refused(deployed, capsys):
    code = run_cli("deploy", "--repository", deployed.repository, "--http-port", "0",
                   "--grpc-port", "0", "--metrics-port", "0")
    assert code == 2
    assert "already running" in capsys.readouterr().err
    assert load_deployment(Path(deployed.repository)).pid == deployed.pid


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
    port = free_port()
    _leave_time_wait_on(port)
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))       # what the old check did: a false "in use"
    check_port_free("127.0.0.1", port, "http")


def test_a_port_that_cannot_be_bound_says_why_instead_of_in_use():
    with pytest.raises(ServerError) as raised:
        check_port_free("192.0.2.1", free_port(), "http")   # TEST-NET-1: not this host's
    assert "in use" not in raised.value.message
    assert "cannot assign requested address" in raised.value.message


def test_a_redeploy_on_the_same_fixed_ports_right_after_down_succeeds(example_repository):
    ports = []
    while len(ports) < 3:
        port = free_port()
        if port not in ports:
            ports.append(port)
    flags = ["--http-port", ports[0], "--grpc-port", ports[1], "--metrics-port", ports[2]]
    for _ in range(2):
        assert run_cli("deploy", "--repository", example_repository, *flags,
                       "--timeout", "60") == 0
        assert run_cli("down", "--repository", example_repository) == 0
