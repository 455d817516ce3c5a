"""Exports one after another in one process (a notebook, a script exporting a repository's
models): the dynamo exporter's table of ONNX functions for PyTorch's operators is built
once, not per export (it was more than half of a small model's export), and each export
still comes out as it would alone."""

from __future__ import annotations

import onnx
import pytest
import torch

import tritonkit
from tritonkit.errors import TritonkitError
from tritonkit.export import onnx_export


class TwoLayers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        return torch.softmax(self.second(torch.relu(self.first(x))), dim=-1)


@pytest.fixture
def registration():
    """torch.onnx's module of the table (imported here, not as every worker collects)."""
    from torch.onnx._internal.exporter import _registration

    return _registration


@pytest.fixture
def builds(monkeypatch, registration) -> list[int]:
    """Each time torch builds the table (its own method, counted), none kept from before."""
    made: list[int] = []
    build = registration.ONNXRegistry.__dict__["from_torchlib"].__func__

    def counted(cls, *args, **kwargs):
        made.append(1)
        return build(cls, *args, **kwargs)

    monkeypatch.setattr(registration.ONNXRegistry, "from_torchlib", classmethod(counted))
    monkeypatch.setattr(onnx_export, "_TABLES", {})
    return made


def _export(module, folder, name: str) -> onnx.ModelProto:
    torch.manual_seed(0)
    result = tritonkit.export(module, torch.randn(2, 8), name=name, repository=folder,
                              max_batch_size=4)
    assert result.report["verification"]["passed"] is True
    return onnx.load(str(result.path / "1" / "model.onnx"))


def _nodes(model: onnx.ModelProto) -> list[tuple]:
    return [(node.op_type, tuple(node.input), tuple(node.output)) for node in model.graph.node]


def test_the_exporters_table_is_built_once_for_exports_one_after_another(tmp_path, builds):
    torch.manual_seed(0)
    module = TwoLayers().eval()
    first = _export(module, tmp_path / "a", "first")
    assert builds
    # (the first export of a process may load operators that make the next build it again)
    _export(module, tmp_path / "b", "second")
    made = len(builds)
    third = _export(module, tmp_path / "c", "third")
    assert len(builds) == made
    assert _nodes(third) == _nodes(first)
    assert [i.name for i in third.graph.initializer] == [i.name for i in first.graph.initializer]


def test_torchs_own_method_is_back_after_each_export_and_after_a_failed_one(tmp_path, builds,
                                                                           registration):
    own = registration.ONNXRegistry.__dict__["from_torchlib"]
    _export(TwoLayers().eval(), tmp_path, "fine")
    assert registration.ONNXRegistry.__dict__["from_torchlib"] is own

    class Broken(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("no forward here")

    with pytest.raises(TritonkitError):
        tritonkit.export(Broken(), torch.randn(2, 8), name="broken", repository=tmp_path,
                         max_batch_size=4)
    assert registration.ONNXRegistry.__dict__["from_torchlib"] is own


def test_an_operator_registered_between_exports_gets_a_table_that_has_it(tmp_path, builds):
    """A library that registers operators (torchvision's detection ops, a user's own) after
    the first export: the next export builds the table again, so torchlib's functions for
    them are in it."""
    _export(TwoLayers().eval(), tmp_path / "a", "before")
    _export(TwoLayers().eval(), tmp_path / "b", "again")
    made = len(builds)
    library = torch.library.Library("tritonkit_test_ops", "DEF")
    library.define("twice(Tensor x) -> Tensor")
    try:
        _export(TwoLayers().eval(), tmp_path / "c", "after")
        assert len(builds) == made + 1
    finally:
        library._destroy()


def test_each_export_gets_its_own_copy_of_the_table(registration):
    """What one export adds to its table (torch.onnx's custom_translation_table does) is
    not in the next one's."""
    with onnx_export._functions_table_kept():
        mine = registration.ONNXRegistry.from_torchlib()
        mine.functions.clear()
        theirs = registration.ONNXRegistry.from_torchlib()
    assert theirs.functions and mine is not theirs


def test_torchs_own_method_is_back_when_exports_that_overlapped_end_in_any_order(registration):
    """Two exports at once (threads): the first to end leaves the table kept for the other;
    the last puts torch's own method back, not the kept one."""
    own = registration.ONNXRegistry.__dict__["from_torchlib"]
    first, second = onnx_export._functions_table_kept(), onnx_export._functions_table_kept()
    first.__enter__()
    second.__enter__()
    assert registration.ONNXRegistry.__dict__["from_torchlib"] is not own
    first.__exit__(None, None, None)
    assert registration.ONNXRegistry.__dict__["from_torchlib"] is not own
    second.__exit__(None, None, None)
    assert registration.ONNXRegistry.__dict__["from_torchlib"] is own
