"""Triton imports a python-backend model's file once more per load, in a stub of its own, to
auto-complete its config: the ONNX Runtime adapter's import there costs no ONNX Runtime."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT
from tritonkit.server.binary import find_install

ADAPTER = ROOT / "tritonkit" / "server" / "onnx_adapter.py"


def test_importing_the_adapter_as_the_auto_complete_stub_does_loads_no_onnx_runtime(tmp_path):
    probe = ("import runpy, sys\n"
             f"runpy.run_path({str(ADAPTER)!r})\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'onnxruntime'))\n")
    env = {**os.environ, "PYTHONPATH": str(find_install().python_backend)}   # pb_utils, as a stub has it
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"
