"""The default verification fits a budget: the example, batch 1 and a small batch always,
the middle and largest batches while their cost stays within a share of the exporter's CPU
time; ``verify_batches="all"`` (``--verify-batches all``) verifies every batch, whatever it
costs. Budgets are set here through ``verify.BUDGET_SHARE`` and ``BUDGET_FLOOR_S``: 0 leaves
every optional batch out, whatever the machine's speed."""

from __future__ import annotations

import json

import pytest
import torch

import tritonkit
from tests.conftest import run_cli
from tritonkit.errors import VerificationError
from tritonkit.export import verify

pytestmark = pytest.mark.slow


@pytest.fixture
def no_budget(monkeypatch):
    monkeypatch.setattr(verify, "BUDGET_SHARE", 0.0)
    monkeypatch.setattr(verify, "BUDGET_FLOOR_S", 0.0)


class BranchesOnLargeBatches(torch.nn.Module):
    """Another path for batches above 8 only: the exporter traces the example's (batch 2)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = self.linear(x)
        return y * 2 if x.shape[0] > 8 else y


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_a_small_model_keeps_every_batch_under_the_default_budget(tmp_path, exporter):
    """However quick its exporter (TorchScript's takes milliseconds): the budget has a floor."""
    result = tritonkit.export(torch.nn.Linear(8, 4), torch.randn(2, 8), name="m",
                              repository=tmp_path, max_batch_size=32, exporters=(exporter,))
    verification = result.report["verification"]
    assert verification["plan"] == "budget"
    assert verification["batches"] == [1, 2, 3, 16, 32]
    assert "left_out" not in verification
    assert verification["budget"]["cpu_seconds"] >= verify.BUDGET_FLOOR_S
    assert 0 < verification["budget"]["spent_cpu_seconds"] <= verification["budget"]["cpu_seconds"]


def test_with_no_budget_the_example_batch_1_and_a_small_batch_are_still_verified(
        tmp_path, no_budget):
    result = tritonkit.export(torch.nn.Linear(8, 4), torch.randn(2, 8), name="m",
                              repository=tmp_path, max_batch_size=32)
    verification = result.report["verification"]
    assert verification["batches"] == [1, 2, 3]
    assert verification["left_out"] == [16, 32]
    assert verification["independent_samples"] == {"batch": 3, "rows": [0, 1, 2]}
    note = next(note for note in result.notes if note.startswith("batch 16, 32 not verified"))
    assert "--verify-batches all" in note
    saved = json.loads((result.path / "export-report.json").read_text())["verification"]
    assert saved["batches"] == [1, 2, 3] and saved["left_out"] == [16, 32]


def test_the_full_plan_verifies_every_batch_whatever_the_budget(tmp_path, no_budget):
    result = tritonkit.export(torch.nn.Linear(8, 4), torch.randn(2, 8), name="m",
                              repository=tmp_path, max_batch_size=32, verify_batches="all")
    verification = result.report["verification"]
    assert verification["plan"] == "all"
    assert verification["batches"] == [1, 2, 3, 16, 32]
    assert "left_out" not in verification and "budget" not in verification
    assert verification["independent_samples"]["batch"] == 32


def test_a_forward_that_differs_only_at_the_middle_batch_is_refused_under_the_full_plan(
        tmp_path, no_budget):
    from tests.test_verification_coverage import MediumBatchesScaled

    with pytest.raises(VerificationError) as caught:
        tritonkit.export(MediumBatchesScaled(), torch.randn(2, 8), name="m", repository=tmp_path,
                         max_batch_size=32, exporters=("dynamo",), verify_batches="all")
    assert "differs from PyTorch at batch 16" in caught.value.message


def test_a_forward_that_differs_only_at_batches_left_out_passes_and_the_report_says_which(
        tmp_path, no_budget):
    """The budget's limit, as documented: a Python branch on batches above the small one is
    frozen by the exporter without a word, and only a verified batch there finds it."""
    result = tritonkit.export(BranchesOnLargeBatches(), torch.randn(2, 8), name="m",
                              repository=tmp_path, max_batch_size=32, exporters=("dynamo",))
    assert result.report["verification"]["left_out"] == [16, 32]
    with pytest.raises(VerificationError, match="differs from PyTorch at batch 16"):
        tritonkit.export(BranchesOnLargeBatches(), torch.randn(2, 8), name="m",
                         repository=tmp_path, max_batch_size=32, exporters=("dynamo",),
                         verify_batches="all", force=True)


class BranchesAboveTwo(torch.nn.Module):
    """Traced at an example batch of 2, the graph holds at batches 1 and 2 only."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = self.linear(x)
        return y * 2 if x.shape[0] > 2 else y


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_with_no_budget_a_graph_that_holds_only_up_to_the_examples_batch_is_refused(
        tmp_path, no_budget, exporter):
    with pytest.raises(VerificationError, match="differs from PyTorch at batch 3"):
        tritonkit.export(BranchesAboveTwo(), torch.randn(2, 8), name="m",
                         repository=tmp_path, max_batch_size=32, exporters=(exporter,))


class MixesSamples(torch.nn.Module):
    def forward(self, x):
        return x - x.mean(dim=0, keepdim=True)


def test_with_no_budget_a_model_that_mixes_the_samples_of_a_batch_is_refused(tmp_path, no_budget):
    with pytest.raises(VerificationError, match="depends on the other samples"):
        tritonkit.export(MixesSamples(), torch.randn(2, 8), name="m", repository=tmp_path,
                         max_batch_size=32)


def test_with_no_budget_a_dynamic_axis_is_still_verified_shorter_and_longer(tmp_path, no_budget):
    result = tritonkit.export(torch.nn.Linear(4, 2), {"x": torch.randn(2, 6, 4)}, name="m",
                              repository=tmp_path, dynamic_axes={"x": {1: "sequence"}},
                              max_batch_size=32)
    lengths = {case["lengths"]["sequence"] for case in result.report["verification"]["cases"]}
    assert lengths == {3, 6, 9}


def test_the_cli_says_which_batches_it_verified_and_how_to_verify_the_rest(
        tmp_path, capsys, no_budget):
    factory = tmp_path / "model.py"
    factory.write_text("import torch\n\ndef build():\n"
                       "    return torch.nn.Linear(8, 4), torch.randn(2, 8)\n")
    assert run_cli("export", f"{factory}:build", "--name", "m", "--repository", tmp_path / "r") == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "at batch 1, 2, 3" in out
    assert "batch 16, 32 not verified" in out and "--verify-batches all" in out
    assert run_cli("export", f"{factory}:build", "--name", "m", "--repository", tmp_path / "r",
                   "--verify-batches", "all", "--force") == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "at batch 1, 2, 3, 16, 32" in out and "not verified" not in out
    script = (tmp_path / "r" / "m" / "reproduce_export.py").read_text()
    assert "'--verify-batches': 'all'" in script


def test_an_unknown_verification_plan_is_refused_with_the_choices(tmp_path, capsys):
    assert run_cli("export", "examples/mlp.py:build", "--name", "m", "--repository", tmp_path,
                   "--verify-batches", "most") == 2
    err = capsys.readouterr().err
    assert "--verify-batches most is not one of budget, all" in err
    assert "hint:" in err and "Traceback" not in err
