"""tritonkit diagnose: recorded monitor CSVs, one per wall, and the verdict each gets."""

from __future__ import annotations

import json
import signal
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import numpy as np
import pytest

from tests.conftest import error_lines, run_cli
from tritonkit.errors import Interrupted, UsageError
from tritonkit.monitor.alerts import load_thresholds
from tritonkit.monitor.diagnose import choose_profile, diagnose, guess_profile
from tritonkit.monitor.nvml import GpuSample
from tritonkit.monitor.recording import CsvRecorder, MonitorRow, read_monitor_csv, rows_for
from tritonkit.monitor.triton_metrics import ModelCounters
from tritonkit.monitor.watch import Monitor
from tritonkit.monitor.watch import record as record_live
from tritonkit.profiles import load_profile

SAMPLES = 30          # 5 minutes at the field notes' 10 s
INTERVAL = 10.0


def record(path: Path, *, name: str, total_gib: float, util: float, mem_pct: float,
           rx_gb_s: float | Callable[[int], float] = 0.5, tx_gb_s: float = 0.2,
           triton: dict | None = None,
           restart_at: int | None = None, batch_counts: bool = True,
           link: tuple[int, int] | None = None, clock_events=lambda i: None) -> Path:
    """Write a monitor CSV as `tritonkit monitor --csv` does, for a steady pattern.

    ``triton`` gives per-interval increments of Triton's counters (requests, batch, and
    µs per request of queue / input / infer time); None records no Triton columns.
    ``restart_at``: the server restarts (its counters start from zero again) just
    before that sample is taken, and the traffic goes on. ``batch_counts=False``: a
    server with its latency counters off, whose inferences, executions and pending
    requests monitor records as unknown. ``link``: the PCIe (generation, lanes) the card
    ran on. ``clock_events(i)``: NVML's clocks-event bitmask at sample i. ``rx_gb_s``: a
    steady figure, or one per sample i.
    """
    total_mib = total_gib * 1024
    rx_at = rx_gb_s if callable(rx_gb_s) else lambda i: rx_gb_s
    counters = ModelCounters() if triton else None
    with CsvRecorder(path) as recorder:
        for i in range(SAMPLES):
            wobble = (-2.0, 0.0, 2.0)[i % 3]        # real samples are never flat
            gpu = GpuSample(0, name, "GPU-1", max(0.0, util + wobble), total_mib * mem_pct / 100,
                            total_mib, 70.0, 120.0, 1400.0, 700.0,
                            None if rx_at(i) is None else rx_at(i) * 1000,
                            None if tx_gb_s is None else tx_gb_s * 1000,
                            *(link or (None, None)), clock_events(i))
            recorder.write(rows_for(1_767_225_600 + i * INTERVAL, i * INTERVAL, [gpu], counters))
            if triton:
                requests = triton["requests"]
                if restart_at is not None and i + 1 == restart_at:
                    counters = ModelCounters()
                counters = counters + ModelCounters(
                    request_success=requests, inference_count=requests * triton["batch"],
                    exec_count=requests,
                    queue_duration_us=requests * triton["queue_us"],
                    compute_input_duration_us=requests * triton.get("input_us", 50),
                    compute_infer_duration_us=requests * triton["infer_us"],
                    compute_output_duration_us=requests * 20)
                # a gauge, not a counter: the queue's length at the sample
                counters = replace(counters, pending_request_count=triton.get("pending", 0))
                if not batch_counts:
                    counters = replace(counters, inference_count=None, exec_count=None,
                                       pending_request_count=None)
    return path


P100 = dict(name="Tesla P100-PCIE-16GB", total_gib=16)
A10 = dict(name="NVIDIA A10", total_gib=24)


def verdict(path: Path, gpu: str):
    (result,) = diagnose(read_monitor_csv(path), load_profile(gpu), load_thresholds())
    return result


def test_memory_near_full_with_low_utilization_is_the_memory_wall(tmp_path):
    csv = record(tmp_path / "memory.csv", **P100, util=35, mem_pct=97,
                 triton=dict(requests=400, batch=8, queue_us=800, infer_us=20_000))
    result = verdict(csv, "p100")
    assert result.wall == "memory"
    assert "memory 97.0 % at peak of 16.0 GiB" in result.evidence
    assert "utilization 35 % (mean under load)" in result.evidence
    advice = " ".join(result.advice)
    assert "FP16" in advice and "NVIDIA A10 24 GB has 24 GiB" in advice and "--gpu a10" in advice


# What a P100's PCIe Gen3 x16 moves host to device from pinned memory (bandwidthTest
# measures ~11.7 GB/s): its rated 15.75 GB/s is never reached.
P100_LINK_FULL = 11.5


def test_utilization_high_and_pcie_near_the_gen3_link_is_the_bandwidth_wall(tmp_path):
    csv = record(tmp_path / "bandwidth.csv", **P100, util=96, mem_pct=55, rx_gb_s=P100_LINK_FULL,
                 triton=dict(requests=300, batch=8, queue_us=500, infer_us=25_000))
    result = verdict(csv, "p100")
    assert result.wall == "bandwidth"
    assert any("97 % of the ~11.8 GB/s that the p100 link carries (PCIe Gen3 x16, rated "
               "15.75 GB/s)" in e for e in result.evidence)
    assert "PCIe near that limit (at least 80 % of it) in 29 of 29 samples under load" \
        in result.evidence
    assert any("PCIe Gen4" in a and "--gpu a10" in a for a in result.advice)


def test_a_link_full_in_most_samples_is_the_bandwidth_wall_though_its_mean_is_lower(tmp_path):
    # two samples of three at the link's limit, the third between batches: the mean
    # (8.6 GB/s) is below 80 % of what the link carries, the copies are not
    bursts = lambda i: 2.0 if i % 3 == 0 else P100_LINK_FULL  # noqa: E731
    result = verdict(record(tmp_path / "bursts.csv", **P100, util=96, mem_pct=55, rx_gb_s=bursts,
                            triton=dict(requests=300, batch=8, queue_us=500, infer_us=25_000)),
                     "p100")
    assert result.figures.pcie_rx_mean_gb_s < 0.8 * result.figures.achievable_gb_s
    assert result.wall == "bandwidth"
    # a burst now and then is not the wall
    rare = lambda i: P100_LINK_FULL if i % 5 == 0 else 2.0  # noqa: E731
    assert verdict(record(tmp_path / "rare.csv", **P100, util=96, mem_pct=55, rx_gb_s=rare,
                          triton=dict(requests=300, batch=8, queue_us=500, infer_us=25_000)),
                   "p100").wall == "none"


@pytest.mark.parametrize("util", [40, 70])
def test_a_saturated_link_is_the_bandwidth_wall_while_the_gpu_waits_on_it(tmp_path, util):
    # copies are not kernels: the GPU waiting on PCIe reads low utilization; feeding it
    # faster (the I/O wall's advice) cannot help when the link itself is full
    csv = record(tmp_path / "waiting.csv", **P100, util=util, mem_pct=40, rx_gb_s=P100_LINK_FULL,
                 triton=dict(requests=300, batch=8, queue_us=500, infer_us=4_000))
    result = verdict(csv, "p100")
    assert result.wall == "bandwidth"
    assert any("move less over PCIe" in a for a in result.advice)


def test_the_same_traffic_on_the_a10s_gen4_link_is_no_wall(tmp_path):
    csv = record(tmp_path / "a10.csv", **A10, util=96, mem_pct=55, rx_gb_s=P100_LINK_FULL,
                 triton=dict(requests=300, batch=8, queue_us=500, infer_us=25_000))
    result = verdict(csv, "a10")
    assert result.wall == "none"
    assert any("49 % of the ~23.6 GB/s that the a10 link carries" in e for e in result.evidence)


def test_an_a10_on_a_gen3_slot_is_judged_by_the_link_it_ran_on(tmp_path):
    # the same 11.5 GB/s that is half of what the A10's Gen4 x16 carries fills a Gen3 x16
    csv = record(tmp_path / "a10-gen3.csv", **A10, util=70, mem_pct=55, rx_gb_s=P100_LINK_FULL,
                 link=(3, 16), triton=dict(requests=300, batch=8, queue_us=500, infer_us=25_000))
    result = verdict(csv, "a10")
    assert result.wall == "bandwidth"
    assert any("97 % of the ~11.8 GB/s that the card's link as recorded carries (PCIe Gen3 "
               "x16, rated 15.75 GB/s" in e for e in result.evidence)
    assert "PCIe Gen3 x16" in result.advice[0] and "Gen4 x16" in result.advice[0]
    # on the Gen4 link it is rated for, the same traffic is no wall
    rated = record(tmp_path / "a10-gen4.csv", **A10, util=70, mem_pct=55, rx_gb_s=P100_LINK_FULL,
                   link=(4, 16), triton=dict(requests=300, batch=8, queue_us=500, infer_us=25_000))
    assert verdict(rated, "a10").wall == "none"


def test_low_utilization_and_memory_while_requests_queue_is_the_io_wall(tmp_path):
    csv = record(tmp_path / "io.csv", **A10, util=25, mem_pct=20,
                 triton=dict(requests=200, batch=4, queue_us=30_000, infer_us=6_000, pending=12))
    result = verdict(csv, "a10")
    assert result.wall == "io" and result.title == "I/O or client wall"
    assert any("queue 30.00 ms per request" in e for e in result.evidence)
    assert any("up to 12 requests pending" in e for e in result.evidence)
    advice = " ".join(result.advice)
    assert "instance_group count (now 2)" in advice and "loader workers" in advice


def test_low_utilization_without_triton_columns_is_still_named_with_a_note(tmp_path):
    csv = record(tmp_path / "gpu-only.csv", **P100, util=30, mem_pct=25)
    result = verdict(csv, "p100")
    assert result.wall == "io"
    assert any("no Triton columns" in n for n in result.notes)


# 500 requests/s of one inference each, 0.4 ms of compute, while 16 clients keep the
# queue full: 30 ms queued each, 15 requests waiting on average
SCHEDULING = dict(requests=5000, batch=1, queue_us=30_000, input_us=30, infer_us=350)


def test_one_inference_per_execution_with_short_compute_is_the_scheduling_wall(tmp_path):
    csv = record(tmp_path / "scheduling.csv", **A10, util=45, mem_pct=30, triton=SCHEDULING)
    result = verdict(csv, "a10")
    assert result.wall == "scheduling"
    assert any("= 1.00 per execution" in e for e in result.evidence)
    advice = " ".join(result.advice)
    assert "dynamic_batching { }" in advice and "max_queue_delay_microseconds: 100" in advice
    assert "CUDA graphs" in advice and "TensorRT plans, which honour them" in advice


def test_on_a_p100_the_scheduling_advice_is_batching_not_cuda_graphs(tmp_path):
    csv = record(tmp_path / "scheduling-p100.csv", **P100, util=45, mem_pct=30,
                 triton=SCHEDULING)
    result = verdict(csv, "p100")
    assert result.wall == "scheduling"
    assert any("does not use: batching is the lever" in a for a in result.advice)


def test_single_requests_that_never_wait_are_the_client_wall_not_scheduling(tmp_path):
    # the same batches of one and short compute, but each request finds the queue empty
    # (0.15 ms queued at 500/s: 0.08 waiting on average): nothing to batch; the client
    # sends one request at a time
    lone = dict(SCHEDULING, queue_us=150)
    result = verdict(record(tmp_path / "lone.csv", **A10, util=45, mem_pct=30, triton=lone),
                     "a10")
    assert result.wall == "io"
    assert result.figures.queue_depth < 1
    advice = " ".join(result.advice)
    assert "more concurrency" in advice and "batching" not in advice


def test_a_busy_gpu_with_room_and_large_batches_is_healthy(tmp_path):
    csv = record(tmp_path / "healthy.csv", **A10, util=90, mem_pct=60, rx_gb_s=3.0,
                 triton=dict(requests=600, batch=6, queue_us=900, infer_us=8_000))
    result = verdict(csv, "a10")
    assert result.wall == "none" and result.notes == []
    assert result.figures.avg_batch == pytest.approx(6.0)


def test_a_recording_without_pcie_figures_says_the_bandwidth_wall_was_not_judged(tmp_path):
    """Triton's own GPU gauges (a server watched from another host) carry no PCIe figures:
    'no wall' must not read as 'the link is fine'."""
    csv = record(tmp_path / "remote.csv", **A10, util=90, mem_pct=60, rx_gb_s=None, tx_gb_s=None,
                 triton=dict(requests=600, batch=6, queue_us=900, infer_us=8_000))
    result = verdict(csv, "a10")
    assert any("PCIe: not recorded" in line and "not judged" in line for line in result.evidence)
    recorded = verdict(record(tmp_path / "local.csv", **A10, util=90, mem_pct=60,
                              triton=dict(requests=600, batch=6, queue_us=900, infer_us=8_000)),
                       "a10")
    assert not any("not recorded" in line for line in recorded.evidence)


def test_a_recording_without_traffic_is_idle_not_a_wall(tmp_path):
    csv = record(tmp_path / "idle.csv", **A10, util=40, mem_pct=30,
                 triton=dict(requests=0, batch=1, queue_us=0, infer_us=0))
    assert verdict(csv, "a10").wall == "idle"


def test_an_idle_recording_with_pcie_figures_does_not_say_they_were_not_recorded(tmp_path):
    """No sample was under load, so no PCIe mean was taken: NVML was there all the same."""
    csv = record(tmp_path / "idle.csv", **A10, util=40, mem_pct=30,
                 triton=dict(requests=0, batch=1, queue_us=0, infer_us=0))
    assert not any("PCIe" in line for line in verdict(csv, "a10").evidence)


def test_the_profile_is_guessed_from_the_recorded_gpu_name(tmp_path):
    p100 = read_monitor_csv(record(tmp_path / "p.csv", **P100, util=50, mem_pct=50))
    assert guess_profile(p100) == "p100"
    a100 = read_monitor_csv(record(tmp_path / "a.csv", name="NVIDIA A100-SXM4-40GB",
                                   total_gib=40, util=50, mem_pct=50))
    assert guess_profile(a100) is None          # "a10" is not a word of "A100"
    with pytest.raises(UsageError, match="cannot tell which GPU profile"):
        choose_profile(a100, None)


def test_a_csv_without_the_utilization_column_is_refused_by_name(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("elapsed_s,mem_used_mib,mem_total_mib\n0,1,2\n")
    with pytest.raises(UsageError, match="no column 'util_pct'"):
        read_monitor_csv(bad)


def test_diagnose_cli_prints_the_wall_evidence_and_advice_and_writes_json(tmp_path, capsys):
    csv = record(tmp_path / "memory.csv", **P100, util=35, mem_pct=97,
                 triton=dict(requests=400, batch=8, queue_us=800, infer_us=20_000))
    out = tmp_path / "diagnosis.json"
    assert run_cli("diagnose", csv, "--json", out) == 0       # profile from the GPU name
    printed = capsys.readouterr().out
    assert "memory wall" in printed and "profile p100" in printed
    assert "memory 97.0 % at peak" in printed and "what to try:" in printed
    (data,) = json.loads(out.read_text())["diagnoses"]
    assert data["wall"] == "memory" and data["figures"]["mem_peak_pct"] == pytest.approx(97.0, abs=0.01)


def test_a_json_report_that_cannot_be_written_whole_leaves_the_previous_one(
        tmp_path, capsys, monkeypatch):
    import errno
    import os

    csv = record(tmp_path / "memory.csv", **P100, util=35, mem_pct=97,
                 triton=dict(requests=400, batch=8, queue_us=800, infer_us=20_000))
    out = tmp_path / "diagnosis.json"
    out.write_text('{"diagnoses": []}\n')

    def disk_full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", disk_full)
    assert run_cli("diagnose", csv, "--json", out, "--force") == 2
    assert "cannot write" in capsys.readouterr().err
    assert out.read_text() == '{"diagnoses": []}\n'        # never half a report
    assert sorted(p.name for p in tmp_path.iterdir()) == ["diagnosis.json", "memory.csv"]


def test_a_json_report_is_kept_unless_force_and_json_to_stdout_is_json_alone(tmp_path, capsys):
    csv = record(tmp_path / "memory.csv", **P100, util=35, mem_pct=97,
                 triton=dict(requests=400, batch=8, queue_us=800, infer_us=20_000))
    out = tmp_path / "diagnosis.json"
    out.write_text("earlier\n")
    assert run_cli("diagnose", csv, "--json", out) == 2
    assert "already exists" in capsys.readouterr().err and out.read_text() == "earlier\n"
    assert run_cli("diagnose", csv, "--json", out, "--force") == 0
    assert json.loads(out.read_text())["diagnoses"]
    capsys.readouterr()
    assert run_cli("diagnose", csv, "--json", "-") == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["diagnoses"]                # stdout: the JSON alone
    assert "what to try" in captured.err                         # the report: on stderr


@pytest.mark.parametrize("command", ["diagnose", "doctor"])
def test_a_json_report_given_a_folder_is_shown_a_json_file_name(tmp_path, capsys, command):
    args = [record(tmp_path / "memory.csv", **P100, util=35, mem_pct=97)] \
        if command == "diagnose" else []
    assert run_cli(command, *args, "--json", tmp_path) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: JSON report {tmp_path} is a folder",
        f"hint: give a file name, e.g. {tmp_path / 'run.json'}"]


def test_a_json_report_never_replaces_the_recording_it_was_made_from_even_with_force(
        tmp_path, capsys):
    csv = record(tmp_path / "memory.csv", **P100, util=35, mem_pct=97,
                 triton=dict(requests=400, batch=8, queue_us=800, infer_us=20_000))
    recorded = csv.read_text()
    assert run_cli("diagnose", csv, "--json", csv, "--force") == 2
    assert "is the recording diagnose reads" in capsys.readouterr().err
    assert csv.read_text() == recorded


def test_a_recording_that_is_not_text_is_one_line_not_a_traceback(tmp_path, capsys):
    binary = tmp_path / "gpu.csv"
    binary.write_bytes(b"\xff\xfe\x00binary")
    assert run_cli("diagnose", binary) == 2
    assert "is not a text CSV" in capsys.readouterr().err


def test_diagnose_needs_a_file_or_live(capsys):
    assert run_cli("diagnose") == 2
    assert "no recording given" in capsys.readouterr().err


def test_a_server_restart_mid_recording_counts_the_traffic_after_it(tmp_path):
    pattern = dict(requests=300, batch=8, queue_us=500, infer_us=25_000)
    result = verdict(record(tmp_path / "restart.csv", **A10, util=90, mem_pct=60,
                            triton=pattern, restart_at=SAMPLES // 2), "a10")
    intervals = SAMPLES - 1                # every interval carried the same traffic
    assert result.figures.loaded_samples == intervals
    assert result.figures.inferences == intervals * pattern["requests"] * pattern["batch"]
    assert result.figures.avg_batch == pytest.approx(pattern["batch"])


def test_without_batch_counts_the_load_and_times_still_count_and_the_gap_is_said(tmp_path):
    # what monitor records from a server with --metrics-config counter_latencies=false
    csv = record(tmp_path / "summaries.csv", **A10, util=45, mem_pct=30, batch_counts=False,
                 triton=dict(requests=5000, batch=1, queue_us=150, input_us=30, infer_us=350))
    result = verdict(csv, "a10")
    assert result.wall != "idle" and result.figures.loaded_samples == SAMPLES - 1
    assert result.figures.has_triton and result.figures.avg_batch is None
    assert any("compute 0.40 ms, queue 0.15 ms per request" in e for e in result.evidence)
    assert any("batch sizes could not be checked" in n for n in result.notes)
    assert not any("no Triton columns" in n for n in result.notes)


def test_clocks_held_down_under_load_are_named_with_how_often(tmp_path):
    import pynvml

    thermal = pynvml.nvmlClocksEventReasonHwThermalSlowdown
    every_third = lambda i: thermal if i % 3 == 0 else pynvml.nvmlClocksEventReasonGpuIdle  # noqa: E731
    csv = record(tmp_path / "hot.csv", **A10, util=90, mem_pct=60, clock_events=every_third,
                 triton=dict(requests=600, batch=6, queue_us=900, infer_us=8_000))
    result = verdict(csv, "a10")
    held = sum(1 for i in range(1, SAMPLES) if every_third(i) == thermal)   # loaded samples
    assert result.figures.slowdown_samples == {"hw_thermal": held}
    (note,) = [n for n in result.notes if "clocks were held down" in n]
    assert f"hw_thermal in {held} of {SAMPLES - 1}" in note and "cooling" in note


def _live_recording_stopped_at_its_fourth_sample(monkeypatch, capsys, stop: BaseException):
    """``diagnose --live`` on a stand-in GPU, ``stop`` raised as its fourth sample is taken
    (Ctrl-C's KeyboardInterrupt, or the Interrupted that SIGTERM raises under
    ``signals_interrupt``): the exit code and what it said."""
    from tests.monitor.conftest import _fake_pynvml

    fake = _fake_pynvml()
    samples = iter(range(1_000))
    busy = fake.nvmlDeviceGetUtilizationRates

    def utilization(handle):
        if next(samples) == 3:
            raise stop
        return busy(handle)

    fake.nvmlDeviceGetUtilizationRates = utilization
    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml", lambda: fake)
    code = run_cli("diagnose", "--live", "--gpu", "p100", "--interval", "0.05", "--duration", "60")
    return code, capsys.readouterr()


def test_ctrl_c_ends_a_live_recording_early_and_what_it_sampled_is_diagnosed(monkeypatch, capsys):
    code, out = _live_recording_stopped_at_its_fourth_sample(monkeypatch, capsys, KeyboardInterrupt())
    assert code == 0
    assert "stopped by Ctrl-C" in out.err and "interrupted" not in out.err
    assert "3 of 3 samples under load" in out.out and "profile p100" in out.out


def test_sigterm_ends_a_live_recording_as_ctrl_c_does_then_exits_143(monkeypatch, capsys):
    """The samples before it are diagnosed; the last line and the exit code are the signal's."""
    code, out = _live_recording_stopped_at_its_fourth_sample(monkeypatch, capsys,
                                                             Interrupted(signal.SIGTERM))
    assert code == 143
    assert "recording stopped by SIGTERM" in out.err
    assert out.err.strip().splitlines()[-1] == "error: stopped by SIGTERM"
    assert "3 of 3 samples under load" in out.out and "profile p100" in out.out


def test_an_older_two_gpu_recording_without_uuids_calls_the_gpu_that_served_nothing_idle(tmp_path):
    """Triton's counters are the server's, on every GPU's row: the card that stayed idle
    (its own utilization says so) served none of it, and is no wall."""
    import csv as csvlib

    path = tmp_path / "two.csv"
    counters = ModelCounters()
    with CsvRecorder(path) as recorder:
        for i in range(SAMPLES):
            gpus = [GpuSample(g, "NVIDIA A10", f"GPU-{g}", util, 8000, 24 * 1024, 60.0, 100.0,
                              1695.0, 6251.0, 500.0, 200.0) for g, util in ((0, 90.0), (1, 0.0))]
            recorder.write(rows_for(1_767_225_600 + i * INTERVAL, i * INTERVAL, gpus, counters))
            counters = counters + ModelCounters(
                request_success=600, inference_count=3600, exec_count=600,
                queue_duration_us=600 * 900, compute_input_duration_us=600 * 50,
                compute_infer_duration_us=600 * 8000, compute_output_duration_us=600 * 20)
    with path.open(newline="") as handle:          # as monitor wrote it before the uuid column
        table = [{k: v for k, v in row.items() if k != "uuid"} for row in csvlib.DictReader(handle)]
    with path.open("w", newline="") as handle:
        writer = csvlib.DictWriter(handle, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    rows = read_monitor_csv(path)
    assert {r.uuid for r in rows} == {""}
    busy, idle = diagnose(rows, load_profile("a10"), load_thresholds())
    assert (busy.gpu, busy.wall) == (0, "none") and (idle.gpu, idle.wall) == (1, "idle")
    assert busy.figures.avg_batch == pytest.approx(6.0)


def test_a_failed_scrape_between_two_samples_keeps_judging_the_gpu_by_its_own_counters():
    """A server that labels its GPU series; the scrape at 20 s failed (NVML still sampled
    the card). Over 10-30 s Triton ran 900 CPU-model requests and nothing on the GPU,
    idle at 2 %: that interval, judged by the server's counters, made it starved."""
    def row(t: float, served: float | None, on_gpu: float | None) -> MonitorRow:
        return MonitorRow(elapsed_s=t, gpu=0, name="NVIDIA A10", uuid="GPU-a", util_pct=2.0,
                          mem_used_mib=1000, mem_total_mib=24 * 1024,
                          triton=None if served is None else ModelCounters(
                              request_success=served, inference_count=served, exec_count=served),
                          gpu_triton=None if on_gpu is None else ModelCounters(
                              request_success=on_gpu, inference_count=on_gpu, exec_count=on_gpu,
                              pending_request_count=None))
    rows = [row(0, 0, 0), row(10, 300, 0), row(20, None, None), row(30, 1200, 0)]
    (result,) = diagnose(rows, load_profile("a10"), load_thresholds())
    assert result.figures.loaded_samples == 0 and result.wall == "idle"


@pytest.mark.parametrize("own", [False, True], ids=["server counters", "gpu's own counters"])
def test_the_interval_after_a_failed_scrape_is_as_long_as_it_was(own):
    """1,000 requests every 10 s, each queued 8 ms: 0.8 waiting on average. The scrape at
    20 s failed, so the interval 10-30 s holds 20 s of traffic; taken as one 10 s step,
    the queue read 1.07 deep and one request at a time read as the scheduling wall."""
    def counters(requests: float, on_gpu: bool) -> ModelCounters:
        return ModelCounters(request_success=requests, inference_count=requests,
                             exec_count=requests, queue_duration_us=requests * 8000,
                             compute_input_duration_us=requests * 20,
                             compute_infer_duration_us=requests * 500,
                             compute_output_duration_us=requests * 20,
                             pending_request_count=None if on_gpu else 0)

    def row(t: float, scraped: bool) -> MonitorRow:
        served = 100 * t
        return MonitorRow(elapsed_s=t, gpu=0, name="NVIDIA A10", uuid="GPU-a", util_pct=90.0,
                          mem_used_mib=1000, mem_total_mib=24 * 1024,
                          triton=counters(served, False) if scraped else None,
                          gpu_triton=counters(served, True) if scraped and own else None)

    rows = [row(t, scraped=t != 20) for t in (0, 10, 20, 30, 40)]
    (result,) = diagnose(rows, load_profile("a10"), load_thresholds())
    assert result.figures.seconds_under_load == pytest.approx(40)
    assert result.figures.queue_depth == pytest.approx(0.8)
    assert result.wall != "scheduling"
    assert any("(~40 s)" in line for line in result.evidence)


def record_server(path: Path, *, per_s: float, batch: float, queue_us: float,
                  compute_us: float, samples: int = 9, pending: float = 0) -> Path:
    """Write a monitor CSV as `tritonkit monitor --csv --url` does against a CPU server:
    NVML finds no GPU, so each sample is one row of Triton's counters alone. ``batch``:
    inferences per execution; ``queue_us``, ``compute_us``: per request."""
    counters = ModelCounters()
    with CsvRecorder(path) as recorder:
        for i in range(samples):
            recorder.write(rows_for(1_767_225_600 + i * INTERVAL, i * INTERVAL, [], counters))
            requests = per_s * INTERVAL
            counters = replace(counters + ModelCounters(
                request_success=requests, inference_count=requests,
                exec_count=requests / batch, queue_duration_us=requests * queue_us,
                compute_input_duration_us=requests * 0.1 * compute_us,
                compute_infer_duration_us=requests * 0.85 * compute_us,
                compute_output_duration_us=requests * 0.05 * compute_us),
                pending_request_count=pending)
    return path


# the platform review's recording: a local CPU deployment under load
CPU_UNDER_LOAD = dict(per_s=3700, batch=2, queue_us=300, compute_us=400)


def test_a_cpu_server_recording_gets_triton_s_verdict_without_a_gpu_profile(tmp_path, capsys):
    csv = record_server(tmp_path / "mon.csv", **CPU_UNDER_LOAD)
    out = tmp_path / "diagnosis.json"
    assert run_cli("diagnose", csv, "--json", out) == 0
    printed = capsys.readouterr().out
    assert "Triton server (no GPU samples): no scheduling wall" in printed
    assert "296000 inferences in 148000 executions = 2.00 per execution" in printed
    assert "compute 0.40 ms, queue 0.30 ms per request" in printed
    (data,) = json.loads(out.read_text())["diagnoses"]
    assert (data["gpu"], data["profile"], data["wall"]) == (None, "", "none")
    assert data["figures"]["loaded_samples"] == 8
    (nvml,) = [n for n in data["notes"] if "need GPU samples" in n]
    assert "the memory, bandwidth and I/O walls need GPU samples" in nvml
    assert "the memory, bandwidth and I/O walls need GPU samples" in " ".join(printed.split())


def test_a_cpu_server_recording_with_gpu_given_is_judged_and_says_the_profile_is_unused(
        tmp_path, capsys):
    csv = record_server(tmp_path / "mon.csv", **CPU_UNDER_LOAD)
    assert run_cli("diagnose", csv, "--gpu", "p100", "--json", "-") == 0
    (data,) = json.loads(capsys.readouterr().out)["diagnoses"]
    assert data["wall"] == "none"
    assert any("--gpu p100 is not used" in n for n in data["notes"])


def test_a_cpu_server_running_one_inference_per_execution_while_requests_wait_is_the_scheduling_wall(
        tmp_path):
    # 3,700 requests/s, none batched, each queued 2 ms: 7.4 waiting on average
    csv = record_server(tmp_path / "mon.csv", per_s=3700, batch=1, queue_us=2000, compute_us=250)
    (result,) = diagnose(read_monitor_csv(csv), None, load_thresholds())
    assert (result.gpu, result.wall, result.title) == (None, "scheduling", "scheduling wall")
    assert result.figures.queue_depth == pytest.approx(7.4)
    advice = " ".join(result.advice)
    assert "dynamic_batching { }" in advice and "CUDA graphs" not in advice


def test_a_recording_with_neither_gpu_samples_nor_triton_counters_is_refused(tmp_path, capsys):
    path = tmp_path / "empty.csv"
    with CsvRecorder(path) as recorder:
        for i in range(3):
            recorder.write(rows_for(1_767_225_600 + i * INTERVAL, i * INTERVAL, [], None))
    assert run_cli("diagnose", path) == 2
    error, hint = capsys.readouterr().err.splitlines()
    assert error == ("error: the recording has neither GPU samples (no util_pct values) nor "
                     "Triton's counters (no request_success values)")
    assert hint.startswith("hint: record on the GPU host") and "--url" in hint


def test_a_gpu_recording_whose_card_matches_no_profile_still_asks_for_gpu(tmp_path, capsys):
    csv = record(tmp_path / "a100.csv", name="NVIDIA A100-SXM4-40GB", total_gib=40, util=50,
                 mem_pct=50, triton=dict(requests=300, batch=8, queue_us=500, infer_us=25_000))
    assert run_cli("diagnose", csv) == 2
    assert "cannot tell which GPU profile" in capsys.readouterr().err
    assert run_cli("diagnose", csv, "--gpu", "a10") == 0
    assert "GPU 0 (NVIDIA A100-SXM4-40GB, profile a10)" in capsys.readouterr().out


def test_a_cpu_servers_compute_input_time_is_input_preparation_not_a_copy_to_a_gpu(tmp_path):
    """On a CPU server Triton's compute_input time prepares the inputs: there is no card
    to copy them to. Where GPU rows exist it is the copy over PCIe."""
    cpu = record_server(tmp_path / "cpu.csv", **CPU_UNDER_LOAD)
    (server,) = diagnose(read_monitor_csv(cpu), None, load_thresholds())
    (times,) = [e for e in server.evidence if "compute 0.40 ms" in e]
    assert "input preparation 10 % of compute" in times and "copy" not in times

    gpu = record(tmp_path / "gpu.csv", **A10, util=25, mem_pct=20,
                 triton=dict(requests=200, batch=4, queue_us=30_000, infer_us=6_000))
    (times,) = [e for e in verdict(gpu, "a10").evidence if "queue 30.00 ms" in e]
    assert "input copy" in times and "preparation" not in times


# --- diagnose --live without a GPU ------------------------------------------------------------


def _no_driver(monkeypatch) -> None:
    """This host as one without an NVIDIA driver, whatever the machine running the test:
    pynvml imports, and NVML does not start (as here: no libnvidia-ml)."""
    class NVMLError(Exception):
        pass

    def init():
        raise NVMLError("NVML Shared Library Not Found")

    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml",
                        lambda: SimpleNamespace(NVMLError=NVMLError, nvmlInit=init))


def _infer(http_url: str, count: int) -> None:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(http_url)
    for _ in range(count):
        tensor = httpclient.InferInput("INPUT__0", [2, 4], "FP32")
        tensor.set_data_from_numpy(np.ones((2, 4), dtype=np.float32))
        client.infer("example", [tensor])


@pytest.mark.server
def test_diagnose_live_on_a_cpu_server_gives_triton_s_verdict_as_a_recording_does(
        example_server, monkeypatch, tmp_path, capsys):
    """No GPU here, but Triton is watched: the server's verdict from its counters (as
    `diagnose FILE` gives for monitor's CSV of it), not 'no GPU to record'."""
    from tritonkit.monitor.triton_metrics import scrape

    if scrape(example_server.metrics_url, at=0).gpus:
        pytest.skip("this server reports GPUs: it is no CPU server")
    _no_driver(monkeypatch)
    _infer(example_server.http_url, 20)
    out = tmp_path / "live.json"
    assert run_cli("diagnose", "--live", "--repository", example_server.repository,
                   "--duration", "1", "--interval", "0.5", "--json", out) == 0
    printed = capsys.readouterr()
    assert "Triton server (no GPU samples)" in printed.out
    assert "no NVIDIA driver" in printed.err          # why there is no GPU to judge
    (verdict,) = json.loads(out.read_text())["diagnoses"]
    assert verdict["gpu"] is None and verdict["profile"] == ""
    assert verdict["wall"] in ("scheduling", "none", "idle")
    assert any("need GPU samples" in note for note in verdict["notes"])


class _NoGpus:
    """NVML open on a host whose GPUs it cannot reach: it samples none."""

    def sample(self) -> list:
        return []

    def close(self) -> None:
        pass


def test_a_live_recording_with_neither_a_gpu_nor_triton_is_refused_naming_both():
    monitor = Monitor(_NoGpus(), None, load_thresholds(None).alerts)
    with pytest.raises(UsageError) as refused:
        record_live(monitor, interval=1, duration=1, sleep=lambda s: None)
    assert "no GPU" in refused.value.message and "no Triton server" in refused.value.message
    assert "--repository" in refused.value.hint and "allow-gpu-metrics" not in refused.value.hint


def test_a_recording_is_read_row_by_row_not_held_whole(tmp_path):
    """A 1.2 GB file (sparse: no disk) with a one-line header: diagnose held about five
    times the file in memory before it looked at that header (6 GB here, a MemoryError
    under a 2 GB address-space limit); read row by row it needs ~80 MB."""
    import subprocess
    import sys

    path = tmp_path / "long.csv"
    path.write_text("elapsed_s,gpu_util\n")
    with path.open("r+b") as handle:
        handle.truncate(1200 << 20)
    probe = ("import resource, sys\n"
             "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
             "from tritonkit.cli import main\n"
             f"sys.exit(main(['diagnose', {str(path)!r}]))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[0] == (f"error: {path} has no column 'util_pct' in its "
                                           "first line: it is no recording of tritonkit monitor")


def test_a_line_longer_than_any_row_is_no_recording(tmp_path, capsys):
    path = tmp_path / "one_line.csv"
    path.write_text("elapsed_s,util_pct" + "x" * (2 << 20) + "\n")
    assert run_cli("diagnose", path) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"error: line 1 of {path} is longer than 1,048,576 characters: it is no recording of "
        "tritonkit monitor")


@pytest.mark.parametrize("column, value", [
    ("util_pct", "1e308"),               # was an internal error: an overflow in fsum
    ("util_pct", "101"), ("mem_used_mib", "inf"), ("temp_c", "-inf"),
    ("pcie_rx_mb_s", "1e300"), ("request_success", "-1"), ("request_success", "1e300"),
])
def test_a_value_outside_its_columns_range_is_refused_naming_file_line_and_column(
        tmp_path, capsys, column, value):
    csv = record(tmp_path / "gpu.csv", **A10, util=60, mem_pct=50,
                 triton=dict(requests=300, batch=4, queue_us=500, infer_us=5_000))
    lines = csv.read_text().splitlines()
    header = lines[0].split(",")
    row = lines[2].split(",")
    row[header.index(column)] = value
    lines[2] = ",".join(row)
    csv.write_text("\n".join(lines) + "\n")
    assert run_cli("diagnose", csv, "--gpu", "a10") == 2
    err = capsys.readouterr().err
    first = error_lines(err)[0]
    assert f"{csv}:3: column '{column}'" in first and "internal error" not in err, err
