"""SIGTERM or SIGHUP ends an export as Ctrl-C does: one line naming the signal, exit 128 +
the signal, and nothing left in the repository. The second adversarial pass found both
ending it silently and leaving its staging folder (``.NAME.export-*``, which holds the
model's files once written) behind."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import default_signals

pytestmark = pytest.mark.timeout(180)

FACTORY = '''
import pathlib, time, torch
def build():
    pathlib.Path({ready!r}).touch()
    time.sleep(120)
    return torch.nn.Linear(4, 2), torch.randn(2, 4)
'''


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_during_the_factory_ends_the_export_and_leaves_nothing(tmp_path, signum):
    ready = tmp_path / "in-factory"
    spec = tmp_path / "slow.py"
    spec.write_text(FACTORY.format(ready=str(ready)))
    repository = tmp_path / "repo"
    proc = subprocess.Popen([sys.executable, "-m", "tritonkit", "export", f"{spec}:build",
                             "--name", "slow", "--repository", str(repository)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)
    deadline = time.monotonic() + 120
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), proc.communicate()
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, err
    said = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    assert err.strip().splitlines()[-1] == f"error: {said}", err
    assert "Traceback" not in err and "nothing was exported" not in err, err
    assert not repository.exists() or list(repository.iterdir()) == [], list(repository.iterdir())
