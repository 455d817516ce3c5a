"""Every file tritonkit reads from a user's path is a regular file, read with a size bound:
a folder, a FIFO nobody writes (a plain open waits for ever), a device (/dev/zero is read
without end) or a file past the bound is bad input, said in one line that names it (exit 2),
at once. The issue's cases: `diagnose /dev/zero` ran until killed, `diagnose FIFO` blocked
for ever."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from tests import onnx_graphs
from tests.conftest import run_cli
from tritonkit.model_config import configure

pytestmark = pytest.mark.timeout(300)    # a read that blocks fails the test, not the suite

KINDS = ("folder", "fifo", "device", "oversized")
SAID = {"folder": "is a folder",
        "fifo": "is a named pipe (FIFO), not a regular file",
        "device": "is a character device, not a regular file",
        "oversized": "more than the"}


def hostile(path: Path, kind: str, oversize: int) -> Path:
    """Make ``path`` a folder, a FIFO with no writer, a link to /dev/zero, or a sparse file
    of ``oversize`` bytes (no disk used); the path to give the command."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    else:
        with open(path, "wb") as fh:
            fh.truncate(oversize)
    return path


def refused_at_once(capsys, started: float, path: Path, kind: str, code: int = 2) -> str:
    assert time.monotonic() - started < 60
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert lines and lines[0].startswith("error: ") and "Traceback" not in err, err
    assert str(path) in lines[0] and SAID[kind] in lines[0], err
    return lines[0]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reader", ["diagnose", "thresholds", "server-config", "gpu-profile"])
def test_a_file_given_by_flag_that_is_no_regular_file_is_refused_at_once(
        tmp_path, capsys, example_repository, reader, kind):
    sizes = {"diagnose": 3 << 30, "thresholds": 2 << 20, "server-config": 2 << 20,
             "gpu-profile": 2 << 20}
    path = hostile(tmp_path / "given" / ("rec.csv" if reader == "diagnose" else "x.toml"),
                   kind, sizes[reader])
    args = {"diagnose": ("diagnose", path),
            "thresholds": ("monitor", "--once", "--thresholds", path),
            "server-config": ("deploy", "--repository", example_repository, "--server-config",
                              path, "--no-warmup"),
            "gpu-profile": ("deploy", "--repository", example_repository, "--gpu", path,
                            "--no-warmup")}[reader]
    started = time.monotonic()
    assert run_cli(*args) == 2
    refused_at_once(capsys, started, path, kind)


@pytest.fixture
def onnx_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    onnx_graphs.mlp(repo / "mlp")
    configure(repo, "mlp", gpu="a10")
    return repo


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("what", ["config.pbtxt", "export-report.json"])
def test_a_models_config_or_report_that_is_no_regular_file_is_refused_at_once(
        onnx_repo, capsys, what, kind):
    path = onnx_repo / "mlp" / what
    path.unlink(missing_ok=True)
    hostile(path, kind, 32 << 20)
    args = ("config", "mlp", "--repository", onnx_repo) + (
        ("--check",) if what == "config.pbtxt" else ("--force",))
    started = time.monotonic()
    assert run_cli(*args) == 2
    refused_at_once(capsys, started, path, kind)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_the_model_file_doctor_reads_is_never_opened_to_wait(onnx_repo, capsys, kind):
    model = onnx_repo / "mlp" / "1" / "model.onnx"
    model.unlink()
    hostile(model, kind, 0)
    started = time.monotonic()
    assert run_cli("doctor", "--repository", onnx_repo, "--host", "127.0.0.1",
                   "--http-port", "1", "--grpc-port", "2", "--metrics-port", "3") == 1
    assert time.monotonic() - started < 60
    out = " ".join(capsys.readouterr().out.split())
    assert f"{model} cannot be read as ONNX: it {SAID[kind]}" in out


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_the_model_file_config_reads_is_checked_before_onnx_opens_it(onnx_repo, capsys, kind):
    model = onnx_repo / "mlp" / "1" / "model.onnx"
    model.unlink()
    hostile(model, kind, 0)
    started = time.monotonic()
    assert run_cli("config", "mlp", "--repository", onnx_repo, "--force") == 2
    refused_at_once(capsys, started, model, kind)


@pytest.mark.parametrize("kind", ["folder", "fifo", "device"])
def test_a_gitignore_beside_the_compose_files_that_is_no_file_is_refused(
        example_repository, tmp_path, capsys, kind):
    out = tmp_path / "docker"
    gitignore = hostile(out / ".gitignore", kind, 0)
    started = time.monotonic()
    assert run_cli("deploy", "--target", "compose", "--gpu", "a10", "--repository",
                   example_repository, "--out", out, "--no-up") == 2
    refused_at_once(capsys, started, gitignore, kind)


@pytest.mark.parametrize("kind", ["folder", "fifo", "device"])
def test_a_compose_file_in_the_way_that_is_no_file_is_named_not_opened(
        example_repository, tmp_path, capsys, kind):
    """Whether a rerun may replace docker-compose.yml is read from it: a FIFO there was
    opened to wait."""
    out = tmp_path / "docker"
    compose_file = hostile(out / "docker-compose.yml", kind, 0)
    started = time.monotonic()
    assert run_cli("deploy", "--target", "compose", "--gpu", "a10", "--repository",
                   example_repository, "--out", out, "--no-up") == 2
    assert time.monotonic() - started < 60
    error = capsys.readouterr().err.splitlines()[0]
    assert f"{compose_file} already exists and cannot be read" in error
    assert SAID[kind] in error


def test_input_data_that_is_no_regular_file_is_refused_at_once(deployed, tmp_path, capsys):
    """Read once the model's inputs are known, from the running server."""
    for kind in KINDS:
        path = hostile(tmp_path / kind / "data.json", kind, 3 << 30)
        started = time.monotonic()
        assert run_cli("loadtest", "--repository", deployed.repository, "--model", "example",
                       "--concurrency", "1", "--duration", "1", "--input-data", path) == 2
        refused_at_once(capsys, started, path, kind)
        if kind == "folder":
            shutil.rmtree(path)


def test_an_npz_that_inflates_past_the_bound_is_refused_before_it_is_read(
        deployed, tmp_path, capsys, monkeypatch):
    """A few KB of compressed zeros can declare gigabytes: the arrays' declared sizes are
    bounded, not only the file's (here the bound lowered to 1 MiB, so the bomb is small)."""
    import numpy as np

    from tritonkit.loadtest import _inputs

    monkeypatch.setattr(_inputs, "INPUT_DATA_MAX_BYTES", 1 << 20)
    path = tmp_path / "bomb.npz"
    np.savez_compressed(path, INPUT__0=np.zeros((1 << 20) // 4 + 1, np.float32))
    assert path.stat().st_size < 16 << 10
    assert run_cli("loadtest", "--repository", deployed.repository, "--model", "example",
                   "--concurrency", "1", "--duration", "1", "--input-data", path) == 2
    assert "GiB of arrays once decompressed, more than the" in capsys.readouterr().err
