"""After a deploy of a fresh export, every model's first request costs what it costs on a
long-warm model: for each model of a repository of real architectures, and for each
instance of a model of several.

What was looked at, and found warm once warm-up has run: the page cache of a new model
file (ONNX Runtime reads the file whole into its own memory when the session is made and
maps none of it), the adapter's imports (all at load), ONNX Runtime's first run of a
shape (warm-up runs every batch size and sequence bucket, so its memory arena has grown
to the largest; a shape within that costs no more on its first run, one beyond it does:
loadtest names such sizes), each python-backend stub's first execution (a burst of one
request per instance, for every shape). The issue's 2-13x after fresh exports did not
come back here.

Measured from outside, as a user meets it: a fresh export, a deploy, a 1 s pause, then
each model's first request (one per instance, sent together) at its smallest and its
largest warmed shape; against the same requests, after the same pause, once the models
are long warm. The models are exported once (three once per run, for the export tests too)
and each trial deploys a new copy of their files (new inodes, written just before the
deploy, as an export leaves them): what the server meets is a fresh export's. The configs
carry no ``model_warmup`` (a config written by hand), so the figures are tritonkit's
warm-up's alone; without it the same probe sees every cold start.
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

import tritonkit
from tests import real_models, small_models
from tests.conftest import add_python_model
from tritonkit.client import Endpoint, example_input
from tritonkit.deploy import deploy_local, down
from tritonkit.model_config import config_to_text, read_config
from tritonkit.warmup import model_instances, warmup_shapes

pytestmark = [pytest.mark.server, pytest.mark.slow, pytest.mark.timing]

PAUSE_S = 1.0
GOAL = 1.5                  # a first request within 1.5x of a long-warm model's, after the same pause
TRIALS = 3                  # fresh exports and deploys whose medians are compared
ATTEMPTS = 2                # rounds of TRIALS, pooled, while a median misses GOAL
WARM_REQUESTS = 30          # what makes the baseline long warm
MAX_BATCH = 4


# Real architectures at small sizes: three exported once per run for the export tests
# (tests/small_models.py), copied here; the ViT exported here, narrower than theirs.
SHARED = ("bert", "gpt2", "mobilenet_v3")
OWN = {"vit": lambda: real_models.vit(layers=2, hidden=64, heads=2, image=64, labels=10)}
MODELS = [*SHARED, *OWN]

# Two instances, each of whose first execution costs 0.2 s (a stub's cold start made
# plain): a warm-up that reached one instance only leaves the other's for a user.
TWINS_CONFIG = """max_batch_size: 8
input { name: "INPUT__0" data_type: TYPE_FP32 dims: 4 }
output { name: "OUTPUT__0" data_type: TYPE_FP32 dims: 4 }
instance_group { count: 2 kind: KIND_CPU }
dynamic_batching { }
"""
TWINS_MODEL = """import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.cold = True

    def execute(self, requests):
        if self.cold:
            self.cold = False
            time.sleep(0.2)
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT__0", pb_utils.get_input_tensor_by_name(r, "INPUT__0").as_numpy())])
                for r in requests]
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """Every model exported, its configs without ``model_warmup``, and 'twins'."""
    repository = tmp_path_factory.mktemp("exported") / "repo"
    for name in SHARED:
        shutil.copytree(small_models.exported(name, tmp_path_factory), repository / name)
    for name, build in OWN.items():
        module, inputs, *axes = build()
        tritonkit.export(module, inputs, name=name, repository=repository,
                         dynamic_axes=axes[0] if axes else None, max_batch_size=MAX_BATCH)
    for name in MODELS:
        for path in [repository / name / "config.pbtxt",
                     *(repository / name / "configs").glob("*.pbtxt")]:
            config = read_config(path)
            config.ClearField("model_warmup")
            path.write_text(config_to_text(config))
    add_python_model(repository, "twins", TWINS_CONFIG, TWINS_MODEL)
    return repository


def _fresh_copy(exported: Path, repository: Path) -> None:
    """The exports' files written anew as ``repository`` (the last trial's removed first)."""
    shutil.rmtree(repository, ignore_errors=True)
    shutil.copytree(exported, repository)


class _Probe:
    """Each model's first requests after a pause: one per instance, sent together, at its
    smallest and its largest warmed shape; the slowest's milliseconds, by (model, shape)."""

    def __init__(self, endpoint: Endpoint, models: list[str]) -> None:
        self.endpoint = endpoint
        client = endpoint.http(network_timeout=300)
        try:
            configs = {name: client.get_model_config(name) for name in models}
        finally:
            client.close()
        self.instances = {name: model_instances(config) for name, config in configs.items()}
        rng = np.random.default_rng(0)
        self.inputs = {}
        for name, config in configs.items():
            shapes = warmup_shapes(config)
            for which, shape in (("smallest", shapes[0]), ("largest", shapes[-1])):
                tensors = []
                for input_name, (datatype, dims) in shape.items():
                    tensor = httpclient.InferInput(input_name, dims, datatype)
                    tensor.set_data_from_numpy(example_input(datatype, dims, rng))
                    tensors.append(tensor)
                self.inputs[name, which] = tensors

    def after_pause(self) -> dict[tuple[str, str], float]:
        figures = {}
        for which in ("smallest", "largest"):
            clients = {name: self.endpoint.http(network_timeout=300, concurrency=count)
                       for name, count in self.instances.items()}
            try:
                for client in clients.values():
                    client.is_server_live()        # connected: no TCP set-up in the figure
                time.sleep(PAUSE_S)
                for name, client in clients.items():
                    started = time.perf_counter()
                    for request in [client.async_infer(name, self.inputs[name, which])
                                    for _ in range(self.instances[name])]:
                        request.get_result()
                    figures[name, which] = (time.perf_counter() - started) * 1e3
            finally:
                for client in clients.values():
                    client.close()
        return figures

    def keep_warm(self) -> None:
        for (name, _which), inputs in self.inputs.items():
            client = self.endpoint.http(network_timeout=300, concurrency=self.instances[name])
            try:
                for _ in range(WARM_REQUESTS):
                    for request in [client.async_infer(name, inputs)
                                    for _ in range(self.instances[name])]:
                        request.get_result()
            finally:
                client.close()


def _fresh_against_long_warm(exported: Path, repository: Path, *,
                             warmup: bool) -> dict[tuple[str, str], float]:
    """One trial: fresh files, a deploy, the probe; then the probe once long warm. The
    first figure over the second, by (model, shape)."""
    fresh, warm = _fresh_and_long_warm(exported, repository, warmup=warmup)
    return {key: fresh[key] / warm[key] for key in fresh}


def _fresh_and_long_warm(exported: Path, repository: Path, *, warmup: bool
                         ) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float]]:
    """One trial's figures (ms, by model and shape): fresh, then long warm."""
    _fresh_copy(exported, repository)
    deployment = deploy_local(repository, http_port=0, grpc_port=0, metrics_port=0,
                              warmup=warmup)
    try:
        probe = _Probe(Endpoint.from_deployment(deployment), deployment.models)
        fresh = probe.after_pause()
        probe.keep_warm()
        warm = probe.after_pause()
    finally:
        down(repository)
    print("fresh / long warm (ms):",
          {f"{m}/{w}": f"{fresh[m, w]:.1f}/{warm[m, w]:.1f}" for m, w in fresh})
    return fresh, warm


def test_after_deploying_a_fresh_export_each_models_first_request_costs_what_a_warm_ones_does(
        exported, tmp_path):
    repository = tmp_path / "repo"
    ratios: dict[tuple[str, str], list[float]] = {}
    for _ in range(ATTEMPTS):
        for _ in range(TRIALS):
            for key, ratio in _fresh_against_long_warm(exported, repository, warmup=True).items():
                ratios.setdefault(key, []).append(ratio)
        medians = {key: statistics.median(values) for key, values in ratios.items()}
        print("median first / long-warm first, by model and shape:",
              {f"{m}/{w}": round(r, 2) for (m, w), r in medians.items()})
        if all(r <= GOAL for r in medians.values()):
            break
    missed = {key: sorted(round(r, 2) for r in ratios[key]) for key, r in medians.items()
              if r > GOAL}
    assert not missed, f"first requests above {GOAL}x a long-warm model's: {missed}"


def test_without_warm_up_the_same_probe_sees_the_cold_starts(exported, tmp_path):
    """The probe above is not blind: without warm-up (and without model_warmup) it sees a
    cold start where one costs more than waking a model after the pause does (~10 ms on a
    busy two-core host): the second instance of 'twins' (0.2 s), and a real model's (its
    session's first run: ~2x at the smallest shape here; GPT-2's first batch at its largest,
    whose vocabulary-wide logits are allocated for the first time, 1.1-2x). The 0.2 s
    is in the first figure whatever the host; waking 'twins' took 10-25 ms on CI's."""
    fresh, warm = _fresh_and_long_warm(exported, tmp_path / "repo", warmup=False)
    ratios = {key: fresh[key] / warm[key] for key in fresh}
    assert fresh["twins", "smallest"] >= 200, (fresh, warm)
    assert warm["twins", "smallest"] < 100, (fresh, warm)
    real = {key: ratio for key, ratio in ratios.items() if key[0] in MODELS}
    assert max(real.values()) > GOAL, ratios      # what the warmed test above would fail
