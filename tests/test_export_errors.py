"""tritonkit export on bad input: one line naming the cause, a non-zero exit, no traceback,
and the repository exactly as it was."""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tritonkit.errors import EXIT_ERROR, EXIT_USAGE
from tritonkit.export import onnx_export

MLP = ROOT / "examples" / "mlp.py"

BAD_MODELS = '''
import torch
from torch import nn

NOT_A_FACTORY = 3


class CallCounter(nn.Module):
    """Scales by how often it was called: Python state no tracer can capture."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * self.calls


class FrozenBatch(nn.Module):
    """Scales by the batch size as a Python int: the TorchScript trace keeps the example's."""

    def forward(self, x):
        return x * int(x.shape[0])


class Noisy(nn.Module):
    def forward(self, x):
        return x + torch.rand_like(x)


class NoSingles(nn.Module):
    def forward(self, x):
        if x.shape[0] == 1:
            raise ValueError("a batch of one is not supported")
        return x * 2


def raises():
    raise ValueError("weights file is corrupt")


def returns_a_module():
    return nn.Linear(4, 2)


def returns_a_string_as_inputs():
    return nn.Linear(4, 2), "four floats"


def call_counter():
    return CallCounter(), torch.randn(2, 4)


def frozen_batch():
    torch.manual_seed(0)    # torch seeds itself at random: the errors it makes must not vary
    return FrozenBatch(), torch.randn(2, 4)


def noisy():
    return Noisy(), torch.randn(2, 4)


def no_singles():
    return NoSingles(), torch.randn(2, 4)


def traced_in_training():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5))
    return torch.jit.trace(model, torch.randn(2, 4)).eval(), torch.randn(2, 4)


class LstmState(nn.Module):
    """Returns the LSTM's final hidden state as it comes: [layers, batch, hidden]."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 6, batch_first=True)

    def forward(self, x):
        out, (hidden, _) = self.lstm(x)
        return out, hidden


class SumOverBatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x).sum(0)


class FlattenedBatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x).view(1, -1)


class CentredOnTheBatch(nn.Module):
    """Subtracts the batch's mean: each sample's output depends on the others."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        y = self.linear(x)
        return y - y.mean(0, keepdim=True)


class TimeFirstLstm(nn.Module):
    """nn.LSTM's default layout, [time, batch, features]: its first axis is time."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 6)

    def forward(self, x):
        return self.lstm(x)[0]


class Pooled(nn.Module):
    def forward(self, input_ids, attention_mask):
        return input_ids * attention_mask


class ScaledNoDefault(nn.Module):
    def forward(self, x, *, scale):
        return x * scale


def lstm_state():
    return LstmState(), torch.randn(2, 5, 4)


def sum_over_batch():
    return SumOverBatch(), torch.randn(2, 4)


def flattened_batch():
    return FlattenedBatch(), torch.randn(2, 4)


def centred_on_the_batch():
    return CentredOnTheBatch(), torch.randn(2, 4)


def time_first_lstm():
    return TimeFirstLstm(), torch.randn(5, 3, 4)


def keys_partly_parameters():
    return Pooled(), {"attention_mask": torch.ones(2, 3), "ids": torch.ones(2, 3)}


def keyword_only_without_default():
    return ScaledNoDefault(), torch.randn(2, 4)


def named_x():
    return nn.Linear(4, 4), {"x": torch.randn(2, 4)}


def meta_weights():
    with torch.device("meta"):
        return nn.Linear(4, 4), torch.randn(2, 4)


def meta_inputs():
    return nn.Linear(4, 4), torch.randn(2, 4, device="meta")


class PositionTable(nn.Module):
    """Learned positions for sequences of up to 16 tokens."""

    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(50, 8)
        self.positions = nn.Embedding(16, 8)

    def forward(self, ids):
        return self.tokens(ids) + self.positions(torch.arange(ids.shape[1]))


def position_table():
    return PositionTable(), torch.randint(0, 50, (2, 12)), {"INPUT__0": {1: "sequence"}}


def axes_as_pairs():
    return nn.Linear(4, 4), {"x": torch.randn(2, 3, 4)}, [("x", 1)]


def axes_keyed_by_label():
    return nn.Linear(4, 4), {"x": torch.randn(2, 3, 4)}, {"x": {"sequence": 1}}


class Masked(nn.Module):
    def forward(self, ids, mask):
        return ids * mask


def mask_left_fixed():
    ids, mask = torch.randint(0, 50, (2, 12)), torch.ones(2, 12, dtype=torch.long)
    return Masked(), {"ids": ids, "mask": mask}, {"ids": {1: "sequence"}}


def empty_batch():
    return nn.Linear(4, 4), torch.randn(0, 4)


def empty_sequence():
    return nn.Embedding(50, 8), torch.zeros(2, 0, dtype=torch.long), {"INPUT__0": {1: "sequence"}}


class Classifier(nn.Module):
    """As a Hugging Face model: given labels, a loss (a scalar) before the logits."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 3)

    def forward(self, x, labels=None):
        logits = self.head(x)
        if labels is None:
            return {"logits": logits}
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


def with_labels():
    return Classifier(), {"x": torch.randn(2, 4), "labels": torch.tensor([0, 2])}


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 1)

    def forward(self, x, target):
        return {"training_loss": ((self.head(x) - target) ** 2).mean()}


def loss_without_labels():
    return Regressor(), {"x": torch.randn(2, 4), "target": torch.randn(2, 1)}
'''

# An operator of its own, with no ONNX translation; a file of its own, as registering it
# twice in one process fails.
UNSUPPORTED_OP = '''
import torch


@torch.library.custom_op("tritonkit_test::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    return x.sin() * 2


@mystery.register_fake
def _(x):
    return torch.empty_like(x)


class Mystery(torch.nn.Module):
    def forward(self, x):
        return mystery(x)


def build():
    return Mystery(), torch.randn(2, 4)
'''


@pytest.fixture(scope="module")
def bad_models(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("specs")
    (folder / "unsupported_op.py").write_text(UNSUPPORTED_OP)
    path = folder / "bad_models.py"
    path.write_text(BAD_MODELS)
    return path


@pytest.fixture
def repository(tmp_path) -> Path:
    """A repository that already holds one model (a file standing in for its graph)."""
    repo = tmp_path / "models"
    (repo / "existing" / "1").mkdir(parents=True)
    (repo / "existing" / "1" / "model.onnx").write_bytes(b"the user's model")
    return repo


def snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` (hidden ones included) with its content's hash."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file()
            else "dir" for p in sorted(folder.rglob("*"))}


def export_fails(capsys, repository: Path, *args) -> tuple[int, str, str]:
    """Run a failing export; check it says one error line (and a hint) and changes nothing.

    Returns the exit code, the error line and the hint line.
    """
    before = snapshot(repository)
    existed = repository.exists()
    code = run_cli("export", *args, "--repository", repository)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code != 0
    assert "Traceback" not in err
    assert len(lines) <= 2 and lines[0].startswith("error: "), err
    assert all(line.startswith(("error: ", "hint: ")) for line in lines), err
    assert repository.exists() == existed
    assert snapshot(repository) == before
    return code, lines[0], lines[1] if len(lines) > 1 else ""


@pytest.mark.parametrize("spec,code,says", [
    ("{dir}/missing.py:build", EXIT_USAGE, "model file {dir}/missing.py does not exist"),
    ("no_such_package.models:build", EXIT_USAGE, "no Python module named 'no_such_package.models'"),
    ("{bad}:nowhere", EXIT_USAGE, "has no factory named 'nowhere'"),
    ("{bad}:NOT_A_FACTORY", EXIT_USAGE, "is a int, not a function"),
    ("{bad}:raises", EXIT_USAGE, "raised ValueError: weights file is corrupt"),
    ("{bad}:returns_a_module", EXIT_USAGE, "returned a torch.nn.modules.linear.Linear, not "
                                          "(module, example_inputs[, dynamic_axes])"),
    ("{bad}:returns_a_string_as_inputs", EXIT_USAGE, "example inputs are a str, not a tensor"),
    ("{dir}/mlp.py", EXIT_USAGE, "is not FILE.py:FACTORY or package.module:FACTORY"),
], ids=["missing file", "missing module", "no such factory", "factory not callable",
        "factory raises", "wrong return type", "inputs not tensors", "no factory named"])
def test_a_bad_spec_is_one_line_naming_the_cause(capsys, repository, bad_models, spec, code, says):
    fill = {"dir": bad_models.parent, "bad": bad_models}
    got, line, _ = export_fails(capsys, repository, spec.format(**fill), "--name", "m")
    assert got == code
    assert says.format(**fill) in line


def test_a_package_module_spec_is_found_in_the_working_folder_and_sys_path_is_left_alone(
        tmp_path, monkeypatch):
    """`tritonkit export examples.mlp:build` from the folder that holds examples/: the console
    script (and `python -m`) do not put the working folder on sys.path, as `python -c` does."""
    import sys

    from tritonkit.export.spec import load_factory

    package = tmp_path / "cwd_models_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tiny.py").write_text(
        "import torch\n\ndef build():\n    return torch.nn.Linear(4, 2), torch.randn(2, 4)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    before = list(sys.path)
    try:
        module, inputs, axes = load_factory("cwd_models_pkg.tiny:build")
    finally:
        for name in ("cwd_models_pkg", "cwd_models_pkg.tiny"):
            sys.modules.pop(name, None)
    assert module.in_features == 4 and tuple(inputs.shape) == (2, 4) and axes is None
    assert sys.path == before


def test_a_files_factory_and_forward_import_its_neighbours_late_as_under_python_file(
        tmp_path, monkeypatch):
    """A factory or a forward() that imports a module beside its file when it runs (not at
    the top) finds it, as `python FILE.py` would; sys.path is left as it was found."""
    import sys

    from tritonkit.export import ExportOptions, export_spec

    folder = tmp_path / "user code"
    folder.mkdir()
    (folder / "layers_late.py").write_text(
        "import torch\n\ndef head():\n    return torch.nn.Linear(4, 2)\n")
    (folder / "scale_late.py").write_text("FACTOR = 2.0\n")
    (folder / "lazy.py").write_text(
        "import torch\n\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self, head):\n"
        "        super().__init__()\n"
        "        self.head = head\n\n"
        "    def forward(self, x):\n"
        "        from scale_late import FACTOR\n"
        "        return self.head(x) * FACTOR\n\n"
        "def build():\n"
        "    from layers_late import head\n"
        "    return Net(head()).eval(), torch.randn(2, 4)\n")
    monkeypatch.chdir(tmp_path)
    before = list(sys.path)
    try:
        result = export_spec(f"{folder / 'lazy.py'}:build",
                             ExportOptions(repository=tmp_path / "repo", name="lazy"))
    finally:
        for name in ("layers_late", "scale_late"):
            sys.modules.pop(name, None)
    worst = result.report["verification"]["max_errors"].values()
    assert worst and all(w["passed"] for w in worst)          # forward() ran, scaled
    assert sys.path == before


def test_an_existing_model_is_not_replaced_without_force(capsys, repository):
    code, line, _ = export_fails(capsys, repository, f"{MLP}:build", "--name", "existing")
    assert code == EXIT_USAGE
    assert line == f"error: model {repository / 'existing'} already exists"


def test_a_model_another_export_moved_in_meanwhile_is_not_replaced_without_force(
        capsys, tmp_path, monkeypatch):
    """Two exports of one name into a shared repository (two CI jobs): each finds the name
    free when it starts, minutes before it moves its folder in. The one that finishes
    second must not replace the first one's model unless told to (--force)."""
    from tritonkit.export import pipeline

    repository = tmp_path / "models"
    target = repository / "mlp"
    configure = pipeline.configure

    def configure_while_another_export_finishes(*args, **kwargs):
        (target / "1").mkdir(parents=True)
        (target / "1" / "model.onnx").write_bytes(b"the other export's model")
        return configure(*args, **kwargs)

    monkeypatch.setattr(pipeline, "configure", configure_while_another_export_finishes)
    code = run_cli("export", f"{MLP}:build", "--name", "mlp", "--repository", repository,
                   "--exporter", "torchscript", "--max-batch-size", "4")
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert err.startswith(f"error: model {target} already exists"), err
    assert "Traceback" not in err
    assert (target / "1" / "model.onnx").read_bytes() == b"the other export's model"
    assert sorted(p.name for p in repository.iterdir()) == ["mlp"], "no staging folder left"


@pytest.mark.slow
def test_an_op_onnx_cannot_express_is_named_after_both_exporters_tried(capsys, repository,
                                                                       bad_models):
    code, line, hint = export_fails(capsys, repository,
                                    f"{bad_models.parent}/unsupported_op.py:build", "--name", "m")
    assert code == EXIT_ERROR
    assert line == "error: dynamo exporter: No ONNX function found for tritonkit_test.mystery.default"
    assert "operator ONNX cannot express" in hint
    assert "also tried torchscript:" in hint and "tritonkit_test::mystery" in hint


def test_out_of_tolerance_names_the_output_and_the_error_and_creates_nothing(
        capsys, tmp_path, bad_models):
    repository = tmp_path / "models"
    code, line, _ = export_fails(capsys, repository, f"{bad_models}:frozen_batch", "--name", "m",
                              "--exporter", "torchscript")
    assert code == EXIT_ERROR
    assert line.startswith("error: torchscript exporter: output OUTPUT__0 differs from PyTorch "
                           "at batch 1")
    assert "max abs error" in line and "max rel error" in line and "atol 0.0001" in line
    assert not repository.exists()


def test_a_failed_export_with_force_keeps_the_model_it_would_have_replaced(
        capsys, repository, bad_models):
    # every version and file of it (export_fails compares the whole repository)
    (repository / "existing" / "7").mkdir()
    (repository / "existing" / "7" / "model.onnx").write_bytes(b"the user's version 7")
    (repository / "existing" / "labels.txt").write_text("cat\ndog\n")
    code, _, _ = export_fails(capsys, repository, f"{bad_models}:frozen_batch", "--name",
                              "existing", "--force", "--exporter", "torchscript")
    assert code == EXIT_ERROR
    assert (repository / "existing" / "1" / "model.onnx").read_bytes() == b"the user's model"


@pytest.mark.slow
@pytest.mark.parametrize("factory,output", [("noisy", "OUTPUT__0"), ("call_counter", "OUTPUT__0")],
                         ids=["random", "state kept between calls"])
def test_a_forward_that_answers_one_input_two_ways_is_called_nondeterministic_not_imprecise(
        capsys, repository, bad_models, factory, output):
    # It was 'differs from PyTorch ... widen --atol/--rtol', after both exporters, though
    # PyTorch differs from itself: no graph can match it, and a wider tolerance hides it.
    code, line, hint = export_fails(capsys, repository, f"{bad_models}:{factory}", "--name", "m")
    assert code == EXIT_USAGE
    assert line.startswith(f"error: forward() is not deterministic: two PyTorch runs on the "
                           f"same inputs differ in output {output} by up to ")
    assert line.endswith(", so no exported graph can match it")
    assert "exporter" not in line + hint and "--atol" not in hint
    assert "--no-verify" in hint


@pytest.mark.slow
def test_a_module_traced_in_train_mode_is_told_to_trace_after_eval(capsys, repository, bad_models):
    """torch.jit.trace freezes dropout into the graph as it ran: .eval() afterwards cannot
    take it out, and the hint says where the randomness came from."""
    code, line, hint = export_fails(capsys, repository, f"{bad_models}:traced_in_training",
                                    "--name", "m")
    assert code == EXIT_USAGE and "not deterministic" in line
    assert "trace it after model.eval()" in hint


def test_a_model_that_fails_at_a_batch_triton_may_send_is_the_users_to_fix(
        capsys, repository, bad_models):
    code, line, hint = export_fails(capsys, repository, f"{bad_models}:no_singles", "--name", "m",
                                    "--exporter", "torchscript")
    assert code == EXIT_USAGE
    assert line == ("error: the model's forward() raised ValueError at batch 1: "
                    "a batch of one is not supported")
    assert "any batch from 1 to --max-batch-size" in hint


def test_a_model_that_fails_at_a_longer_sequence_is_told_the_length_not_the_batch(
        capsys, repository, bad_models):
    code, line, hint = export_fails(capsys, repository, f"{bad_models}:position_table",
                                    "--name", "m", "--exporter", "torchscript",
                                    "--max-batch-size", "8")
    assert code == EXIT_USAGE
    assert line == ("error: the model's forward() raised IndexError at batch 3, sequence 18: "
                    "index out of range in self")
    assert "other sequence lengths than the example's" in hint
    assert "at most two thirds of a longest length" in hint     # 10 of 16 would do
    assert "any batch" not in hint


def test_an_input_as_long_as_a_dynamic_axis_but_left_fixed_is_named_with_its_flag(
        capsys, repository, bad_models):
    """ids declared dynamic, its mask of the same length not: at another length the two no
    longer match, and the hint names the input to declare, not the example's lengths."""
    code, line, hint = export_fails(capsys, repository, f"{bad_models}:mask_left_fixed",
                                    "--name", "m", "--exporter", "torchscript",
                                    "--max-batch-size", "8")
    assert code == EXIT_USAGE and "forward() raised RuntimeError" in line
    assert hint == ("hint: mask's axis 1 is as long as the sequence axis (12) but not dynamic: "
                    "declare it too, e.g. --dynamic-axis mask:1=sequence")


def test_a_tolerance_wide_enough_lets_the_difference_through(tmp_path, bad_models):
    # The frozen batch is off by 30 x at batch 32 (122 at most here): the tolerances the
    # user gives rule.
    code = run_cli("export", f"{bad_models}:frozen_batch", "--name", "m", "--repository",
                   tmp_path, "--exporter", "torchscript", "--atol", "200", "--rtol", "0")
    assert code == 0


def test_bad_flags_are_refused_before_anything_is_loaded(capsys, repository):
    code, line, _ = export_fails(capsys, repository, f"{MLP}:build", "--name", "m",
                              "--format", "savedmodel")
    assert code == EXIT_USAGE and "--format savedmodel" in line
    code, line, _ = export_fails(capsys, repository, f"{MLP}:build", "--name", "../escape")
    assert code == EXIT_USAGE and "not a plain folder name" in line
    code, line, _ = export_fails(capsys, repository, f"{MLP}:build", "--name", "m",
                              "--input-names", "a,b")
    assert code == EXIT_USAGE and "2 input names for 1 inputs" in line


@pytest.mark.parametrize("options,says", [
    ({"atol": -1.0}, "--atol -1.0 is not a tolerance"),
    ({"rtol": float("nan")}, "--rtol nan is not a tolerance"),
    ({"max_batch_size": 2**31}, "--max-batch-size 2147483648 is not from 1 to 2147483647"),
    ({"input_names": [""]}, "input 0 has an empty name"),
    ({"output_names": [""]}, "output 0 has an empty name"),
], ids=["negative atol", "nan rtol", "past int32", "empty input name", "empty output name"])
def test_the_python_api_refuses_what_the_cli_flags_would_before_anything_runs(
        tmp_path, options, says):
    import torch

    from tritonkit.errors import UsageError
    from tritonkit.export import export

    # A negative or NaN tolerance failed every comparison, equal outputs too ("max abs
    # error 0 ... atol -1"); a batch limit past int32 was traced for, then failed the config;
    # an empty name (the CLI drops empty ones) reached the ONNX checker after the export.
    with pytest.raises(UsageError, match=re.escape(says)):
        export(torch.nn.Identity(), torch.randn(4, 3), name="m", repository=tmp_path / "repo",
               **options)
    assert not (tmp_path / "repo").exists()


@pytest.mark.slow
def test_an_opset_neither_exporter_makes_is_refused_not_swapped_for_another(
        capsys, repository, tmp_path):
    # The dynamo exporter kept its opset-18 graph when converting it to 30 failed: the
    # export passed, reporting opset 18, a graph the user's runtime was not asked about.
    # (For a card whose profile does not say what its ONNX Runtime loads: the A10's would
    # refuse opset 30 before any export.)
    unsaid = tmp_path / "card.toml"
    unsaid.write_text("".join(line for line in (ROOT / "configs" / "gpus" / "a10.toml").read_text()
                              .splitlines(keepends=True) if not line.startswith("onnx_max_")))
    code, line, hint = export_fails(capsys, repository, f"{MLP}:build", "--name", "m",
                                    "--opset", "30", "--gpu", str(unsaid))
    assert code == EXIT_ERROR
    assert line == ("error: dynamo exporter: the graph came out at opset 18, its conversion "
                    "to --opset 30 failed")
    assert "also tried torchscript: Unsupported onnx_opset_version: 30" in hint
    assert hint.startswith("hint: choose an --opset the installed exporters take") \
        and "--opset 18" in hint and "TRITONKIT_DEBUG" not in hint


@pytest.mark.parametrize("factory,line,hint", [
    ("with_labels", "error: dynamo exporter: output loss is a scalar: Triton needs the batch as "
                    "its first axis",
     "hint: loss is a training loss, computed because the example inputs give labels: leave it "
     "out of the example (a served model is sent no targets) (also tried torchscript: the same)"),
    ("loss_without_labels", "error: dynamo exporter: output training_loss is a scalar: Triton "
                            "needs the batch as its first axis",
     "hint: training_loss is a training loss: export the model as it serves, without the targets "
     "forward() compares its predictions with (also tried torchscript: the same)"),
], ids=["labels in the example", "a loss of other targets"])
def test_a_loss_among_the_outputs_is_told_to_leave_the_targets_out(capsys, repository, bad_models,
                                                                    factory, line, hint):
    code, said, hinted = export_fails(capsys, repository, f"{bad_models}:{factory}", "--name", "m")
    assert code == EXIT_ERROR
    assert (said, hinted) == (line, hint)


def test_debug_variable_shows_the_traceback(capsys, monkeypatch, repository, bad_models):
    monkeypatch.setenv("TRITONKIT_DEBUG", "1")
    code = run_cli("export", f"{bad_models}:raises", "--name", "m", "--repository", repository)
    assert code == EXIT_USAGE
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.parametrize("factory,output", [
    ("lstm_state", "OUTPUT__1"), ("sum_over_batch", "OUTPUT__0"), ("flattened_batch", "OUTPUT__0"),
], ids=["rnn state [layers, batch, hidden]", "sum over the batch", "flattened batch"])
def test_an_output_whose_first_axis_is_not_the_batch_is_refused_naming_it(
        capsys, repository, bad_models, factory, output):
    # The TorchScript exporter, the fallback, had declared every output's first axis the batch.
    code, line, hint = export_fails(capsys, repository, f"{bad_models}:{factory}", "--name", "m",
                                    "--exporter", "torchscript")
    assert code == EXIT_ERROR
    assert line.startswith(f"error: torchscript exporter: output {output}")
    assert "not the batch" in line
    assert hint == f"hint: {onnx_export.NOT_BATCH_FIRST_HINT}"


@pytest.mark.parametrize("factory", ["centred_on_the_batch", "time_first_lstm"],
                         ids=["statistics over the batch", "rnn reading the batch as time"])
def test_an_output_that_depends_on_the_other_samples_of_its_batch_is_refused(
        capsys, repository, bad_models, factory):
    # Each matches PyTorch at every batch size; Triton's dynamic batching would change answers.
    code, line, hint = export_fails(capsys, repository, f"{bad_models}:{factory}", "--name", "m",
                                    "--exporter", "torchscript", "--max-batch-size", "8")
    assert code == EXIT_ERROR
    assert line.startswith("error: torchscript exporter: output OUTPUT__0 of one sample depends "
                           "on the other samples in its batch: sample ")
    assert "of batch 8 differs from that sample run alone" in line
    assert "depend on that sample alone" in hint and "batch_first=True" in hint


def test_dict_keys_that_name_only_some_forward_parameters_are_refused(capsys, repository,
                                                                      bad_models):
    # forward(input_ids, attention_mask) given {"attention_mask", "ids"}: passed by keyword,
    # forward() has no ids to take.
    code, line, hint = export_fails(capsys, repository, f"{bad_models}:keys_partly_parameters",
                                    "--name", "m")
    assert code == EXIT_USAGE
    assert line == "error: forward(input_ids, attention_mask) has no parameter named ids"
    assert "key the example inputs by forward()'s parameter names" in hint


def test_an_output_named_like_an_input_is_refused_before_export(capsys, repository, bad_models):
    code, line, hint = export_fails(capsys, repository, f"{bad_models}:named_x", "--name", "m",
                                    "--output-names", "x")
    assert code == EXIT_USAGE
    assert line == "error: x names both an input and an output"
    assert "--output-names" in hint


@pytest.mark.parametrize("factory,says,hint", [
    ("meta_weights", "the model's weights are on the meta device (weight and 1 more): they were "
                     "never loaded", None),
    ("meta_inputs", "example input INPUT__0 is on the meta device: it holds no values", None),
    ("keyword_only_without_default", "forward()'s keyword-only parameter scale has no default",
     "give the example inputs as a dict keyed by forward()'s parameter names"),
    ("axes_as_pairs", "the dynamic axes are a list of 1, not a dict of input name to axes",
     'e.g. {"input_ids": {1: "sequence"}}'),
    ("axes_keyed_by_label", "dynamic axis 'sequence' of 'x' is not an axis number",
     'e.g. {"input_ids": {1: "sequence"}}'),
    # Triton never sends an empty batch, and verification draws its inputs like the
    # example's values: an empty one has none (its integer range was an internal error).
    ("empty_batch", "example input INPUT__0 is empty (shape [0, 4])", "give every example input"),
    ("empty_sequence", "example input INPUT__0 is empty (shape [2, 0])",
     "give every example input"),
], ids=["meta weights", "meta inputs", "keyword-only without a default", "dynamic axes not a dict", "dynamic axes label first",
        "empty batch", "empty sequence"])
def test_what_the_exporters_cannot_take_is_refused_up_front_naming_it(capsys, repository,
                                                                       bad_models, factory,
                                                                       says, hint):
    code, line, given_hint = export_fails(capsys, repository, f"{bad_models}:{factory}",
                                          "--name", "m")
    assert code == EXIT_USAGE
    assert line.startswith(f"error: {says}")
    assert hint is None or given_hint.startswith(f"hint: {hint}")


def test_only_an_operator_the_exporters_name_is_called_one_onnx_cannot_express():
    operator = onnx_export._hint_for(RuntimeError(
        "Exporting the operator 'aten::linalg_eig' to ONNX opset version 18 is not supported"), "")
    assert "operator ONNX cannot express" in operator
    wrapper = onnx_export._hint_for(RuntimeError(
        "torch.nn.DataParallel is not supported by ONNX exporter, please use 'attribute' module "
        "to unwrap model from torch.nn.DataParallel"), "")
    assert "operator" not in wrapper


@pytest.mark.parametrize("name", ["a b", "é", "a:b", "a\nb", "ab\n", "x" * 200])
def test_a_name_that_cannot_sit_in_a_request_url_is_refused_before_anything_runs(tmp_path,
                                                                                  capsys, name):
    """The name is the model's folder and goes into every request's URL: deploy would
    fail on it later with an internal error."""
    code = run_cli("export", "examples/mlp.py:build", "--name", name, "--repository", tmp_path)
    assert code == 2
    assert "is not a plain folder name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("gpu, opset, says", [
    ("p100", "22", "error: --opset 22: ONNX Runtime 1.19.2 in the p100 profile's Triton "
                   "(nvcr.io/nvidia/tritonserver:24.10-py3) loads opset 21 at most"),
    (None, "24", "error: --opset 24: ONNX Runtime 1.23.2 in the a10 profile's Triton "
                 "(nvcr.io/nvidia/tritonserver:25.12-py3) loads opset 23 at most"),
])
def test_an_opset_the_cards_onnx_runtime_cannot_load_is_refused_before_the_export(
        capsys, repository, gpu, opset, says):
    """Without --gpu the model's config.pbtxt is the A10's: its image must load it. The
    check costs no export (the encoder's takes a minute on a CPU)."""
    started = time.monotonic()
    code, line, hint = export_fails(capsys, repository, f"{MLP}:build", "--name", "m",
                                    "--opset", opset, *(("--gpu", gpu) if gpu else ()))
    assert code == EXIT_USAGE and line == says
    assert hint == f"hint: use --opset {21 if gpu else 23} or lower"
    assert time.monotonic() - started < 5
