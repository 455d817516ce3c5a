"""`tritonkit monitor` recording: a fixed schedule, the CSV files (server and per model) and
their columns, files never overwritten without --force."""

from __future__ import annotations

import csv
import math
from dataclasses import replace

import pytest

from tests.conftest import run_cli, unused_port
from tests.monitor.conftest import (
    LIMITS, TWO_MODELS, _Clock, _fake_pynvml, _gpu, _scraping, triton_exposition)
from tritonkit.errors import UsageError
from tritonkit.monitor.recording import (
    COLUMNS, CsvRecorder, read_models_csv, read_monitor_csv, rows_for)
from tritonkit.monitor.triton_metrics import ModelCounters
from tritonkit.monitor.watch import Monitor, watch


def test_an_existing_csv_is_kept_unless_force(tmp_path, capsys):
    recording = tmp_path / "gpu.csv"
    recording.write_text("a day of samples\n")
    assert run_cli("monitor", "--url", "127.0.0.1:1", "--metrics-port", unused_port(), "--once",
                   "--csv", recording) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "--force" in err
    assert recording.read_text() == "a day of samples\n"
    run_cli("monitor", "--url", "127.0.0.1:1", "--metrics-port", unused_port(), "--once",
            "--csv", recording, "--force")      # no server there: only the header is written
    assert recording.read_text().startswith("timestamp,elapsed_s,")


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


def test_a_reading_of_nan_or_inf_is_recorded_as_not_given_which_diagnose_reads_back(tmp_path):
    # diagnose refuses nan and inf in a recording: monitor never writes one
    path = tmp_path / "gpu.csv"
    gpu = replace(_gpu(util=50), temperature_c=math.nan, power_w=math.inf)
    with CsvRecorder(path) as recorder:
        recorder.write(rows_for(1_767_225_600, 0.0, [gpu], None))
    cells = path.read_text().splitlines()[1].split(",")
    assert "nan" not in cells and "inf" not in cells
    (row,) = read_monitor_csv(path)
    assert row.temp_c is None and row.power_w is None and row.util_pct == 50.0
