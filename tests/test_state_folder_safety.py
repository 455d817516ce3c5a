"""DIR/.tritonkit/ is tritonkit's own: nothing planted there (a link, a FIFO, a folder where
a file belongs, the folder itself a link) is followed, read through or written through;
each is refused with one line that names it. A deploy that fails leaves no mirror behind,
`down` clears a leftover one and stops a server whose record was cut short, and a
redeploy keeps the previous server's log."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import add_broken_model, run_cli
from tritonkit.errors import UsageError
from tritonkit.server.local import _running, others_see_command_lines
from tritonkit.server.state import load_deployment, state_dir

PORTS = ("--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")


def _deploy(repo: Path, *extra: str) -> int:
    return run_cli("deploy", "--repository", repo, *PORTS, "--no-warmup", "--timeout", "60",
                   *extra)


def _one_error(err: str) -> str:
    """The error line of a refusal: one ``error:`` line, then at most a hint, no traceback."""
    lines = err.strip().splitlines()
    assert len(lines) <= 2 and lines[0].startswith("error: "), err
    assert all(line.startswith(("error: ", "hint: ")) for line in lines), err
    return lines[0]


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of the user's, outside the repository, that a planted link points at."""
    path = tmp_path / "victim.txt"
    path.write_text("precious\n")
    return path


@pytest.mark.parametrize("name", ["server.log", "server.json", "secret", "deploy.lock",
                                  "server.log.1"])
def test_a_link_planted_in_the_state_folder_is_refused_and_never_written_through(
        example_repository, victim, name, capsys):
    """The issue's case (a server.log link made deploy truncate the file it points to) and
    every other file a deploy writes there."""
    if name == "server.log.1":      # where the last log is kept when there is one
        (state_dir(example_repository)).mkdir()
        (state_dir(example_repository) / "server.log").write_text("the last server's log\n")
    state_dir(example_repository).mkdir(exist_ok=True)
    (state_dir(example_repository) / name).symlink_to(victim)
    assert _deploy(example_repository) == 2
    line = _one_error(capsys.readouterr().err)
    assert f"{state_dir(example_repository) / name} is a symbolic link to {victim}" in line
    assert victim.read_text() == "precious\n"
    assert not (state_dir(example_repository) / "local").exists()


@pytest.mark.parametrize("name", ["local", "backends", "backends/python"])
def test_a_folder_of_the_state_that_is_a_link_is_refused_and_never_written_into(
        example_repository, tmp_path, name, capsys):
    """The mirror (removed and built anew by each deploy) and the backend folder: a link
    planted in their place would have the deploy empty and fill another folder."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine")
    link = state_dir(example_repository) / name
    link.parent.mkdir(parents=True)
    link.symlink_to(elsewhere)
    assert _deploy(example_repository) == 2
    line = _one_error(capsys.readouterr().err)
    assert f"{link} is a symbolic link to {elsewhere}" in line
    assert [p.name for p in elsewhere.iterdir()] == ["keep.txt"]


def test_a_state_folder_that_is_a_file_is_refused(example_repository, capsys):
    state_dir(example_repository).write_text("not a folder\n")
    assert _deploy(example_repository) == 2
    assert f"{state_dir(example_repository)} is a file, not a folder" in \
        _one_error(capsys.readouterr().err)


def test_a_lock_link_to_a_missing_file_makes_no_file_there(example_repository, tmp_path, capsys):
    """O_CREAT through a link makes its target: a deploy.lock link to a file that does not
    exist yet must not create it (as root, anywhere)."""
    target = tmp_path / "made-by-tritonkit"
    state_dir(example_repository).mkdir()
    (state_dir(example_repository) / "deploy.lock").symlink_to(target)
    assert _deploy(example_repository) == 2
    assert "deploy.lock is a symbolic link" in _one_error(capsys.readouterr().err)
    assert not target.exists()


def test_a_state_folder_that_is_a_link_is_refused(example_repository, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "local").mkdir()
    (elsewhere / "local" / "keep.txt").write_text("mine")
    state_dir(example_repository).symlink_to(elsewhere)
    assert _deploy(example_repository) == 2
    line = _one_error(capsys.readouterr().err)
    assert f"{state_dir(example_repository)} is a symbolic link to {elsewhere}" in line
    assert sorted(p.name for p in elsewhere.rglob("*")) == ["keep.txt", "local"]
    # Nor is anything read through it: `down` and `warmup` refuse it too.
    assert run_cli("down", "--repository", example_repository) == 2
    assert "is a symbolic link" in _one_error(capsys.readouterr().err)


@pytest.mark.parametrize("make", ["fifo", "folder"])
@pytest.mark.parametrize("name", ["server.json", "secret"])
def test_a_fifo_or_folder_in_place_of_a_state_file_is_refused_at_once(
        example_repository, name, make, capsys):
    """A FIFO with no writer would block a plain open for ever: reading (`down` reads the
    record, the secret is read for every request) and writing (deploy) say what is there."""
    from tritonkit.server.state import read_secret

    state_dir(example_repository).mkdir()
    path = state_dir(example_repository) / name
    os.mkfifo(path) if make == "fifo" else path.mkdir()
    started = time.monotonic()
    if name == "secret":
        with pytest.raises(UsageError, match=f"{path} is a "):
            read_secret(example_repository)
        command = ("deploy", *PORTS, "--no-warmup")
    else:
        command = ("down",)
    assert run_cli(*command, "--repository", example_repository) == 2
    assert time.monotonic() - started < 30
    line = _one_error(capsys.readouterr().err)
    assert f"{path} is a {'named pipe' if make == 'fifo' else 'folder'}" in line


@pytest.mark.parametrize("target", ["compose", "k8s"])
@pytest.mark.parametrize("where", ["the state folder", "a folder inside it", "a link to it"])
def test_a_deployments_out_in_the_state_folder_is_refused_even_with_force(
        example_repository, tmp_path, capsys, target, where):
    """--out is a folder of the user's: the compose file, its .env and .gitignore, or k8s/
    written into .tritonkit/ would sit beside (and could replace) the deployment's secret
    and record. Refused before anything is written, however the path reaches it."""
    state = state_dir(example_repository)
    state.mkdir()
    out = {"the state folder": state, "a folder inside it": state / "deploy",
           "a link to it": tmp_path / "deploy"}[where]
    if where == "a link to it":
        out.symlink_to(state)
    no_up = ("--no-up",) if target == "compose" else ()
    assert run_cli("deploy", "--target", target, "--gpu", "a10", "--repository",
                   example_repository, "--out", out, *no_up, "--force") == 2
    line = _one_error(capsys.readouterr().err)
    assert line.startswith(f"error: --out {out} is ")
    assert "a .tritonkit folder" in line and "which holds a deployment's state, secret and log" in line
    written = {p.name for p in state.rglob("*")} & {"docker-compose.yml", ".env", ".gitignore",
                                                    "k8s", "deploy"}
    assert written == set()


def test_a_write_goes_into_the_folder_opened_even_if_it_is_swapped_for_a_link(tmp_path, victim):
    """Between the check and the write, the state folder replaced by a link to another
    folder: what was opened is written, the other folder is not."""
    from tritonkit.server.state import state_folder

    repo, elsewhere = tmp_path / "repo", tmp_path / "elsewhere"
    repo.mkdir()
    elsewhere.mkdir()
    with state_folder(repo, create=True) as folder:
        os.rename(state_dir(repo), tmp_path / "moved")
        state_dir(repo).symlink_to(elsewhere)
        folder.write("server.json", "{}")
        fd = folder.create("server.log")
        os.close(fd)
    assert list(elsewhere.iterdir()) == []
    assert sorted(p.name for p in (tmp_path / "moved").iterdir()) == ["server.json", "server.log"]


def test_a_link_swapped_in_after_the_check_is_not_written_through(tmp_path, victim, monkeypatch):
    """The log is opened only as a file the open makes (O_EXCL): a link put in its place
    after the previous log was moved aside is refused, its target untouched; a record
    written by a rename replaces a link swapped in, never its target."""
    from tritonkit.fileio import OwnedFolder

    with OwnedFolder(tmp_path, "state", create=True) as folder:
        os.symlink(victim, tmp_path / "state" / "server.log")
        with pytest.raises(UsageError, match="server.log is a symbolic link"):
            folder.create("server.log")
        real_check = OwnedFolder._require_file
        monkeypatch.setattr(OwnedFolder, "_require_file", lambda self, name: None)
        os.symlink(victim, tmp_path / "state" / "server.json")
        folder.write("server.json", "{}")          # the check was passed, then the link came
        monkeypatch.setattr(OwnedFolder, "_require_file", real_check)
    assert victim.read_text() == "precious\n"
    assert (tmp_path / "state" / "server.json").read_text() == "{}"
    assert not (tmp_path / "state" / "server.json").is_symlink()


def test_the_state_folder_is_made_private(example_repository):
    """Its log, record and mirror are the deploying user's alone; nobody else may plant
    anything in it."""
    from tritonkit.server.state import new_secret

    new_secret(example_repository)
    assert os.stat(state_dir(example_repository)).st_mode & 0o077 == 0


# --- what a deploy leaves behind --------------------------------------------------------

@pytest.mark.server
def test_a_deploy_triton_refuses_leaves_no_mirror(example_repository, capsys):
    add_broken_model(example_repository)
    assert _deploy(example_repository) == 1
    assert "weights file is corrupt" in capsys.readouterr().err
    assert not (state_dir(example_repository) / "local").exists()
    assert not (state_dir(example_repository) / "server.json").exists()


def test_a_deploy_refused_for_a_busy_port_leaves_no_mirror(example_repository, capsys):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert run_cli("deploy", "--repository", example_repository, "--http-port", port,
                       "--grpc-port", "0", "--metrics-port", "0", "--no-warmup") == 2
    assert "already in use" in capsys.readouterr().err
    assert not (state_dir(example_repository) / "local").exists()


def test_down_with_nothing_recorded_removes_a_leftover_mirror(example_repository, capsys):
    """A mirror a killed deploy left (its hard links keep old model bytes on disk)."""
    leftover = state_dir(example_repository) / "local" / "example" / "1"
    leftover.mkdir(parents=True)
    (leftover / "model.py").write_text("# left by a killed deploy\n")
    assert run_cli("down", "--repository", example_repository) == 0
    assert "nothing to stop" in capsys.readouterr().out
    assert not (state_dir(example_repository) / "local").exists()
    assert (example_repository / "example" / "1" / "model.py").exists()


@pytest.mark.server
@pytest.mark.parametrize("record", ["", '{"target": "local", "repos', "[]"])
def test_down_stops_a_running_server_whose_record_is_corrupt(example_repository, record, capsys):
    """A record cut short (a full disk) or not a record: `down` finds the server by its
    command line, stops it, clears the record and the mirror."""
    assert _deploy(example_repository) == 0
    pid = load_deployment(example_repository).pid
    try:
        (state_dir(example_repository) / "server.json").write_text(record)
        capsys.readouterr()
        assert run_cli("down", "--repository", example_repository) == 0, \
            capsys.readouterr().err
        assert "stopped the Triton server" in capsys.readouterr().out
        assert not _running(pid)
        assert not (state_dir(example_repository) / "server.json").exists()
        assert not (state_dir(example_repository) / "local").exists()
    finally:
        if _running(pid):
            os.killpg(pid, signal.SIGKILL)


def test_a_corrupt_record_with_no_server_is_still_an_error_that_says_so(example_repository, capsys):
    state_dir(example_repository).mkdir()
    (state_dir(example_repository) / "server.json").write_text('{"target": "comp')
    assert run_cli("down", "--repository", example_repository) == 2
    line = _one_error(capsys.readouterr().err)
    assert "is corrupt" in line


@pytest.mark.server
def test_a_redeploy_keeps_the_previous_servers_log(example_repository, capsys):
    """The log of a server that crashed is what its error points to; the redeploy the error
    recommends keeps it as server.log.1."""
    logs = state_dir(example_repository)
    assert _deploy(example_repository) == 0
    first = load_deployment(example_repository).pid
    os.killpg(first, signal.SIGKILL)                 # a crash: its log is all there is
    while _running(first):
        time.sleep(0.05)
    assert _deploy(example_repository) == 0
    try:
        second = load_deployment(example_repository).pid
        assert f" {first} " in (logs / "server.log.1").read_text()
        assert f" {first} " not in (logs / "server.log").read_text()
        assert f" {second} " in (logs / "server.log").read_text()
        said = "note: the secret is on Triton's command line" in \
            " ".join(capsys.readouterr().out.split())
        assert said == others_see_command_lines()      # hidepid: nothing to say
    finally:
        assert run_cli("down", "--repository", example_repository) == 0
