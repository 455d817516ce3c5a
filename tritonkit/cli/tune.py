"""`tritonkit tune`: the config with the highest throughput that meets an SLA, measured on the
running deployment; the gain shown with its interval; --write puts it into the config."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn

from tritonkit import tune as tune_lib
from tritonkit.cli import app
from tritonkit.cli.options import JsonOut, Url, console, err_console
from tritonkit.client import resolve_endpoint
from tritonkit.errors import EXIT_ERROR, UsageError
from tritonkit.fileio import check_outputs
from tritonkit.loadtest import parse_shapes
from tritonkit.report import Sla
from tritonkit.server.local import signals_deferred, signals_interrupt
from tritonkit.tune import _report
from tritonkit.tune._run import check_times

DEFAULT_REPOSITORY = Path("model_repository")


@app.command(epilog="Example: tritonkit tune mlp --repository model_repository --sla-p99-ms 10 "
                    "--budget-s 300 --plot out/tune.png --write\n\n"
                    "A narrower space: tritonkit tune mlp --sla-p99-ms 10 --space my-space.toml "
                    "(e.g. instance_count = [1, 2]; max_batch_size = [32])")
def tune(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The model to tune (served by the deployment).")],
    repository: Annotated[Optional[Path], typer.Option(
        "--repository", "-r", help="Model repository of a deployment (its state finds the server; "
                                   "--write writes there).",
        show_default=f"{DEFAULT_REPOSITORY} unless --url")] = None,
    url: Url = None,
    gpu: Annotated[Optional[str], typer.Option(
        "--gpu", help="The card's profile: its [tune] space on a GPU server, and the config "
                      "--write writes (configs/<gpu>.pbtxt).")] = None,
    sla_p99_ms: Annotated[float, typer.Option(
        "--sla-p99-ms", help="SLA: p99 latency at most this many ms (open loop).")] = ...,
    sla_min_qps: Annotated[Optional[float], typer.Option(
        "--sla-min-qps", help="SLA: at least this many requests/s at that p99.")] = None,
    budget_s: Annotated[float, typer.Option(
        "--budget-s", help="Seconds for the whole tune, search and comparison.", min=1)] = 300.0,
    space: Annotated[Optional[Path], typer.Option(
        "--space", help="A TOML file of knob values to try, replacing the profile's lists "
                        "(instance_count, max_batch_size, max_queue_delay_us, "
                        "preferred_batch_size, intra_op_thread_count, accelerator).")] = None,
    protocol: Annotated[str, typer.Option(help="http or grpc.")] = "http",
    shape: Annotated[Optional[List[str]], typer.Option(
        "--shape", help="An input's dims without the batch axis, NAME:D1,D2,... (repeatable): "
                        "the size of each dynamic dimension, as loadtest's.")] = None,
    probe_s: Annotated[float, typer.Option(
        "--probe-s", help="Seconds measured at each load level.", min=0.1)] = 2.0,
    max_concurrency: Annotated[int, typer.Option(
        "--max-concurrency", help="The most requests in flight a config is tried at.",
        min=1)] = 256,
    json_out: JsonOut = None,
    csv_out: Annotated[Optional[Path], typer.Option("--csv", help="Write a row per config as CSV.")] = None,
    plot: Annotated[Optional[Path], typer.Option(
        "--plot", help="Write a PNG: throughput against p99 per config, the SLA, the winner.")] = None,
    write: Annotated[bool, typer.Option(
        "--write", help="Put the winner into the model's config file (stamped as tune's).")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace existing --json/--csv/--plot files, and with --write a config "
                        "edited by hand.")] = False,
) -> None:
    """Search the model's config space on the running deployment for the highest throughput
    that meets the SLA, and show whether the gain is real.

    Each config is loaded in place of the served one (no restart), warmed up, then its
    highest load meeting the p99 is found and judged in open loop. The winner is
    re-measured against the served config and Triton's bare default, interleaved, each
    ratio with its 95% interval. The served config is put back at the end (Ctrl-C too).

    Exit code: 0 a config meets the SLA, 3 none does (the closest is named), 4 run errors;
    1 when it was met but a --json/--csv/--plot file could not be written.
    """
    check_outputs({"--json": json_out, "--csv": csv_out, "--plot": plot}, force=force)
    if repository is None and url is None:
        repository = DEFAULT_REPOSITORY
    if write and repository is None:
        raise UsageError("--write needs --repository DIR: the folder whose config it writes",
                         hint=f"pass --repository with the model repository that holds {name}")
    sla = Sla(p99_ms=sla_p99_ms, min_qps=sla_min_qps)
    check_times(budget_s, probe_s)
    override = tune_lib.read_space_file(space) if space else None
    endpoint = resolve_endpoint(repository, url)
    target = tune_lib.write_target(repository, name, gpu=gpu, force=force) if write else None
    columns = (TextColumn("{task.description}"), BarColumn(),
               TextColumn("{task.fields[trials]} configs tried, {task.fields[left]:.0f} s left"))
    # A signal once the search is over waits until the report is written and said.
    with signals_deferred():
        with signals_interrupt(), Progress(*columns, console=err_console, transient=True,
                                           disable=not err_console.is_terminal) as bar:
            task = bar.add_task("tune", total=budget_s, trials=0, left=budget_s)

            def progress(state: tune_lib.TuneProgress) -> None:
                bar.update(task, completed=min(state.elapsed_s, state.budget_s), trials=state.trials_done,
                           left=max(0.0, state.budget_s - state.elapsed_s),
                           description=escape(f"{state.phase}: {state.current}"[:60]))

            result = tune_lib.tune(endpoint, name, sla, space=override,
                                   space_keys=tune_lib.space_keys(space) if space else None, gpu=gpu,
                                   budget_s=budget_s, protocol=protocol,
                                   shapes=parse_shapes(shape or ()), probe_s=probe_s,
                                   max_concurrency=max_concurrency, write=target,
                                   repository=repository if url is None else None, progress=progress)
        written, unwritten = [], []
        for path, save in ((json_out, _report.write_json), (csv_out, _report.write_csv),
                           (plot, _report.write_plot)):
            if path is not None:
                try:
                    written.append(save(path, result))
                except OSError as exc:
                    unwritten.append(f"error: could not write {path}: {exc.strerror or exc}")
        _report.print_report(console, result)
        if result.written:
            written.append(result.written)
        for path in written:
            console.print(f"wrote {path}", markup=False, highlight=False, soft_wrap=True)
        if result.written:
            console.print(tune_lib.how_to_serve(target), markup=False, highlight=False,
                          soft_wrap=True)
        for line in unwritten:
            err_console.print(line, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(result.exit_code or (EXIT_ERROR if unwritten else 0))
