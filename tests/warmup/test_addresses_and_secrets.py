"""`tritonkit warmup`: the addresses it takes (HTTP and gRPC URLs, peers that are no
server) and the model-repository secret it sends."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli, unused_port
from tests.warmup.conftest import _ready
from tritonkit.server.state import Deployment, save_deployment, state_dir


@pytest.mark.server
def test_a_server_no_state_records_is_warmed_with_its_secret_from_a_file_or_the_environment(
        warm_server, tmp_path, monkeypatch, capsys):
    url = warm_server.http_url
    monkeypatch.delenv("TRITONKIT_REPOSITORY_SECRET", raising=False)
    assert run_cli("warmup", "--url", url, "--model", "example", "--reload") == 2
    assert "refused the model-repository API with no secret" in capsys.readouterr().err

    key = tmp_path / "key"
    key.write_text(warm_server.secret() + "\n")
    assert run_cli("warmup", "--url", url, "--model", "example", "--reload",
                   "--secret-file", key) == 0
    key.write_text("not-the-secret\n")
    assert run_cli("warmup", "--url", url, "--model", "example", "--secret-file", key) == 2
    assert "with a wrong secret" in capsys.readouterr().err

    monkeypatch.setenv("TRITONKIT_REPOSITORY_SECRET", warm_server.secret())
    assert run_cli("warmup", "--url", url, "--model", "example", "--reload") == 0
    assert _ready(warm_server)


@pytest.mark.server
def test_a_wrong_secret_is_refused_before_anything_is_touched(warm_server, capsys):
    secret_file = state_dir(Path(warm_server.repository)) / "secret"
    secret = secret_file.read_text()
    secret_file.write_text("not-the-secret\n")
    try:
        code = run_cli("warmup", "--repository", warm_server.repository, "--reload")
    finally:
        secret_file.write_text(secret)
    err = capsys.readouterr().err
    assert code == 2
    assert "refused the model-repository API with a wrong secret" in err
    assert "This API is restricted" in err                   # Triton's own words
    assert _ready(warm_server)


@pytest.mark.server
def test_a_grpc_url_that_does_not_answer_is_one_line_naming_it(stateful_and_decoupled,
                                                                 tmp_path, capsys):
    secret_file = tmp_path / "secret"
    secret_file.write_text(stateful_and_decoupled.secret() + "\n")
    port = unused_port()
    started = time.monotonic()
    code = run_cli("warmup", "--url", stateful_and_decoupled.http_url, "--grpc-url",
                   f"127.0.0.1:{port}", "--secret-file", secret_file, "--model", "streaming",
                   "--timeout", "20")
    err = capsys.readouterr().err
    assert code == 1 and time.monotonic() - started < 10
    assert err.startswith(f"error: no gRPC answer at 127.0.0.1:{port} for 'streaming'")
    assert "pass --grpc-url HOST:PORT of the same server" in err
    assert len(err.strip().splitlines()) == 2 and "Traceback" not in err    # error + hint


@pytest.mark.slow
def test_a_peer_that_does_not_speak_http_is_not_triton_not_an_internal_error(capsys):
    import socket as socketlib

    with socketlib.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def greet() -> None:
            for _ in range(20):
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
                conn.close()

        threading.Thread(target=greet, daemon=True).start()
        code = run_cli("warmup", "--url", f"127.0.0.1:{port}", "--timeout", "1")
    err = capsys.readouterr().err
    assert code == 1
    # said at once, its bytes escaped (tests/test_not_triton.py: every such peer, every verb)
    assert (f"error: the server at 127.0.0.1:{port} is not Triton, or not a version tritonkit "
            "speaks: its answer is not HTTP/1.x: b'SSH-2.0-OpenSSH_9.6\\r\\n'") in err, err
    assert "internal error" not in err


@pytest.mark.parametrize("url", ["localhost:80a", "localhost", "http://h:1/path", "h:70000", "::1"])
def test_a_url_that_is_not_host_and_port_is_bad_input(url, capsys):
    assert run_cli("warmup", "--url", url, "--timeout", "1") == 2
    assert "is not HOST:PORT" in capsys.readouterr().err


@pytest.mark.parametrize("url", ["h:8000", "http://h:8000/", "[::1]:8000", "10.0.0.1:8000"])
def test_host_and_port_in_the_usual_spellings_is_taken(url):
    from tritonkit.client import check_address

    assert check_address(url.removeprefix("http://"), "--url") == \
        url.removeprefix("http://").removesuffix("/")


def test_a_given_secret_goes_under_the_header_the_recorded_server_was_started_with(tmp_path):
    from tritonkit.client import resolve_endpoint

    from tritonkit.server.state import new_secret

    new_secret(tmp_path)                  # the recorded one, which the given secret replaces
    save_deployment(Deployment(target="local", repository=str(tmp_path), host="127.0.0.1",
                               http_port=1, grpc_port=2, metrics_port=3,
                               secret_header="x-custom-key", models=[], started_at=0.0))
    endpoint = resolve_endpoint(tmp_path, secret="from-a-file")
    assert endpoint.repository_headers == {"x-custom-key": "from-a-file"}
    assert resolve_endpoint(tmp_path, url="127.0.0.1:1", secret="s").repository_headers == {
        "x-custom-key": "s"}
