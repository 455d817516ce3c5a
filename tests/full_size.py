"""Full-size models exported from the CLI once per run, verified at every batch
(``--verify-batches all``): the export tests check them, and the deploy of a repository of
real models serves three of them (configured down to a smaller batch limit) rather than
exporting the same weights again."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from tests.conftest import ROOT, OncePerRun, run_cli

# family -> (factory spec, output names)
FULL_SIZE = {
    "bert_base": ("examples/hf_bert.py:build", ["last_hidden_state", "pooler_output"]),
    "gpt2": ("tests/real_models.py:gpt2", ["logits"]),
    "resnet50": ("tests/real_models.py:resnet50", ["OUTPUT__0"]),
    "vit": ("tests/real_models.py:vit", ["logits"]),
}


def _exporter(family: str):
    def make(folder: Path) -> dict:
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            code = run_cli("export", ROOT / FULL_SIZE[family][0], "--name", family,
                           "--repository", folder / "repo", "--verify-batches", "all")
        return {"code": code, "said": said.getvalue(), "model": str(folder / "repo" / family)}
    return make


EXPORTS = {family: OncePerRun(f"full_size_{family}", _exporter(family)) for family in FULL_SIZE}


def exported(family: str, tmp_path_factory) -> dict:
    """``{"code", "said", "model"}``: the CLI's exit code and output, and the model's folder."""
    return EXPORTS[family].get(tmp_path_factory)
