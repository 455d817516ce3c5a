"""What verification runs in PyTorch and ONNX Runtime, case by case: each verified batch
gets a PyTorch run of its own, and random inputs are drawn like the example."""

from __future__ import annotations

import pytest
import torch

import tritonkit
from tritonkit.errors import VerificationError
from tritonkit.export.spec import normalize_inputs
from tritonkit.export.verify import verification_cases


class MediumBatchesScaled(torch.nn.Module):
    """Takes another path for batches of 9 to 16 only: the example's batch, batch 1 and 32
    agree with the graph the exporter traced, the middle batch (16) does not."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = self.linear(x)
        return y * 2 if 8 < x.shape[0] <= 16 else y


def test_a_forward_that_differs_only_at_the_middle_batch_is_refused_there(tmp_path):
    """The middle batch's reference is PyTorch's own run at that batch: rows of the largest
    batch's reference would match the graph here, and the export would pass."""
    with pytest.raises(VerificationError) as caught:
        tritonkit.export(MediumBatchesScaled(), torch.randn(2, 8), name="m", repository=tmp_path,
                         max_batch_size=32, exporters=("dynamo",))
    assert "differs from PyTorch at batch 16" in caught.value.message
    assert not (tmp_path / "m").exists()


def test_every_verified_batch_is_drawn_and_run_at_its_own_size():
    example = torch.randn(2, 3, 8, 8)
    cases = verification_cases(normalize_inputs(example), 32)
    assert [(case.label, case.batch) for case in cases] == [
        ("example inputs", 2), ("batch 1", 1), ("batch 3", 3), ("batch 16", 16), ("batch 32", 32)]
    assert [case.tensors[0].shape[0] for case in cases] == [2, 1, 3, 16, 32]


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_random_float_inputs_keep_the_examples_dtype_mean_and_spread(dtype):
    example = (torch.randn(64, 256, dtype=torch.float64) * 3 + 5).to(dtype)
    for case in verification_cases(normalize_inputs(example), 64)[1:]:
        drawn = case.tensors[0]
        assert drawn.dtype == dtype
        if case.batch == 64:            # 16384 values: both within 6 standard errors
            values = drawn.double()
            assert abs(float(values.mean()) - 5) < 0.15
            assert abs(float(values.std()) - 3) < 0.15
