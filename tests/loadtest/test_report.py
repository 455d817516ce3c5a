"""`tritonkit loadtest` report: what a run prints and writes (JSON, CSV, plot), and output
files never overwritten or lost."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import EXAMPLE_REPOSITORY, ROOT, run_cli
from tests.loadtest.conftest import (
    _failed_in_second, _loadtest, _result, _some_failed_in_second, _stalled_then_idle,
    _timeline)
from tritonkit import report
from tritonkit.errors import EXIT_RUN_ERRORS, EXIT_SLA_MISS, EXIT_USAGE
from tritonkit.loadtest import LevelResult, LoadSpec, LoadTestResult, Window, cold_start_windows


def _closed_result(timeline: list[Window], ok: int, errors: dict[str, int]) -> LoadTestResult:
    """A 6-second closed-loop level of ``timeline`` (1 s windows), its spikes marked."""
    spikes = cold_start_windows(timeline, [], 0, 1.0)
    level = LevelResult(mode="closed", level=2, workers=1, duration_s=6, sent=ok + sum(errors.values()),
                        ok=ok, errors=errors, qps=ok / 6, infer_per_s=ok / 6, latency_ms={"p99": 1.0},
                        timeline=timeline, spikes=spikes, events=[], server_split_ms=None)
    return LoadTestResult(spec=LoadSpec(model="m", concurrency=(2,), duration_s=6, window_s=1),
                          server="s", request="r", levels=[level])


def _cells(row: str) -> list[str]:
    """A table row's cells: two spaces or more part the columns (a cause has single ones)."""
    return re.split(r"\s{2,}", row.strip())


def test_an_error_window_is_in_the_json_the_csv_the_spikes_table_the_warnings_and_the_plot(tmp_path,
                                                                                          monkeypatch):
    import matplotlib.pyplot as plt
    from rich.console import Console

    result = _closed_result(_failed_in_second(2), ok=500, errors={"HTTP 400: unknown model": 40})
    verdict = report.judge(result, report.Sla(max_error_rate=0.5))
    assert "concurrency 2 at 2 s: errors: every request failed (40 errors); no server event " \
           "explains it (typical p99 1.00 ms)" in verdict.warnings
    report.write_json(tmp_path / "run.json", result, verdict)
    saved = json.loads((tmp_path / "run.json").read_text())["levels"][0]
    assert [w["failed"] for w in saved["timeline"]] == [False, False, True, False, False, False]
    assert [(s["window"], s["failed"], s["errors"], s["stall"]) for s in saved["spikes"]] == [(2, True, 40, False)]
    rows = list(csv.DictReader(io.StringIO(report.timeline_csv(result))))
    assert list(rows[0])[-3:] == ["stall", "failed", "partly_failed"]   # after the columns files had before
    assert [(r["failed"], r["spike"], r["errors"]) for r in rows[1:4]] == [
        ("0", "0", "0"), ("1", "1", "40"), ("0", "0", "0")]
    console = Console(width=250, record=True)
    console.print(report.spikes_table(result))
    text = console.export_text()
    assert text.startswith("spikes, stalls and error windows")
    # what an error window is, which the table's title said, its page says
    assert "every request failed, or 5 % or more" in " ".join(
        (ROOT / "docs" / "commands" / "loadtest.md").read_text().split())
    row, = [_cells(line) for line in text.splitlines() if "every request failed (40" in line]
    assert row[1:3] == ["2", "-"]
    kept = []
    monkeypatch.setattr(plt, "close", kept.append)
    report.write_plot(tmp_path / "run.png", result)
    shaded = [p for p in kept[0].axes[0].patches if p.get_label() == "errors (every request failed)"]
    assert [(p.get_x(), p.get_x() + p.get_width()) for p in shaded] == [(2.0, 3.0)]


def test_a_partly_failed_window_is_in_the_json_the_csv_the_spikes_table_the_warnings_and_the_plot(
        tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    from rich.console import Console

    result = _closed_result(_some_failed_in_second(2, ok=28, errors=12), ok=528,
                            errors={"HTTP 404: unknown model": 12})
    verdict = report.judge(result, report.Sla(max_error_rate=0.5))
    assert ("concurrency 2 at 2 s: errors: 12 of 40 requests failed (30%); no server event "
            "explains it (p99 1.00 ms, max 1.20 ms, typical p99 1.00 ms)") in verdict.warnings
    report.write_json(tmp_path / "run.json", result, verdict)
    saved = json.loads((tmp_path / "run.json").read_text())["levels"][0]
    assert [w["partly_failed"] for w in saved["timeline"]] == [False, False, True, False, False, False]
    assert [(s["window"], s["partly_failed"], s["failed"], s["errors"]) for s in saved["spikes"]] == [
        (2, True, False, 12)]
    rows = list(csv.DictReader(io.StringIO(report.timeline_csv(result))))
    assert [(r["partly_failed"], r["failed"], r["spike"], r["errors"]) for r in rows[1:4]] == [
        ("0", "0", "0", "0"), ("1", "0", "1", "12"), ("0", "0", "0", "0")]
    console = Console(width=250, record=True)
    console.print(report.spikes_table(result))
    row, = [_cells(line) for line in console.export_text().splitlines()
            if "12 of 40 requests failed" in line]
    assert row[1:3] == ["2", "1.00"]
    kept = []
    monkeypatch.setattr(plt, "close", kept.append)
    report.write_plot(tmp_path / "run.png", result)
    shaded = [p for p in kept[0].axes[0].patches
              if p.get_label() == "errors (5% or more of requests failed)"]
    assert [(p.get_x(), p.get_x() + p.get_width()) for p in shaded] == [(2.0, 3.0)]


@pytest.mark.slow
def test_a_stall_is_in_the_json_the_csv_the_spikes_table_the_warnings_and_the_plot(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    from rich.console import Console

    level = _stalled_then_idle()
    result = LoadTestResult(spec=LoadSpec(model="m", rates=(10.0,), duration_s=6, window_s=1), server="s",
                            request="r", levels=[level])
    verdict = report.judge(result, report.Sla())
    stalls = [w for w in verdict.warnings if re.match(r"rate 10/s at \d s: stall: nothing came back", w)]
    assert [re.search(r" at (\d) s: ", w)[1] for w in stalls] == ["1", "2"]
    assert "(p99 2500" in stalls[0] and "(typical p99 1.00 ms)" in stalls[1]    # second 2 sent nothing
    report.write_json(tmp_path / "run.json", result, verdict)
    saved = json.loads((tmp_path / "run.json").read_text())["levels"][0]
    assert [w["stall"] for w in saved["timeline"]] == [False, True, True, False, False, False]
    assert saved["timeline"][4]["waiting_ms"] is None and saved["timeline"][2]["waiting_ms"] == 2000
    assert [(s["window"], s["stall"], s["p99_ms"] is None) for s in saved["spikes"]] == [
        (1, True, False), (2, True, True)]            # (second 1 has the held request's latency)
    rows = list(csv.DictReader(io.StringIO(report.timeline_csv(result))))
    assert [(r["stall"], r["came_back"], r["waiting_ms"]) for r in rows[1:5]] == [
        ("1", "0", "1000.000"), ("1", "0", "2000.000"), ("0", "1", ""), ("0", "0", "")]
    console = Console(width=250, record=True)
    console.print(report.spikes_table(result))
    rows = [_cells(line) for line in console.export_text().splitlines()
            if "stall: nothing came back" in line]
    assert [(at, p99 == "-", cause.startswith("stall: ")) for _, at, p99, _, _, cause in rows] == [
        ("1", False, True), ("2", True, True)]
    # the plot: the stalled seconds shaded, and the latency line broken where no latency was
    kept = []
    monkeypatch.setattr(plt, "close", kept.append)
    report.write_plot(tmp_path / "run.png", result)
    top = kept[0].axes[0]
    shaded = [p for p in top.patches if p.get_label() == "stall (none came back)"]
    assert [(p.get_x(), p.get_x() + p.get_width()) for p in shaded] == [(1.0, 3.0)]
    p99_line = next(line for line in top.get_lines() if line.get_label() == "rate 10/s p99")
    assert np.isnan(p99_line.get_ydata()).tolist() == [False, False, True, True, True, False]


def test_a_level_where_every_request_failed_still_writes_strict_json(tmp_path):
    result = _result(sent=40, errors={"[request id: <id_unknown>] bad input [/x]": 40})
    result.levels[0].latency_ms = {}
    verdict = report.judge(result, report.Sla(p99_ms=10))
    assert verdict.exit_code == EXIT_RUN_ERRORS
    assert verdict.checks[0].measured is None and not verdict.checks[0].passed
    report.write_json(tmp_path / "failed.json", result, verdict)
    text = (tmp_path / "failed.json").read_text()
    assert "Infinity" not in text and "NaN" not in text
    assert json.loads(text)["verdict"]["checks"][0]["measured"] is None


def test_the_servers_words_are_printed_as_they_are_not_as_markup():
    from rich.console import Console

    kind = "[request id: <id_unknown>] unexpected shape [/bold]"
    result = _result(sent=10, errors={kind: 10})
    console = Console(record=True, width=200)
    report.print_report(console, result, report.judge(result, report.Sla()))
    assert "[request id: <id_unknown>] unexpected shape [/bold]" in console.export_text()


@pytest.mark.server
def test_a_generous_sla_passes_and_every_output_file_holds_the_run(served, tmp_path, capsys):
    import socket
    from datetime import datetime, timedelta, timezone

    from tritonkit import __version__

    out = tmp_path / "out"
    began = datetime.now(timezone.utc).replace(microsecond=0)
    code = _loadtest(served, "--concurrency", "1,4", "--duration", "2", "--sla-p99-ms", "1000",
                     "--sla-min-qps", "10", "--json", out / "run.json", "--csv", out / "run.csv",
                     "--plot", out / "run.png")
    assert code == 0
    said = capsys.readouterr().out.splitlines()
    assert [line for line in said if line.startswith("wrote ")] == [
        f"wrote {out / 'run.json'}", f"wrote {out / 'run.csv'}", f"wrote {out / 'run.png'}"]
    data = json.loads((out / "run.json").read_text())
    started = datetime.fromisoformat(data["started_at"])          # ISO 8601, UTC
    assert started.utcoffset() == timedelta(0) and began <= started <= began + timedelta(seconds=5)
    assert (data["tritonkit_version"], data["host"]) == (__version__, socket.gethostname())
    assert (data["server_version"], data["model_version"]) == ("2.51.0", "1")
    assert data["verdict"]["outcome"] == "pass" and data["verdict"]["exit_code"] == 0
    assert [lv["label"] for lv in data["levels"]] == ["concurrency 1", "concurrency 4"]
    for lv in data["levels"]:
        lat = lv["latency_ms"]
        assert lv["ok"] == lv["sent"] > 50 and lv["errors"] == {}
        assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p99.9"] <= lat["max"]
        assert lv["server_split_ms"]["compute_infer"] > 0       # Triton's own statistics
        assert lv["hdr_histogram"] and lv["client_cpu_us"] > 0
        assert lv["server_batch"] == pytest.approx(1.0)   # the example model does not batch
    rows = list(csv.DictReader((out / "run.csv").open()))
    assert {r["level"] for r in rows} == {"concurrency 1", "concurrency 4"}
    assert sum(int(r["ok"]) for r in rows) == sum(lv["ok"] for lv in data["levels"])
    assert (out / "run.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.server
def test_existing_output_files_are_not_overwritten_without_force(served, tmp_path, capsys):
    target = tmp_path / "keep.json"
    target.write_text("mine")
    code = _loadtest(served, "--concurrency", "1", "--duration", "0.5", "--json", target)
    assert code == EXIT_USAGE and target.read_text() == "mine"
    assert "--force" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--json", "--csv", "--plot"])
def test_an_output_file_that_could_not_be_written_is_refused_before_the_run(tmp_path, capsys, flag):
    from tests.conftest import unused_port

    (tmp_path / "taken").write_text("a file, where a folder would have to be")
    target = tmp_path / "taken" / "out" / ("run.png" if flag == "--plot" else "run.x")
    # no server at this address either: the paths are checked before anything is run
    code = run_cli("loadtest", "--url", f"127.0.0.1:{unused_port()}", "--model", "example",
                   "--concurrency", "1", flag, target)
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert err.startswith(f"error: cannot write {flag} file {target}")


@pytest.mark.server
def test_a_file_that_fails_to_write_after_the_run_keeps_the_report_and_the_verdict(served, tmp_path,
                                                                                capsys, monkeypatch):
    import errno

    def disk_full(path, *args):     # the path passed the check before the run; the disk filled up
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(report, "write_json", disk_full)
    out = tmp_path / "out" / "run.json"
    code = _loadtest(served, "--concurrency", "1", "--duration", "1", "--sla-p99-ms", "0.001",
                     "--json", out, "--csv", tmp_path / "run.csv")
    captured = capsys.readouterr()
    assert code == EXIT_SLA_MISS                        # the verdict, not a usage error
    assert "SLA missed" in captured.out                 # the report was printed
    assert (tmp_path / "run.csv").read_text().startswith("level,")   # the other file was written
    assert [line for line in captured.out.splitlines() if line.startswith("wrote ")] == [
        f"wrote {tmp_path / 'run.csv'}"]                               # and only it is said written
    assert [line for line in captured.err.splitlines() if "run.json" in line] == [
        f"error: could not write {out}: No space left on device"]


def test_a_plot_of_a_run_where_nothing_succeeded_draws_no_empty_legend(tmp_path):
    import warnings

    result = _result(sent=40, errors={"HTTP 400: bad input": 40})
    result.levels[0].latency_ms = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # matplotlib: "No artists with labels found"
        report.write_plot(tmp_path / "failed.png", result)
    assert (tmp_path / "failed.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_a_benchmarks_json_lands_whole_in_a_folder_that_did_not_exist(tmp_path):
    target = tmp_path / "new" / "folder" / "bench_export.json"
    runs = tmp_path / "runs"                # every run's own copy: here, not in the checkout's out/
    done = subprocess.run([sys.executable, str(EXAMPLE_REPOSITORY.parent / "bench" / "bench_export.py"),
                           "--models", "mlp", "--iterations", "2", "--warmup", "1", "--threads", "1",
                           "--json", str(target)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRITONKIT_BENCH_RUNS": str(runs)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert [(row["model"], row["batch"]) for row in json.loads(target.read_text())["results"]] == [
        ("mlp", 1), ("mlp", 32)]
    assert [p.name for p in target.parent.iterdir()] == ["bench_export.json"]   # no temporary left
    [kept] = runs.iterdir()
    assert json.loads(kept.read_text())["results"] == json.loads(target.read_text())["results"]


def test_two_outputs_on_one_path_are_refused_before_the_run(tmp_path, capsys):
    from tests.conftest import unused_port

    same = tmp_path / "same.json"
    code = run_cli("loadtest", "--url", f"127.0.0.1:{unused_port()}", "--model", "m",
                   "--concurrency", "1", "--json", same, "--csv", same)
    assert code == EXIT_USAGE
    assert "--json and --csv name the same file" in capsys.readouterr().err
    assert not same.exists()


def _spread_result(batch_size: int = 1, low_ms: float = 0.3, high_ms: float = 40.0) -> LoadTestResult:
    """A level whose latencies spread from ``low_ms`` to ``high_ms``, its windows' p99s too."""
    from hdrh.histogram import HdrHistogram

    hist = HdrHistogram(1, 60_000_000, 3)
    for us in np.geomspace(low_ms * 1000, high_ms * 1000, 400):
        hist.record_value(int(us))
    timeline = _timeline(list(np.geomspace(low_ms * 2, high_ms, 6)))
    result = _closed_result(timeline, ok=400, errors={})
    result.levels[0].histogram = hist
    result.levels[0].latency_ms = {"p50": (low_ms * high_ms) ** 0.5, "p99": high_ms * 0.95, "max": high_ms}
    result.levels[0].infer_per_s = result.levels[0].qps * batch_size
    result.spec = LoadSpec(model="m", concurrency=(2,), duration_s=6, window_s=1, batch_size=batch_size)
    return result


def _overlapping_tick_labels(fig) -> list[tuple[str, str]]:
    """Pairs of tick labels drawn on one axis whose boxes overlap along it."""
    renderer = fig.canvas.get_renderer()
    pairs = []
    for ax in fig.axes:
        for axis, along in ((ax.xaxis, 0), (ax.yaxis, 1)):
            low, high = sorted(axis.get_view_interval())
            boxes = []
            for label in axis.get_ticklabels(which="both"):
                at = label.get_position()[along]
                if label.get_visible() and label.get_text() and low <= at <= high:
                    extent = label.get_window_extent(renderer)
                    boxes.append(((extent.x0, extent.x1) if along == 0 else (extent.y0, extent.y1),
                                  label.get_text()))
            boxes.sort()
            pairs += [(a[1], b[1]) for a, b in zip(boxes, boxes[1:]) if b[0][0] < a[0][1]]
    return pairs


@pytest.mark.slow
@pytest.mark.parametrize("low_ms, high_ms, labelled", [
    (0.3, 40.0, {"1", "10"}), (0.05, 3000.0, {"0.1", "1", "10", "100", "1000"}),
    (0.6, 1.3, {"0.6", "1"}), (0.65, 0.95, {"0.7", "0.8", "0.9"}),
], ids=["2 decades", "5 decades", "one decade", "within one"])
def test_the_plots_tick_labels_do_not_run_into_each_other(tmp_path, monkeypatch, low_ms, high_ms,
                                                          labelled):
    """The log axes labelled every minor tick: '0.70.80.9' over 2 decades."""
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    report.write_plot(tmp_path / "spread.png", _spread_result(low_ms=low_ms, high_ms=high_ms))
    (fig,) = figures
    assert _overlapping_tick_labels(fig) == []
    low, high = fig.axes[1].get_xlim()
    labels = {t.get_text() for t in fig.axes[1].xaxis.get_ticklabels(which="both")
              if t.get_text() and low <= t.get_position()[0] <= high}
    assert labelled <= labels                       # still labelled, in plain numbers


def test_a_batched_run_shows_inferences_per_second_beside_requests_per_second():
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(report.levels_table(_spread_result(batch_size=4)))
    lines = console.export_text().splitlines()
    assert "infer/s" in next(line for line in lines if "QPS" in line)
    row = next(line for line in lines if "c=2" in line)
    assert "66.7" in row and "266.7" in row             # 400 requests in 6 s, 4 inferences each
    console = Console(record=True, width=200)
    console.print(report.levels_table(_spread_result(batch_size=1)))
    assert "infer/s" not in console.export_text()


def test_the_json_says_when_where_and_against_what_the_run_ran(tmp_path):
    import socket

    from tritonkit import __version__

    result = _result()
    result.started_at, result.host = "2026-12-04T10:00:00+00:00", socket.gethostname()
    result.server_version, result.model_version = "2.51.0", "3"
    report.write_json(tmp_path / "run.json", result, report.judge(result, report.Sla()))
    data = json.loads((tmp_path / "run.json").read_text())
    assert {k: data[k] for k in ("started_at", "tritonkit_version", "host", "server_version",
                                 "model_version")} == {
        "started_at": "2026-12-04T10:00:00+00:00", "tritonkit_version": __version__,
        "host": socket.gethostname(), "server_version": "2.51.0", "model_version": "3"}
    assert {"model", "server", "request", "spec", "verdict", "levels"} <= set(data)   # kept


@pytest.mark.slow
def test_the_plot_draws_each_windows_slowest_request_so_a_lone_outlier_shows(tmp_path, monkeypatch):
    """One request of 178 ms among ~7 ms ones: 24x the p99, too few to move a percentile
    or make a spike; only each window's max line shows it."""
    import matplotlib.pyplot as plt

    timeline = [Window(index=i, start_s=float(i), ok=100, errors=0, qps=100.0, p50_ms=5.0, p99_ms=7.4,
                       max_ms=178.0 if i == 3 else 7.9) for i in range(6)]
    result = _closed_result(timeline, ok=600, errors={})
    assert result.levels[0].spikes == []
    kept = []
    monkeypatch.setattr(plt, "close", kept.append)
    report.write_plot(tmp_path / "run.png", result)
    drawn = {line.get_label(): list(line.get_ydata()) for line in kept[0].axes[0].get_lines()}
    assert drawn["concurrency 2 max"] == [7.9, 7.9, 7.9, 178.0, 7.9, 7.9]
    assert max(max(ys) for label, ys in drawn.items() if label != "concurrency 2 max") < 178.0
