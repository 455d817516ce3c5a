"""`tritonkit warmup`: explicit load and warm-up until steady, with the cold-start figures."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from tritonkit import warmup as warmup_lib
from tritonkit.cli import app
from tritonkit.cli.options import (
    DAY_S,
    PHASE_LINES_EVERY_S,
    Force,
    JsonOut,
    OptionalRepository,
    Url,
    console,
    err_console,
    progress_status,
)
from tritonkit.client import SECRET_ENV, read_secret_file
from tritonkit.errors import TritonkitError, shell_word
from tritonkit.fileio import atomic_write, check_outputs
from tritonkit.server.local import signals_deferred, signals_interrupt
from tritonkit.tables import fitted, new_table


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}x"


def warmup_table(results: list[warmup_lib.ModelWarmup]) -> Table:
    """One row per model: the load, the first request (the cold start) and steady p50 of
    its first shape, the worst shape's first request, and a new client's first after."""
    table = new_table("warm-up (first: the cold start; after: a new client's first, once warm)")
    table.add_column("model")
    for column in COLUMNS:
        table.add_column(column, justify="right", no_wrap=True)
    for r in results:
        table.add_row(
            escape(r.model), _load(r), _ms(r.first_ms),
            _ms(r.steady_p50_ms), _ratio(r.ratio), _ms(r.worst.first_ms if r.worst else None),
            str(r.requests),
            _ms(r.after.first_ms if r.after else None),
            _ratio(r.after.ratio if r.after else None),
            _steady(r))
    shown = [LOAD_LEGEND[label] for label in LOAD_LEGEND if label in {_load(r) for r in results}]
    if shown:
        table.caption = "; ".join(shown)
    return table


# The table's columns; docs/commands/warmup.md says what each holds.
COLUMNS = ("load s", "first ms", "p50 ms", "first/p50", "worst ms", "reqs", "after ms",
           "after/its p50", "steady")
# Why a model has no load time (the "load s" column).
LOAD_LEGEND = {"start": "start: loaded before this warm-up, first request still cold",
               "ready": "ready: already warm, no cold start"}


def _load(r: warmup_lib.ModelWarmup) -> str:
    """The load's seconds, or why there was none: the server loaded the model as it started
    (a deploy's warm-up, or one after a restart: its statistics showed no request served,
    so its first request is still a cold start), or it was READY and warm already."""
    if r.load_s is not None:
        return f"{r.load_s:.2f}"
    return "start" if r.cold else "ready"


def _steady(r: warmup_lib.ModelWarmup) -> str:
    if r.error is not None:
        return "[red]failed[/red]"
    if not r.warmed:
        return "[yellow]skipped[/yellow]"
    return "[green]yes[/green]" if r.steady else "[red]no[/red]"


def print_results(results: list[warmup_lib.ModelWarmup]) -> None:
    """The table, then each model's note on a line of its own (a narrow terminal would
    fold a note inside the table a word per line), and which shape its worst cold start
    was (with its figures, unless it was the first shape, whose the row's are)."""
    console.print(fitted(warmup_table(results)))
    for r in results:
        if r.worst is not None and len(r.series_ms) > 1:
            console.print(f"  {escape(r.model)}: {escape(worst_line(r))}", highlight=False,
                          soft_wrap=True)
        if r.note:
            console.print(f"  {escape(r.model)}: {escape(r.note)}", highlight=False, soft_wrap=True)
        if r.error is not None:
            console.print(f"  {escape(r.model)}: [red]failed:[/red] {escape(r.error)}",
                          highlight=False, soft_wrap=True)
        if r.first_response_ms is not None:
            console.print(f"  {escape(r.model)}: {first_response_line(r)}", highlight=False,
                          soft_wrap=True)


def worst_line(r: warmup_lib.ModelWarmup) -> str:
    """The shape whose cold start cost the most milliseconds, and its figures."""
    worst = r.worst
    if worst.shape == next(iter(r.series_ms), None):
        return f"worst cold start {worst.shape}, the first shape"
    return (f"worst cold start {worst.shape}: first {_ms(worst.first_ms)} ms, steady p50 "
            f"{_ms(worst.p50_ms)} ms (+{_ms(worst.penalty_ms)} ms, {_ratio(worst.ratio)})")


def first_response_line(r: warmup_lib.ModelWarmup) -> str:
    """A streamed model's time to its first response, as the table gives its final one."""
    line = f"time to first token: first {_ms(r.first_response_ms)} ms"
    if r.first_response_p50_ms is not None:
        line += f", steady p50 {_ms(r.first_response_p50_ms)} ms"
    if r.first_response_ratio is not None:
        line += f" ({_ratio(r.first_response_ratio)})"
    if r.after is not None and r.after.first_response_ms is not None:
        line += f", after {_ms(r.after.first_response_ms)} ms"
    return line


def print_warmup(records: list[dict], repository: Path) -> None:
    """The table for warm-up figures kept as dicts (a deployment's state), and a warning
    for each model that did not become steady: the server is up and serving anyway."""
    results = [warmup_lib.ModelWarmup.from_dict(r) for r in records]
    print_results(results)
    for r in results:
        if r.warmed and not r.steady and r.error is None:
            console.print(f"[yellow]warning:[/yellow] {escape(r.model)}: {escape(r.note)}; "
                          "run: tritonkit warmup --repository "
                          f"{escape(shell_word(repository))} --model {escape(shell_word(r.model))}",
                          highlight=False, soft_wrap=True)


def write_json(path: Path, results: list[warmup_lib.ModelWarmup],
               context: dict | None = None) -> None:
    """The figures, after the run's own facts (``run_context``) and ``about``: what each
    key means, in the file itself."""
    document = {**(context or {}), "about": warmup_lib.ABOUT,
                "models": [r.as_dict() for r in results]}
    atomic_write(path, json.dumps(document, indent=2) + "\n")


def write_outputs(results: list[warmup_lib.ModelWarmup], json_out: Path | None,
                  plot: Path | None, context: dict | None = None) -> None:
    """The --json and --plot files asked for, a line for each written."""
    if json_out:
        write_json(json_out, results, context)
        console.print(f"wrote {escape(str(json_out))}", highlight=False, soft_wrap=True)
    if plot:
        from tritonkit.warmup.plot import write_warmup_plot

        write_warmup_plot(plot, results)
        console.print(f"wrote {escape(str(plot))}", highlight=False, soft_wrap=True)


def notice(line: str) -> None:
    """A line the warm-up says whatever the output is (what it waits for, a warning), on
    stderr, where the error would come."""
    if line.startswith("warning:"):
        err_console.print(f"[yellow]warning:[/yellow]{escape(line.removeprefix('warning:'))}",
                          highlight=False, soft_wrap=True)
    else:
        err_console.print(escape(line), highlight=False, soft_wrap=True)


def unsteady_error(results: list[warmup_lib.ModelWarmup],
                   rule: warmup_lib.SteadyRule) -> TritonkitError | None:
    """One short error naming the models that did not get steady (each one's line under
    the table says why), or None."""
    unsteady = [r for r in results if r.warmed and not r.steady and r.error is None]
    if not unsteady:
        return None
    suggested = max((r.suggested_requests for r in unsteady if r.suggested_requests), default=None)
    fixes = [f"try --requests {suggested}"] if suggested else []
    fixes += ["raise --timeout", f"loosen --steady-tolerance (now {rule.tolerance:g}) or "
                                 f"--steady-floor-ms (now {rule.floor_ms:g})"]
    return TritonkitError(f"not steady: {', '.join(r.model for r in unsteady)} (the line "
                          f"under the table says why)", hint=", or ".join(fixes))


@app.command(epilog="Example: tritonkit warmup --repository model_repository")
def warmup(
    repository: OptionalRepository = None,
    url: Url = None,
    grpc_url: Annotated[Optional[str], typer.Option(
        "--grpc-url", help="With --url: the server's gRPC address host:port, which decoupled "
                           "models are warmed through (streaming; HTTP cannot reach them).")] = None,
    model: Annotated[Optional[list[str]], typer.Option(
        "--model", "-m", help="A model to warm (repeat for several; default: all).")] = None,
    requests: Annotated[int, typer.Option(
        help="Warm-up requests per model, all shapes together, after each shape's first "
             "(cold) one and its burst of one per instance (a stateful model: per sequence "
             "slot; its samples are whole sequences of 3).", min=1)] = warmup_lib.DEFAULT_REQUESTS,
    steady_window: Annotated[int, typer.Option(
        help="Steady means: the last N requests of a shape ...", min=2)] = warmup_lib.SteadyRule.window,
    steady_tolerance: Annotated[float, typer.Option(
        help="... each within this fraction of their median, and that median within it of "
             "the N before.", min=0.001)] = warmup_lib.SteadyRule.tolerance,
    steady_floor_ms: Annotated[float, typer.Option(
        help="... or within this many ms, whatever the fraction: a sub-millisecond "
             "request's jitter is the host's.", min=0.0, max=1000.0)] = warmup_lib.SteadyRule.floor_ms,
    reload: Annotated[bool, typer.Option(
        "--reload", help="Reload models that are READY too, their files changed or not (their "
                         "cold start comes back; the old copy serves until the new one is READY).")] = False,
    secret_file: Annotated[Optional[Path], typer.Option(
        help="A file holding the server's restricted-API secret, for a server no deployment "
             f"here records (Kubernetes); or set {SECRET_ENV}.")] = None,
    timeout: Annotated[float, typer.Option(
        "--timeout", help="Fail once nothing has moved (no load done, no request answered) "
                          "for this many seconds.", min=0.1, max=DAY_S)] = 120.0,
    json_out: JsonOut = None,
    plot: Annotated[Optional[Path], typer.Option(
        help="Write a PNG: each model's latency per shape from its cold first request "
             "until steady.")] = None,
    force: Force = False,
) -> None:
    """Load every model explicitly and warm it up until its latency is steady."""
    if repository is None and url is None:
        repository = Path("model_repository")
    check_outputs({"--json": json_out, "--plot": plot}, force=force)  # before a 2-minute run
    secret = read_secret_file(secret_file) if secret_file else None
    rule = warmup_lib.SteadyRule(window=steady_window, tolerance=steady_tolerance,
                                 floor_ms=steady_floor_ms)
    started_at = warmup_lib.utc_now()
    # SIGTERM and SIGHUP end a warm-up as Ctrl-C does (one line, 128 + the signal); one
    # that comes once it is over waits until the figures are said and written.
    with signals_deferred():
        try:
            with signals_interrupt(), progress_status(
                    "warming up", plain_after=PHASE_LINES_EVERY_S,
                    plain_every=PHASE_LINES_EVERY_S) as progress:
                results = warmup_lib.warm_up(
                    repository, url, model, timeout=timeout, requests=requests, reload=reload,
                    secret=secret, grpc_url=grpc_url, progress=progress, notice=notice, rule=rule)
        except warmup_lib.WarmupFailed as failed:   # the others were warmed: say how, then fail
            with signals_deferred():                # a Ctrl-C now waits until they are said
                print_results(failed.results)
                write_outputs(failed.results, json_out, plot,
                              _context(json_out, repository, url, started_at, secret))
            raise
        print_results(results)
        write_outputs(results, json_out, plot,
                      _context(json_out, repository, url, started_at, secret))
    if error := unsteady_error(results, rule):
        raise error


def _context(json_out: Path | None, repository: Path | None, url: str | None,
             started_at: datetime, secret: str | None) -> dict | None:
    """The run's facts for its JSON (they ask the server its version once more): only
    when a JSON file is asked for."""
    return warmup_lib.run_context(repository, url, started_at, secret=secret) if json_out else None
