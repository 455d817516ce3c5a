"""Dict example inputs reach forward() by keyword; outputs keep the names forward() gives them.

Hugging Face models take ``model(**inputs)`` with optional parameters left out, and return
a ModelOutput: both must export as they are, through both exporters, and the Python API
must show itself (signature, docstring) without importing torch for ``import tritonkit``.
"""

from __future__ import annotations

import inspect
import pydoc
import subprocess
import sys
from collections import namedtuple
from dataclasses import dataclass
from typing import Optional

import numpy as np
import onnxruntime as ort
import pytest
import torch
from torch import nn

import tritonkit
from tritonkit.errors import UsageError
from tritonkit.export.forward import named_outputs
from tritonkit.export.verify import tolerance_share
from tests.conftest import ROOT, run_cli

EXPORTERS = ("dynamo", "torchscript")


def run_graph(model_dir, feed: dict) -> dict:
    session = ort.InferenceSession(str(model_dir / "1" / "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    names = [value.name for value in session.get_outputs()]
    return dict(zip(names, session.run(None, feed)))


class Tokens(nn.Module):
    """Hugging Face's shape of forward(): an optional parameter between the ones given,
    and each input changing the output its own way, so a swap or a drop shows."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 8)
        self.segment = nn.Embedding(2, 8)

    def forward(self, input_ids, past_key_values=None, attention_mask=None,
                token_type_ids=None, output_hidden_states: Optional[bool] = None):
        hidden = self.embed(input_ids) + 3 * self.segment(token_type_ids)
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)


def token_inputs(batch: int = 2, sequence: int = 6) -> dict:
    generator = torch.Generator().manual_seed(1)
    mask = torch.ones(batch, sequence, dtype=torch.int64)
    mask[-1, sequence // 2:] = 0
    segments = torch.zeros(batch, sequence, dtype=torch.int64)
    segments[:, sequence // 2:] = 1
    # Keys in neither forward()'s order nor any other the exporters would guess.
    return {"token_type_ids": segments, "input_ids": torch.randint(0, 50, (batch, sequence),
                                                                   generator=generator),
            "attention_mask": mask}


@pytest.mark.slow
@pytest.mark.parametrize("exporter", EXPORTERS)
def test_dict_inputs_reach_forward_by_keyword_in_any_order_skipping_optional_parameters(
        tmp_path, exporter):
    model = Tokens().eval()
    example = token_inputs()
    result = tritonkit.export(model, example, name="tokens", repository=tmp_path,
                              dynamic_axes={name: {1: "sequence"} for name in example},
                              exporters=(exporter,))
    assert result.report["exporter"] == exporter
    assert [t["name"] for t in result.report["inputs"]] == \
        ["input_ids", "attention_mask", "token_type_ids"]          # forward()'s order
    # Served by name, at another length and batch than the example's.
    feed = {name: tensor.numpy() for name, tensor in token_inputs(batch=3, sequence=9).items()}
    (served,) = run_graph(result.path, feed).values()
    with torch.no_grad():
        expected = model(**{name: torch.from_numpy(array) for name, array in feed.items()})
    np.testing.assert_allclose(served, expected.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_a_keyword_only_parameter_is_fed_from_the_dict(tmp_path):
    class Scaled(nn.Module):
        def forward(self, x, *, scale):
            return x * scale

    example = {"scale": torch.full((2, 1), 3.0), "x": torch.randn(2, 4)}
    result = tritonkit.export(Scaled(), example, name="scaled", repository=tmp_path)
    (served,) = run_graph(result.path, {"x": np.ones((1, 4), np.float32),
                                        "scale": np.full((1, 1), 5.0, np.float32)}).values()
    np.testing.assert_array_equal(served, np.full((1, 4), 5.0))


@pytest.mark.parametrize("example,says", [
    ({"attention_mask": torch.ones(2, 6, dtype=torch.int64)},
     "forward()'s parameter input_ids has no default, and the example inputs do not give it "
     "(they give attention_mask)"),
    ({"input_ids": torch.zeros(2, 6, dtype=torch.int64), "mask": torch.ones(2, 6)},
     "forward(input_ids, past_key_values, attention_mask, token_type_ids, "
     "output_hidden_states) has no parameter named mask"),
], ids=["required parameter missing", "a key forward() has no parameter for"])
def test_a_dict_forward_cannot_take_is_refused_naming_the_parameter(tmp_path, example, says):
    with pytest.raises(UsageError) as refused:
        tritonkit.export(Tokens().eval(), example, name="tokens", repository=tmp_path)
    assert refused.value.message == says
    assert not (tmp_path / "tokens").exists()


@dataclass
class Heads:
    logits: torch.Tensor
    loss: Optional[torch.Tensor] = None
    hidden_states: Optional[tuple] = None


Pair = namedtuple("Pair", ["scores", "embedding"])


class DataclassOut(nn.Module):
    def forward(self, x):
        return Heads(logits=x * 2, hidden_states=(x + 1, x - 1))


class NamedTupleOut(nn.Module):
    def forward(self, x):
        return Pair(scores=x.sum(-1, keepdim=True), embedding=x * 3)


class DictOut(nn.Module):
    def forward(self, x):
        return {"logits": x * 2, "attentions": None, "layers": [x + 1, {"last": x - 1}]}


@pytest.mark.slow
@pytest.mark.parametrize("model,names", [
    (DataclassOut(), ["logits", "hidden_states.0", "hidden_states.1"]),
    (NamedTupleOut(), ["scores", "embedding"]),
    (DictOut(), ["logits", "layers.0", "layers.1.last"]),
], ids=["dataclass", "named tuple", "nested dict"])
def test_outputs_keep_the_names_forward_gives_them_leaving_none_out(tmp_path, model, names):
    x = torch.randn(2, 4)
    result = tritonkit.export(model, x, name="named", repository=tmp_path)
    assert [t["name"] for t in result.report["outputs"]] == names
    served = run_graph(result.path, {"INPUT__0": x.numpy()})
    assert list(served) == names
    expected = [tensor for _, tensor in named_outputs(model(x))]
    for name, want in zip(names, expected):
        np.testing.assert_allclose(served[name], want.numpy(), rtol=1e-5, atol=1e-6)


def test_an_unnamed_tuple_keeps_the_default_output_names():
    x = torch.ones(2, 3)
    assert [name for name, _ in named_outputs((x, (x, x)))] == [None, None, None]


def test_a_key_value_cache_is_named_by_layer_key_and_value():
    class Cache:
        def __init__(self, layers):
            self.layers = layers

        def to_legacy_cache(self):
            return tuple(self.layers)

    k, v = torch.zeros(2, 4, 3, 8), torch.ones(2, 4, 3, 8)
    result = {"logits": torch.zeros(2, 3), "past_key_values": Cache([(k, v), (k, v)])}
    assert [name for name, _ in named_outputs(result)] == [
        "logits", "past_key_values.0.key", "past_key_values.0.value",
        "past_key_values.1.key", "past_key_values.1.value"]


def test_an_output_that_is_not_a_tensor_is_refused_naming_where_it_is(tmp_path):
    class Counted(nn.Module):
        def forward(self, x):
            return {"logits": x, "steps": 3}

    with pytest.raises(UsageError) as refused:
        tritonkit.export(Counted(), torch.randn(2, 3), name="m", repository=tmp_path)
    assert refused.value.message == "the model's forward() returns a int as steps, not a tensor"


def test_the_python_api_shows_its_signature_and_docstring():
    parameters = inspect.signature(tritonkit.export).parameters
    assert list(parameters)[:2] == ["module", "example_inputs"]
    assert {"name", "repository", "dynamic_axes", "atol", "rtol", "max_batch_size"} <= set(parameters)
    assert parameters["name"].kind is inspect.Parameter.KEYWORD_ONLY
    text = pydoc.render_doc(tritonkit.export, renderer=pydoc.plaintext)
    assert "Export a torch.nn.Module to ``repository/name``" in text
    assert "function export" in text
    # The package's other names still reach through it, whichever way they are imported.
    from tritonkit.export import ExportOptions
    import tritonkit.export.spec as spec
    assert tritonkit.export.ExportOptions is ExportOptions
    assert spec.__name__ == "tritonkit.export.spec" and tritonkit.export.spec is spec


def test_importing_tritonkit_loads_no_torch():
    code = "import sys, tritonkit; tritonkit.__version__; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          check=True)
    assert done.stdout.strip() == "False"


def test_a_large_relative_error_near_zero_passes_within_atol_and_says_so():
    # A logit of 1e-6 off by 1e-6 is 100 % off relatively, and 1 % of atol's allowance.
    want = np.array([2.0, 1e-6], np.float32)
    got = np.array([2.0, 2e-6], np.float32)
    assert tolerance_share(want, got, 1e-4, 1e-3) == pytest.approx(1e-6 / (1e-4 + 1e-9), rel=1e-3)
    # And where the error is more than the allowance, the share says by how much.
    assert tolerance_share(np.array([1.0]), np.array([1.01]), 1e-4, 1e-3) == \
        pytest.approx(0.01 / 1.1e-3, rel=1e-6)


def test_the_table_shows_each_outputs_tolerance_share_and_verdict(tmp_path, capsys):
    code = run_cli("export", ROOT / "examples" / "multi_output.py:build", "--name", "heads",
                   "--repository", tmp_path, "--exporter", "torchscript", "--rtol", "0.002")
    assert code == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "max abs err" in line)
    for column in ("atol", "rtol", "err/tol", "check"):
        assert column in header
    import json
    report = json.loads((tmp_path / "heads" / "export-report.json").read_text())
    rows = [line for line in out.splitlines() if line.startswith("out ")]
    assert len(rows) == len(report["outputs"])
    for row, output in zip(rows, report["outputs"]):
        worst = report["verification"]["max_errors"][output["name"]]
        assert worst["passed"] is True and 0 <= worst["tolerance_share"] <= 1
        assert worst["rtol"] == 0.002
        cells = row.split()
        assert cells[-1] == "pass"
        assert cells[-2] == f"{worst['tolerance_share']:.2f}"
        assert cells[-3] == "2.0e-03"
