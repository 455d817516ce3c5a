"""The ONNX checker sees the graph as written: from the bytes just saved where the graph
holds its weights, from the file where they lie beside it."""

from __future__ import annotations

import onnx
import pytest
import torch

from tritonkit.errors import ExportError
from tritonkit.export import onnx_export
from tritonkit.export.verify import check_graph


def _graph(path):
    torch.onnx.export(torch.nn.Linear(64, 64), (torch.randn(2, 64),), str(path), dynamo=False)
    return onnx.load(str(path))


def test_a_graph_written_whole_comes_back_as_the_bytes_in_its_file(tmp_path):
    model = _graph(tmp_path / "source.onnx")
    files, serialized = onnx_export.save_model(model, tmp_path / "1" / "model.onnx")
    assert files == [tmp_path / "1" / "model.onnx"]
    assert serialized == files[0].read_bytes()
    assert onnx.load_model_from_string(serialized) == model


def test_a_graph_with_its_weights_beside_it_is_checked_from_its_file(tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_export, "_EXTERNAL_DATA_BYTES", 0)   # as past protobuf's 2 GiB
    path = tmp_path / "1" / "model.onnx"
    files, serialized = onnx_export.save_model(_graph(tmp_path / "source.onnx"), path)
    assert files == [path, path.with_name("model.onnx.data")] and serialized is None
    check_graph(path, serialized)       # finds the weights beside it
    path.with_name("model.onnx.data").unlink()
    with pytest.raises(ExportError, match="fails the ONNX checker"):
        check_graph(path, serialized)


def test_the_checker_refuses_an_invalid_graph_from_the_bytes_just_written(tmp_path):
    model = _graph(tmp_path / "source.onnx")
    model.graph.node[0].input[0] = "nowhere"        # fed by no input, weight or node
    files, serialized = onnx_export.save_model(model, tmp_path / "1" / "model.onnx")
    with pytest.raises(ExportError, match="fails the ONNX checker.*nowhere"):
        check_graph(files[0], serialized)
