"""Shared fixtures: a copy of a model repository, and the real local tritonserver on free ports."""

from __future__ import annotations

import importlib.util
import shutil
import signal
from pathlib import Path

import pytest

from tritonkit.cli import main
from tritonkit.server.state import load_deployment

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_REPOSITORY = ROOT / "model_repository"


def default_signals() -> None:
    """For a child the tests signal (``preexec_fn``): Ctrl-C, SIGTERM and SIGHUP at their
    defaults, as a terminal starts a command. A suite run in the background (``&``,
    ``nohup``) would hand it ignored ones, which a command rightly keeps ignoring."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


@pytest.fixture
def default_sigint():
    """The test process's own Ctrl-C handling as Python sets it up in a terminal."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def run_cli(*args: str) -> int:
    """Run the tritonkit CLI in-process and return its exit code."""
    return main([str(a) for a in args])


@pytest.fixture
def example_repository(tmp_path: Path) -> Path:
    """A private copy of model_repository/ (without any deployment state)."""
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE_REPOSITORY, repo, ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    return repo


@pytest.fixture
def deployed(example_repository: Path):
    """The real embedded Triton serving the example repository on free loopback ports."""
    code = run_cli("deploy", "--repository", example_repository, "--http-port", "0",
                   "--grpc-port", "0", "--metrics-port", "0", "--timeout", "60")
    assert code == 0, "tritonkit deploy failed"
    deployment = load_deployment(example_repository)
    yield deployment
    run_cli("down", "--repository", example_repository)


def add_broken_model(repository: Path, name: str = "broken") -> Path:
    """A python-backend model whose model.py raises on import ('weights file is corrupt')."""
    broken = repository / name
    (broken / "1").mkdir(parents=True)
    (broken / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        'input { name: "X" data_type: TYPE_FP32 dims: 1 }\n'
        'output { name: "Y" data_type: TYPE_FP32 dims: 1 }\n')
    (broken / "1" / "model.py").write_text("raise RuntimeError('weights file is corrupt')\n")
    return broken


def load_example_forward():
    """The example model's own forward function, imported from its model.py."""
    path = EXAMPLE_REPOSITORY / "example" / "1" / "model.py"
    spec = importlib.util.spec_from_file_location("example_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.forward


def add_python_model(repository: Path, name: str, config: str, model_py: str) -> Path:
    """A python-backend model ``name``: ``config`` is its config.pbtxt after the name and
    backend lines, ``model_py`` its 1/model.py."""
    model = repository / name
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n' + config)
    (model / "1" / "model.py").write_text(model_py)
    return model


def echo_model(*, initialize: str = "pass", execute: str = "pass") -> str:
    """A python-backend model.py that answers OUTPUT__0 = INPUT__0, running the Python
    statements ``initialize`` (one line or several, unindented) in initialize and
    ``execute`` in execute, before it answers."""
    import textwrap

    return f"""import os, signal, sys, time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
{textwrap.indent(initialize, " " * 8)}

    def execute(self, requests):
{textwrap.indent(execute, " " * 8)}
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT__0", pb_utils.get_input_tensor_by_name(r, "INPUT__0").as_numpy())])
                for r in requests]
"""


ECHO_CONFIG = ('max_batch_size: 8\n'
               'input { name: "INPUT__0" data_type: TYPE_FP32 dims: 4 }\n'
               'output { name: "OUTPUT__0" data_type: TYPE_FP32 dims: 4 }\n')

