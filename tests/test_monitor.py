"""tritonkit monitor: NVML samples, Triton's real metrics, alerts, the CSV it writes."""

from __future__ import annotations

import csv
import http.client
import signal
import subprocess
import sys
import time
from pathlib import Path
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from tests.conftest import ROOT, default_signals, run_cli
from tritonkit.errors import ProfileError, ServerError, UsageError
from tritonkit.monitor.alerts import AlertThresholds, AlertTracker, default_thresholds_path, load_thresholds
from tritonkit.monitor.nvml import GpuSample, GpuUnavailableError, Nvml
from tritonkit.monitor.recording import (COLUMNS, CsvRecorder, read_models_csv, read_monitor_csv,
                                         rows_for)
from tritonkit.monitor.triton_metrics import (ModelCounters, gpu_increase, increase,
                                               model_increase, parse_metrics, rates)
from tritonkit.monitor.watch import Monitor, record, watch
from tritonkit.server.local import free_port

# As tritonserver 2.51.0 (CPU build) serves it, after 5 requests of batch 2.
TRITON_2_51_METRICS = """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="example",version="1"} 5
# HELP nv_inference_request_failure Number of failed inference requests, all batch sizes
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{model="example",reason="OTHER",version="1"} 0
nv_inference_request_failure{model="example",reason="BACKEND",version="1"} 1
# HELP nv_inference_count Number of inferences performed (does not include cached requests)
# TYPE nv_inference_count counter
nv_inference_count{model="example",version="1"} 10
# HELP nv_inference_exec_count Number of model executions performed (does not include cached requests)
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{model="example",version="1"} 5
# TYPE nv_inference_request_duration_us counter
nv_inference_request_duration_us{model="example",version="1"} 94584
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{model="example",version="1"} 308
# TYPE nv_inference_compute_input_duration_us counter
nv_inference_compute_input_duration_us{model="example",version="1"} 230
# TYPE nv_inference_compute_infer_duration_us counter
nv_inference_compute_infer_duration_us{model="example",version="1"} 93616
# TYPE nv_inference_compute_output_duration_us counter
nv_inference_compute_output_duration_us{model="example",version="1"} 407
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="example",version="1"} 2
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-1"} 0.5
# TYPE nv_cpu_utilization gauge
nv_cpu_utilization 1
"""


def _nvml_works() -> bool:
    try:
        with Nvml():
            return True
    except GpuUnavailableError:
        return False


# --- Triton's metrics -------------------------------------------------------------------------

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


def _versions(requests: dict[str, int]) -> str:
    """Triton's request counter for the versions of model "example" it reports."""
    return "# TYPE nv_inference_request_success counter\n" + "".join(
        f'nv_inference_request_success{{model="example",version="{v}"}} {n}\n'
        for v, n in requests.items())


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


# Triton's per-model families, as its core names them (HELP lines from Triton 2.51's own
# /metrics), and the ModelCounters field each one fills.
_FAMILIES = (
    ("nv_inference_request_success", "counter", "request_success"),
    ("nv_inference_request_failure", "counter", "request_failure"),
    ("nv_inference_count", "counter", "inference_count"),
    ("nv_inference_exec_count", "counter", "exec_count"),
    ("nv_inference_request_duration_us", "counter", "request_duration_us"),
    ("nv_inference_queue_duration_us", "counter", "queue_duration_us"),
    ("nv_inference_compute_input_duration_us", "counter", "compute_input_duration_us"),
    ("nv_inference_compute_infer_duration_us", "counter", "compute_infer_duration_us"),
    ("nv_inference_compute_output_duration_us", "counter", "compute_output_duration_us"),
    ("nv_inference_pending_request_count", "gauge", "pending_request_count"),
)


def triton_exposition(series: dict[tuple[str, str, str], ModelCounters],
                      gpu_uuids: tuple[str, ...] = ()) -> str:
    """Triton's /metrics text for these series: (model, version, gpu_uuid) -> counters,
    "" for a series without a GPU. The label set is the one Triton's core gives them
    (triton-inference-server/core src/metric_model_reporter.cc GetMetricLabels: "model",
    "version", and "gpu_uuid" only for a model instance of kind GPU; the model's own
    reporter, which counts its pending requests, has none), in prometheus-cpp's sorted
    order; failures are split by "reason" as Triton 2.51 splits them. A model given as
    "namespace/model" gets the "namespace" label (--model-namespacing=true)."""
    lines = []
    for family, kind, attribute in _FAMILIES:
        lines.append(f"# TYPE {family} {kind}")
        for (model, version, uuid), counters in series.items():
            gpu = f'gpu_uuid="{uuid}",' if uuid else ""
            namespace, _, name = model.rpartition("/")
            model = f'{name}",namespace="{namespace}' if namespace else model
            value = getattr(counters, attribute) or 0
            if family == "nv_inference_request_failure":
                lines += [f'{family}{{{gpu}model="{model}",reason="OTHER",version="{version}"}} 0',
                          f'{family}{{{gpu}model="{model}",reason="BACKEND",version="{version}"}} '
                          f"{value:.0f}"]
            else:
                lines.append(f'{family}{{{gpu}model="{model}",version="{version}"}} {value:.0f}')
    lines.append("# TYPE nv_gpu_utilization gauge")
    lines += [f'nv_gpu_utilization{{gpu_uuid="{uuid}"}} 0.500000' for uuid in gpu_uuids]
    return "\n".join(lines) + "\n"


def _served(requests: float, batch: float = 1, pending: float = 0) -> ModelCounters:
    return ModelCounters(request_success=requests, inference_count=requests * batch,
                         exec_count=requests, request_duration_us=requests * 900,
                         queue_duration_us=requests * 100, compute_input_duration_us=requests * 50,
                         compute_infer_duration_us=requests * 700,
                         compute_output_duration_us=requests * 20,
                         pending_request_count=pending)


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


def test_monitor_shows_each_namespaces_model_on_its_own_row(monkeypatch, capsys):
    text = triton_exposition({("/repo_a/resnet", "1", ""): _served(7),
                              ("/repo_b/resnet", "1", ""): _served(3)})
    _scraping(monkeypatch, text)
    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml", lambda: _fake_pynvml())
    assert run_cli("monitor", "--url", "127.0.0.1:8000", "--once") == 0
    rows = {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines()
            if "resnet" in line}
    assert rows == {"/repo_a/resnet": "7", "/repo_b/resnet": "3"}


def _scraped_every(monkeypatch, seconds: float, *texts: str) -> None:
    """Triton's metrics endpoint answering these texts, one per scrape, ``seconds`` apart
    by the scrapes' own times (what a rate's interval is read from), however fast the
    test runs."""
    answers = enumerate(texts)

    def scrape(url, at):
        k, text = next(answers)
        return parse_metrics(text, at=k * seconds)

    monkeypatch.setattr(sys.modules["tritonkit.monitor.watch"], "scrape", scrape)


def _triton_rows(out: str) -> list[dict[str, str]]:
    """The rows of every Triton table printed, in order, each by its column's header."""
    rows, header = [], None
    for line in out.splitlines():
        words = line.replace("queue ms", "queue_ms").replace("comp ms", "comp_ms").split()
        if words[:1] in (["GPUs"], ["Triton"]):
            header = None
        elif words[:1] == ["model"]:
            header = words
        elif header and words[:1] == ["counts"]:
            header = None       # the table ends: its caption is no row
        elif header and len(words) == len(header):
            rows.append(dict(zip(header, words)))
    return rows


@pytest.mark.slow
def test_the_triton_table_shows_failures_per_second_beside_their_lifetime_count(
        monkeypatch, capsys):
    """Someone paged for errors needs the failures of now: resnet's 30 in the last 10 s
    are 3.0 a second, whatever it failed before; bert, failing nothing, reads 0.0."""
    before = {("resnet", "1", ""): replace(_served(1000), request_failure=500),
              ("bert", "1", ""): _served(70)}
    after = {("resnet", "1", ""): replace(_served(1200), request_failure=530),
             ("bert", "1", ""): _served(90)}
    _scraped_every(monkeypatch, 10, triton_exposition(before), triton_exposition(after))
    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml", lambda: _fake_pynvml())
    assert run_cli("monitor", "--url", "127.0.0.1:8000", "--interval", "1", "--duration", "1") == 0
    out = capsys.readouterr().out
    first = {r["model"]: (r["fail"], r["fail/s"]) for r in _triton_rows(out)[:2]}
    assert first == {"resnet": ("500", "—"), "bert": ("0", "—")}    # no interval yet
    second = {r["model"]: r for r in _triton_rows(out)[2:]}
    resnet, bert = second["resnet"], second["bert"]
    assert (resnet["fail"], resnet["fail/s"], resnet["req/s"]) == ("530", "3.0", "20.0")
    assert (bert["fail"], bert["fail/s"]) == ("0", "0.0")
    assert "counts since load; rates and means since the last sample" in " ".join(out.split())


@pytest.mark.slow
def test_one_failure_in_a_minutes_interval_does_not_read_as_no_failures(monkeypatch, capsys):
    before = {("resnet", "1", ""): replace(_served(1000), request_failure=8)}
    after = {("resnet", "1", ""): replace(_served(4000), request_failure=9)}
    _scraped_every(monkeypatch, 60, triton_exposition(before), triton_exposition(after))
    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml", lambda: _fake_pynvml())
    assert run_cli("monitor", "--url", "127.0.0.1:8000", "--interval", "1", "--duration", "1") == 0
    (_, resnet) = _triton_rows(capsys.readouterr().out)
    assert resnet["fail/s"] == "0.017"                       # 1 / 60 s, not 0.0


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


def _summaries_only(requests: int, request_us: int, queue_us: int, input_us: int, infer_us: int,
                    output_us: int, p50_us: int) -> str:
    """tritonserver 2.51.0 started with --metrics-config counter_latencies=false
    --metrics-config summary_latencies=true, as it served its metrics here (quantiles but
    one left out): its counters stay at 0 however many requests it serves (#8125)."""
    text = """\
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="example",version="1"} 0
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{model="example",reason="OTHER",version="1"} 0
nv_inference_request_failure{model="example",reason="BACKEND",version="1"} 0
# TYPE nv_inference_count counter
nv_inference_count{model="example",version="1"} 0
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{model="example",version="1"} 0
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="example",version="1"} 0
"""
    for family, total in (("request", request_us), ("queue", queue_us), ("compute_input", input_us),
                          ("compute_infer", infer_us), ("compute_output", output_us)):
        name = f"nv_inference_{family}_summary_us"
        text += (f"# TYPE {name} summary\n"
                 f'{name}_count{{model="example",version="1"}} {requests}\n'
                 f'{name}_sum{{model="example",version="1"}} {total}\n')
        if family == "request":
            text += f'{name}{{model="example",version="1",quantile="0.5"}} {p50_us}\n'
    return text


# Two scrapes of one such server: after 3 requests of batch 2, then 5 more of batch 4.
SUMMARIES_BEFORE = _summaries_only(3, 156543, 198, 411, 154018, 1893, p50_us=950)
SUMMARIES_AFTER = _summaries_only(8, 165676, 1067, 538, 159825, 4200, p50_us=1208)


def test_with_triton_latency_counters_off_requests_and_times_come_from_its_summaries():
    before, after = parse_metrics(SUMMARIES_BEFORE), parse_metrics(SUMMARIES_AFTER)
    r = rates(before.models["example"], after.models["example"], seconds=1.0)
    assert r.requests_per_s == 5                      # 8 - 3 served, not the counters' 0
    assert r.queue_us == pytest.approx((1067 - 198) / 5)
    assert r.compute_us == pytest.approx(((538 - 411) + (159825 - 154018) + (4200 - 1893)) / 5)
    # what Triton did not count is unknown, not 0 (no batch of 0, no idle server)
    assert r.avg_batch is None and r.inferences_per_s is None and r.pending is None
    assert any("counter_latencies=false" in note for note in after.notes)


def test_a_summaries_only_server_counts_the_requests_of_its_first_busy_interval():
    # idle, its counters' zeros are true; then busy, and they stay at 0
    idle = parse_metrics(_summaries_only(0, 0, 0, 0, 0, 0, p50_us=0))
    busy = parse_metrics(SUMMARIES_AFTER)
    r = rates(idle.models["example"], busy.models["example"], seconds=2.0)
    assert r.requests_per_s == 8 / 2.0 and r.avg_batch is None
    assert r.queue_us == pytest.approx(1067 / 8)


def test_a_summaries_only_server_whose_counters_count_keeps_its_batch_sizes_mid_request():
    """A Triton that counts with its latency counters off, scraped between a request's
    summary observation and its success count (one family is read after the other): one
    request ahead in the summary is a scrape's timing, not counters stuck at 0."""
    counting = (SUMMARIES_AFTER
                .replace('request_success{model="example",version="1"} 0',
                         'request_success{model="example",version="1"} 7')
                .replace('nv_inference_count{model="example",version="1"} 0',
                         'nv_inference_count{model="example",version="1"} 28')
                .replace('exec_count{model="example",version="1"} 0',
                         'exec_count{model="example",version="1"} 7'))
    example = parse_metrics(counting).models["example"]
    assert (example.inference_count, example.exec_count) == (28, 7)
    assert example.request_success == 8                  # the summary's count: the later one


def test_a_summaries_only_model_with_the_response_cache_counts_requests_by_its_queue_summary():
    """Triton leaves the request summary out for a model with the response cache (core
    src/metric_model_reporter.cc InitializeSummaries); its queue summary still counts
    every request. Read as "no summaries", the model served nothing and took no time."""
    cached = "".join(line + "\n" for line in SUMMARIES_AFTER.splitlines()
                     if "nv_inference_request_summary_us" not in line)
    example = parse_metrics(cached).models["example"]
    assert example.request_success == 8 and example.request_duration_us is None
    assert example.queue_duration_us == 1067
    assert not any("so are its summaries" in n for n in parse_metrics(cached).notes)


def _on_gpu(text: str, uuid: str, model: str = "example") -> str:
    """A recorded exposition's series moved onto GPU ``uuid`` (and renamed ``model``)."""
    return text.replace('model="example"', f'gpu_uuid="{uuid}",model="{model}"')


def test_a_summaries_only_model_busy_on_one_gpu_and_idle_on_another_gets_one_note():
    """Its idle GPU's series reads 0 in counters and summaries alike, which alone would be
    a Triton that counts: two notes for one model, one saying its batch sizes are known."""
    idle = _summaries_only(0, 0, 0, 0, 0, 0, p50_us=0)
    metrics = parse_metrics(_on_gpu(SUMMARIES_AFTER, "GPU-aaa") + _on_gpu(idle, "GPU-bbb"))
    (note,) = metrics.notes
    assert "batch sizes, failures and pending requests of example are unknown" in note
    assert metrics.gpu_totals()["GPU-bbb"].inference_count is None
    assert metrics.models["example"].request_success == 8


def test_a_summaries_only_servers_note_names_the_models_whose_counters_count_nothing():
    idle = _summaries_only(0, 0, 0, 0, 0, 0, p50_us=0)
    metrics = parse_metrics(_on_gpu(SUMMARIES_AFTER, "GPU-aaa", model="resnet")
                            + _on_gpu(idle, "GPU-aaa", model="bert"))
    (note,) = metrics.notes
    assert "of resnet are unknown" in note and "bert" not in note
    assert metrics.models["bert"].inference_count == 0    # its 0 is not 2.51's bug yet


def test_a_summaries_only_server_is_watched_as_serving_and_said_once(monkeypatch, capsys):
    _scraping(monkeypatch, SUMMARIES_BEFORE, SUMMARIES_AFTER, SUMMARIES_AFTER)
    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml", lambda: _fake_pynvml())
    # a slot a slow sample ran past is skipped: 0.25 s apart, a busy host still takes two
    assert run_cli("monitor", "--url", "127.0.0.1:8000", "--interval", "0.25",
                   "--duration", "0.5") == 0
    out = capsys.readouterr()
    assert out.err.count("counter_latencies=false") == 1          # one warning, not per sample
    example = [line.split() for line in out.out.splitlines() if line.split()[:1] == ["example"]]
    assert example[1][1] == "8" and example[1][2] == "—"          # requests, inferences unknown


# A Triton server's GPU gauges as it served them on an A100 40 GB (a scrape quoted in a
# public issue thread), with the example model's counters.
A100_SERVER = TRITON_2_51_METRICS.split("# TYPE nv_gpu_utilization")[0] + """\
# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-c06bbf33-c250-ca45-579b-19134b518844"} 0.000000
# HELP nv_gpu_memory_total_bytes GPU total memory, in bytes
# TYPE nv_gpu_memory_total_bytes gauge
nv_gpu_memory_total_bytes{gpu_uuid="GPU-c06bbf33-c250-ca45-579b-19134b518844"} 42949672960.000000
# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes
# TYPE nv_gpu_memory_used_bytes gauge
nv_gpu_memory_used_bytes{gpu_uuid="GPU-c06bbf33-c250-ca45-579b-19134b518844"} 33763098624.000000
# HELP nv_gpu_power_usage GPU power usage in watts
# TYPE nv_gpu_power_usage gauge
nv_gpu_power_usage{gpu_uuid="GPU-c06bbf33-c250-ca45-579b-19134b518844"} 51.091000
# HELP nv_gpu_power_limit GPU power management limit in watts
# TYPE nv_gpu_power_limit gauge
nv_gpu_power_limit{gpu_uuid="GPU-c06bbf33-c250-ca45-579b-19134b518844"} 400.000000
nv_energy_consumption{gpu_uuid="GPU-c06bbf33-c250-ca45-579b-19134b518844"} 3594017.400000
"""
A100_UUID = "GPU-c06bbf33-c250-ca45-579b-19134b518844"


def _scraping(monkeypatch, *texts: str) -> None:
    """Triton's metrics endpoint answering these recorded texts, one per scrape."""
    answers = iter(texts)
    monkeypatch.setattr(sys.modules["tritonkit.monitor.watch"], "scrape",   # the module, not
                        lambda url, at: parse_metrics(next(answers), at=at))  # watch()


def test_a_server_watched_from_another_gpu_host_shows_the_servers_gpus(monkeypatch):
    _scraping(monkeypatch, A100_SERVER)
    with Nvml(_fake_pynvml()) as nvml:         # this host's own card: a P100, GPU-abc
        snapshot = Monitor(nvml, "http://gpu-host:8002/metrics", LIMITS).snapshot()
    (gpu,) = snapshot.gpus
    assert gpu.uuid == A100_UUID and gpu.memory_total_mib == 40 * 1024
    assert gpu.utilization_pct == 0.0 and gpu.power_w == pytest.approx(51.091)
    assert gpu.memory_pct == pytest.approx(100 * 33763098624 / 42949672960)
    assert any("not the server's" in note for note in snapshot.notes)
    # the server's GPU is this host's: NVML's sample stays, with its temperature and clocks
    _scraping(monkeypatch, A100_SERVER.replace(A100_UUID, "GPU-abc"))
    with Nvml(_fake_pynvml()) as nvml:
        (own,) = Monitor(nvml, "http://127.0.0.1:8002/metrics", LIMITS).snapshot().gpus
    assert own.name == "Tesla P100-PCIE-16GB" and own.temperature_c == 71


def test_without_a_driver_here_the_servers_gpu_gauges_are_recorded_and_diagnosed(
        monkeypatch, tmp_path, capsys):
    no_driver = _fake_pynvml()
    no_driver.nvmlInit = _raising("DRIVER_NOT_LOADED")
    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml", lambda: no_driver)
    _scraping(monkeypatch, A100_SERVER)
    recording = tmp_path / "remote.csv"
    assert run_cli("monitor", "--url", "gpu-host:8000", "--once", "--csv", recording) == 0
    (row,) = read_monitor_csv(recording)
    assert row.gpu == 0 and row.util_pct == 0.0 and row.mem_total_mib == 40 * 1024
    assert row.triton.request_success == 5
    capsys.readouterr()
    assert run_cli("diagnose", recording, "--gpu", "a10") == 0      # a GPU sample to read


def _scraping_then_failing(monkeypatch, text: str, fail_at: int) -> None:
    """Triton's metrics answering ``text``, except the ``fail_at``-th scrape (0-based): the
    server restarting, say."""
    scrapes = iter(range(1_000))

    def scrape(url, at):
        if next(scrapes) == fail_at:
            raise ServerError("cannot reach Triton's metrics (Connection refused)")
        return parse_metrics(text, at=at)

    monkeypatch.setattr(sys.modules["tritonkit.monitor.watch"], "scrape", scrape)


def test_a_remote_servers_gpus_stay_the_servers_while_a_scrape_fails(monkeypatch):
    """Once this host's GPUs are known not to be the server's, a failed scrape (a restart)
    records no GPU for that sample, not this host's own card as GPU 0 of the server."""
    _scraping_then_failing(monkeypatch, A100_SERVER, fail_at=1)
    with Nvml(_fake_pynvml()) as nvml:         # this host's own card: a P100, GPU-abc
        monitor = Monitor(nvml, "http://gpu-host:8002/metrics", LIMITS)
        first, failed, back = (monitor.snapshot() for _ in range(3))
    assert [g.uuid for g in first.gpus] == [A100_UUID]
    assert failed.triton_error and failed.gpus == []
    assert [row.gpu for row in failed.rows()] == [None]
    assert [g.uuid for g in back.gpus] == [A100_UUID]


def test_a_failed_scrape_mid_recording_does_not_end_a_live_recording_without_a_driver(
        monkeypatch):
    """Without NVML the GPUs come from Triton's gauges: a scrape that fails after the first
    (the server restarting) leaves one sample without them, and the recording goes on."""
    _scraping_then_failing(monkeypatch, A100_SERVER, fail_at=1)
    clock = _Clock()
    monitor = Monitor(None, "http://gpu-host:8002/metrics", LIMITS, clock=clock,
                      wall_clock=lambda: 0.0)
    recording = record(monitor, interval=1, duration=3, sleep=clock.sleep)
    assert not recording.interrupted
    assert [(round(r.elapsed_s), r.gpu) for r in recording.rows] == [(0, 0), (1, None), (2, 0),
                                                                     (3, 0)]


def test_a_live_recording_keeps_each_samples_note_once(monkeypatch):
    """diagnose --live says where the GPUs' figures came from, as monitor does."""
    _scraping_then_failing(monkeypatch, A100_SERVER, fail_at=99)
    clock = _Clock()
    with Nvml(_fake_pynvml()) as nvml:         # this host's own card is not the server's
        monitor = Monitor(nvml, "http://gpu-host:8002/metrics", LIMITS, clock=clock,
                          wall_clock=lambda: 0.0)
        recording = record(monitor, interval=1, duration=3, sleep=clock.sleep)
    server_gpus = [n for n in recording.notes if "not the server's" in n]
    assert len(recording.rows) == 4 and len(server_gpus) == 1


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
                   "--interval", "0.5", "--duration", "0.5", "--csv", by_url) == 0   # (see 0.25 above)
    samples = read_monitor_csv(by_url)
    assert len(samples) == 2
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


# A python-backend model that fails as a backend does: it raises on a request whose first
# value is -9 (Triton counts a failure), and answers -7 with an error response (which
# Triton 2.51 counts as a success: server#7713).
FLAKY_MODEL = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT__0").as_numpy()
            if x[0, 0] == -9:
                raise RuntimeError("a backend failure")
            if x[0, 0] == -7:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("an error response")))
                continue
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT__0", np.zeros((x.shape[0], 3), np.float32))]))
        return responses
"""


@pytest.fixture(scope="module")
def failing_server(tmp_path_factory):
    """The real local Triton serving the example, "flaky" (FLAKY_MODEL) and "pipeline", an
    ensemble of one step: flaky."""
    import shutil

    from tests.conftest import EXAMPLE_REPOSITORY
    from tests.test_warmup import ENSEMBLE
    from tritonkit.server.state import load_deployment

    repo = tmp_path_factory.mktemp("failing") / "repo"
    shutil.copytree(EXAMPLE_REPOSITORY, repo,
                    ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    (repo / "flaky" / "1").mkdir(parents=True)
    (repo / "flaky" / "config.pbtxt").write_text(
        (repo / "example" / "config.pbtxt").read_text().replace('"example"', '"flaky"'))
    (repo / "flaky" / "1" / "model.py").write_text(FLAKY_MODEL)
    (repo / "pipeline" / "1").mkdir(parents=True)
    (repo / "pipeline" / "config.pbtxt").write_text(
        ENSEMBLE.replace('model_name: "example"', 'model_name: "flaky"'))
    assert run_cli("deploy", "--repository", repo, "--http-port", "0", "--grpc-port", "0",
                   "--metrics-port", "0", "--timeout", "60") == 0, "tritonkit deploy failed"
    yield load_deployment(repo)
    run_cli("down", "--repository", repo)


def _infer_failing(deployment, model: str, first: float, count: int, width: int = 4) -> int:
    """Send ``count`` requests of one row ``[first, 1, 1, ...]`` (``width`` values) to
    ``model``; how many the client saw fail."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    client = httpclient.InferenceServerClient(deployment.http_url)
    failed = 0
    for _ in range(count):
        values = np.ones((1, width), dtype=np.float32)
        values[0, 0] = first
        tensor = httpclient.InferInput("X" if model == "pipeline" else "INPUT__0",
                                       list(values.shape), "FP32")
        tensor.set_data_from_numpy(values)
        try:
            client.infer(model, [tensor])
        except InferenceServerException:
            failed += 1
    client.close()
    return failed


def _settled(deployment, counted: dict[tuple[str, str], float]):
    """A scrape once every (model, counter) has reached its count (a count lands just after
    its response), or the last one within 30 s (a busy host's; the wait ends when the
    counts do)."""
    from tritonkit.monitor.triton_metrics import scrape

    deadline = time.monotonic() + 30
    while True:
        metrics = scrape(deployment.metrics_url, at=time.monotonic())
        if time.monotonic() > deadline or all(
                getattr(metrics.models[model], name) >= value
                for (model, name), value in counted.items()):
            return metrics


@pytest.mark.server
def test_failures_on_the_real_triton_are_shown_per_second_between_two_samples(failing_server):
    monitor = Monitor(None, failing_server.metrics_url, LIMITS)
    first = monitor.snapshot()
    failed_before = first.triton.models["flaky"].request_failure
    assert _infer_failing(failing_server, "flaky", -9, count=3) == 3
    _settled(failing_server, {("flaky", "request_failure"): failed_before + 3})
    second = monitor.snapshot()
    seconds = second.triton.at - first.triton.at
    assert second.triton.models["flaky"].request_failure == failed_before + 3
    assert second.model_rates["flaky"].failures_per_s == pytest.approx(3 / seconds)
    assert second.model_rates["example"].failures_per_s == 0


@pytest.mark.server
def test_triton_counts_no_failure_for_a_bad_input_nor_a_python_models_error_response(
        failing_server):
    """What fail/s cannot show (said in triton_metrics' docstring): a request refused for
    its shape never reaches a model, and a python model's error response counts as a
    success (server#7713): 0 failures a second is no proof that clients see none."""
    before = _settled(failing_server, {})
    assert _infer_failing(failing_server, "flaky", 1, count=2, width=5) == 2     # HTTP 400
    assert _infer_failing(failing_server, "flaky", -7, count=3) == 3             # HTTP 500
    after = _settled(failing_server, {
        ("flaky", "request_success"): before.models["flaky"].request_success + 3})
    assert after.models["flaky"].request_failure == before.models["flaky"].request_failure
    assert after.models["flaky"].request_success == before.models["flaky"].request_success + 3


@pytest.mark.server
def test_triton_counts_an_ensembles_request_in_every_model_it_runs_so_no_total_is_shown(
        failing_server, capsys):
    """Why the Triton table has no total row: 5 requests to an ensemble of one step count
    5 in the ensemble and 5 in the step, and a failed one counts twice in the ensemble and
    once in the step. Summed over models: 10 requests and 3 failures, where clients sent
    6 and saw 1 fail."""
    before = _settled(failing_server, {})
    assert _infer_failing(failing_server, "pipeline", 1, count=5) == 0
    assert _infer_failing(failing_server, "pipeline", -9, count=1) == 1
    expected = {("pipeline", "request_success"): 5, ("flaky", "request_success"): 5,
                ("pipeline", "request_failure"): 2, ("flaky", "request_failure"): 1}
    was = {(model, name): getattr(before.models[model], name) for model, name in expected}
    after = _settled(failing_server, {key: was[key] + n for key, n in expected.items()})
    assert {(model, name): getattr(after.models[model], name) - was[(model, name)]
            for model, name in expected} == expected
    assert run_cli("monitor", "--url", failing_server.http_url,
                   "--metrics-port", failing_server.metrics_port, "--once") == 0
    assert sorted(r["model"] for r in _triton_rows(capsys.readouterr().out)) == [
        "example", "flaky", "pipeline"]


def _pipeline_served(deployment, count: int, before) -> None:
    """Send ``count`` requests to the ensemble "pipeline" and wait until both it and its
    step "flaky" have counted them (from the scrape ``before``)."""
    assert _infer_failing(deployment, "pipeline", 1, count=count) == 0
    _settled(deployment, {(model, "request_success"): before.models[model].request_success + count
                          for model in ("pipeline", "flaky")})


@pytest.mark.server
def test_an_ensembles_requests_count_once_in_the_server_totals_and_whole_in_its_own_row(
        failing_server):
    """The ensemble runs nothing itself: its step's counters are the server's work, so 5
    requests to it are 5 in the totals and in what the GPUs' alerts see served, not 10;
    its own row still says clients sent it 5."""
    monitor = Monitor(None, failing_server.metrics_url, LIMITS, http_url=failing_server.http_url)
    _settled(failing_server, {})
    first = monitor.snapshot()
    lifetime = {name: c.request_success for name, c in first.triton.models.items()}
    assert first.triton_totals.request_success == lifetime["example"] + lifetime["flaky"]
    _pipeline_served(failing_server, 5, first.triton)
    second = monitor.snapshot()
    seconds = second.triton.at - first.triton.at
    assert second.triton_totals.request_success - first.triton_totals.request_success == 5
    assert second.served == 5
    assert second.model_rates["pipeline"].requests_per_s == pytest.approx(5 / seconds)
    assert second.model_rates["flaky"].requests_per_s == pytest.approx(5 / seconds)
    assert not [n for n in first.notes + second.notes if "ensemble" in n]


@pytest.mark.server
def test_the_monitor_csv_counts_an_ensembles_requests_once_in_its_server_totals(
        failing_server, tmp_path):
    """Both ways of naming the server give monitor its HTTP address, which tells the
    ensemble apart: --repository and --url."""
    before = _settled(failing_server, {})
    assert run_cli("monitor", "--repository", failing_server.repository, "--once",
                   "--csv", tmp_path / "before.csv") == 0
    _pipeline_served(failing_server, 5, before)
    assert run_cli("monitor", "--url", failing_server.http_url, "--metrics-port",
                   failing_server.metrics_port, "--once", "--csv", tmp_path / "after.csv") == 0
    (was,), (now,) = (read_monitor_csv(tmp_path / f"{n}.csv") for n in ("before", "after"))
    assert now.triton.request_success - was.triton.request_success == 5
    assert now.triton.inference_count - was.triton.inference_count == 5


@pytest.mark.server
def test_an_http_proxy_in_the_environment_does_not_stand_between_monitor_and_triton(
        failing_server, monkeypatch):
    """A proxy set for the internet (http_proxy, as on corporate and CI hosts) is not asked
    for Triton's ports, as tritonclient does not ask it: the metrics are scraped and the
    ensemble told apart. Through urllib's proxy support the scrape failed, blaming the
    server, and the ensemble counted twice."""
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")    # nothing listens there
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monitor = Monitor(None, failing_server.metrics_url, LIMITS, http_url=failing_server.http_url)
    snapshot = monitor.snapshot()
    assert {"example", "flaky", "pipeline"} <= set(snapshot.triton.models)
    assert not [note for note in snapshot.notes if "ensemble" in note]
    lifetime = {name: c.request_success for name, c in snapshot.triton.models.items()}
    assert snapshot.triton_totals.request_success == lifetime["example"] + lifetime["flaky"]


@pytest.mark.server
def test_the_config_of_each_model_version_is_asked_once_as_it_appears(failing_server,
                                                                        monkeypatch):
    from tritonkit import client

    asked = []
    urlopen = client.open_direct

    def spied(url, *args, **kwargs):
        asked.extend([url] if url.endswith("/config") else [])
        return urlopen(url, *args, **kwargs)

    monkeypatch.setattr(client, "open_direct", spied)
    monitor = Monitor(None, failing_server.metrics_url, LIMITS, http_url=failing_server.http_url)
    for _ in range(3):
        monitor.snapshot()
    assert sorted(url.split("/v2/models/")[1] for url in asked) == [
        "example/versions/1/config", "flaky/versions/1/config", "pipeline/versions/1/config"]


@pytest.mark.server
@pytest.mark.parametrize("where", ["metrics port", "closed port"])
def test_where_the_http_port_cannot_be_asked_ensembles_count_as_before_and_it_is_said(
        failing_server, where):
    """Watched with only the metrics port reachable (given for the HTTP address, which it
    answers with no model config; or an HTTP port nothing listens on): monitoring goes on,
    the totals count the ensemble's requests again in its step, and a note says so."""
    address = (failing_server.metrics_url.removeprefix("http://").removesuffix("/metrics")
               if where == "metrics port" else f"127.0.0.1:{free_port()}")
    monitor = Monitor(None, failing_server.metrics_url, LIMITS, http_url=address)
    first = monitor.snapshot()
    _pipeline_served(failing_server, 5, first.triton)
    second = monitor.snapshot()
    assert second.triton_totals.request_success - first.triton_totals.request_success == 10
    (note,) = [n for n in first.notes if "ensembles" in n]
    assert address in note and "again in each model it runs" in note
    assert note in second.notes         # the same words each sample: the CLI says it once


@pytest.mark.server
def test_monitor_watched_through_the_metrics_port_alone_says_once_it_cannot_tell_ensembles(
        failing_server, capsys):
    metrics = failing_server.metrics_url.removeprefix("http://").removesuffix("/metrics")
    assert run_cli("monitor", "--url", metrics, "--metrics-port", failing_server.metrics_port,
                   "--interval", "0.25", "--duration", "0.5") == 0
    out = capsys.readouterr()
    assert out.err.count("could not ask Triton which models are ensembles") == 1
    # three models a sample; three samples, or two where a busy host's sample ran past a
    # slot (skipped, not caught up on)
    assert len(_triton_rows(out.out)) in (2 * 3, 3 * 3)


@pytest.mark.server
def test_an_ensemble_unloaded_before_the_monitor_started_is_left_out_once_loaded_again(
        failing_server):
    """Triton answers 404 for an unloaded model's config (and keeps some of its counters):
    it counts nothing while unloaded, and is asked again once its counters move."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(failing_server.http_url)
    headers = failing_server.repository_headers()
    try:
        client.unload_model("pipeline", headers=headers)
        monitor = Monitor(None, failing_server.metrics_url, LIMITS,
                          http_url=failing_server.http_url)
        unloaded = monitor.snapshot()
        client.load_model("pipeline", headers=headers)
        loaded = monitor.snapshot()
        _pipeline_served(failing_server, 5, loaded.triton)
        served = monitor.snapshot()
    finally:
        client.load_model("pipeline", headers=headers)
        client.close()
    # Triton keeps the unloaded ensemble's failure counters alone: left out, they leave the
    # totals known
    assert unloaded.triton.models["pipeline"].request_success is None
    assert unloaded.triton_totals.request_success == sum(
        unloaded.triton.models[m].request_success for m in ("example", "flaky"))
    assert served.triton_totals.request_success - loaded.triton_totals.request_success == 5
    assert not [n for n in loaded.notes + served.notes if "ensembles" in n]
    assert not [n for n in unloaded.notes if "latency counters" in n]     # nor a wrong cause


@pytest.mark.server
def test_ctrl_c_is_how_monitor_ends_so_it_exits_0_and_says_what_it_wrote(example_server, tmp_path):
    recording = tmp_path / "gpu.csv"
    monitor = subprocess.Popen(
        [sys.executable, "-m", "tritonkit", "monitor", "--repository", example_server.repository,
         "--interval", "0.2", "--csv", str(recording)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        preexec_fn=default_signals)
    try:
        end = time.monotonic() + 30
        while not (recording.exists() and len(recording.read_text().splitlines()) >= 3):
            assert time.monotonic() < end and monitor.poll() is None, monitor.stderr.read()
            time.sleep(0.1)
        monitor.send_signal(signal.SIGINT)
        out, err = monitor.communicate(timeout=30)
    finally:
        monitor.kill()
    assert monitor.returncode == 0, err
    assert "error" not in err
    samples = len(read_monitor_csv(recording))
    assert f"{samples} samples written to {recording}" in " ".join(out.split())


def test_an_existing_csv_is_kept_unless_force(tmp_path, capsys):
    recording = tmp_path / "gpu.csv"
    recording.write_text("a day of samples\n")
    assert run_cli("monitor", "--url", "127.0.0.1:1", "--metrics-port", free_port(), "--once",
                   "--csv", recording) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "--force" in err
    assert recording.read_text() == "a day of samples\n"
    run_cli("monitor", "--url", "127.0.0.1:1", "--metrics-port", free_port(), "--once",
            "--csv", recording, "--force")      # no server there: only the header is written
    assert recording.read_text().startswith("timestamp,elapsed_s,")


def test_without_a_driver_monitor_says_so_in_one_line_and_fails(capsys):
    if _nvml_works():
        pytest.skip("this host has an NVIDIA driver")
    assert run_cli("monitor", "--once") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("error: no NVIDIA driver") and err[1].startswith("hint: ")
    assert len(err) == 2


def test_a_wrong_metrics_address_is_named(capsys, tmp_path):
    port = free_port("127.0.0.1")
    assert run_cli("monitor", "--url", "127.0.0.1:1", "--metrics-port", port, "--once") == 1
    assert f"http://127.0.0.1:{port}/metrics did not answer" in capsys.readouterr().err


class _Answer:
    """What urlopen returns: a response whose body is ``text``, or whose read fails with
    ``error`` (the server going away mid-response)."""

    def __init__(self, text: str = "", error: Exception | None = None) -> None:
        self.text, self.error = text, error

    def __enter__(self): return self
    def __exit__(self, *exc): pass

    def read(self) -> bytes:
        if self.error:
            raise self.error
        return self.text.encode()


def _answering(monkeypatch, *answers) -> None:
    """urlopen answering each scrape in turn: an _Answer, or an exception it raises; no
    HTTP port answers (which models are ensembles is not known)."""
    import urllib.error

    queue = iter(answers)

    def urlopen(url, timeout):
        if not url.endswith("/metrics"):
            raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
        answer = next(queue)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr("tritonkit.client.open_direct", urlopen)


@pytest.mark.parametrize("cut", [
    _Answer(error=http.client.IncompleteRead(b"# TYPE nv_inference_count counter\n", 900)),
    http.client.BadStatusLine(""),
    http.client.RemoteDisconnected("Remote end closed connection without response")],
    ids=["IncompleteRead", "BadStatusLine", "RemoteDisconnected"])
def test_a_server_restarting_mid_response_is_a_scrape_that_failed(monkeypatch, cut):
    from tritonkit.monitor.triton_metrics import scrape

    _answering(monkeypatch, cut)
    with pytest.raises(ServerError, match="http://h:8002/metrics did not answer"):
        scrape("http://h:8002/metrics", at=0)


def test_a_recording_goes_on_through_a_scrape_cut_off_mid_response(monkeypatch, capsys):
    cut = http.client.IncompleteRead(b"# TYPE nv_inference_count counter\n", 900)
    _answering(monkeypatch, _Answer(TRITON_2_51_METRICS), _Answer(error=cut),
               _Answer(TRITON_2_51_METRICS))
    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml", lambda: _fake_pynvml())
    assert run_cli("monitor", "--url", "127.0.0.1:8000", "--interval", "0.05",
                   "--duration", "0.1") == 0
    out = capsys.readouterr()
    assert "internal error" not in out.err
    assert "Triton: Triton's metrics endpoint" in out.out and "IncompleteRead" in out.out


# --- NVML -------------------------------------------------------------------------------------

def _nvml_error(name: str) -> Exception:
    """The error pynvml raises for NVML's NVML_ERROR_<name> (its own class and text)."""
    import pynvml

    return pynvml.NVMLError(getattr(pynvml, f"NVML_ERROR_{name}"))


def _raising(name: str):
    """An NVML call that fails with NVML_ERROR_<name>."""
    def call(*_args):
        raise _nvml_error(name)
    return call


def _fake_pynvml(power_supported: bool = True, clock_events: int = 0) -> SimpleNamespace:
    """pynvml's surface as a Tesla P100 under load would answer it (no GPU on CI), raising
    pynvml's own errors; ``clock_events``: NVML's clocks-event reasons bitmask."""
    import pynvml

    def power(_handle):
        if not power_supported:
            raise _nvml_error("NOT_SUPPORTED")
        return 187_500  # mW

    return SimpleNamespace(
        NVMLError=pynvml.NVMLError, NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2,
        NVML_PCIE_UTIL_TX_BYTES=0, NVML_PCIE_UTIL_RX_BYTES=1,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlSystemGetDriverVersion=lambda: "535.104.05",
        nvmlDeviceGetCudaComputeCapability=lambda h: (6, 0),
        nvmlDeviceGetName=lambda h: b"Tesla P100-PCIE-16GB",
        nvmlDeviceGetUUID=lambda h: "GPU-abc",
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=93, memory=40),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=12 * 2**30, total=16 * 2**30),
        nvmlDeviceGetTemperature=lambda h, sensor: 71,
        nvmlDeviceGetPowerUsage=power,
        nvmlDeviceGetClockInfo=lambda h, clock: {1: 1328, 2: 715}[clock],
        nvmlDeviceGetPcieThroughput=lambda h, counter: {1: 12_000_000, 0: 500_000}[counter],
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 3,
        nvmlDeviceGetCurrPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: clock_events,
        NVML_FEATURE_ENABLED=1, nvmlDeviceGetRetiredPagesPendingStatus=lambda h: 0,
        # row remapping is Ampere's; Pascal retires pages
        nvmlDeviceGetRemappedRows=_raising("NOT_SUPPORTED"), nvmlDeviceGetEccMode=lambda h: [1, 1],
    )


def _failing_from_now_on(fake: SimpleNamespace, error: str) -> None:
    """Every per-GPU call of ``fake`` fails with NVML_ERROR_<error> from now on."""
    for name in [n for n in vars(fake) if n.startswith("nvmlDevice")]:
        setattr(fake, name, _raising(error))


def test_nvml_samples_are_converted_to_mib_watts_and_decimal_mb_per_s():
    with Nvml(_fake_pynvml()) as nvml:
        (gpu,) = nvml.sample()
        (identity,) = nvml.identities()
        assert nvml.driver_version() == "535.104.05"
    assert identity.name == "Tesla P100-PCIE-16GB" and identity.compute_capability == 6.0
    assert identity.memory_total_mib == 16 * 1024
    assert gpu.utilization_pct == 93 and gpu.memory_pct == 75.0
    assert gpu.memory_used_mib == 12 * 1024 and gpu.power_w == 187.5
    assert (gpu.sm_clock_mhz, gpu.memory_clock_mhz, gpu.temperature_c) == (1328, 715, 71)
    assert gpu.pcie_rx_mb_s == pytest.approx(12_288.0)   # 12e6 KB/s * 1024 B
    assert gpu.pcie_tx_mb_s == pytest.approx(512.0)
    assert (gpu.pcie_gen, gpu.pcie_width) == (3, 16)


def test_clock_event_reasons_are_a_bitmask_of_which_only_slowdowns_count():
    import pynvml

    held = (pynvml.nvmlClocksEventReasonGpuIdle | pynvml.nvmlClocksEventReasonSwPowerCap
            | pynvml.nvmlClocksEventReasonHwThermalSlowdown)
    with Nvml(_fake_pynvml(clock_events=held)) as nvml:
        (gpu,) = nvml.sample()
    assert gpu.clock_events == held
    assert gpu.slowdowns == ("sw_power_cap", "hw_thermal")     # idle is no slowdown
    with Nvml(_fake_pynvml(clock_events=pynvml.nvmlClocksEventReasonGpuIdle)) as nvml:
        assert nvml.sample()[0].slowdowns == ()


def test_a_reading_the_card_does_not_support_is_empty_not_an_error():
    with Nvml(_fake_pynvml(power_supported=False)) as nvml:
        (gpu,) = nvml.sample()
    assert gpu.power_w is None and gpu.utilization_pct == 93 and gpu.error is None


@pytest.mark.parametrize("error", ["TIMEOUT", "IN_USE", "VGPU_ECC_NOT_SUPPORTED", "NOT_SUPPORTED"])
def test_a_reading_that_fails_for_another_reason_is_empty_and_the_card_not_lost(error):
    """A PCIe counter timing out once, or a vGPU's ECC: not a card to reset."""
    fake = _fake_pynvml()
    fake.nvmlDeviceGetPowerUsage = _raising(error)
    with Nvml(fake) as nvml:
        monitor = Monitor(nvml, None, LIMITS)
        snapshot = monitor.snapshot()
    (gpu,) = snapshot.gpus
    assert gpu.error is None and gpu.power_w is None and gpu.utilization_pct == 93
    assert snapshot.alerts == []


@pytest.mark.parametrize("error", ["GPU_IS_LOST", "DRIVER_NOT_LOADED", "RESET_REQUIRED",
                                   "UNKNOWN"])
def test_a_gpu_lost_mid_run_is_a_failed_sample_and_one_alert_naming_it(error):
    fake = _fake_pynvml()
    with Nvml(fake) as nvml:
        monitor = Monitor(nvml, None, LIMITS)
        first = monitor.snapshot()
        _failing_from_now_on(fake, error)           # it falls off the bus
        lost, still_lost = monitor.snapshot(), monitor.snapshot()
    assert first.alerts == [] and first.gpus[0].error is None
    (gpu,) = lost.gpus
    assert gpu.error.endswith(f"(NVML_ERROR_{error})") and gpu.utilization_pct is None
    assert (gpu.index, gpu.name, gpu.uuid) == (0, "Tesla P100-PCIE-16GB", "GPU-abc")  # as it was
    (alert,) = lost.alerts
    assert alert.kind == "gpu_lost" and alert.gpu == 0
    assert f"GPU 0 (Tesla P100-PCIE-16GB) cannot be read: {gpu.error}" in alert.message
    assert still_lost.alerts == []                  # edge-triggered: once
    assert [(r.gpu, r.util_pct) for r in lost.rows()] == [(0, None)]


def test_the_gpu_table_says_why_a_lost_gpus_row_is_empty():
    from rich.console import Console

    from tritonkit.cli.monitor import _snapshot_view

    fake = _fake_pynvml()
    with Nvml(fake) as nvml:
        monitor = Monitor(nvml, None, LIMITS)
        _failing_from_now_on(fake, "GPU_IS_LOST")
        snapshot = monitor.snapshot()
    console = Console(record=True, width=300)
    console.print(_snapshot_view(snapshot))
    said = " ".join(console.export_text().split())        # the caption wraps to the table
    assert "0 = Tesla P100-PCIE-16GB; cannot be read: " + snapshot.gpus[0].error in said


def test_a_gpu_lost_before_its_first_sample_is_named_by_the_uuid_it_had_when_opened():
    """The UUID is how a monitor pairs NVML's GPUs with the server's."""
    fake = _fake_pynvml()
    with Nvml(fake) as nvml:
        _failing_from_now_on(fake, "GPU_IS_LOST")
        (gpu,) = nvml.sample()
    assert (gpu.name, gpu.uuid) == ("Tesla P100-PCIE-16GB", "GPU-abc") and gpu.error


def test_a_gpu_back_after_a_reset_alerts_again_if_it_is_lost_again():
    tracker = AlertTracker(LIMITS)
    lost = GpuSample.failed(0, "NVIDIA A10", "GPU-1", "GPU is lost (NVML_ERROR_GPU_IS_LOST)")
    fired = [tracker.observe(t, s) for t, s in enumerate([_gpu(), lost, lost, _gpu(), lost])]
    assert [[a.kind for a in f] for f in fired] == [[], ["gpu_lost"], [], [], ["gpu_lost"]]


def test_a_hot_card_lost_and_back_still_hot_is_not_a_second_temperature_alert():
    tracker = AlertTracker(LIMITS)
    lost = GpuSample.failed(0, "NVIDIA A10", "GPU-1", "GPU is lost (NVML_ERROR_GPU_IS_LOST)")
    fired = [tracker.observe(t, s) for t, s in enumerate([_gpu(temp=90), lost, _gpu(temp=90)])]
    assert [[a.kind for a in f] for f in fired] == [["temperature"], ["gpu_lost"], []]


def test_clock_events_on_a_driver_before_r535_are_read_by_their_throttle_name():
    """nvidia-ml-py has nvmlDeviceGetCurrentClocksEventReasons whatever the driver; a
    driver before NVML 12.2 (R470, R525: the P100's) lacks the symbol and answers
    FUNCTION_NOT_FOUND. The throttle call gives the same bits."""
    import pynvml

    fake, asked = _fake_pynvml(), []

    def events(handle):
        asked.append(handle)
        raise _nvml_error("FUNCTION_NOT_FOUND")

    fake.nvmlDeviceGetCurrentClocksEventReasons = events
    fake.nvmlDeviceGetCurrentClocksThrottleReasons = (
        lambda h: pynvml.nvmlClocksThrottleReasonHwThermalSlowdown)        # 0x40
    with Nvml(fake) as nvml:
        first, second = nvml.sample()[0], nvml.sample()[0]
    assert first.clock_events == 0x40 and first.slowdowns == ("hw_thermal",)
    assert second.slowdowns == ("hw_thermal",) and len(asked) == 1      # the choice is kept
    (alert,) = AlertTracker(LIMITS).observe(0, first)
    assert alert.kind == "clocks" and "hw_thermal" in alert.message


def test_a_gpu_this_process_may_not_use_is_named_and_the_others_are_watched():
    """nvmlDeviceGetCount_v2 counts GPUs whose handle is NVML_ERROR_NO_PERMISSION."""
    fake = _fake_pynvml()
    fake.nvmlDeviceGetCount = lambda: 3
    fake.nvmlDeviceGetHandleByIndex = (
        lambda i: _raising("NO_PERMISSION")() if i == 1 else f"h{i}")
    with Nvml(fake) as nvml:
        assert [g.index for g in nvml.sample()] == [0, 2]
        assert [g.index for g in nvml.identities()] == [0, 2]
        assert [str(f) for f in nvml.unreachable] == [
            "gpu 1: Insufficient Permissions (NVML_ERROR_NO_PERMISSION)"]


def test_a_gpu_that_fails_while_identified_is_named_not_raised():
    fake = _fake_pynvml()
    fake.nvmlDeviceGetCount = lambda: 2
    fake.nvmlDeviceGetCudaComputeCapability = (
        lambda h: _raising("GPU_IS_LOST")() if h == "h0" else (6, 0))
    with Nvml(fake) as nvml:
        assert [g.index for g in nvml.identities()] == [1]
    assert [str(f) for f in nvml.unreachable] == ["gpu 0: GPU is lost (NVML_ERROR_GPU_IS_LOST)"]


def test_when_no_gpu_can_be_reached_each_is_named_in_one_line():
    fake = _fake_pynvml()
    fake.nvmlDeviceGetCount = lambda: 2
    fake.nvmlDeviceGetHandleByIndex = _raising("NO_PERMISSION")
    with pytest.raises(GpuUnavailableError) as raised:
        Nvml(fake).open()
    assert "gpu 0: Insufficient Permissions" in raised.value.message
    assert "gpu 1: Insufficient Permissions" in raised.value.message
    assert "\n" not in raised.value.message and raised.value.hint


def test_monitor_with_a_gpu_prints_the_table_and_writes_one_row_per_gpu(monkeypatch, tmp_path,
                                                                        capsys):
    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml", lambda: _fake_pynvml())
    out = tmp_path / "gpu.csv"
    assert run_cli("monitor", "--interval", "0.25", "--duration", "0.5", "--csv", out) == 0
    printed = capsys.readouterr().out
    assert "Tesla P100-PCIE-16GB (PCIe Gen3 x16)" in printed and "12288/16384" in printed
    with out.open() as handle:
        header = next(csv.reader(handle))
    assert tuple(header) == COLUMNS
    rows = read_monitor_csv(out)
    # one row a sample: three, or two where a busy host's sample ran past a slot (skipped)
    assert len(rows) in (2, 3) and len({r.elapsed_s for r in rows}) == len(rows)
    assert {r.gpu for r in rows} == {0}
    assert rows[0].util_pct == 93 and rows[0].triton is None


# --- alerts -----------------------------------------------------------------------------------

LIMITS = AlertThresholds(temperature_c=85, memory_pct=95, low_utilization_pct=60,
                         low_utilization_minutes=5, idle_utilization_pct=5,
                         temperature_hysteresis_c=5, hw_slowdown_samples=3)


def _gpu(util=90.0, mem_pct=50.0, temp=60.0) -> GpuSample:
    return GpuSample(0, "NVIDIA A10", "GPU-1", util, mem_pct * 240, 24000, temp, 100.0,
                     1695, 6251, 100.0, 50.0)


def _kinds(tracker: AlertTracker, samples: list[GpuSample]) -> list[list[str]]:
    return [[a.kind for a in tracker.observe(t, s)] for t, s in enumerate(samples)]


def test_a_thresholds_file_decides_when_alerts_fire(tmp_path):
    import pynvml

    hw_slowdown = pynvml.nvmlClocksEventReasonHwSlowdown
    samples = [_gpu(temp=80), replace(_gpu(temp=83), clock_events=hw_slowdown), _gpu(temp=78),
               _gpu(temp=83)]
    default = _kinds(AlertTracker(load_thresholds().alerts), samples)
    text = (ROOT / "configs" / "alerts.toml").read_text()
    changed = tmp_path / "alerts.toml"
    changed.write_text(text.replace("temperature_c = 85", "temperature_c = 79")
                       .replace("temperature_hysteresis_c = 5", "temperature_hysteresis_c = 0")
                       .replace("hw_slowdown_samples = 3", "hw_slowdown_samples = 1"))
    assert default == [[], [], [], []]
    assert _kinds(AlertTracker(load_thresholds(changed).alerts), samples) == [
        ["temperature"], ["clocks"], [], ["temperature"]]


def test_a_hot_card_alerts_once_until_it_cools_down():
    tracker = AlertTracker(LIMITS)
    fired = [tracker.observe(t, _gpu(temp=temp)) for t, temp in
             enumerate([80, 88, 90, 91, 70, 87])]
    kinds = [[a.kind for a in f] for f in fired]
    assert kinds == [[], ["temperature"], [], [], [], ["temperature"]]
    assert "88 °C" in fired[1][0].message


def test_clocks_held_by_heat_or_the_power_brake_alert_once_and_the_power_cap_does_not():
    import pynvml

    power_cap, thermal = (pynvml.nvmlClocksEventReasonSwPowerCap,
                          pynvml.nvmlClocksEventReasonHwThermalSlowdown)
    tracker = AlertTracker(LIMITS)
    events = [power_cap, power_cap | thermal, thermal, 0, pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown]
    fired = [tracker.observe(t, replace(_gpu(), clock_events=e)) for t, e in enumerate(events)]
    assert [[a.kind for a in f] for f in fired] == [[], ["clocks"], [], [], ["clocks"]]
    assert "hw_thermal" in fired[1][0].message and "sw_power_cap" not in fired[1][0].message
    assert "hw_power_brake" in fired[4][0].message


def test_a_card_hovering_at_the_threshold_is_one_temperature_alert():
    tracker = AlertTracker(LIMITS)                  # 85 °C, ending 5 °C below it
    assert _kinds(tracker, [_gpu(temp=t) for t in (86, 84, 86, 81, 86)]) == [
        ["temperature"], [], [], [], []]
    assert _kinds(tracker, [_gpu(temp=t) for t in (79, 86)]) == [[], ["temperature"]]


def test_a_moments_hw_slowdown_at_a_clock_change_is_no_alert_a_lasting_one_is():
    """nvml.h: HwSlowdown "may be also reported during PState or clock change"."""
    import pynvml

    hw = pynvml.nvmlClocksEventReasonHwSlowdown
    events = lambda *bits: [replace(_gpu(), clock_events=b) for b in bits]  # noqa: E731
    assert _kinds(AlertTracker(LIMITS), events(hw, 0, hw, hw, 0)) == [[], [], [], [], []]
    assert _kinds(AlertTracker(LIMITS), events(hw, hw, hw, hw)) == [[], [], ["clocks"], []]
    # with heat's own bit it alerts at once
    thermal = hw | pynvml.nvmlClocksEventReasonHwThermalSlowdown
    assert _kinds(AlertTracker(LIMITS), events(thermal)) == [["clocks"]]


def test_a_bad_hysteresis_or_sample_count_is_refused_naming_the_field(tmp_path):
    text = (ROOT / "configs" / "alerts.toml").read_text()
    for old, new, field in (("temperature_hysteresis_c = 5", "temperature_hysteresis_c = -1",
                             "alerts.temperature_hysteresis_c"),
                            ("hw_slowdown_samples = 3", "hw_slowdown_samples = 0",
                             "alerts.hw_slowdown_samples")):
        bad = tmp_path / "alerts.toml"
        bad.write_text(text.replace(old, new))
        with pytest.raises(ProfileError, match=field):
            load_thresholds(bad)


def test_memory_above_95_percent_alerts():
    (alert,) = AlertTracker(LIMITS).observe(0, _gpu(mem_pct=97))
    assert alert.kind == "memory" and "97.0 %" in alert.message


def test_low_utilization_alerts_only_after_minutes_under_load():
    tracker = AlertTracker(LIMITS)
    # 40 % busy while Triton serves, every 10 s: nothing for 4m50s, then one alert at 5 min
    fired = [tracker.observe(t, _gpu(util=40), triton_inferences=100) for t in range(0, 310, 10)]
    assert [i for i, f in enumerate(fired) if f] == [30]
    assert fired[30][0].kind == "low_utilization" and "5.0 min" in fired[30][0].message


def test_an_idle_card_is_not_starved():
    tracker = AlertTracker(LIMITS)
    assert not any(tracker.observe(t, _gpu(util=0)) for t in range(0, 900, 10))
    # with Triton watched, low utilization and no inferences is idle too
    assert not any(tracker.observe(t, _gpu(util=30), triton_inferences=0)
                   for t in range(0, 900, 10))


def test_a_busy_minute_resets_the_low_utilization_clock():
    tracker = AlertTracker(LIMITS)
    utils = [40] * 20 + [90] + [40] * 20      # 200 s low, busy, 200 s low: never 5 min
    assert not any(tracker.observe(10 * i, _gpu(util=u), 50) for i, u in enumerate(utils))


def test_a_bad_thresholds_file_names_the_field(tmp_path):
    bad = tmp_path / "alerts.toml"
    text = (Path(__file__).parent.parent / "configs" / "alerts.toml").read_text()
    bad.write_text(text.replace("temperature_c = 85", 'temperature_c = "hot"'))
    with pytest.raises(ProfileError, match="alerts.temperature_c"):
        load_thresholds(bad)


# --- the loop and the CSV ---------------------------------------------------------------------

class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds + 0.01   # every sleep overshoots a little


class _FakeSampler:
    def __init__(self, samples): self.samples = samples
    def sample(self): return self.samples
    def close(self): pass


def test_watch_keeps_a_fixed_schedule_and_stops_after_the_duration():
    clock = _Clock()
    monitor = Monitor(_FakeSampler([_gpu()]), None, LIMITS, clock=clock, wall_clock=lambda: 0.0)
    elapsed = [s.elapsed_s for s in watch(monitor, interval=10, duration=30, sleep=clock.sleep)]
    assert len(elapsed) == 4
    assert elapsed[-1] == pytest.approx(30.01)   # overshoot does not accumulate


def test_the_csv_round_trips_gpu_and_triton_columns(tmp_path):
    path = tmp_path / "m.csv"
    counters = ModelCounters(request_success=3, inference_count=6, exec_count=3,
                             queue_duration_us=120.5)
    with CsvRecorder(path) as recorder:
        recorder.write(rows_for(1_700_000_000, 0.0, [replace(_gpu(util=42), clock_events=0x44)],
                                counters))
        recorder.write(rows_for(1_700_000_010, 10.0, [], counters))
    first, second = read_monitor_csv(path)
    assert first.util_pct == 42 and first.gpu == 0 and first.name == "NVIDIA A10"
    assert first.mem_pct == pytest.approx(50.0) and first.timestamp.startswith("2023-11-14T22:13:20")
    assert first.triton == counters and first.slowdowns == ("sw_power_cap", "hw_thermal")
    assert second.gpu is None and second.util_pct is None and second.elapsed_s == 10.0


def test_a_csv_path_under_a_file_is_refused_before_sampling(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    assert run_cli("monitor", "--once", "--csv", afile / "gpu.csv") == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_an_interval_no_sleep_can_take_is_refused_as_bad_input(monkeypatch, capsys):
    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml", lambda: _fake_pynvml())
    for flags in (("monitor", "--interval", "inf"), ("monitor", "--interval", "1e12"),
                  ("diagnose", "--live", "--interval", "inf"),
                  ("diagnose", "--live", "--duration", "inf")):
        assert run_cli(*flags) == 2, flags
        err = capsys.readouterr().err
        assert flags[-2] in err and "internal error" not in err


def test_a_thresholds_file_copied_before_the_newer_fields_still_loads_with_their_defaults(tmp_path):
    """Users copy alerts.toml to tune it (--thresholds, TRITONKIT_CONFIGS): a copy made
    before temperature_hysteresis_c, hw_slowdown_samples and the bandwidth wall's two
    shares existed failed to load ("missing field") once they did."""
    newer = ("temperature_hysteresis_c", "hw_slowdown_samples", "pcie_achievable_fraction",
             "pcie_saturated_share")
    current = load_thresholds()
    old = tmp_path / "alerts.toml"
    old.write_text("".join(line for line in default_thresholds_path().read_text()
                           .splitlines(keepends=True) if not line.startswith(newer)))
    copied = load_thresholds(old)
    assert copied == current                 # the defaults are the shipped file's values


# --- each model's own figures ---------------------------------------------------------------

TWO_MODELS = {("bert", "1", ""): replace(_served(1000, batch=4), request_failure=2),
              ("vision", "1", ""): _served(40, batch=8),
              ("vision", "2", ""): replace(_served(60, batch=2), queue_duration_us=60 * 4000)}


def test_once_shows_each_models_batch_queue_and_compute_means_since_load_not_dashes(
        monkeypatch, capsys):
    """One sample holds the cumulative sums: bert's 4000 inferences in 1000 executions are
    batches of 4, its 100 ms of queueing over 1000 requests 0.10 ms each. Rates need the
    time between two samples, so they stay dashes, and the caption says since when."""
    _scraping(monkeypatch, triton_exposition(TWO_MODELS))
    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml", lambda: _fake_pynvml())
    assert run_cli("monitor", "--url", "127.0.0.1:8000", "--once") == 0
    out = capsys.readouterr().out
    rows = {r["model"]: r for r in _triton_rows(out)}
    shown = {name: (r["batch"], r["queue_ms"], r["comp_ms"], r["req/s"], r["fail/s"], r["inf/s"])
             for name, r in rows.items()}
    assert shown == {"bert": ("4.00", "0.10", "0.77", "—", "—", "—"),
                     # its two versions summed: 40 * 8 + 60 * 2 inferences in 100 executions,
                     # (40 * 0.1 ms + 60 * 4 ms) of queueing over 100 requests
                     "vision": ("4.40", "2.44", "0.77", "—", "—", "—")}
    caption = " ".join(out.split())
    assert "counts and means since load; the rates need a second sample" in caption
    assert "since the last sample" not in caption


def test_the_monitor_csv_keeps_its_columns_and_each_model_versions_counters_go_beside_it(
        monkeypatch, tmp_path, capsys):
    """The server's totals cannot tell which of two models spiked: mon.models.csv holds
    one row per sample per model version, and mon.csv reads as before."""
    _scraping(monkeypatch, triton_exposition(TWO_MODELS))
    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml", lambda: _fake_pynvml())
    recording = tmp_path / "out" / "mon.csv"
    assert run_cli("monitor", "--url", "127.0.0.1:8000", "--once", "--csv", recording) == 0
    per_model = tmp_path / "out" / "mon.models.csv"
    assert f"(per model: {per_model})" in " ".join(capsys.readouterr().out.split())

    with recording.open() as handle:
        assert tuple(next(csv.reader(handle))) == COLUMNS
    (row,) = read_monitor_csv(recording)
    assert row.triton.request_success == 1100                        # the server's total

    with per_model.open() as handle:
        table = list(csv.DictReader(handle))
    assert [(r["model"], r["version"], r["request_success"], r["inference_count"],
             r["request_failure"], r["queue_duration_us"]) for r in table] == [
        ("bert", "1", "1000", "4000", "2", "100000"),
        ("vision", "1", "40", "320", "0", "4000"),
        ("vision", "2", "60", "120", "0", "240000")]
    assert {(r["timestamp"], r["elapsed_s"]) for r in table} == {(row.timestamp, "0")}


def test_an_existing_per_model_csv_is_kept_unless_force(monkeypatch, tmp_path, capsys):
    _scraping(monkeypatch, *[triton_exposition(TWO_MODELS)] * 2)
    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml", lambda: _fake_pynvml())
    (tmp_path / "mon.models.csv").write_text("yesterday's models\n")
    assert run_cli("monitor", "--url", "127.0.0.1:8000", "--once",
                   "--csv", tmp_path / "mon.csv") == 2
    err = capsys.readouterr().err
    assert "mon.models.csv already exists" in err and "--force" in err
    assert not (tmp_path / "mon.csv").exists()
    assert (tmp_path / "mon.models.csv").read_text() == "yesterday's models\n"
    assert run_cli("monitor", "--url", "127.0.0.1:8000", "--once", "--force",
                   "--csv", tmp_path / "mon.csv") == 0
    assert len(read_models_csv(tmp_path / "mon.models.csv")) == 3


@pytest.mark.server
def test_the_real_tritons_models_are_recorded_one_by_one_and_once_shows_their_means(
        failing_server, tmp_path, capsys):
    """Against the real server: each model version's row of the sample, summed but the
    ensemble, is the server's total of the same sample, and --once shows the example's
    batch, queue and compute time from its lifetime counters."""
    _infer_failing(failing_server, "example", 1, count=3)
    _infer_failing(failing_server, "pipeline", 1, count=2)
    before = _settled(failing_server, {("example", "request_success"): 3,
                                       ("flaky", "request_success"): 2})
    recording = tmp_path / "mon.csv"
    assert run_cli("monitor", "--repository", failing_server.repository, "--once",
                   "--csv", recording) == 0
    rows = _triton_rows(capsys.readouterr().out)
    example = next(r for r in rows if r["model"] == "example")
    assert example["req/s"] == "—"                      # a rate needs a second sample
    # deploy's warm-up sent batches of several sizes: a mean batch of 1 or more
    assert float(example["batch"]) >= 1
    assert float(example["queue_ms"]) >= 0 and float(example["comp_ms"]) > 0

    (server,) = read_monitor_csv(recording)
    models = {(r.model, r.version): r.counters for r in read_models_csv(
        tmp_path / "mon.models.csv")}
    assert set(models) == {("example", "1"), ("flaky", "1"), ("pipeline", "1")}
    assert models["example", "1"].request_success >= before.models["example"].request_success
    assert models["pipeline", "1"].request_success >= 2
    assert server.triton.request_success == (models["example", "1"].request_success
                                             + models["flaky", "1"].request_success)


def test_a_server_too_slow_to_answer_once_is_asked_again_later_not_never(monkeypatch):
    """A monitor starts under load: one config request past its timeout made the check give
    up for the whole session, and an ensemble loaded later was counted twice for hours. The
    address is asked again after a pause, and meanwhile a sample waits no timeout at all."""
    import http.server
    import threading

    from tritonkit.monitor.triton_metrics import EnsembleCheck

    answered = []

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if not answered:
                answered.append("stalled")
                time.sleep(0.6)                  # past the client's timeout
            body = b'{"platform": "ensemble"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        check = EnsembleCheck(f"127.0.0.1:{server.server_port}", timeout=0.2)
        metrics = parse_metrics(_versions({"1": 5}))
        left, note = check.left_out(metrics)
        assert left == frozenset() and "did not answer" in note and "asked again" in note
        started = time.monotonic()
        assert check.left_out(metrics)[0] == frozenset()       # waiting: not asked
        assert time.monotonic() - started < 0.1
        monkeypatch.setattr(EnsembleCheck, "ASK_AGAIN_S", 0.0)
        check._ask_again_at = 0.0                               # the pause is over
        check.timeout = 10.0                # the answer now comes at once; a busy host's "at once"
        left, note = check.left_out(metrics)
        assert left == frozenset({("example", "1")}) and note is None
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_a_recording_that_cannot_open_its_per_model_file_leaves_no_header_only_csv(tmp_path):
    """The main CSV was opened first: left with its header alone, the next run without
    --force refused it."""
    from tritonkit.monitor.recording import CsvRecorder, models_csv_path

    path = tmp_path / "mon.csv"
    models_csv_path(path).mkdir()           # where the per-model file must go: a folder
    with pytest.raises(UsageError, match="cannot write the CSV file"):
        with CsvRecorder(path, force=True, models=True):
            pass
    assert not path.exists()
