"""`tritonkit monitor` of a server on another GPU host or without a driver here: the server's
own GPU gauges, kept through failed scrapes."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import run_cli
from tests.monitor.conftest import (
    LIMITS, TRITON_2_51_METRICS, _Clock, _fake_pynvml, _raising, _scraping)
from tritonkit.errors import ServerError
from tritonkit.monitor.nvml import Nvml
from tritonkit.monitor.recording import read_monitor_csv
from tritonkit.monitor.triton_metrics import parse_metrics
from tritonkit.monitor.watch import Monitor, record


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
