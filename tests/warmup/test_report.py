"""`tritonkit warmup` report: the figures it records, its table, JSON and plot, and output
files refused or kept before the server is asked."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import datetime, timezone

import pytest

from tests.conftest import BUSY_HOST_STEADY, run_cli, unasked_address, unused_port
from tests.warmup.conftest import _ready
import tritonkit
from tritonkit.cli.warmup import print_results, write_json
from tritonkit.warmup import ColdStart, ModelWarmup, SteadyRule, run_context


def test_figures_round_trip_through_the_deployment_state():
    result = ModelWarmup(model="m", steady=True, requests=12, load_s=1.4, first_ms=30.0,
                         steady_p50_ms=0.6, after=ColdStart(0.7, 0.6, clients=3), shapes=["x:1x4"])
    data = json.loads(json.dumps(result.as_dict()))
    assert data["ratio"] == pytest.approx(50.0)
    assert ModelWarmup.from_dict(data) == result


def test_a_streamed_models_first_response_figures_round_trip_and_give_their_own_ratio():
    result = ModelWarmup(model="s", steady=True, requests=12, load_s=1.4, first_ms=340.0,
                         steady_p50_ms=20.0, first_response_ms=300.0, first_response_p50_ms=2.0,
                         after=ColdStart(21.0, 20.0, clients=3, first_response_ms=2.5))
    data = json.loads(json.dumps(result.as_dict()))
    assert data["first_response_ratio"] == pytest.approx(150.0)     # not 340 / 20
    assert data["after"]["first_response_ms"] == 2.5
    assert ModelWarmup.from_dict(data) == result
    # warmed, not loaded cold: no ratio, as for the final response
    assert ModelWarmup.from_dict({**data, "cold": False}).first_response_ratio is None


@pytest.mark.server
def test_deploy_warms_up_and_records_the_figures(warm_server, capsys):
    figures = {r["model"]: r for r in warm_server.extra["warmup"]}
    assert set(figures) == {"example", "pipeline"}
    for r in figures.values():
        assert r["steady"] and r["load_s"] is None            # loaded at start, not again
        assert r["requests"] >= SteadyRule().window * len(r["shapes"])
    assert figures["example"]["shapes"] == ["INPUT__0:1x4", "INPUT__0:8x4"]
    # After a server start the first request is the cold one: warm-up paid for it.
    assert figures["example"]["first_ms"] > 5 * figures["example"]["steady_p50_ms"]
    assert figures["example"]["cold"] and figures["example"]["ratio"] > 5


@pytest.mark.timing
@pytest.mark.server
def test_warmup_on_a_warm_server_is_quick_harmless_and_writes_json(warm_server, tmp_path, capsys):
    out = tmp_path / "warm.json"
    started = time.monotonic()
    code = run_cli("warmup", "--repository", warm_server.repository, "--json", out,
                   *BUSY_HOST_STEADY)              # about a warm server, not steadiness
    assert code == 0, capsys.readouterr().err
    assert time.monotonic() - started < 10
    document = json.loads(out.read_text())
    records = document["models"]
    assert [r["model"] for r in records] == ["example", "pipeline"]   # steps first
    assert all(r["steady"] and r["load_s"] is None for r in records)  # nothing reloaded
    # ... and the file says so in words, and where and when it ran, against what
    assert all(r["loaded"] is False and r["was_ready"] is True for r in records)
    assert document["triton_version"] == "2.51.0"
    assert document["url"] == warm_server.http_url
    assert document["repository"] == warm_server.repository
    started = datetime.fromisoformat(document["started_at"].replace("Z", "+00:00"))
    assert started.tzinfo is not None and abs(time.time() - started.timestamp()) < 60
    assert document["tritonkit_version"] and document["host"]
    # it was warm: a cold first request here is 53-58x p50, a warm one 1.1-3.4x, 10.5x once
    # on a busy CI host
    assert all(r["first_ms"] < 20 * r["steady_p50_ms"] for r in records)
    # ... so its first request is no cold start, and no cold-start ratio is claimed
    assert all(r["cold"] is False and r["ratio"] is None for r in records)
    table = capsys.readouterr().out
    assert "p50 ms" in table and " ready " in table       # not loaded: no load time
    assert _ready(warm_server, "example") and _ready(warm_server, "pipeline")


def test_the_warmup_json_says_when_where_and_against_what_it_ran_and_what_its_keys_mean(
        tmp_path):
    out = tmp_path / "warm.json"
    was_ready = ModelWarmup(model="m", steady=True, requests=12, load_s=None, first_ms=30.0,
                            steady_p50_ms=0.6, after=ColdStart(0.9, 0.6, clients=3),
                            cold=True, was_ready=True)
    loaded = replace(was_ready, model="n", load_s=1.5, was_ready=False)
    context = run_context(None, "127.0.0.1:1", datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc))
    write_json(out, [was_ready, loaded], context)
    document = json.loads(out.read_text())
    assert document["started_at"] == "2026-01-02T03:04:05Z"
    assert document["url"] == "127.0.0.1:1" and document["triton_version"] is None  # no server
    assert document["tritonkit_version"] == tritonkit.__version__ and document["host"]
    m, n = document["models"]
    assert (m["load_s"], m["loaded"], m["was_ready"]) == (None, False, True)
    assert (n["load_s"], n["loaded"], n["was_ready"]) == (1.5, True, False)
    # the ratio under a name that says what it divides, and the old key kept alike
    assert m["first_to_p50"] == m["ratio"] == pytest.approx(50.0)
    assert m["after"]["first_to_p50"] == m["after"]["ratio"] == pytest.approx(1.5)
    about = document["about"]
    assert "first_ms / steady_p50_ms" in about["first_to_p50"]
    assert "first_to_p50" in about["ratio"] and "load_s" in about["loaded"]
    assert [ModelWarmup.from_dict(r) for r in document["models"]] == [was_ready, loaded]


def test_the_load_column_says_why_a_model_has_no_load_time(capsys):
    """A deploy's models load as the server starts: no load request is timed, and their
    first request is still the cold one. A model READY before warm-up was already warm."""
    at_start = ModelWarmup(model="started", steady=True, requests=12, load_s=None,
                           first_ms=30.0, steady_p50_ms=0.6, cold=True, was_ready=True)
    ready = replace(at_start, model="warm", cold=False)
    loaded = replace(at_start, model="loaded", load_s=1.5, was_ready=False)
    print_results([at_start, ready, loaded])
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines()
            if line.split() and line.split()[0] in ("started", "warm", "loaded")}
    assert " start " in rows["started"] and "50.0x" in rows["started"]
    assert " ready " in rows["warm"] and "50.0x" not in rows["warm"]
    assert " 1.50 " in rows["loaded"]
    legend = " ".join(out.split())
    assert "start: loaded before this warm-up, first request still cold" in legend
    assert "ready: already warm, no cold start" in legend


def test_an_existing_json_file_is_kept_unless_force_before_the_server_is_asked(tmp_path, capsys):
    out = tmp_path / "warm.json"
    out.write_text("earlier figures\n")
    with unasked_address() as address:                       # no wait for a server first
        code = run_cli("warmup", "--url", address, "--timeout", "5", "--json", out)
    assert code == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "--force" in err
    assert out.read_text() == "earlier figures\n"


def test_a_json_path_that_cannot_be_written_is_refused_before_the_warm_up(tmp_path, capsys):
    """Refused before the server is asked: nothing connects to the address given (a bound
    on the time, 2 s, took 2.4 s on a busy host)."""
    afile = tmp_path / "afile"
    afile.write_text("a file, not a folder\n")
    with unasked_address() as address:
        for path in (afile / "warm.json", tmp_path):
            code = run_cli("warmup", "--url", address, "--timeout", "5", "--json", path, "--force")
            assert code == 2
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and f"{tmp_path} is a folder" in err


@pytest.mark.server
def test_warmup_keeps_each_shapes_series_and_plots_it(warm_server, tmp_path, capsys):
    out, plot = tmp_path / "warm.json", tmp_path / "warm.png"
    plot.write_text("earlier plot\n")
    args = ("warmup", "--repository", warm_server.repository, "--model", "example",
            "--json", out, "--plot", plot)
    assert run_cli(*args) == 2 and plot.read_text() == "earlier plot\n"   # kept without --force
    assert "already exists" in capsys.readouterr().err
    assert run_cli(*args, "--force") == 0, capsys.readouterr().err
    assert [line for line in capsys.readouterr().out.splitlines() if "wrote" in line] == [
        f"wrote {out}", f"wrote {plot}"]                  # one line for each file written
    [record] = json.loads(out.read_text())["models"]
    assert set(record["series_ms"]) == set(record["shapes"]) and len(record["shapes"]) > 1
    first_shape = record["series_ms"][record["shapes"][0]]
    assert first_shape[0] == pytest.approx(record["first_ms"], abs=1e-3)    # the first, first
    assert sum(len(s) for s in record["series_ms"].values()) <= record["requests"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000


def test_the_warmup_plot_has_a_panel_for_a_model_that_was_not_warmed(tmp_path):
    from tritonkit.warmup.plot import write_warmup_plot

    cold = ModelWarmup(model="cold", steady=True, requests=40, first_ms=80.0, steady_p50_ms=2.0,
                       shapes=["x:1x4", "x:8x4"],
                       series_ms={"x:1x4": [80.0] + [2.0] * 20, "x:8x4": [30.0] + [4.0] * 18})
    skipped = ModelWarmup(model="streamed", steady=False, requests=0, warmed=False,
                          note="decoupled model: not warmed")
    path = write_warmup_plot(tmp_path / "w.png", [cold, skipped])
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_a_warmup_plot_that_is_not_a_png_is_refused_before_the_server_is_asked(tmp_path, capsys):
    code = run_cli("warmup", "--url", f"127.0.0.1:{unused_port()}", "--plot", tmp_path / "w.svg")
    assert code == 2 and "w.svg does not end in .png" in capsys.readouterr().err
    same = tmp_path / "w.png"
    code = run_cli("warmup", "--url", f"127.0.0.1:{unused_port()}", "--json", same, "--plot", same)
    assert code == 2 and "--json and --plot name the same file" in capsys.readouterr().err


@pytest.mark.server
def test_warmup_json_replaces_a_file_with_force(warm_server, tmp_path):
    out = tmp_path / "warm.json"
    out.write_text("earlier figures\n")
    assert run_cli("warmup", "--repository", warm_server.repository, "--model", "example",
                   "--json", out, "--force") == 0
    assert [r["model"] for r in json.loads(out.read_text())["models"]] == ["example"]


SMALL, BATCH_32 = "INPUT__0:1x3x24x18", "INPUT__0:32x3x96x72"


def _vision() -> ModelWarmup:
    """The walkthrough's model: its first shape 5.1x of 0.37 ms, batch 32 4.2x of 6.5 ms."""
    return ModelWarmup(model="vision", steady=True, requests=60, load_s=1.42, first_ms=1.87,
                       steady_p50_ms=0.37, shapes=[SMALL, BATCH_32], steady_window=5,
                       series_ms={SMALL: [1.87, 0.6, 0.45] + [0.37] * 10,
                                  BATCH_32: [27.0, 12.0, 8.0] + [6.5] * 10})


def test_the_worst_shapes_cold_start_is_in_the_table_not_only_the_first_shapes(capsys):
    """By milliseconds over its own p50: batch 32's 27 ms against 6.5 ms pages a user; the
    first shape's 5.1x of 0.37 ms does not."""
    print_results([_vision()])
    out = capsys.readouterr().out
    [row] = [line for line in out.splitlines() if line.split()[:1] == ["vision"]]
    assert "5.1x" in row and " 27.00 " in row                # the first shape's, and the worst
    assert (f"vision: worst cold start {BATCH_32}: first 27.00 ms, steady p50 6.50 ms "
            "(+20.50 ms, 4.2x)") in " ".join(out.split())


def test_the_json_gives_the_worst_shape_and_each_shapes_p50_beside_the_old_keys(tmp_path):
    out = tmp_path / "warm.json"
    result = _vision()
    write_json(out, [result])
    document = json.loads(out.read_text())
    [record] = document["models"]
    assert record["first_ms"] == 1.87 and record["steady_p50_ms"] == 0.37   # kept as they were
    assert record["first_to_p50"] == record["ratio"] == pytest.approx(1.87 / 0.37)
    assert record["shape_p50_ms"] == {SMALL: 0.37, BATCH_32: 6.5}
    assert record["worst"] == {"shape": BATCH_32, "first_ms": 27.0, "p50_ms": 6.5,
                               "penalty_ms": 20.5, "first_to_p50": pytest.approx(27 / 6.5)}
    assert record["steady_window"] == 5
    about = document["about"]
    assert "first_ms - p50_ms" in about["worst"] and "own steady p50" in about["shape_p50_ms"]
    assert "steady window" in about["steady_window"]
    assert ModelWarmup.from_dict(record) == result
    # an older record (no steady_window) still reads, and still gives the worst shape
    older = {k: v for k, v in record.items() if k not in ("steady_window", "worst")}
    assert ModelWarmup.from_dict(older).worst.shape == BATCH_32


def test_no_worst_shape_is_claimed_for_a_warm_model_or_one_with_an_unsteady_shape():
    assert replace(_vision(), cold=False).worst is None
    unsteady = replace(_vision(), steady=False)
    assert unsteady.worst is None and unsteady.as_dict()["worst"] is None
    assert unsteady.as_dict()["shape_p50_ms"] == {}


def _bert_like() -> ModelWarmup:
    """15 shapes (3 batch sizes x 5 sequence lengths), steady between 0.8 and 1.3 ms."""
    series = {f"input_ids:{b}x{s}": [10.0 + s / 8, 3.0, 2.0] + [0.8 + s / 512] * 10
              for b in (1, 4, 8) for s in (16, 32, 64, 128, 256)}
    return ModelWarmup(model="bert", steady=True, requests=200, first_ms=12.0,
                       steady_p50_ms=0.83, shapes=list(series), series_ms=series,
                       steady_window=5)


@pytest.mark.slow
def test_the_plot_gives_every_shape_its_own_look_and_keeps_the_legend_off_the_data():
    import matplotlib.pyplot as plt

    from tritonkit.warmup.plot import warmup_figure

    result = _bert_like()
    fig = warmup_figure([result])
    try:
        fig.canvas.draw()
        ax = fig.axes[0]
        series = [line for line in ax.get_lines()
                  if line.get_label().removesuffix(" (worst)") in result.series_ms]
        assert len(series) == 15
        looks = {(line.get_color(), str(line.get_linestyle()), line.get_marker())
                 for line in series}
        assert len(looks) == 15                          # 15 series on 10 colours: no twins
        legend = ax.get_legend().get_window_extent()
        panel = ax.get_window_extent()
        assert legend.x0 >= panel.x1 or legend.y1 <= panel.y0     # beside or below, not over
        assert [t.get_text() for t in ax.yaxis.get_minorticklabels() if t.get_text()] == []
        assert [t.get_text() for t in ax.yaxis.get_majorticklabels() if t.get_text()]
    finally:
        plt.close(fig)


def test_the_plots_title_and_dashed_line_are_the_worst_shapes_and_say_so():
    import matplotlib.pyplot as plt

    from tritonkit.warmup.plot import warmup_figure

    fig = warmup_figure([_vision(), replace(_vision(), model="older", steady_window=None,
                                            series_ms={SMALL: [1.87] + [0.37] * 10},
                                            shapes=[SMALL], steady=False)])
    try:
        worst, older = fig.axes[:2]
        assert worst.get_title() == (f"vision: worst cold start 27.00 ms, 4.2x its steady p50"
                                     f"\n({BATCH_32})")
        [dashed] = [line for line in worst.get_lines() if line.get_linestyle() == "--"]
        assert dashed.get_ydata()[0] == 6.5
        assert dashed.get_label() == f"steady p50 of {BATCH_32}: 6.50 ms"
        [batch_32] = [line for line in worst.get_lines() if line.get_label().startswith(BATCH_32)]
        assert dashed.get_color() == batch_32.get_color()
        # no worst shape known (not steady): the first shape's figures, saying whose
        [dashed] = [line for line in older.get_lines() if line.get_linestyle() == "--"]
        assert dashed.get_label() == f"steady p50 of {SMALL}: 0.37 ms"
        assert older.get_title().startswith("older: cold start 1.87 ms, 5.1x the steady p50")
    finally:
        plt.close(fig)
