"""Terminal output that reads at a glance: every table keeps the column naming its rows and
every figure whole at 80 columns; titles and captions are a line each; a spike is said once;
the plots' legends sit beside the lines they name; one set of words for the cold start
across verbs; diagnose --live says once why there is no GPU."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from rich.console import Console
from rich.table import Table

from tests.conftest import run_cli
from tritonkit import report
from tritonkit.cli import warmup as warmup_cli
from tritonkit.loadtest import LevelResult, LoadSpec, LoadTestResult, Window, cold_start_windows
from tritonkit.profiles import TuneSpace
from tritonkit.report import Sla
from tritonkit.tables import fitted
from tritonkit.tune import Candidate
from tritonkit.tune._report import print_report, trials_table
from tritonkit.tune._run import Trial, TuneResult
from tritonkit.tune._search import Found, Probe
from tritonkit.warmup import ColdStart, ModelWarmup

TERMINAL_LINE = 100          # a title or caption line at most this long
LONG_NAME = "bert_base_uncased_sequence_classifier_v2"
SMALL, BATCH_32 = "INPUT__0:1x3x24x18", "INPUT__0:32x3x96x72"


def _warmups() -> list[ModelWarmup]:
    vision = ModelWarmup(model="vision", steady=True, requests=60, load_s=1.42, first_ms=1.87,
                         steady_p50_ms=0.37, shapes=[SMALL, BATCH_32], steady_window=5,
                         after=ColdStart(0.45, 0.37, clients=3),
                         series_ms={SMALL: [1.87, 0.6, 0.45] + [0.37] * 10,
                                    BATCH_32: [27.0, 12.0, 8.0] + [6.5] * 10})
    return [vision, replace(vision, model=LONG_NAME, load_s=None, cold=False),
            replace(vision, model="started", load_s=None)]


def _loadtest(mode: str = "closed") -> LoadTestResult:
    """Two levels; the second's window 3 a spike far above its typical p99."""
    levels = []
    for level, p99s in ((1, [1.0] * 6), (8, [2.0, 2.1, 1.9, 40.0, 2.0, 2.0])):
        timeline = [Window(index=i, start_s=float(i), ok=100, errors=0, qps=100.0, p50_ms=p / 2,
                           p99_ms=p, max_ms=p * 1.2) for i, p in enumerate(p99s)]
        levels.append(LevelResult(
            mode=mode, level=level, workers=1, duration_s=6, sent=600, ok=600, errors={},
            qps=1234.5, infer_per_s=1234.5,
            latency_ms={"p50": 0.41, "p90": 1.2, "p95": 2.5, "p99": 12.34, "p99.9": 123.45,
                        "max": 1234.56},
            timeline=timeline, spikes=cold_start_windows(timeline, [], 0, 1.0), events=[],
            server_split_ms={"queue": 0.1, "compute_input": 0.02, "compute_infer": 0.3,
                             "compute_output": 0.04, "request": 0.5, "client_and_network": 0.2},
            server_batch=2.5))
    spec = (LoadSpec(model=LONG_NAME, concurrency=(1, 8), duration_s=6, window_s=1)
            if mode == "closed" else LoadSpec(model=LONG_NAME, rates=(1, 8), duration_s=6, window_s=1))
    return LoadTestResult(spec=spec, server="127.0.0.1:8000", request="INPUT__0 FP32[1, 16]",
                          levels=levels, cold_first_request_ms=9.87)


def _tune() -> TuneResult:
    judged = Probe("open", 800.0, 790.0, 1.2, 8.5, batch=2.0, queue_ms=0.1, compute_ms=0.4)
    winner = Trial(point=Candidate(instance_count=2, max_batch_size=32, max_queue_delay_us=500,
                                   intra_op_thread_count=0),
                   found=Found(probes=[judged], concurrency=8, judged=judged), load_s=1.5)
    closed_only = Trial(point=Candidate(bare=True), role="bare default", load_s=1.7, found=Found(
        probes=[Probe("closed", 4, 900.0, 1.0, 3.0), Probe("open", 900.0, 880.0, 2.0, 11.0)],
        concurrency=4))
    return TuneResult(model=LONG_NAME, server="127.0.0.1:8000", sla=Sla(p99_ms=10),
                      space=TuneSpace(), trials=[winner, closed_only], best=winner, winner=winner)


def _tables() -> dict[str, Table]:
    """Each verb's table, its rows named by their first column."""
    result = _loadtest()
    return {"warm-up": warmup_cli.warmup_table(_warmups()),
            "loadtest levels": report.levels_table(result),
            "loadtest open-loop levels": report.levels_table(_loadtest("open")),
            "loadtest server split": report.server_split_table(result),
            "loadtest spikes": report.spikes_table(result),
            "tune": trials_table(_tune())}


def _printed(renderable, width: int) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))
    console.print(renderable)
    return console.export_text()


def _first_column(text: str) -> str:
    """The first column's text of a printed table, its folded lines joined: each line's
    text before the first gap of two spaces."""
    lines = text.splitlines()
    body = lines[next(i for i, line in enumerate(lines) if line.startswith("─")) + 1:]
    return "".join(re.split(r"\s{2,}", line)[0].replace(" ", "") for line in body)


@pytest.mark.parametrize("name", sorted(_tables()))
def test_a_table_at_80_columns_keeps_the_column_naming_its_rows_and_every_figure_whole(name):
    """Rich, short of room, shrank the warm-up table's model column to nothing and dropped
    it, and cut figures with '…'."""
    table = _tables()[name]
    names = [str(cell) for cell in table.columns[0].cells]
    figures = [str(cell) for column in table.columns[1:] if column.no_wrap for cell in column.cells]
    text = _printed(fitted(table), 80)
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    for row_name in names:                  # folded onto several lines at worst, never lost
        assert re.sub(r"\s+|\[[^]]*\]", "", row_name) in _first_column(text), (row_name, text)
    for figure in figures:
        assert re.sub(r"\[[^]]*\]", "", figure) in text, (figure, text)


@pytest.mark.parametrize("name", sorted(_tables()))
def test_a_tables_title_and_caption_are_each_at_most_a_terminal_line(name):
    table = _tables()[name]
    lines = [str(table.title or ""), *str(table.caption or "").splitlines()]
    assert all(len(line) <= TERMINAL_LINE for line in lines), lines


def test_a_wide_terminal_gets_the_headers_on_one_line():
    text = _printed(fitted(warmup_cli.warmup_table(_warmups())), 160)
    header = next(line for line in text.splitlines() if line.startswith("model"))
    assert header.split() == ["model", "load", "s", "first", "ms", "p50", "ms", "first/p50",
                              "worst", "ms", "reqs", "after", "ms", "after/its", "p50",
                              "steady"]


def test_a_spike_is_a_row_of_its_table_and_not_said_again_as_a_warning():
    """Each spike was printed in the table and again as a `warning:` line (four times in
    the demo); the JSON's verdict keeps every one."""
    result = _loadtest()
    verdict = report.judge(result, Sla(p99_ms=100))
    [spike] = result.levels[1].spikes
    assert report.spike_warning(result.levels[1], spike) in verdict.warnings    # the JSON's
    console = Console(width=160, record=True, file=open("/dev/null", "w"))
    report.print_report(console, result, verdict)
    text = console.export_text()
    assert text.count(spike.cause) == 1
    row = next(line for line in text.splitlines() if spike.cause in line)
    assert row.split()[:5] == ["c=8", "3", "40.00", "48.00", "2.00"]
    assert "warning: cold start" in text                # the other warnings are still said


def test_the_cold_start_has_the_same_words_in_warmup_and_loadtest(monkeypatch):
    """first request, cold start, steady p50: not '1st' in one verb and 'first' in another."""
    from tritonkit.warmup.plot import warmup_figure
    import matplotlib.pyplot as plt

    console = Console(width=160, record=True, file=open("/dev/null", "w"))
    monkeypatch.setattr(warmup_cli, "console", console)
    warmup_cli.print_results(_warmups())
    said = console.export_text()
    verdict = report.judge(_loadtest(), Sla())
    [cold] = [w for w in verdict.warnings if w.startswith("cold start")]
    fig = warmup_figure(_warmups()[:1])
    try:
        title = fig.axes[0].get_title()
    finally:
        plt.close(fig)
    assert "first ms" in said and "p50 ms" in said
    assert f"vision: worst cold start {BATCH_32}: first 27.00 ms, steady p50 6.50 ms" in said
    assert cold.startswith(f"cold start: model '{LONG_NAME}': first request since its load")
    assert title.startswith("vision: worst cold start 27.00 ms, 4.2x its steady p50")
    for text in (said, cold, title):
        assert "1st" not in text


def test_the_load_test_plot_keeps_its_legends_beside_the_panels(tmp_path, monkeypatch):
    """Inside the panel the legend covered the lines it named (a run's max, top right)."""
    import matplotlib.pyplot as plt

    kept = []
    monkeypatch.setattr(plt, "close", kept.append)
    report.write_plot(tmp_path / "run.png", _loadtest())
    fig = kept[0]
    fig.canvas.draw()
    legends = [(ax.get_legend(), ax) for ax in fig.axes if ax.get_legend() is not None]
    assert legends                          # the timeline's at least
    for legend, ax in legends:
        box, panel = legend.get_window_extent(), ax.get_window_extent()
        assert box.x0 >= panel.x1 or box.y1 <= panel.y0             # beside or below, not over
    plt.close(fig)


def test_a_config_met_only_in_closed_loop_says_so_not_that_no_load_met_it():
    """Its closed-loop p99 (3 ms) met the 10 ms SLA; its open-loop rate did not (11 ms):
    'SLA not met at any load (best p99 3.00 ms)' read as a contradiction."""
    console = Console(width=160, record=True, file=open("/dev/null", "w"))
    print_report(console, _tune())
    said = console.export_text().splitlines()
    assert "bare default: met at c=4, not in open loop (best p99 11.00 ms)" in said
    assert not any("not met at any load" in line for line in said)


def _nvml_starts() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.server
def test_diagnose_live_without_a_gpu_says_once_why(deployed, capsys):
    """The missing driver was said as a warning and again in the diagnosis' note."""
    code = run_cli("diagnose", "--live", "--duration", "1", "--interval", "0.5",
                   "--repository", deployed.repository)
    out = capsys.readouterr()
    assert code == 0
    said = out.out + out.err
    if _nvml_starts():
        pytest.skip("this host has a GPU NVML reaches")
    assert said.count("NVML could not start") == 1 and said.count("no NVIDIA driver") == 1
    assert "only Triton's scheduling was judged" in out.out
