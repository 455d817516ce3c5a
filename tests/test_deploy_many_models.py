"""A repository of real, full-size models deploys together with default flags on the local
Triton: BERT-base (mask and token types, dynamic sequence), GPT-2 with its attention mask
(full width, 2 of its 12 layers), ResNet-50 and a ViT are exported, deployed by
`tritonkit deploy` with its default --timeout (the repository's load and warm-up take
minutes on two cores: the timeout bounds stalls), warmed, one load-tested at two
concurrencies, and stopped. Served with a batch limit of 4 (three exported at their default
and configured down, GPT-2 exported at 4): a batch of 32 ResNet-50 images takes seconds a
request on a CPU, and the warm-up sends dozens."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient

import tritonkit
from tests import full_size, real_models
from tests.conftest import OncePerRun, run_cli
from tritonkit.server.state import load_deployment

pytestmark = pytest.mark.slow

PORTS = ("--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")
MAX_BATCH = 4


MODELS = ("bert_base", "gpt2", "resnet50", "vit")
# Exported from the CLI at their default batch limit once per run (tests/full_size.py, for
# the export tests), then configured down to MAX_BATCH, as a user lowers a limit without
# exporting again; GPT-2 is exported here, 2 of its 12 layers, at MAX_BATCH.
CONFIGURED = ("bert_base", "resnet50", "vit")


@pytest.fixture
def exported(tmp_path_factory) -> Path:
    """The repository of the four models (made once per run)."""

    def assemble(folder: Path) -> str:
        repo = folder / "repo"
        for name in CONFIGURED:
            made = full_size.exported(name, tmp_path_factory)
            assert made["code"] == 0, made["said"]
            shutil.copytree(made["model"], repo / name)
            assert run_cli("config", name, "--repository", repo, "--max-batch-size", MAX_BATCH,
                           "--force") == 0
        module, inputs, axes = real_models.gpt2_2layer()
        tritonkit.export(module, inputs, name="gpt2", repository=repo, dynamic_axes=axes,
                         max_batch_size=MAX_BATCH)
        return str(repo)

    # Made by the first test to ask: the one below, which runs beside the alone tests
    # (tests/conftest.py), not while the deploy test holds the machine.
    return Path(OncePerRun("many_models", assemble).get(tmp_path_factory))


def test_each_model_is_verified_and_served_at_the_batch_limit_it_was_given(exported):
    for name in MODELS:
        report = json.loads((exported / name / "export-report.json").read_text())
        assert report["verification"]["passed"] is True, name
        batches = {case["batch"] for case in report["verification"]["cases"]}
        if name in CONFIGURED:          # verified at every batch up to its export's limit
            assert batches >= {1, 16, 32}, name
        else:
            assert batches <= set(range(1, MAX_BATCH + 1)), name
        for config in [exported / name / "config.pbtxt",
                       *(exported / name / "configs").glob("*.pbtxt")]:
            assert f"max_batch_size: {MAX_BATCH}" in config.read_text(), config


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
