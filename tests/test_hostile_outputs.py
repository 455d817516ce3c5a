"""`--force` replaces a file, never a pipe or a device: an output path that is a FIFO, a
device, a socket or a link to one is refused (exit 2) in one line naming it, with or
without --force. The second adversarial pass found `loadtest --json /dev/full --force`
(run as root) putting a regular file in place of /dev/full, `--json /dev/stdout --force`
would have replaced that link, and `monitor --csv FIFO --force` waiting for a reader.
A link that leads nowhere is a file of the user's too: kept unless --force. A monitor
CSV replaced with --force replaces a link rather than writing into its target, and a
write the disk refuses is said naming the file, not as an internal error."""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tritonkit.errors import UsageError
from tritonkit.fileio import atomic_write, check_output

KINDS = ("fifo", "device", "socket", "link-to-device")


def special(path: Path, kind: str) -> Path:
    """Make ``path`` a FIFO, a link to /dev/null (a character device), or a Unix socket."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    else:
        path.symlink_to("/dev/null")
    return path


def _refused(capsys, path: Path) -> str:
    err = capsys.readouterr().err
    first = err.strip().splitlines()[0]
    assert first.startswith("error: ") and str(path) in first, err
    assert "not a file tritonkit may replace" in first and "Traceback" not in err, err
    return first


@pytest.mark.parametrize("kind", KINDS)
def test_force_does_not_replace_a_pipe_a_device_or_a_socket(tmp_path, kind):
    path = special(tmp_path / "out.json", kind)
    before = os.lstat(path)
    for force in (False, True):
        with pytest.raises(UsageError):
            check_output(path, force=force, what="--json file", suffix=".json")
    with pytest.raises(UsageError, match="not a file tritonkit may replace"):
        atomic_write(path, "{}")
    after = os.lstat(path)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]   # no temporary left


def test_doctor_json_on_a_device_with_force_is_refused_before_the_checks(
        tmp_path, capsys, example_repository):
    path = special(tmp_path / "report.json", "link-to-device")
    code = run_cli("doctor", "--gpu", "p100", "--repository", example_repository,
                   "--json", path, "--force")
    assert code == 2
    _refused(capsys, path)
    assert os.readlink(path) == "/dev/null"


def test_config_force_does_not_replace_a_config_that_is_a_fifo(tmp_path, capsys, exported_mlp):
    repository = tmp_path / "repo"
    model = exported_mlp(repository)
    config = model / "config.pbtxt"
    config.unlink()
    os.mkfifo(config)
    assert run_cli("config", model.name, "--repository", repository, "--force") == 2
    err = capsys.readouterr().err
    assert str(config) in err.splitlines()[0] and "Traceback" not in err, err
    assert os.path.exists(config) and not config.is_file()


def test_a_link_that_leads_nowhere_is_kept_without_force(tmp_path):
    path = tmp_path / "out.json"
    path.symlink_to(tmp_path / "nowhere.json")
    with pytest.raises(UsageError, match="already exists"):
        check_output(path, force=False, what="--json file", suffix=".json")
    check_output(path, force=True, what="--json file", suffix=".json")


def test_monitor_csv_with_force_replaces_a_link_not_its_target(tmp_path):
    from tritonkit.monitor.recording import CsvRecorder

    target = tmp_path / "elsewhere.txt"
    target.write_text("the user's text\n")
    path = tmp_path / "rec.csv"
    path.symlink_to(target)
    with CsvRecorder(path, force=True):
        pass
    assert target.read_text() == "the user's text\n"
    assert not path.is_symlink() and path.read_text().startswith("timestamp")


def test_monitor_csv_a_full_disk_is_said_naming_the_file(tmp_path):
    """A file-size limit makes the disk refuse the write (EFBIG) as a full one would."""
    path = tmp_path / "rec.csv"
    script = f"""
import sys
from tritonkit.cli import _print_error
from tritonkit.errors import TritonkitError
from tritonkit.monitor.recording import CsvRecorder, rows_for
try:
    with CsvRecorder({str(path)!r}) as rec:
        for i in range(10000):
            rec.write(rows_for(0.0, float(i), [], None))
except TritonkitError as exc:
    _print_error(exc.message, exc.hint)
    sys.exit(exc.exit_code)
"""

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          preexec_fn=small_files, timeout=120)
    assert done.returncode == 1, done.stderr
    first = done.stderr.strip().splitlines()[0]
    assert first.startswith(f"error: could not write the monitor CSV {path}"), done.stderr
    assert "Traceback" not in done.stderr and path.stat().st_size <= 4096
