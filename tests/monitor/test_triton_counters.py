"""`tritonkit monitor` reading Triton's metrics: per model, version and GPU, rates between two
scrapes, counters restarted by a reload or a server restart."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.monitor.conftest import (
    TRITON_2_51_METRICS, _fake_pynvml, _nvml_works, _scraping, _served, _versions,
    triton_exposition)
from tritonkit.monitor.recording import read_monitor_csv
from tritonkit.monitor.triton_metrics import (
    ModelCounters, gpu_increase, increase, model_increase, parse_metrics, rates)


def test_triton_counters_are_read_per_model_with_failures_summed_over_reasons():
    metrics = parse_metrics(TRITON_2_51_METRICS)
    example = metrics.models["example"]
    assert (example.request_success, example.inference_count, example.exec_count) == (5, 10, 5)
    assert example.request_failure == 1
    assert example.compute_infer_duration_us == 93616
    assert example.pending_request_count == 2
    assert metrics.gpus == {"GPU-1": {"nv_gpu_utilization": 0.5}}


def test_rates_give_batch_size_and_queue_and_compute_time_per_request():
    before = ModelCounters(request_success=10, inference_count=10, exec_count=10,
                           queue_duration_us=1000, compute_infer_duration_us=5000)
    after = ModelCounters(request_success=30, inference_count=90, exec_count=20,
                          queue_duration_us=5000, compute_input_duration_us=2000,
                          compute_infer_duration_us=45000, pending_request_count=3)
    r = rates(before, after, seconds=2.0)
    assert r.requests_per_s == 10 and r.inferences_per_s == 40 and r.executions_per_s == 5
    assert r.avg_batch == 8.0
    assert r.queue_us == 200 and r.compute_us == 2100 and r.compute_input_us == 100
    assert r.pending == 3


def test_a_server_restart_reads_as_no_traffic_not_negative_rates():
    r = rates(ModelCounters(inference_count=100, exec_count=50), ModelCounters(), seconds=1.0)
    assert r.inferences_per_s == 0 and r.avg_batch is None


def test_after_a_server_restart_rates_count_from_zero_for_every_counter_alike():
    # a fast model served 1,000 single requests; the server restarts and serves 40
    # requests of batch 8 with longer compute: some counters fell, others rose
    before = ModelCounters(request_success=1000, inference_count=1000, exec_count=1000,
                           queue_duration_us=50_000, compute_infer_duration_us=100_000)
    after = ModelCounters(request_success=40, inference_count=320, exec_count=40,
                          queue_duration_us=80_000, compute_infer_duration_us=400_000)
    r = rates(before, after, seconds=10.0)
    assert r.requests_per_s == after.request_success / 10.0
    assert r.inferences_per_s == after.inference_count / 10.0
    assert r.avg_batch == after.inference_count / after.exec_count
    assert r.queue_us == after.queue_duration_us / after.request_success
    assert r.compute_us == after.compute_infer_duration_us / after.request_success


def test_a_rolled_back_model_update_counts_what_each_version_served_since_the_last_scrape():
    """Triton 2.51 keeps an unloaded version's counters and starts a version loaded again
    from zero (measured: test_triton_keeps_a_swapped_out_versions_counters_and_restarts_a_
    reloaded_one). A model update to version 2 rolled back to version 1: version 1 counted
    7 since its reload, version 2 nothing. Their sum fell (55 to 22), which a restart would
    read as 22 counted; version by version it is 7."""
    before = parse_metrics(_versions({"1": 40, "2": 15}), at=0)
    after = parse_metrics(_versions({"1": 7, "2": 15}), at=10)
    assert after.models["example"].request_success == 22           # the versions summed
    assert increase(before.models["example"], after.models["example"]).request_success == 22
    assert model_increase(before, after, "example").request_success == 7
    # a version new since the last scrape counts from zero; one still counting counts on
    grown = parse_metrics(_versions({"1": 9, "2": 15, "3": 4}), at=20)
    assert model_increase(after, grown, "example").request_success == 2 + 0 + 4


def test_each_gpus_own_traffic_is_kept_by_its_uuid_beside_the_model_totals():
    """A GPU model on two GPUs (one series each, labelled), its model-level series (its
    scheduler's pending requests, no label), and a CPU model (no label)."""
    metrics = parse_metrics(triton_exposition({
        ("resnet", "1", "GPU-aaa"): _served(300, batch=4),
        ("resnet", "1", "GPU-bbb"): _served(100, batch=2),
        ("resnet", "1", ""): _served(0, pending=3),
        ("tokenizer", "1", ""): _served(5000),
    }, gpu_uuids=("GPU-aaa", "GPU-bbb", "GPU-ccc")))
    resnet = metrics.models["resnet"]
    assert (resnet.request_success, resnet.inference_count, resnet.pending_request_count) == (
        400, 300 * 4 + 100 * 2, 3)
    assert metrics.versions["resnet"]["1"].request_success == 400
    assert metrics.models["tokenizer"].request_success == 5000
    on_gpus = metrics.gpu_totals()
    assert set(on_gpus) == {"GPU-aaa", "GPU-bbb"}          # GPU-ccc runs no model
    assert (on_gpus["GPU-aaa"].request_success, on_gpus["GPU-aaa"].inference_count) == (300, 1200)
    assert on_gpus["GPU-bbb"].served == 200                 # the CPU model's 5000 are no GPU's
    assert on_gpus["GPU-aaa"].pending_request_count is None  # the queue is the model's
    assert metrics.total().request_success == 5400


def test_a_server_that_labels_no_series_with_a_gpu_has_no_per_gpu_figures():
    assert parse_metrics(TRITON_2_51_METRICS).gpu_totals() is None
    assert gpu_increase(parse_metrics(TRITON_2_51_METRICS),
                        parse_metrics(TRITON_2_51_METRICS)) is None


def test_model_names_are_shown_as_triton_names_them_brackets_and_all(monkeypatch, capsys):
    """Rich reads "[...]" in a cell as markup: "resnet[fp16]" showed as "resnet", and a
    repository path with "[/...]" in it ended the monitor with an internal error."""
    _scraping(monkeypatch, triton_exposition({("resnet[fp16]", "1", ""): _served(7),
                                              ("/srv/a[/b]/bert", "1", ""): _served(3)}))
    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml", lambda: _fake_pynvml())
    assert run_cli("monitor", "--url", "127.0.0.1:8000", "--once") == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()
             if line.split()[-1:] == ["0"] and ("resnet" in line or "bert" in line)]
    assert names == ["/srv/a[/b]/bert", "resnet[fp16]"]


def test_one_model_name_in_two_namespaces_is_two_models_and_one_reloaded_restarts_alone():
    """Triton started with --model-namespacing=true labels each series with its model's
    "namespace" (core src/constants.h kMetricsLabelModelNamespace): two repositories'
    "resnet" are two models. Summed as one, B's reload (its counters from zero) read as
    a restart of both and counted A's 2 M requests of before again."""
    before = parse_metrics(triton_exposition({("/repo_a/resnet", "1", ""): _served(2_000_000),
                                              ("/repo_b/resnet", "1", ""): _served(500)}), at=0)
    after = parse_metrics(triton_exposition({("/repo_a/resnet", "1", ""): _served(2_000_300),
                                             ("/repo_b/resnet", "1", ""): _served(40)}), at=10)
    assert set(after.models) == {"/repo_a/resnet", "/repo_b/resnet"}
    assert after.models["/repo_a/resnet"].request_success == 2_000_300
    assert model_increase(before, after, "/repo_a/resnet").request_success == 300
    assert model_increase(before, after, "/repo_b/resnet").request_success == 40
    # without namespacing, a model is named as Triton names it
    assert set(parse_metrics(TRITON_2_51_METRICS).models) == {"example"}


def test_per_gpu_increase_counts_a_restarted_version_from_zero_and_a_new_one_whole():
    """Version 1 on GPU-aaa had served 900 and is reloaded (its series start again: 30);
    version 2 appears on GPU-bbb with 50. Read as sums, GPU-aaa fell; series by series
    it ran 30, GPU-bbb 50, and nothing is counted twice."""
    before = parse_metrics(triton_exposition({("resnet", "1", "GPU-aaa"): _served(900),
                                              ("resnet", "1", "GPU-bbb"): _served(400)}), at=0)
    after = parse_metrics(triton_exposition({("resnet", "1", "GPU-aaa"): _served(30),
                                             ("resnet", "1", "GPU-bbb"): _served(410),
                                             ("resnet", "2", "GPU-bbb"): _served(50)}), at=10)
    counted = gpu_increase(before, after)
    assert counted["GPU-aaa"].request_success == 30
    assert counted["GPU-bbb"].request_success == 10 + 50
    # the model's increase too: version 1's sum fell (1300 to 440), which read as its
    # restart counted GPU-bbb's 400 of before a second time
    assert model_increase(before, after, "resnet").request_success == 30 + 10 + 50


def _send_requests(deployment, count: int, batch: int) -> None:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(deployment.http_url)
    for _ in range(count):
        tensor = httpclient.InferInput("INPUT__0", [batch, 4], "FP32")
        tensor.set_data_from_numpy(np.ones((batch, 4), dtype=np.float32))
        client.infer("example", [tensor])


@pytest.mark.server
def test_monitor_shows_real_triton_counters_without_a_gpu(deployed, tmp_path, capsys):
    from tritonkit.monitor.triton_metrics import scrape

    before = scrape(deployed.metrics_url, at=0).models["example"]   # deploy's warm-up counts too
    _send_requests(deployed, count=3, batch=2)
    by_state = tmp_path / "state.csv"
    assert run_cli("monitor", "--repository", deployed.repository, "--once",
                   "--csv", by_state) == 0
    out = capsys.readouterr()
    assert "example" in out.out
    if not _nvml_works():
        assert out.err.count("\n") == 1 and "watching Triton's metrics only" in out.err

    (row,) = list(csv.DictReader(by_state.open()))
    assert float(row["request_success"]) - before.request_success == 3
    # its model runs on CPU instances: Triton labels no series with a GPU, so there are no
    # per-GPU figures (empty, not 0), and the model's traffic is still counted whole
    assert row["gpu_request_success"] == "" and row["gpu_inference_count"] == ""
    assert scrape(deployed.metrics_url, at=0).gpu_totals() is None
    assert float(row["inference_count"]) - before.inference_count == 6
    assert float(row["exec_count"]) - before.exec_count == 3
    assert float(row["compute_infer_duration_us"]) > before.compute_infer_duration_us

    # --url (HTTP address) + --metrics-port finds the same server; two samples give rates
    _send_requests(deployed, count=2, batch=4)
    by_url = tmp_path / "url.csv"
    assert run_cli("monitor", "--url", deployed.http_url, "--metrics-port", deployed.metrics_port,
                   "--interval", "0.5", "--duration", "1.5", "--csv", by_url) == 0
    samples = read_monitor_csv(by_url)
    assert len(samples) >= 2        # four, or fewer where a busy host's sample skipped a slot
    assert samples[-1].triton.request_success - before.request_success == 5
    assert samples[-1].triton.inference_count - before.inference_count == 14


@pytest.mark.server
def test_triton_keeps_a_swapped_out_versions_counters_and_restarts_a_reloaded_one(deployed):
    """What model_increase relies on, on the real server: an update to version 2 leaves
    version 1's counters as they were, and rolling back restarts version 1's from zero."""
    import shutil

    import tritonclient.http as httpclient
    from tritonkit.monitor.triton_metrics import scrape

    served = Path(deployed.extra.get("served_repository") or deployed.repository) / "example"
    client = httpclient.InferenceServerClient(deployed.http_url)

    def counted(version: str, requests: float):
        """A scrape once ``version`` has counted ``requests`` and its count has settled
        (a count lands just after its response, and an earlier test's may land late), or
        the last one within 30 s (a busy host's; the wait ends when the count does)."""
        deadline = time.monotonic() + 30
        last = None
        while True:
            metrics = scrape(deployed.metrics_url, at=time.monotonic())
            done = metrics.versions["example"].get(version)
            now = done.request_success if done else None
            if (now is not None and now >= requests and now == last) or time.monotonic() > deadline:
                return metrics
            last = now
            time.sleep(0.2)

    try:
        before = counted("1", 0).versions["example"]["1"].request_success
        _send_requests(deployed, count=4, batch=1)
        first = counted("1", before + 4)
        shutil.copytree(served / "1", served / "2", symlinks=True)       # the update ...
        client.load_model("example", headers=deployed.repository_headers())
        _send_requests(deployed, count=3, batch=1)
        updated = counted("2", 3)
        shutil.rmtree(served / "2")                                       # ... rolled back
        client.load_model("example", headers=deployed.repository_headers())
        _send_requests(deployed, count=2, batch=1)
        rolled_back = counted("1", 2)
    finally:
        client.close()
    v1_before = first.versions["example"]["1"].request_success
    assert updated.versions["example"]["1"].request_success == v1_before     # kept
    assert updated.versions["example"]["2"].request_success == 3
    assert rolled_back.versions["example"]["1"].request_success == 2         # from zero
    assert rolled_back.versions["example"]["2"].request_success == 3         # kept
    assert model_increase(first, updated, "example").request_success == 3
    assert model_increase(updated, rolled_back, "example").request_success == 2
