"""The architectures people serve export as they are: Hugging Face models and full CNNs.

Each is built from its config with random weights (tests/real_models.py; nothing is
downloaded), its example dict shuffled, and exported with verification (the small sizes
once per run, tests/small_models.py, which the first-request test serves). The graph is then
run here, apart from tritonkit's own verification: at another batch and sequence length
than the example's, against the model called as Hugging Face calls it, and with a
changed attention mask, which must change the answer. Small configs keep each to seconds,
the full-size ones take minutes: all are slow tests, left out of ``-m quick`` (and of
``-m 'not slow'``).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

import tritonkit
from tests import full_size, real_models, small_models
from tests.conftest import ROOT, run_cli

# Real architectures, exported and verified: seconds each. transformers is imported by the
# tests that build a model (1.4 CPU s): every xdist worker collects this module.
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                 reason="transformers is not installed")]

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SMALL = small_models.SMALL
MAX_BATCH = small_models.MAX_BATCH


def session_of(model_dir) -> ort.InferenceSession:
    return ort.InferenceSession(str(model_dir / "1" / "model.onnx"),
                                providers=["CPUExecutionProvider"])


def like(example, batch: int, sequence: int | None):
    """Inputs like the example's at another batch (and sequence length), as numpy."""
    generator = torch.Generator().manual_seed(7)
    if not isinstance(example, dict):
        return {"INPUT__0": torch.randn(batch, *example.shape[1:], generator=generator).numpy()}
    feed = {}
    for name, tensor in example.items():
        if name == "pixel_values":
            feed[name] = torch.randn(batch, *tensor.shape[1:], generator=generator).numpy()
        elif name == "input_ids":
            feed[name] = torch.randint(0, 1000, (batch, sequence), generator=generator).numpy()
        elif name == "attention_mask":
            mask = np.ones((batch, sequence), np.int64)
            mask[0, sequence // 2:] = 0
            feed[name] = mask
        else:                                               # token_type_ids
            feed[name] = np.zeros((batch, sequence), np.int64)
    return feed


def expected_outputs(model, feed: dict, names: list[str]) -> list[np.ndarray]:
    tensors = {name: torch.from_numpy(array) for name, array in feed.items()}
    with torch.no_grad():
        result = model(tensors["INPUT__0"]) if "INPUT__0" in tensors else model(**tensors)
    if isinstance(result, torch.Tensor):
        return [result.numpy()]
    return [result[name].numpy() for name in names]


def _report(model_dir: Path) -> dict:
    return json.loads((model_dir / "export-report.json").read_text())


@pytest.mark.parametrize("family", list(SMALL))
def test_real_architectures_export_verified_and_serve_what_the_model_computes(tmp_path_factory,
                                                                           family):
    """Exported once per run (tests/small_models.py), as tritonkit.export exports it."""
    outputs = SMALL[family][2]
    model, example, axes = small_models.build(family)        # seeded: the weights exported
    model_dir = small_models.exported(family, tmp_path_factory)
    report = _report(model_dir)
    assert report["verification"]["passed"] is True
    assert {t["name"] for t in report["inputs"]} == set(example if isinstance(example, dict)
                                                        else ["INPUT__0"])
    assert [t["name"] for t in report["outputs"]] == outputs
    for name in outputs:
        worst = report["verification"]["max_errors"][name]
        assert worst["passed"] is True and worst["tolerance_share"] <= 1

    session = session_of(model_dir)
    sequence = 11 if axes else None          # neither the example's 16 nor one verified
    feed = like(example, 3, sequence)
    served = session.run(outputs, feed)
    for name, got, want in zip(outputs, served, expected_outputs(model, feed, outputs)):
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, atol=1e-4 * scale, rtol=1e-3, err_msg=name)
    if "attention_mask" in feed:             # the mask is wired in, not traced as a constant
        feed["attention_mask"] = np.ones_like(feed["attention_mask"])
        assert not np.allclose(session.run(outputs[:1], feed)[0], served[0], atol=1e-6)


def test_bert_takes_its_sequence_axis_dynamic_on_every_input(tmp_path_factory):
    report = _report(small_models.exported("bert", tmp_path_factory))
    by_name = {t["name"]: t for t in report["inputs"]}
    assert list(by_name) == ["input_ids", "attention_mask", "token_type_ids"]   # forward()'s
    for spec in by_name.values():
        assert spec["dynamic_axes"] == {"0": "batch", "1": "sequence"}
    lengths = {case["lengths"]["sequence"] for case in report["verification"]["cases"]}
    assert len(lengths) >= 3


def test_gpt2_with_its_cache_on_names_each_layers_past_key_and_value(tmp_path):
    """A decoder built with Hugging Face's defaults (use_cache=True) returns a cache
    object beside its logits: each layer's key and value become named outputs."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4)).eval()
    _, example, axes = real_models.gpt2(**small_models.SMALL_TEXT)
    result = tritonkit.export(model, small_models.shuffled(example), name="gpt2",
                              repository=tmp_path,
                              dynamic_axes=axes, max_batch_size=MAX_BATCH)
    names = [t["name"] for t in result.report["outputs"]]
    assert names == ["logits", "past_key_values.0.key", "past_key_values.0.value",
                     "past_key_values.1.key", "past_key_values.1.value"]
    key = next(t for t in result.report["outputs"] if t["name"] == "past_key_values.1.key")
    assert key["dynamic_axes"]["0"] == "batch" and key["shape"][1] == 4    # [batch, heads, …]


def test_the_cli_exports_a_transformers_factory_with_its_names(tmp_path, capsys):
    code = run_cli("export", ROOT / "tests" / "real_models.py:bert_small", "--name", "bert",
                   "--repository", tmp_path, "--max-batch-size", MAX_BATCH)
    assert code == 0
    out = capsys.readouterr().out
    for name in ("in  input_ids", "in  attention_mask", "in  token_type_ids",
                 "out last_hidden_state", "out pooler_output"):
        assert name in out
    config = (tmp_path / "bert" / "config.pbtxt").read_text()
    assert 'name: "pooler_output"' in config and 'name: "token_type_ids"' in config


def test_a_model_the_torchscript_exporter_cannot_trace_is_told_to_use_the_dynamo_one(
        tmp_path, capsys, monkeypatch):
    """LLaMA's mask is made under torch.vmap, where the TorchScript exporter fails in C++
    ('unordered_map::at'): the error says what forward() did, the debug traceback reaches
    the line of transformers' code that did it."""
    monkeypatch.setenv("TRITONKIT_DEBUG", "1")
    code = run_cli("export", ROOT / "tests" / "real_models.py:llama_small", "--name", "llama",
                   "--repository", tmp_path / "repo", "--exporter", "torchscript")
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 1
    assert lines[-2] == ("error: torchscript exporter: forward() calls torch.vmap or torch.func "
                         "(functorch), which the TorchScript exporter cannot trace (it failed "
                         "with 'unordered_map::at')"), err
    assert lines[-1].startswith("hint: export it with the dynamo exporter (the default: leave out "
                                "--exporter torchscript)")
    assert "transformers/masking_utils.py" in err     # the traceback goes past tritonkit's own
    assert not (tmp_path / "repo" / "llama").exists()


@pytest.mark.slow
@pytest.mark.parametrize("family", list(full_size.FULL_SIZE))
def test_full_size_models_export_verified_from_the_cli(tmp_path_factory, family):
    """At every batch (--verify-batches all): the default budget leaves a CNN's large ones
    out (tests/test_verification_budget.py). Exported once per run (tests/full_size.py): the
    deploy of many models serves these files."""
    made = full_size.exported(family, tmp_path_factory)
    assert made["code"] == 0, made["said"]
    assert "pass" in made["said"]
    report = json.loads((Path(made["model"]) / "export-report.json").read_text())
    assert [t["name"] for t in report["outputs"]] == full_size.FULL_SIZE[family][1]
    assert {case["batch"] for case in report["verification"]["cases"]} >= {1, 16, 32}
    assert all(worst["passed"] for worst in report["verification"]["max_errors"].values())
