"""A repository of real, full-size models deploys together with default flags on the local
Triton: BERT-base (mask and token types, dynamic sequence), GPT-2 with its attention mask
(full width, 2 of its 12 layers), ResNet-50 and a ViT are exported, deployed by
`tritonkit deploy` with its default --timeout (the repository's load and warm-up take
minutes on two cores: the timeout bounds stalls), warmed, one load-tested at two
concurrencies, and stopped. Exported with --max-batch-size 4: a batch of 32 ResNet-50
images takes seconds a request on a CPU, and the warm-up sends dozens."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient

import tritonkit
from tests import real_models
from tests.conftest import OncePerRun, run_cli
from tritonkit.server.state import load_deployment

pytestmark = pytest.mark.slow

PORTS = ("--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")
MAX_BATCH = 4


MODELS = {"bert_base": real_models.bert_base, "gpt2": real_models.gpt2_2layer,
          "resnet50": real_models.resnet50, "vit": real_models.vit}


def _export(folder: Path) -> str:
    repo = folder / "repo"
    for name, build in MODELS.items():
        module, inputs, *axes = build()
        tritonkit.export(module, inputs, name=name, repository=repo,
                         dynamic_axes=axes[0] if axes else None, max_batch_size=MAX_BATCH)
    return str(repo)


# Made by the first test to ask: the export test below, which runs beside the alone tests
# (tests/conftest.py), not while the deploy test holds the machine.
EXPORTED = OncePerRun("many_models", _export)


@pytest.fixture
def exported(tmp_path_factory) -> Path:
    """The repository of the four models exported (once per run)."""
    return Path(EXPORTED.get(tmp_path_factory))


def test_each_model_is_exported_verified_at_the_batch_limit_it_was_given(exported):
    for name in MODELS:
        report = json.loads((exported / name / "export-report.json").read_text())
        assert report["verification"]["passed"] is True, name
        assert {case["batch"] for case in report["verification"]["cases"]} <= set(
            range(1, MAX_BATCH + 1))
        assert f"max_batch_size: {MAX_BATCH}" in (exported / name / "config.pbtxt").read_text(), name


# alone: four full-size models warmed until steady take both cores for 50 s; beside other
# tests their warm-up needs twice the requests (and the CPU) to become steady.
@pytest.mark.server
@pytest.mark.alone
def test_real_models_deploy_together_with_default_flags_warm_serve_and_stop(exported, tmp_path):
    repo, took = exported, {}
    vit_module, vit_inputs = real_models.vit()[:2]           # seeded: the weights exported
    started = time.monotonic()
    code = run_cli("deploy", "--repository", repo, *PORTS)      # the default --timeout
    took["deploy"] = time.monotonic() - started
    try:
        assert code == 0, "tritonkit deploy failed"
        deployment = load_deployment(repo)
        assert sorted(deployment.models) == sorted(MODELS)
        records = {r["model"]: r for r in deployment.extra["warmup"]}
        for name in MODELS:                                  # each one warmed, none failed
            assert records[name]["warmed"] and records[name]["error"] is None, records[name]
            assert records[name]["requests"] > 0 and records[name]["cold"]

        # Served as exported: the ViT's logits for one image, as PyTorch computes them.
        image = vit_inputs["pixel_values"][:1].numpy()
        client = httpclient.InferenceServerClient(deployment.http_url, network_timeout=120)
        try:
            tensor = httpclient.InferInput("pixel_values", list(image.shape), "FP32")
            tensor.set_data_from_numpy(image)
            served = client.infer("vit", [tensor]).as_numpy("logits")
        finally:
            client.close()
        with torch.no_grad():
            expected = vit_module(pixel_values=torch.from_numpy(image)).logits.numpy()
        np.testing.assert_allclose(served, expected, rtol=1e-3, atol=1e-4)

        out = tmp_path / "loadtest.json"
        started = time.monotonic()
        code = run_cli("loadtest", "--repository", repo, "--model", "bert_base",
                       "--concurrency", "1,4", "--duration", "2",
                       "--shape", "input_ids:16", "--shape", "attention_mask:16",
                       "--shape", "token_type_ids:16", "--json", out)
        took["loadtest"] = time.monotonic() - started
        assert code == 0
        levels = json.loads(out.read_text())["levels"]
        assert [level["level"] for level in levels] == [1, 4]
        assert all(level["ok"] > 0 and level["qps"] > 0 and level["errors"] == {}
                   for level in levels), levels
    finally:
        started = time.monotonic()
        stopped = run_cli("down", "--repository", repo)
        took["down"] = time.monotonic() - started
        print("seconds:", {phase: round(seconds) for phase, seconds in took.items()})
    assert stopped == 0
