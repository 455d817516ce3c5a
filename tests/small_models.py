"""Real architectures at small sizes, each exported once per run with verification, as a
user's script exports them (``tritonkit.export``, the example dict in another order than
forward() takes it, batch limit 4): tests/test_export_hf.py checks the exports and
tests/test_first_request.py serves copies of some, rather than exporting the same weights
again (a MobileNetV3 export is about 13 CPU s here). A factory is seeded: built again, a
model has the weights that were exported."""

from __future__ import annotations

from pathlib import Path

import tritonkit
from tests import real_models
from tests.conftest import OncePerRun

SMALL_TEXT = dict(layers=2, hidden=64, heads=4)
# name → (factory, its small size, output names)
SMALL = {
    "bert": (real_models.bert_base, SMALL_TEXT, ["last_hidden_state", "pooler_output"]),
    "distilbert": (real_models.distilbert_cls, SMALL_TEXT, ["logits"]),
    "gpt2": (real_models.gpt2, SMALL_TEXT, ["logits"]),
    "t5_encoder": (real_models.t5_encoder, SMALL_TEXT, ["last_hidden_state"]),
    "vit": (real_models.vit, dict(layers=2, image=64), ["logits"]),
    "resnet50": (real_models.resnet50, dict(image=64), ["OUTPUT__0"]),
    "mobilenet_v3": (real_models.mobilenet_v3, dict(image=64), ["OUTPUT__0"]),
}
MAX_BATCH = 4


def shuffled(example):
    """The example dict with its keys in another order than forward() takes them."""
    return dict(reversed(list(example.items()))) if isinstance(example, dict) else example


def build(family: str) -> tuple:
    """``(model, example shuffled, dynamic axes or None)`` of ``family`` at its small size."""
    factory, size, _ = SMALL[family]
    built = factory(**size)
    return built[0], shuffled(built[1]), built[2] if len(built) > 2 else None


def _exporter(family: str):
    def make(folder: Path) -> str:
        model, example, axes = build(family)
        return str(tritonkit.export(model, example, name=family, repository=folder / "repo",
                                    dynamic_axes=axes, max_batch_size=MAX_BATCH).path)
    return make


EXPORTS = {family: OncePerRun(f"small_{family}", _exporter(family)) for family in SMALL}


def exported(family: str, tmp_path_factory) -> Path:
    """The model folder of ``family``'s export (shared by the run: copy it to change it)."""
    return Path(EXPORTS[family].get(tmp_path_factory))
