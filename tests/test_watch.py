"""The sampling loop (tritonkit.monitor.watch): which GPUs it watches, what it records of
Triton's counters, and its schedule. NVML and Triton's metrics endpoint are stand-ins."""

from __future__ import annotations

import sys
from dataclasses import replace
from types import SimpleNamespace

import pytest

from tests.monitor.conftest import _Clock, _fake_pynvml, _served, triton_exposition
from tritonkit.monitor.alerts import load_thresholds
from tritonkit.monitor.diagnose import diagnose
from tritonkit.monitor.nvml import Nvml
from tritonkit.monitor.recording import CsvRecorder, read_monitor_csv
from tritonkit.monitor.triton_metrics import ModelCounters, TritonMetrics, parse_metrics
from tritonkit.monitor.watch import Monitor, watch
from tritonkit.profiles import load_profile

URL = "http://127.0.0.1:8002/metrics"
THRESHOLDS = load_thresholds()


def _counters(requests: float, *, queue_us: float = 500, infer_us: float = 800) -> ModelCounters:
    """One model's cumulative counters after ``requests`` requests of one inference each."""
    return ModelCounters(
        request_success=requests, inference_count=requests, exec_count=requests,
        request_duration_us=requests * (queue_us + infer_us + 70), queue_duration_us=requests * queue_us,
        compute_input_duration_us=requests * 50, compute_infer_duration_us=requests * infer_us,
        compute_output_duration_us=requests * 20)


def _serving(monkeypatch, models, gpu_uuids=("GPU-abc",), on_scrape=lambda k: None) -> None:
    """Triton's metrics endpoint: scrape k reports ``models(k)`` and GPU metrics naming
    ``gpu_uuids``; ``on_scrape(k)`` runs first (a slow scrape moves the clock)."""
    scrapes = iter(range(1_000_000))

    def scrape(url, at):
        k = next(scrapes)
        on_scrape(k)
        return TritonMetrics(at=at, models=models(k),
                             gpus={u: {"nv_gpu_utilization": 0.5} for u in gpu_uuids})

    monkeypatch.setattr(sys.modules["tritonkit.monitor.watch"], "scrape", scrape)


def _two_gpus(utilization: dict[str, float]) -> SimpleNamespace:
    """pynvml for a host of two P100s, GPU-abc and GPU-def, busy as ``utilization`` says."""
    fake = _fake_pynvml()
    uuids = {"h0": "GPU-abc", "h1": "GPU-def"}
    fake.nvmlDeviceGetCount = lambda: 2
    fake.nvmlDeviceGetUUID = lambda handle: uuids[handle]
    fake.nvmlDeviceGetUtilizationRates = lambda handle: SimpleNamespace(
        gpu=utilization[uuids[handle]], memory=40)
    fake.nvmlDeviceGetPcieThroughput = lambda handle, counter: 1_000_000   # ~1 GB/s
    return fake


def _watched(pynvml, seconds: float, tmp_path):
    """The snapshots of ``seconds`` of sampling every 10 s, and the CSV they recorded, read."""
    clock = _Clock()
    path = tmp_path / "gpu.csv"
    with Nvml(pynvml) as nvml, CsvRecorder(path) as recorder:
        monitor = Monitor(nvml, URL, THRESHOLDS.alerts, clock=clock,
                          wall_clock=lambda: 1_767_225_600.0)
        snapshots = []
        for snapshot in watch(monitor, interval=10, duration=seconds, sleep=clock.sleep):
            recorder.write(snapshot.rows())
            snapshots.append(snapshot)
    return snapshots, read_monitor_csv(path)


def _steady(k: int) -> dict[str, ModelCounters]:
    return {"resnet": _counters(300 * k)}


# --- which GPUs are the server's -------------------------------------------------------------

def test_a_hosts_gpu_triton_does_not_report_is_not_watched_nor_called_starved(
        monkeypatch, tmp_path):
    # GPU 1 runs someone else's job at 30 %; Triton's traffic is GPU 0's alone
    _serving(monkeypatch, _steady, gpu_uuids=("GPU-abc",))
    snapshots, rows = _watched(_two_gpus({"GPU-abc": 93, "GPU-def": 30}), 360, tmp_path)
    assert not [a for s in snapshots for a in s.alerts]     # GPU 1 would be "starved" at 5 min
    assert {g.index for s in snapshots for g in s.gpus} == {0}
    assert any("GPU 1 (GPU-def)" in note and "not watched" in note for note in snapshots[0].notes)
    assert {(r.gpu, r.uuid) for r in rows} == {(0, "GPU-abc")}
    (result,) = diagnose(rows, load_profile("p100"), THRESHOLDS)
    assert result.gpu_uuid == "GPU-abc"


def test_an_idle_gpu_of_a_two_gpu_server_is_idle_not_starved_by_the_others_traffic(
        monkeypatch, tmp_path):
    # both GPUs are the server's; the model it serves runs on GPU 0 only
    _serving(monkeypatch, _steady, gpu_uuids=("GPU-abc", "GPU-def"))
    snapshots, rows = _watched(_two_gpus({"GPU-abc": 93, "GPU-def": 0}), 360, tmp_path)
    assert not [a for s in snapshots for a in s.alerts if a.gpu == 1]
    assert {r.uuid for r in rows if r.gpu == 1} == {"GPU-def"}
    busy, idle = diagnose(rows, load_profile("p100"), THRESHOLDS)
    assert idle.gpu == 1 and idle.wall == "idle"
    assert busy.gpu == 0 and busy.wall == "none"
    assert any("the whole server's" in note for note in busy.notes)


def test_two_gpus_both_idle_under_the_servers_traffic_are_each_starved_not_idle(
        monkeypatch, tmp_path):
    """Only a GPU idle while another is busy gives its traffic away: with both at 3 %
    under load, a client or an I/O path starves them both."""
    _serving(monkeypatch, _steady, gpu_uuids=("GPU-abc", "GPU-def"))
    snapshots, rows = _watched(_two_gpus({"GPU-abc": 3, "GPU-def": 3}), 360, tmp_path)
    starved = {a.gpu for s in snapshots for a in s.alerts if a.kind == "low_utilization"}
    assert starved == {0, 1}
    diagnosed = diagnose(rows, load_profile("p100"), THRESHOLDS)
    assert all(d.wall != "idle" and d.figures.loaded_samples > 0 for d in diagnosed), diagnosed


def _exposing(monkeypatch, series, gpu_uuids=("GPU-abc", "GPU-def")) -> None:
    """Triton's metrics endpoint as text: scrape k exposes ``series(k)``, (model, version,
    gpu_uuid or "") -> counters, labelled as Triton labels them (triton_exposition)."""
    scrapes = iter(range(1_000_000))
    monkeypatch.setattr(sys.modules["tritonkit.monitor.watch"], "scrape",
                        lambda url, at: parse_metrics(
                            triton_exposition(series(next(scrapes)), gpu_uuids), at=at))


def test_a_cpu_models_traffic_is_no_gpus_load_so_an_idle_gpu_is_not_starved(
        monkeypatch, tmp_path):
    """A tokenizer on CPU instances serves 300 requests a sample; the GPU model placed on
    GPU-abc serves none, and the card idles at 2 %. Counted as the GPU's load, the
    tokenizer's traffic made it "starved" (an alert at 5 minutes, the I/O wall)."""
    _exposing(monkeypatch, lambda k: {("tokenizer", "1", ""): _served(300 * k),
                                      ("resnet", "1", "GPU-abc"): _served(0)},
              gpu_uuids=("GPU-abc",))
    fake = _fake_pynvml()
    fake.nvmlDeviceGetUtilizationRates = lambda handle: SimpleNamespace(gpu=2, memory=1)
    snapshots, rows = _watched(fake, 360, tmp_path)
    assert not [a for s in snapshots for a in s.alerts if a.kind == "low_utilization"]
    assert rows[-1].triton.request_success == 300 * 36          # the server's, recorded
    assert rows[-1].gpu_triton.request_success == 0              # none of it the GPU's
    (result,) = diagnose(rows, load_profile("p100"), THRESHOLDS)
    assert result.wall == "idle" and result.figures.loaded_samples == 0


def test_a_server_gpu_no_model_runs_on_is_idle_though_something_else_keeps_it_busy(
        monkeypatch, tmp_path):
    """Both GPUs are the server's; its model runs on GPU-abc alone, and another process
    keeps GPU-def at 30 %. Above the idle threshold, GPU-def took the server's traffic
    as its own: starved at 5 minutes, an I/O wall it never had."""
    _exposing(monkeypatch, lambda k: {("resnet", "1", "GPU-abc"): _served(300 * k, batch=4),
                                      ("resnet", "1", ""): _served(0, pending=2)})
    snapshots, rows = _watched(_two_gpus({"GPU-abc": 93, "GPU-def": 30}), 360, tmp_path)
    assert not [a for s in snapshots for a in s.alerts]
    busy, other = diagnose(rows, load_profile("p100"), THRESHOLDS)
    assert (busy.gpu, busy.wall) == (0, "none") and (other.gpu, other.wall) == (1, "idle")
    assert busy.figures.requests == 300 * 36 and busy.figures.avg_batch == 4
    assert any("this GPU's own" in note for note in busy.notes)


def test_of_two_slow_gpus_only_the_one_the_model_runs_on_is_starved(monkeypatch, tmp_path):
    """Both GPUs at 3 %: by the server's counters each looked starved; Triton's labels say
    the model runs on GPU-abc alone, so GPU-def is idle. Each GPU's figures are its own."""
    _exposing(monkeypatch, lambda k: {("resnet", "1", "GPU-abc"): _served(300 * k, batch=1),
                                      ("bert", "1", "GPU-abc"): _served(100 * k, batch=8)})
    snapshots, rows = _watched(_two_gpus({"GPU-abc": 3, "GPU-def": 3}), 360, tmp_path)
    starved = {a.gpu for s in snapshots for a in s.alerts if a.kind == "low_utilization"}
    assert starved == {0}
    served, idle = diagnose(rows, load_profile("p100"), THRESHOLDS)
    assert served.wall == "io" and idle.wall == "idle"
    assert served.figures.inferences == (300 + 100 * 8) * 36
    assert served.figures.avg_batch == pytest.approx((300 + 800) / 400)


# --- Triton's counters ----------------------------------------------------------------------

def test_a_model_unloaded_mid_recording_does_not_pour_the_others_lifetime_into_one_interval(
        monkeypatch, tmp_path):
    """Model A has served 2 M requests since the server started; B serves too until it is
    unloaded. Its counters leave Triton's sum, which then falls: read as a restart, A's
    2 M would land in one interval (and 2 M requests of 0.5 ms queued in 5 minutes make
    a queue that was never there: the scheduling wall)."""
    unloaded_after = 14

    def models(k):
        served = {"a": _counters(2_000_000 + 30 * k)}
        if k <= unloaded_after:
            served["b"] = _counters(10_000 + 20 * k)
        return served

    _serving(monkeypatch, models)
    fake = _fake_pynvml()
    fake.nvmlDeviceGetPcieThroughput = lambda handle, counter: 1_000_000
    snapshots, rows = _watched(fake, 290, tmp_path)
    intervals = len(snapshots) - 1
    assert intervals == 29
    (result,) = diagnose(rows, load_profile("p100"), THRESHOLDS)
    assert result.figures.requests == 30 * intervals + 20 * unloaded_after
    assert result.figures.queue_depth == pytest.approx(
        500 * result.figures.requests / (290 * 1e6), rel=0.05)
    assert result.wall == "none"
    # the counters recorded never fall, and start from Triton's own sum
    recorded = [r.triton.request_success for r in rows]
    assert recorded == sorted(recorded) and recorded[0] == 2_000_000 + 10_000


def test_a_model_reloaded_in_one_namespace_leaves_its_namesake_in_another_out_of_the_csv(
        monkeypatch, tmp_path):
    """--model-namespacing=true: repository A's "resnet" has served 2 M requests and serves
    30 a sample; repository B's "resnet" serves 20 a sample and is reloaded at sample 10
    (its counters start from zero). Summed under one name, the reload read as a restart
    and A's 2 M went into the CSV's totals in one interval."""
    def exposition(k):
        b = 20 * (k - 9) if k >= 10 else 700 + 20 * k
        return triton_exposition({("/repo_a/resnet", "1", ""): _served(2_000_000 + 30 * k),
                                  ("/repo_b/resnet", "1", ""): _served(b)},
                                 gpu_uuids=("GPU-abc",))

    scrapes = iter(range(1_000_000))
    monkeypatch.setattr(sys.modules["tritonkit.monitor.watch"], "scrape",
                        lambda url, at: parse_metrics(exposition(next(scrapes)), at=at))
    fake = _fake_pynvml()
    fake.nvmlDeviceGetPcieThroughput = lambda handle, counter: 1_000_000
    snapshots, rows = _watched(fake, 190, tmp_path)
    recorded = [r.triton.request_success for r in rows]
    assert recorded[-1] - recorded[0] == 30 * 19 + 20 * 19
    assert snapshots[-1].model_rates["/repo_a/resnet"].requests_per_s == pytest.approx(3, rel=0.01)
    (result,) = diagnose(rows, load_profile("p100"), THRESHOLDS)
    assert result.figures.requests == 30 * 19 + 20 * 19


def test_failures_per_second_count_a_reloaded_model_from_zero_and_leave_its_neighbour_alone(
        monkeypatch, tmp_path):
    """A fails 5 and B 2 every 10 s. B is reloaded at sample 10 (its counters start again
    from zero, failures too): its failures since the reload are the interval's, not a
    negative rate nor none, and A's lifetime failures stay out of every interval."""
    def exposition(k):
        since = k - 9 if k >= 10 else 100 + k           # B's 10 s intervals counted
        return triton_exposition({("a", "1", ""): replace(_served(90_000 + 30 * k),
                                                          request_failure=5_000 + 5 * k),
                                  ("b", "1", ""): replace(_served(20 * since),
                                                          request_failure=2 * since)},
                                 gpu_uuids=("GPU-abc",))

    scrapes = iter(range(1_000_000))
    monkeypatch.setattr(sys.modules["tritonkit.monitor.watch"], "scrape",
                        lambda url, at: parse_metrics(exposition(next(scrapes)), at=at))
    snapshots, _ = _watched(_fake_pynvml(), 190, tmp_path)
    assert [s.model_rates["a"].failures_per_s for s in snapshots[1:]] == pytest.approx(
        [0.5] * 19, rel=0.01)
    assert [s.model_rates["b"].failures_per_s for s in snapshots[1:]] == pytest.approx(
        [0.2] * 19, rel=0.01)


def test_a_model_update_rolled_back_is_counted_version_by_version(monkeypatch, tmp_path):
    """Version 1 serves 30 a sample; at sample 10 version 2 takes over (version 1's
    counters stay, as Triton keeps them); at 20 the update is rolled back and version 1
    counts from zero again. Every interval served 30; read as one sum, the rollback's
    fall would have counted version 2's whole life again."""
    def models(k):
        if k < 10:
            versions = {"1": _counters(5_000 + 30 * k)}
        elif k < 20:
            versions = {"1": _counters(5_000 + 30 * 9), "2": _counters(30 * (k - 9))}
        else:
            versions = {"1": _counters(30 * (k - 19)), "2": _counters(30 * 10)}
        return {"a": versions}

    scrapes = iter(range(1_000_000))

    def scrape(url, at):
        versions = models(next(scrapes))
        return TritonMetrics(at=at, models={m: sum(v.values(), ModelCounters())
                                            for m, v in versions.items()},
                             gpus={"GPU-abc": {"nv_gpu_utilization": 0.5}}, versions=versions)

    monkeypatch.setattr(sys.modules["tritonkit.monitor.watch"], "scrape", scrape)
    fake = _fake_pynvml()
    fake.nvmlDeviceGetPcieThroughput = lambda handle, counter: 1_000_000
    snapshots, rows = _watched(fake, 290, tmp_path)
    assert [s.model_rates["a"].requests_per_s for s in snapshots[1:]] == pytest.approx(
        [3.0] * (len(snapshots) - 1), rel=0.01)             # 30 in each 10 s interval
    (result,) = diagnose(rows, load_profile("p100"), THRESHOLDS)
    assert result.figures.requests == 30 * (len(snapshots) - 1)


def test_a_server_restart_is_still_counted_from_zero_model_by_model(monkeypatch, tmp_path):
    restarted_at = 10

    def models(k):
        return {"a": _counters(30 * (k - restarted_at) if k >= restarted_at else 5_000 + 30 * k)}

    _serving(monkeypatch, models)
    fake = _fake_pynvml()
    fake.nvmlDeviceGetPcieThroughput = lambda handle, counter: 1_000_000
    snapshots, rows = _watched(fake, 290, tmp_path)
    (result,) = diagnose(rows, load_profile("p100"), THRESHOLDS)
    # every interval but the one the restart cut (0 requests since the restart) served 30
    assert result.figures.requests == 30 * (len(snapshots) - 2)


# --- the schedule ---------------------------------------------------------------------------

def test_a_slow_scrape_skips_the_slots_it_ran_past_instead_of_sampling_back_to_back(
        monkeypatch):
    clock = _Clock()

    def slow_second_scrape(k):
        if k == 1:
            clock.now += 5.0           # the server took 5 s to answer

    _serving(monkeypatch, _steady, on_scrape=slow_second_scrape)
    monitor = Monitor(None, URL, THRESHOLDS.alerts, clock=clock, wall_clock=lambda: 0.0)
    elapsed = [s.elapsed_s for s in watch(monitor, interval=1, duration=10, sleep=clock.sleep)]
    assert all(b - a >= 1 for a, b in zip(elapsed, elapsed[1:])), elapsed
    assert elapsed == pytest.approx([0, 1.01, 7.01, 8.01, 9.01, 10.01])   # slots 2-6 skipped


def test_a_gpu_nvml_cannot_reach_is_named_when_the_monitor_opens():
    from tests.monitor.conftest import _raising
    from tritonkit.monitor.watch import open_monitor

    fake = _fake_pynvml()
    fake.nvmlDeviceGetCount = lambda: 2
    fake.nvmlDeviceGetHandleByIndex = lambda i: _raising("NO_PERMISSION")() if i == 1 else f"h{i}"
    monitor, note = open_monitor(None, THRESHOLDS.alerts, nvml=Nvml(fake))
    assert note == "gpu 1: Insufficient Permissions (NVML_ERROR_NO_PERMISSION): not watched"
    assert [g.index for g in monitor.snapshot().gpus] == [0]
    _, note = open_monitor(None, THRESHOLDS.alerts, nvml=Nvml(_fake_pynvml()))
    assert note is None


def test_a_gpu_lost_mid_recording_is_said_in_the_csv_and_by_diagnose(tmp_path):
    """Its rows' empty cells were those of a card that does not report them."""
    from tests.monitor.conftest import _failing_from_now_on

    fake = _fake_pynvml()
    with Nvml(fake) as nvml:
        monitor = Monitor(nvml, None, THRESHOLDS.alerts)
        path = tmp_path / "lost.csv"
        with CsvRecorder(path) as recorder:
            for k in range(6):
                if k == 4:
                    _failing_from_now_on(fake, "GPU_IS_LOST")
                recorder.write(monitor.snapshot().rows())
    rows = read_monitor_csv(path)
    assert [r.nvml_error for r in rows] == [""] * 4 + ["GPU is lost (NVML_ERROR_GPU_IS_LOST)"] * 2
    (result,) = diagnose(rows, load_profile("p100"), THRESHOLDS)
    assert result.figures.samples == 4
    assert any(n.startswith("NVML could not read this GPU in 2 sample(s)") and
               "GPU is lost (NVML_ERROR_GPU_IS_LOST)" in n for n in result.notes), result.notes


def test_each_model_versions_recorded_counters_carry_on_through_a_reload_as_the_servers_do(
        monkeypatch, tmp_path):
    """bert serves 30 a sample throughout; vision's version 1 serves 10 and is reloaded
    at sample 5 (its counters from zero). In the per-model CSV bert's count is its own,
    and vision's never falls: the reload takes back nothing counted before it (the
    interval it cut counts none, as the server's totals have it)."""
    from tritonkit.monitor.recording import read_models_csv

    def series(k):
        return {("bert", "1", ""): _counters(5_000 + 30 * k),
                ("vision", "1", "GPU-abc"): _counters(800 + 10 * k if k < 5 else 10 * (k - 5))}

    _exposing(monkeypatch, series, gpu_uuids=("GPU-abc",))
    clock = _Clock()
    path = tmp_path / "mon.csv"
    with Nvml(_fake_pynvml()) as nvml, CsvRecorder(path, models=True) as recorder:
        monitor = Monitor(nvml, URL, THRESHOLDS.alerts, clock=clock,
                          wall_clock=lambda: 1_767_225_600.0)
        for snapshot in watch(monitor, interval=10, duration=90, sleep=clock.sleep):
            recorder.write(snapshot.rows(), snapshot.model_rows())
    rows = read_models_csv(tmp_path / "mon.models.csv")
    counted = {}
    for row in rows:
        counted.setdefault((row.model, row.version), []).append(row.counters.request_success)
    assert counted == {("bert", "1"): [5_000 + 30 * k for k in range(10)],
                       ("vision", "1"): [800 + 10 * k for k in range(5)]
                       + [840 + 10 * (k - 5) for k in range(5, 10)]}
    server = [r.triton.request_success for r in read_monitor_csv(path)]
    assert server == [a + b for a, b in zip(counted["bert", "1"], counted["vision", "1"])]
