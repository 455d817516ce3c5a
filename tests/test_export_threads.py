"""The verification's runtimes wait for work asleep, not spinning on a core the other needs.

PyTorch's OpenMP threads read OMP_WAIT_POLICY once, when torch loads: `tritonkit export`
sets it to PASSIVE before that, unless the user set it. ONNX Runtime's session is told
the same per session. (bench/bench_export_speed.py measures what it buys.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

FACTORY = '''
import os
from pathlib import Path

import torch


def build():
    Path(os.environ["SEEN_AT"]).write_text(os.environ.get("OMP_WAIT_POLICY", "unset"))
    return torch.nn.Linear(4, 2).eval(), torch.randn(2, 4)
'''


@pytest.mark.slow
@pytest.mark.parametrize("given,seen", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")],
                         ids=["set by export", "the user's kept"])
def test_export_runs_pytorch_with_passive_openmp_waits_unless_told_otherwise(tmp_path, given,
                                                                             seen):
    (tmp_path / "model.py").write_text(FACTORY)
    env = {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}
    env |= {"SEEN_AT": str(tmp_path / "seen"), **({"OMP_WAIT_POLICY": given} if given else {})}
    done = subprocess.run([sys.executable, "-m", "tritonkit", "export",
                           f"{tmp_path / 'model.py'}:build", "--name", "m",
                           "--repository", str(tmp_path / "repo"), "--exporter", "torchscript",
                           "--max-batch-size", "2"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "seen").read_text() == seen


def test_the_verification_session_does_not_spin(tmp_path):
    import torch

    from tritonkit.export.verify import open_session

    path = Path(tmp_path / "m.onnx")
    torch.onnx.export(torch.nn.Linear(4, 2), (torch.randn(2, 4),), str(path), dynamo=False)
    options = open_session(path).get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
