"""The secret header's value, wherever it comes from ($TRITONKIT_REPOSITORY_SECRET,
--secret-file, the state, a kept secret.yaml), is checked as a header value before any
request: visible ASCII, at most 4096 characters. Anything else (a CR LF that would start a
header of its own, a NUL, a space, 10 MB) is refused with exit 2 in one line that never
shows the secret. The containers read it from their environment as they start, so it is in
no container command."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli, silent_listener
from tritonkit.errors import UsageError
from tritonkit.server.state import state_dir

# What each hostile value is refused for, and a piece of it that must never be echoed.
HOSTILE = {
    "crlf": ("abcd\r\nX-Evil: injected", "control character (0x0d)", "X-Evil"),
    "nul": ("abcd\x00efgh", "control character (0x00)", "efgh"),
    "space": ("abcd efgh", "a space", "efgh"),
    "not ascii": ("abcdéfgh", "not ASCII", "fgh"),
    "10 MB": ("k" * 10_000_000, "10000000 characters long", "kkkkk"),
}


@pytest.fixture
def listener():
    """A socket that listens and answers nothing: whether a command connected to it at
    all (a refused secret must be refused before any request)."""
    with silent_listener() as listening:
        yield listening


def _refusal(capsys, source: str, why: str, never: str) -> None:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: "), err
    assert f"the secret from {source}" in lines[0] and why in lines[0]
    assert never not in err


@pytest.mark.parametrize("case", HOSTILE)
@pytest.mark.parametrize("command", [("warmup", "--timeout", "5"),
                                     ("loadtest", "--model", "m", "--concurrency", "1",
                                      "--duration", "1")])
def test_a_hostile_secret_in_the_environment_is_refused_before_any_request(
        listener, monkeypatch, capsys, case, command):
    """The issue's case: the CR LF made warmup send X-Evil: injected as a header of its own."""
    url, connected = listener
    value, why, never = HOSTILE[case]
    if case == "nul":               # no environment holds a NUL; another control character
        value, why = value.replace("\x00", "\x01"), "control character (0x01)"
    monkeypatch.setenv("TRITONKIT_REPOSITORY_SECRET", value)
    assert run_cli(*command, "--url", url) == 2
    _refusal(capsys, "$TRITONKIT_REPOSITORY_SECRET", why, never)
    assert not connected()


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_secret_file_is_refused_naming_the_file(tmp_path, listener, capsys, case):
    url, connected = listener
    value, why, never = HOSTILE[case]
    path = tmp_path / "secret"
    if case == "crlf":      # its first line is the secret: a CR ends it, so a space inside
        value, why, never = "abcd\tX-Evil: injected", "control character (0x09)", "X-Evil"
    path.write_bytes(value.encode())
    assert run_cli("warmup", "--url", url, "--secret-file", path, "--timeout", "5") == 2
    if case == "10 MB":     # the file's size is refused before its contents are read
        err = capsys.readouterr().err
        assert f"the secret file {path} is 9.54 MiB, more than the 64 KiB" in err
        assert never not in err
    else:
        _refusal(capsys, f"the secret file {path}", why, never)
    assert not connected()


@pytest.mark.parametrize("make", ["folder", "fifo", "device", "not utf-8", "empty"])
def test_a_secret_file_that_is_no_text_file_is_one_line_naming_it(tmp_path, listener, capsys,
                                                                   make):
    """A folder, a FIFO nobody writes (a plain open waits for ever), /dev/zero (read without
    end), bytes that are not UTF-8 (an internal UnicodeDecodeError before)."""
    url, connected = listener
    path = tmp_path / "secret"
    if make == "folder":
        path.mkdir()
    elif make == "fifo":
        os.mkfifo(path)
    elif make == "device":
        path = Path("/dev/zero")
    elif make == "not utf-8":
        path.write_bytes(b"\xff\xfe\x00secret")
    else:
        path.write_text("\n  \n")
    started = time.monotonic()
    assert run_cli("warmup", "--url", url, "--secret-file", path, "--timeout", "5") == 2
    assert time.monotonic() - started < 20
    error = capsys.readouterr().err.splitlines()[0]
    assert str(path) in error
    assert {"folder": "is a folder", "fifo": "is a named pipe", "device": "is a character device",
            "not utf-8": "is not UTF-8 text", "empty": "is empty"}[make] in error
    assert not connected()


def test_a_tampered_recorded_secret_is_refused_naming_its_file(deployed, capsys):
    """The state's own secret is checked as every other: a secret file edited to carry a
    header line of its own never reaches a request."""
    secret_file = state_dir(Path(deployed.repository)) / "secret"
    kept = secret_file.read_bytes()
    try:
        secret_file.write_bytes(kept.strip() + b"\r\nX-Evil: injected\n")
        assert run_cli("warmup", "--repository", deployed.repository, "--timeout", "10") == 2
        _refusal(capsys, str(secret_file), "control character (0x0d)", "X-Evil")
    finally:
        secret_file.write_bytes(kept)


def test_a_secret_header_name_that_is_no_token_is_refused():
    from tritonkit.client import Endpoint

    with pytest.raises(UsageError, match="is not an HTTP header name"):
        Endpoint(http_url="127.0.0.1:1", repository_headers={"key\r\nX-Evil: x": "abcd"})


def test_a_kept_k8s_secret_that_cannot_be_a_header_value_is_replaced(tmp_path):
    """A secret.yaml whose digest still matches but whose value would split a header line
    is not kept: the manifests get a new secret."""
    from tritonkit.server import k8s
    from tritonkit.server.provenance import stamped

    repo = tmp_path / "repo"
    repo.mkdir()
    secret_file = tmp_path / "secret.yaml"
    document = ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: "
                f"{k8s.secret_object_name('triton')}\nstringData:\n  "
                f"{k8s.SECRET_KEY}: \"abcd\\r\\nX-Evil: injected\"\n")
    secret_file.write_text(stamped(k8s.HEADER, document, repo))
    kept, why = k8s._kept_secret(secret_file, "triton", repo)
    assert kept is None and "cannot be a header value" in why


# --- the secret on command lines ------------------------------------------------------

@pytest.mark.server
def test_a_container_reads_the_secret_from_its_environment_as_triton_starts(tmp_path):
    """The container's command (what `docker inspect` shows as Cmd) holds no secret; the
    shell it starts with passes it to the real tritonserver, whose restricted API then
    wants it: refused without the header, answered with it."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    from tritonkit.client import health
    from tritonkit.fileio import OwnedFolder
    from tritonkit.server.binary import find_install, prepare_backends, server_environment
    from tritonkit.server.container import ContainerSpec
    from tests.conftest import unused_ports
    from tritonkit.server.settings import load_server_settings

    install = find_install()
    http, grpc, metrics = unused_ports(3)
    spec = ContainerSpec(gpu="a10", compute_capability=8.6, image="unused", models=(),
                         settings=load_server_settings(), tensorrt=False,
                         model_config_name=None, recipes=())
    command, environment = spec.command_with_secret_from_env()
    (tmp_path / "models").mkdir()
    with OwnedFolder(tmp_path, "backends", create=True) as backends:
        backend_directory = prepare_backends(install, backends)
    # The container's paths and ports, this host's instead.
    here = {"tritonserver": str(install.binary), "--model-repository=/models":
            f"--model-repository={tmp_path / 'models'}", "--http-port=8000": f"--http-port={http}",
            "--grpc-port=8001": f"--grpc-port={grpc}", "--metrics-port=8002": f"--metrics-port={metrics}",
            "--http-address=0.0.0.0": "--http-address=127.0.0.1",
            "--grpc-address=0.0.0.0": "--grpc-address=127.0.0.1",
            "--metrics-address=0.0.0.0": "--metrics-address=127.0.0.1",
            "--allow-gpu-metrics=true": "--allow-gpu-metrics=false"}
    command = [here.get(arg, arg) for arg in command] + [f"--backend-directory={backend_directory}"]
    secret = "s3cret-from-the-environment"
    assert not any(secret in arg for arg in command)
    env = {**server_environment(install), **environment, "TRITONKIT_REPOSITORY_KEY": secret}
    with open(tmp_path / "server.log", "wb") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while health(f"127.0.0.1:{http}", "/v2/health/ready") is not None:
            assert server.poll() is None, (tmp_path / "server.log").read_text()
            assert time.monotonic() < deadline
            time.sleep(0.2)
        # The shell is gone (exec): the process is tritonserver, with the secret on its
        # own command line, as Triton takes it nowhere else.
        argv = Path(f"/proc/{server.pid}/cmdline").read_bytes().split(b"\0")
        assert argv[0].endswith(b"tritonserver")
        assert (b"--http-restricted-api=model-repository,shared-memory,logging,trace:"
                b"tritonkit-repository-key=" + secret.encode()) in argv
        client = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
        try:
            with pytest.raises(InferenceServerException, match="tritonkit-repository-key"):
                client.get_model_repository_index()
            assert client.get_model_repository_index(
                headers={"tritonkit-repository-key": secret}) == []
        finally:
            client.close()
    finally:
        server.terminate()
        server.wait(timeout=60)


@pytest.mark.parametrize("options, visible", [
    ("rw,nosuid,nodev,noexec,relatime - proc proc rw", True),
    ("rw,nosuid,nodev,noexec,relatime - proc proc rw,hidepid=2", False),
    ("rw,relatime shared:12 - proc proc rw,hidepid=invisible", False),
    ("rw,relatime - proc proc rw,hidepid=noaccess", False),
    ("rw,relatime - proc proc rw,hidepid=0", True),
])
def test_deploy_says_the_secret_is_in_ps_unless_proc_hides_other_users_processes(
        tmp_path, options, visible):
    from tritonkit.server.local import others_see_command_lines

    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("21 26 0:20 / /sys rw,nosuid - sysfs sysfs rw\n"
                         f"22 26 0:21 / /proc {options}\n")
    assert others_see_command_lines(mountinfo) is visible
