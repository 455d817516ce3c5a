"""The user's code (the SPEC's file, its factory, the model's forward()) ending the run
itself — sys.exit(), its own KeyboardInterrupt, GeneratorExit, any BaseException — is a
failed export (exit 1) naming that code, never the code's own exit status or a Ctrl-C.
A real SIGINT meanwhile stays a Ctrl-C (130)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

import tritonkit
from tests.conftest import run_cli
from tritonkit.errors import EXIT_ERROR, EXIT_INTERRUPTED, UserCodeError

# Each way of ending a plain Python program from inside a function, as its statement.
ENDINGS = {
    "sys.exit(0)": ("import sys; sys.exit(0)", "called sys.exit(0)"),
    "sys.exit(3)": ("import sys; sys.exit(3)", "called sys.exit(3)"),
    "SystemExit(msg)": ("raise SystemExit('bye')", "called sys.exit('bye')"),
    "sys.exit()": ("import sys; sys.exit()", "called sys.exit()"),
    "KeyboardInterrupt": ("raise KeyboardInterrupt", "raised KeyboardInterrupt itself"),
    "GeneratorExit": ("raise GeneratorExit", "raised GeneratorExit"),
    "BaseException": ("raise type('Stop', (BaseException,), {})('enough')",
                      "raised Stop (enough)"),
}

# A model whose forward() runs the ending in one phase of the export only: on the example
# inputs, while an exporter traces it, or at batch 1 (verification; the example is 4).
MODELS = '''
import torch

ENDING = {ending!r}


def _end():
    exec(ENDING)


class Ends(torch.nn.Module):
    def __init__(self, phase):
        super().__init__()
        self.phase = phase
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x):
        tracing = torch.jit.is_tracing() or torch.compiler.is_exporting()
        if (self.phase == "example" and not tracing and x.shape[0] == 4
                or self.phase == "export" and tracing
                or self.phase == "verify" and not tracing and x.shape[0] == 1):
            _end()
        return self.linear(x)


class EndsInTrain(torch.nn.Module):
    """Ends in train(False), which model.eval() calls: the model's code outside forward()."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def train(self, mode=True):
        if not mode:
            _end()
        return super().train(mode)

    def forward(self, x):
        return self.linear(x)


def factory():
    _end()


def on_example():
    return Ends("example"), torch.randn(4, 4)


def on_export():
    return Ends("export"), torch.randn(4, 4)


def on_verify():
    return Ends("verify"), torch.randn(4, 4)


def in_train():
    return EndsInTrain(), torch.randn(4, 4)
'''


def write_models(folder: Path, ending: str) -> Path:
    path = folder / "ending_models.py"
    path.write_text(MODELS.format(ending=ENDINGS[ending][0]))
    return path


def export_ends(capsys, tmp_path: Path, spec: str) -> tuple[int, str, str]:
    """Run an export the user's code ends; return its code, error line and hint line, having
    checked there is one of each, no traceback, and no repository made."""
    repository = tmp_path / "repo"
    code = run_cli("export", spec, "--name", "m", "--repository", repository)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert "Traceback" not in captured.err
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: "), \
        captured.err
    assert not repository.exists()
    return code, lines[0], lines[1]


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_a_factory_that_ends_the_run_is_a_failed_export_naming_the_factory(
        capsys, tmp_path, ending):
    models = write_models(tmp_path, ending)
    code, error, hint = export_ends(capsys, tmp_path, f"{models}:factory")
    assert code == EXIT_ERROR
    assert f"the factory {models}:factory {ENDINGS[ending][1]}" in error
    assert "nothing was exported" in error
    assert "factory returns (module, example_inputs" in hint


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_a_forward_that_ends_the_run_on_the_example_is_a_failed_export_naming_forward(
        capsys, tmp_path, ending):
    models = write_models(tmp_path, ending)
    code, error, hint = export_ends(capsys, tmp_path, f"{models}:on_example")
    assert code == EXIT_ERROR
    assert f"the model's forward() on the example inputs {ENDINGS[ending][1]}" in error
    assert "forward() returns" in hint


@pytest.mark.parametrize("ending", ["sys.exit(0)", "KeyboardInterrupt"])
def test_a_forward_that_ends_the_run_while_traced_stops_the_export_without_another_exporter(
        capsys, tmp_path, ending):
    models = write_models(tmp_path, ending)
    code, error, hint = export_ends(capsys, tmp_path, f"{models}:on_export")
    assert code == EXIT_ERROR
    assert f"the model's forward() (traced by the dynamo exporter) {ENDINGS[ending][1]}" in error
    assert "torchscript" not in error + hint      # the next exporter runs the same code


@pytest.mark.parametrize("ending", ["sys.exit(3)", "GeneratorExit"])
def test_a_forward_that_ends_the_run_during_verification_names_the_case(
        capsys, tmp_path, ending):
    models = write_models(tmp_path, ending)
    code, error, _ = export_ends(capsys, tmp_path, f"{models}:on_verify")
    assert code == EXIT_ERROR
    assert f"the model's forward() at batch 1 {ENDINGS[ending][1]}" in error


def test_the_models_code_outside_forward_is_inside_the_boundary(capsys, tmp_path):
    models = write_models(tmp_path, "sys.exit(0)")
    code, error, _ = export_ends(capsys, tmp_path, f"{models}:in_train")
    assert code == EXIT_ERROR
    assert "the model's code called sys.exit(0)" in error


@pytest.mark.parametrize("ending", ["sys.exit(0)", "KeyboardInterrupt"])
def test_a_file_that_ends_the_run_while_imported_names_the_import(capsys, tmp_path, ending):
    models = tmp_path / "script.py"
    models.write_text(ENDINGS[ending][0] + "\n")
    code, error, hint = export_ends(capsys, tmp_path, f"{models}:build")
    assert code == EXIT_ERROR
    assert f"importing {models} {ENDINGS[ending][1]}" in error
    assert 'if __name__ == "__main__"' in hint


def test_a_module_spec_that_ends_the_run_while_imported_names_the_import(
        capsys, tmp_path, monkeypatch):
    (tmp_path / "exiting_model_module.py").write_text("import sys\nsys.exit(5)\n")
    monkeypatch.chdir(tmp_path)
    code, error, _ = export_ends(capsys, tmp_path, "exiting_model_module:build")
    assert code == EXIT_ERROR
    assert "importing exiting_model_module called sys.exit(5)" in error


def test_a_real_ctrl_c_during_forward_is_still_an_interrupt(capsys, tmp_path, default_sigint):
    """The SIGINT reaches us while forward() runs (as a Ctrl-C would): 130, not the model's
    fault."""
    models = write_models(tmp_path, "BaseException")
    models.write_text(models.read_text().replace(
        "exec(ENDING)", "import os, signal; os.kill(os.getpid(), signal.SIGINT)"))
    code = run_cli("export", f"{models}:on_verify", "--name", "m",
                   "--repository", tmp_path / "repo")
    err = capsys.readouterr().err
    assert code == EXIT_INTERRUPTED
    assert err.strip() == "error: interrupted"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_python_api_raises_user_code_error(tmp_path):
    class Exits(torch.nn.Module):
        def forward(self, x):
            raise SystemExit(0)

    with pytest.raises(UserCodeError, match=r"forward\(\) on the example inputs called "
                                            r"sys.exit\(0\)"):
        tritonkit.export(Exits(), torch.randn(2, 4), name="m", repository=tmp_path / "repo")
    assert not (tmp_path / "repo").exists()


FACTORY_THAT_MOVES = '''
import inspect
import os
import signal
import sys

import torch


def build():
    os.chdir({elsewhere!r})
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.umask(0o777)
    sys.setrecursionlimit(len(inspect.stack(0)) + 40)     # enough to return, not to export
    sys.stdout = None
    return torch.nn.Linear(4, 2), torch.randn(2, 4)


def closes():
    sys.stdout.close()
    sys.stderr.close()
    return torch.nn.Linear(4, 2), torch.randn(2, 4)
'''


def test_a_factory_cannot_change_what_the_export_runs_on(capsys, tmp_path, monkeypatch,
                                                        default_sigint):
    """A relative --repository is where the user ran the export from, whatever folder the
    factory went to; a Ctrl-C still interrupts after a factory that ignored it; the files
    are written with the user's umask, not the factory's; the export still says what it
    wrote, where the factory took stdout away."""
    import sys

    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    (here / "moving.py").write_text(FACTORY_THAT_MOVES.format(elsewhere=str(elsewhere)))
    monkeypatch.chdir(here)
    limit = sys.getrecursionlimit()
    code = run_cli("export", "moving.py:build", "--name", "m", "--repository", "repo",
                   "--no-verify")
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "exported m to repo/m" in captured.out
    model = here / "repo" / "m" / "1" / "model.onnx"
    assert model.is_file() and os.access(model, os.R_OK) and model.stat().st_mode & 0o444
    assert not (elsewhere / "repo").exists()
    assert Path(os.getcwd()) == here
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert sys.getrecursionlimit() == limit


def test_a_factory_that_closes_stdout_and_stderr_still_gets_the_exports_lines(tmp_path):
    import subprocess
    import sys

    (tmp_path / "moving.py").write_text(FACTORY_THAT_MOVES.format(elsewhere=str(tmp_path)))
    done = subprocess.run([sys.executable, "-m", "tritonkit", "export", "moving.py:closes",
                           "--name", "m", "--repository", "repo", "--no-verify"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "exported m to repo/m" in done.stdout
    assert "internal error" not in done.stderr
