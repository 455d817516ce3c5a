"""The local mirror (DIR/.tritonkit/local) takes only what the model repository holds: a
link that leads out of it (a model file, a model or version folder, a config, an external
data file, a python model's model.py) is refused with one line naming the link and where
it points; a FIFO or device is refused, never opened; a link inside the repository is
taken as the file it leads to. No link of a refused deploy is left behind."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests import onnx_graphs
from tests.conftest import EXAMPLE_REPOSITORY, error_lines, run_cli
from tritonkit.model_config import configure
from tritonkit.server.state import state_dir

PORTS = ("--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")


@pytest.fixture
def onnx_repo(tmp_path: Path) -> Path:
    """A repository with one ONNX model (mlp), configs for every profile."""
    repo = tmp_path / "repo"
    onnx_graphs.mlp(repo / "mlp")
    (repo / "mlp" / "export-report.json").write_text(json.dumps(
        {"max_batch_size": 8, "inputs": [{"name": "INPUT__0", "example_shape": [1, 16]}]}))
    configure(repo, "mlp", gpu="a10")
    return repo


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder of the user's beside the repository, not in it."""
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


def _deploy(repo: Path, *extra: str) -> int:
    return run_cli("deploy", "--repository", repo, *PORTS, "--no-warmup", "--timeout", "60",
                   *extra)


def _refused(repo: Path, capsys, link: Path, target: Path, *extra: str) -> None:
    """Deploy is refused (exit 2) with one line naming ``link`` and ``target``; nothing of
    the mirror is left, no server recorded."""
    assert _deploy(repo, *extra) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: ")
    assert f"{link} is a link to {target}, outside the model repository" in lines[0]
    assert not (state_dir(repo) / "local").exists()
    assert not (state_dir(repo) / "server.json").exists()


def test_a_model_file_linked_to_a_file_outside_is_refused_and_never_hard_linked(
        onnx_repo, outside, capsys):
    """The issue's case: model.onnx a link to /etc/passwd was served from a hard link to
    /etc/passwd's inode, which outlived the failed deploy and `down`."""
    secret = outside / "passwd"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    model = onnx_repo / "mlp" / "1" / "model.onnx"
    model.unlink()
    model.symlink_to(secret)
    _refused(onnx_repo, capsys, model, secret)
    assert secret.stat().st_nlink == 1
    assert run_cli("down", "--repository", onnx_repo) == 0
    assert secret.stat().st_nlink == 1


@pytest.mark.parametrize("what", ["model folder", "version folder", "external data",
                                  "label file", "config", "gpu config"])
def test_a_link_out_of_the_repository_is_refused_wherever_the_mirror_meets_it(
        onnx_repo, outside, what, capsys):
    model_dir = onnx_repo / "mlp"
    if what in ("model folder", "version folder"):
        moved = outside / "moved"
        source = model_dir if what == "model folder" else model_dir / "1"
        shutil.move(source, moved)
        source.symlink_to(moved)
        link, target = source, moved
    else:
        target = outside / "file"
        shutil.copy(model_dir / "config.pbtxt", target)
        link = {"external data": model_dir / "1" / "weights.bin",
                "label file": model_dir / "labels.txt",
                "config": model_dir / "config.pbtxt",
                "gpu config": model_dir / "configs" / "p100.pbtxt"}[what]
        link.unlink(missing_ok=True)
        link.symlink_to(target)
    extra = ("--gpu", "p100") if what == "gpu config" else ()
    _refused(onnx_repo, capsys, link, target, *extra)


def test_a_link_into_the_state_folder_is_refused(example_repository, capsys):
    """The state folder is inside the repository, but it is tritonkit's: its secret is
    never mirrored into a model."""
    link = example_repository / "example" / "1" / "labels.txt"
    link.symlink_to(state_dir(example_repository) / "secret")
    assert _deploy(example_repository) == 2
    error = error_lines(capsys.readouterr().err)[0]
    assert f"{link} is a link to {state_dir(example_repository).resolve() / 'secret'}, in " \
           "tritonkit's own state folder" in error
    assert not (state_dir(example_repository) / "local").exists()


def test_a_python_models_file_linked_outside_is_refused(example_repository, outside, capsys):
    """python-backend models are linked file by file: each link must stay in the repository."""
    code = outside / "model.py"
    shutil.copy(example_repository / "example" / "1" / "model.py", code)
    link = example_repository / "example" / "1" / "model.py"
    link.unlink()
    link.symlink_to(code)
    _refused(example_repository, capsys, link, code)


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_a_fifo_or_socket_in_a_model_folder_is_refused_not_opened(onnx_repo, kind, capsys):
    import socket

    path = onnx_repo / "mlp" / "1" / "weights.bin"
    held = None
    if kind == "fifo":
        os.mkfifo(path)
    else:
        held = socket.socket(socket.AF_UNIX)
        held.bind(str(path))
    try:
        assert _deploy(onnx_repo) == 2
    finally:
        if held:
            held.close()
    error = error_lines(capsys.readouterr().err)[0]
    assert f"{path} is a {'named pipe' if kind == 'fifo' else 'socket'}" in error
    assert not (state_dir(onnx_repo) / "local").exists()


@pytest.mark.server
def test_a_link_inside_the_repository_is_taken_as_the_file_it_leads_to(onnx_repo, capsys):
    """A model file kept once and linked from the version folder (inside the repository):
    the mirror holds the file itself (a hard link to it), never a link out."""
    shared = onnx_repo / "shared"                      # no config, no version: no model
    shared.mkdir()
    model = onnx_repo / "mlp" / "1" / "model.onnx"
    shutil.move(model, shared / "mlp.onnx")
    model.symlink_to(Path("..") / ".." / "shared" / "mlp.onnx")
    (onnx_repo / "mlp" / "1" / "gone.bin").symlink_to(onnx_repo / "nowhere")   # left out
    assert _deploy(onnx_repo) == 0, capsys.readouterr().err
    try:
        mirrored = state_dir(onnx_repo) / "local" / "mlp" / "1" / "model.onnx"
        assert not mirrored.is_symlink()
        assert mirrored.stat().st_ino == (shared / "mlp.onnx").stat().st_ino
        assert not (state_dir(onnx_repo) / "local" / "mlp" / "1" / "gone.bin").exists()
    finally:
        assert run_cli("down", "--repository", onnx_repo) == 0
    assert (shared / "mlp.onnx").stat().st_nlink == 1


@pytest.mark.server
def test_the_mirrors_python_model_links_lead_into_the_repository(tmp_path, capsys):
    """A python model's files are linked by path: to their real place in the repository,
    never through a link the repository holds."""
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE_REPOSITORY, repo, ignore=shutil.ignore_patterns(".tritonkit",
                                                                             "__pycache__"))
    real = repo / "example" / "1" / "model.py"
    shutil.move(real, repo / "example" / "code.py")
    real.symlink_to(Path("..") / "code.py")
    assert _deploy(repo) == 0, capsys.readouterr().err
    try:
        link = state_dir(repo) / "local" / "example" / "1" / "model.py"
        assert os.readlink(link) == str((repo / "example" / "code.py").resolve())
    finally:
        assert run_cli("down", "--repository", repo) == 0


def test_a_file_swapped_after_it_was_checked_is_refused_not_mirrored(tmp_path):
    """The mirror links the file it checked: one put in its place in between (a link out of
    the repository, say) is found by its inode and refused, nothing left in the mirror."""
    from tritonkit.errors import UsageError
    from tritonkit.fileio import OwnedFolder

    checked, swapped = tmp_path / "model.onnx", tmp_path / "passwd"
    checked.write_bytes(b"graph")
    swapped.write_text("root:x:0:0\n")
    with OwnedFolder(tmp_path, "mirror", create=True) as mirror:
        with pytest.raises(UsageError, match="changed while it was mirrored"):
            mirror.link_file("model.onnx", swapped, os.stat(checked))
    assert list((tmp_path / "mirror").iterdir()) == []
    assert swapped.stat().st_nlink == 1
