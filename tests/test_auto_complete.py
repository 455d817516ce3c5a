"""Which deployments the local server starts without Triton's auto-complete: none of whose
models may complete its own config (``local_repository.completes_a_config``), read from
the mirror the server reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonkit.server.local_repository import ADAPTER, MODEL_PY_MAX_BYTES, completes_a_config

PLAIN = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return []
"""
CONFIG = 'backend: "python"\nmax_batch_size: 8\n'


def _model(mirror: Path, name: str, config: str | None = CONFIG, model_py: str | None = PLAIN,
           version: str = "1") -> Path:
    folder = mirror / name
    (folder / version).mkdir(parents=True, exist_ok=True)
    if config is not None:
        (folder / "config.pbtxt").write_text(f'name: "{name}"\n{config}')
    if model_py is not None:
        (folder / version / "model.py").write_text(model_py)
    return folder


def test_the_adapters_models_and_plain_python_models_have_nothing_to_complete(tmp_path):
    _model(tmp_path, "exported", model_py=ADAPTER.read_text())
    _model(tmp_path, "plain")
    _model(tmp_path, "ensemble", 'platform: "ensemble"\n', model_py=None)
    assert not completes_a_config(tmp_path, ["exported", "plain", "ensemble"])


@pytest.mark.parametrize("model_py", [
    PLAIN.replace("    def execute", "    @staticmethod\n    def auto_complete_config(c):\n"
                                    "        return c\n\n    def execute"),
    PLAIN.replace("class TritonPythonModel:", "class TritonPythonModel(Base):"),
    PLAIN.replace("class TritonPythonModel:", "class TritonPythonModel(metaclass=Meta):"),
    PLAIN.replace("class TritonPythonModel:", "@register\nclass TritonPythonModel:"),
    "from base import *\n" + PLAIN,
    PLAIN + "\nTritonPythonModel = other\n",
    "from base import Model as TritonPythonModel\n",
    PLAIN + "\nsetattr(TritonPythonModel, 'auto_complete_config', f)\n",
    PLAIN + "\nif True:\n    (TritonPythonModel, x) = (a, b)\n",
    "class TritonPythonModel:\n    def execute(self\n",           # Triton names the error
    "# -*- coding: latin-1 -*-\n# caf\xe9\n" + PLAIN,                # not UTF-8
], ids=["defines it", "base class", "metaclass", "decorator", "import *", "rebound", "imported",
        "set later", "rebound nested", "syntax error", "encoded"])
def test_a_python_model_that_may_complete_its_config_keeps_auto_complete(tmp_path, model_py):
    _model(tmp_path, "plain")
    folder = _model(tmp_path, "maybe", model_py=None)
    (folder / "1" / "model.py").write_bytes(model_py.encode("latin-1"))
    assert completes_a_config(tmp_path, ["plain", "maybe"])
    assert not completes_a_config(tmp_path, ["plain"])


def test_any_version_or_model_file_the_config_names_counts(tmp_path):
    folder = _model(tmp_path, "versions")
    _model(tmp_path, "versions", model_py="class TritonPythonModel(Base): pass\n", version="2")
    assert completes_a_config(tmp_path, ["versions"])
    _model(tmp_path, "named", CONFIG + 'default_model_filename: "serve.py"\n')
    (tmp_path / "named" / "1" / "serve.py").write_text("from base import *\n")
    assert completes_a_config(tmp_path, ["named"])
    assert folder.exists()


@pytest.mark.parametrize("config", [
    None,                                              # Triton makes it from model.py
    'backend: "onnxruntime"\n',                         # not the python backend's
    CONFIG + 'runtime: "custom.py"\n',                  # a python-based backend's model.py
    "max_batch_size: oops\n",                           # Triton names the error
], ids=["no config", "another backend", "runtime", "unreadable config"])
def test_a_model_without_a_plain_python_config_keeps_auto_complete(tmp_path, config):
    _model(tmp_path, "model", config)
    assert completes_a_config(tmp_path, ["model"])


def test_a_model_file_over_the_bound_is_not_read_and_keeps_auto_complete(tmp_path):
    _model(tmp_path, "large", model_py=PLAIN + "#" * MODEL_PY_MAX_BYTES)
    assert completes_a_config(tmp_path, ["large"])
