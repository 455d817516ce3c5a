"""`tritonkit monitor` as a user runs it: its tables, --once, Ctrl-C to end it, no driver."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, default_signals, run_cli
from tests.monitor.conftest import (
    TWO_MODELS, _fake_pynvml, _infer_failing, _nvml_works, _scraping, _served, _settled,
    _triton_rows, triton_exposition)
from tritonkit.monitor.recording import COLUMNS, CsvRecorder, read_models_csv, read_monitor_csv


def test_monitor_shows_each_namespaces_model_on_its_own_row(monkeypatch, capsys):
    text = triton_exposition({("/repo_a/resnet", "1", ""): _served(7),
                              ("/repo_b/resnet", "1", ""): _served(3)})
    _scraping(monkeypatch, text)
    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml", lambda: _fake_pynvml())
    assert run_cli("monitor", "--url", "127.0.0.1:8000", "--once") == 0
    rows = {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines()
            if "resnet" in line}
    assert rows == {"/repo_a/resnet": "7", "/repo_b/resnet": "3"}


def _monitor_stopped_by(signum: int, repository: str, recording: Path) -> tuple[int, str, str]:
    """`tritonkit monitor --csv` run until its CSV holds two samples, then sent ``signum``:
    its exit code, stdout and stderr."""
    monitor = subprocess.Popen(
        [sys.executable, "-m", "tritonkit", "monitor", "--repository", repository,
         "--interval", "0.2", "--csv", str(recording)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        preexec_fn=default_signals)
    try:
        end = time.monotonic() + 30
        while not (recording.exists() and len(recording.read_text().splitlines()) >= 3):
            assert time.monotonic() < end and monitor.poll() is None, monitor.stderr.read()
            time.sleep(0.1)
        monitor.send_signal(signum)
        out, err = monitor.communicate(timeout=30)
    finally:
        monitor.kill()
    return monitor.returncode, out, err


@pytest.mark.server
def test_ctrl_c_is_how_monitor_ends_so_it_exits_0_and_says_what_it_wrote(example_server, tmp_path):
    recording = tmp_path / "gpu.csv"
    code, out, err = _monitor_stopped_by(signal.SIGINT, example_server.repository, recording)
    assert code == 0, err
    assert "error" not in err
    samples = len(read_monitor_csv(recording))
    assert f"{samples} samples written to {recording}" in " ".join(out.split())


@pytest.mark.server
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_ends_monitor_with_128_plus_the_signal_and_every_sample_kept(
        example_server, tmp_path, signum):
    """A service manager's stop (SIGTERM) or a closed terminal (SIGHUP) ends monitor as
    Ctrl-C does, each CSV closed whole, but as a signal's end: one line, 128 + the signal."""
    recording = tmp_path / "gpu.csv"
    code, out, err = _monitor_stopped_by(signum, example_server.repository, recording)
    assert code == 128 + signum, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == f"error: stopped by {signal.Signals(signum).name}"
    samples = len(read_monitor_csv(recording))
    assert f"{samples} samples written to {recording}" in " ".join(out.split())
    models = tmp_path / "gpu.models.csv"
    assert recording.read_text().endswith("\n") and models.read_text().endswith("\n")
    assert len(read_models_csv(models)) == samples     # one model: a row per sample each


def test_without_a_driver_monitor_says_so_in_one_line_and_fails(capsys):
    if _nvml_works():
        pytest.skip("this host has an NVIDIA driver")
    assert run_cli("monitor", "--once") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("error: no NVIDIA driver") and err[1].startswith("hint: ")
    assert len(err) == 2


def test_monitor_with_a_gpu_prints_the_table_and_writes_one_row_per_gpu(monkeypatch, tmp_path,
                                                                        capsys):
    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml", lambda: _fake_pynvml())
    out = tmp_path / "gpu.csv"
    # slots 0.25 s apart for 1.5 s: a busy host's slow sample skips slots, yet leaves two
    assert run_cli("monitor", "--interval", "0.25", "--duration", "1.5", "--csv", out) == 0
    printed = capsys.readouterr().out
    assert "Tesla P100-PCIE-16GB (PCIe Gen3 x16)" in printed and "12288/16384" in printed
    with out.open() as handle:
        header = next(csv.reader(handle))
    assert tuple(header) == COLUMNS
    rows = read_monitor_csv(out)
    # one row a sample: seven, or fewer where a sample ran past a slot (skipped)
    assert 2 <= len(rows) <= 7 and len({r.elapsed_s for r in rows}) == len(rows)
    assert {r.gpu for r in rows} == {0}
    assert rows[0].util_pct == 93 and rows[0].triton is None


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


def test_a_ctrl_c_while_a_sample_is_written_says_the_count_the_file_holds(
        monkeypatch, capsys, tmp_path, default_sigint):
    """Ctrl-C pressed just as a sample is written (a user watching the file does): the
    sample is finished and counted, and the line says what the CSV holds."""
    texts = [triton_exposition({("mlp", "1", ""): _served(n)}) for n in range(1, 9)]
    _scraping(monkeypatch, *texts)
    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml", lambda: _fake_pynvml())
    write = CsvRecorder.write
    written = []

    def write_then_ctrl_c(self, *args, **kwargs):
        write(self, *args, **kwargs)
        written.append(1)
        if len(written) == 2:
            os.kill(os.getpid(), signal.SIGINT)       # Python raises it at the next line
            time.sleep(0.01)

    monkeypatch.setattr(CsvRecorder, "write", write_then_ctrl_c)
    recording = tmp_path / "gpu.csv"
    code = run_cli("monitor", "--url", "127.0.0.1:8000", "--interval", "0.05",
                   "--csv", recording)
    assert code == 0
    rows = read_monitor_csv(recording)
    assert len(rows) == 2
    assert f"2 samples written to {recording}" in " ".join(capsys.readouterr().out.split())
