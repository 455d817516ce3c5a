"""A forward() that branches on a dynamic length: torch.export follows the example's branch
and the ONNX graph forgets the condition, so verification also tries a length near the
example's that breaks it (tritonkit/export/length_rules.py). Neither exporter's graph is
kept if it answers such a length otherwise than PyTorch; a model that refuses such lengths
itself exports, and says what clients must send."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F

import tritonkit
from tritonkit.errors import VerificationError

AXES = {"INPUT__0": {1: "sequence"}}


class PadsOnlyWhenNeeded(torch.nn.Module):
    """Pools windows of 4 along the sequence, padding it first if its length needs it."""

    def forward(self, x):
        batch, length, channels = x.shape
        if length % 4:
            x = F.pad(x, (0, 0, 0, 4 - length % 4))
        return x.reshape(batch, -1, 4, channels).amax(2).mean(1)


class AlwaysPads(torch.nn.Module):
    """The same, with no branch on the length: the pad is (-length) % 4, zero or more."""

    def forward(self, x):
        batch, length, channels = x.shape
        x = F.pad(x, (0, 0, 0, (-length) % 4))
        return x.reshape(batch, -1, 4, channels).amax(2).mean(1)


class RefusesOtherLengths(torch.nn.Module):
    def forward(self, x):
        if x.shape[1] % 4:
            raise ValueError("the sequence must be a multiple of 4")
        batch, _, channels = x.shape
        return x.reshape(batch, -1, 4, channels).amax(2).mean(1)


@pytest.mark.parametrize("length, rule, broken_at", [
    (16, "sequence % 4 == 0", "sequence 17"),     # the example needs no pad: the graph never pads
    (15, "sequence % 4 != 0", "sequence 16"),     # the example needs one: the graph always pads
])
def test_a_branch_on_a_dynamic_length_is_refused_naming_the_rule_and_a_length_it_breaks(
        tmp_path, length, rule, broken_at):
    torch.manual_seed(0)
    with pytest.raises(VerificationError) as raised:
        tritonkit.export(PadsOnlyWhenNeeded(), torch.randn(2, length, 8), name="pools",
                         repository=tmp_path / "repo", dynamic_axes=AXES)
    said = raised.value.message
    assert f"the graph holds only where {rule}" in said, said
    assert broken_at in said, said
    assert "make forward() compute every length the same way" in raised.value.hint
    assert "torchscript" in raised.value.hint       # the fallback's graph was refused too
    assert not (tmp_path / "repo" / "pools").exists()


def test_the_same_pooling_without_the_branch_exports_and_serves_every_length(tmp_path):
    torch.manual_seed(0)
    model = AlwaysPads()
    made = tritonkit.export(model, torch.randn(2, 16, 8), name="pools",
                            repository=tmp_path / "repo", dynamic_axes=AXES)
    assert made.report["exporter"] == "dynamo"
    assert "length_rule" not in made.report["verification"]
    session = ort.InferenceSession(str(made.path / "1" / "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    for length in (5, 13, 17, 18):
        x = torch.randn(3, length, 8)
        served, = session.run(None, {"INPUT__0": x.numpy()})
        np.testing.assert_allclose(served, model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_a_model_that_refuses_other_lengths_itself_exports_and_says_what_clients_must_send(
        tmp_path):
    torch.manual_seed(0)
    made = tritonkit.export(RefusesOtherLengths(), torch.randn(2, 16, 8), name="pools",
                            repository=tmp_path / "repo", dynamic_axes=AXES)
    rule = made.report["verification"]["length_rule"]
    assert rule["rule"] == "sequence % 4 == 0" and rule["model_refuses"], rule
    assert rule["lengths"] == {"sequence": 17}
    assert any("holds only where sequence % 4 == 0" in note and "clients must send" in note
               for note in made.notes), made.notes
