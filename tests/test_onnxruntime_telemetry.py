"""ONNX Runtime 1.29+ on Linux records each session it opens in a database under
~/.cache/Microsoft/DeveloperTools. What tritonkit runs with it (export's verification, the
local server's ONNX adapter) leaves nothing there, unless the user set
ORT_DISABLE_TELEMETRY themselves."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tritonkit.extras import ORT_TELEMETRY_ENV

# Opens a session the way export's verification does, in a process whose HOME is a test's.
SESSION = """
import onnx
from onnx import TensorProto, helper
import tritonkit.export
from tritonkit.export.verify import open_session

graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "m.onnx")
open_session(__import__("pathlib").Path("m.onnx"))
"""


def _written_under_home(tmp_path, **env) -> list[str]:
    """Runs SESSION as a user at a desk would: ONNX Runtime records nothing where it sees a CI
    service's variable (CI, GITHUB_ACTIONS, JENKINS_URL, ...) and writes under XDG_CACHE_HOME
    when set, so the process gets a bare environment, not the one the suite runs in."""
    home = tmp_path / "home"
    home.mkdir()
    bare = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}
    subprocess.run([sys.executable, "-c", SESSION], cwd=tmp_path, check=True, timeout=120,
                   env={**bare, **env})
    return sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())


@pytest.mark.slow                       # a subprocess that imports torch
def test_export_verification_leaves_no_onnxruntime_record_in_home(tmp_path):
    assert _written_under_home(tmp_path) == []


@pytest.mark.slow
def test_a_users_own_setting_stands(tmp_path):
    """The control: with telemetry left on by the user, the same session is recorded."""
    written = _written_under_home(tmp_path, **{ORT_TELEMETRY_ENV: "0"})
    assert any(p.endswith("onnxruntime.db") for p in written), written


def test_the_local_servers_stubs_run_with_it_off_unless_the_user_says_otherwise(monkeypatch):
    from tritonkit.errors import TritonkitError
    from tritonkit.server.binary import find_install, server_environment

    try:
        install = find_install()
    except TritonkitError as exc:
        pytest.fail(f"the embedded server is part of the dev install: {exc}")
    monkeypatch.delenv(ORT_TELEMETRY_ENV, raising=False)
    assert server_environment(install)[ORT_TELEMETRY_ENV] == "1"
    monkeypatch.setenv(ORT_TELEMETRY_ENV, "0")
    assert server_environment(install)[ORT_TELEMETRY_ENV] == "0"
