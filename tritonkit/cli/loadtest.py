"""`tritonkit loadtest`: QPS and latency percentiles against an SLA; the verdict is the exit code."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from tritonkit import loadtest as loadtest_lib
from tritonkit import report
from tritonkit.cli import app
from tritonkit.cli.options import JsonOut, Url, console, err_console
from tritonkit.client import resolve_endpoint
from tritonkit.errors import EXIT_ERROR, EXIT_OK, Interrupted, UsageError
from tritonkit.fileio import check_outputs
from tritonkit.server.local import signals_deferred, signals_interrupt


DEFAULT_REPOSITORY = Path("model_repository")


def _numbers(text: Optional[str], kind: type, flag: str) -> tuple:
    if not text:
        return ()
    try:
        return tuple(kind(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"{flag} takes a comma-separated list of numbers (got '{text}')",
                         hint=f"e.g. {flag} 1,4,16") from None


class _ProgressBar:
    """One bar per level on stderr: seconds elapsed of warm-up + measurement, requests sent."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._tasks: dict[str, int] = {}

    def __call__(self, label: str, elapsed_s: float, total_s: float, done: int) -> None:
        if label not in self._tasks:
            self._tasks[label] = self._progress.add_task(label, total=total_s, done=0)
        self._progress.update(self._tasks[label], completed=elapsed_s, done=done)


@app.command(epilog="Example: tritonkit loadtest --repository model_repository --model example "
                    "--concurrency 1,8 --sla-p99-ms 20\n\n"
                    "Open loop: tritonkit loadtest --url 127.0.0.1:8000 --model mlp --rate 200 "
                    "--arrivals poisson --duration 30 --plot out/mlp.png\n\n"
                    "Dynamic sizes: tritonkit loadtest --model encoder --concurrency 4 "
                    "--shape input_ids:128 --shape attention_mask:128\n\n"
                    "Stateful (sequence_batching): tritonkit loadtest --model tracker --concurrency 8 "
                    "--sequence-length 50 (each user sends whole sequences, START to END)")
def loadtest(
    model: Annotated[str, typer.Option("--model", "-m", help="The model to load.")],
    repository: Annotated[Optional[Path], typer.Option(
        "--repository", "-r", help="Model repository of a deployment (its state finds the server).",
        show_default=f"{DEFAULT_REPOSITORY} unless --url")] = None,
    url: Url = None,
    grpc_url: Annotated[Optional[str], typer.Option(
        "--grpc-url", help="Triton gRPC address host:port, with --url and --protocol grpc.")] = None,
    concurrency: Annotated[Optional[str], typer.Option(
        "--concurrency", "-c", help="Closed loop: requests kept in flight, e.g. 1,8,32.")] = None,
    rate: Annotated[Optional[str], typer.Option(
        "--rate", help="Open loop: offered requests per second, e.g. 100,400.")] = None,
    arrivals: Annotated[str, typer.Option(
        help="Open loop: poisson or constant inter-arrival times.")] = "poisson",
    duration: Annotated[float, typer.Option(
        "--duration", help="Seconds measured at each level.", min=0.1)] = 10.0,
    warmup_s: Annotated[float, typer.Option(
        "--warmup-s", help="Seconds of load before the measurement at each level (not counted).",
        min=0)] = 1.0,
    batch_size: Annotated[int, typer.Option("--batch-size", "-b", help="Batch size of each request.",
                                            min=1)] = 1,
    protocol: Annotated[str, typer.Option(help="http or grpc.")] = "http",
    workers: Annotated[Optional[int], typer.Option(
        help="Load-generating processes (default: enough for the load, at most the CPUs).", min=1)] = None,
    max_in_flight: Annotated[Optional[int], typer.Option(
        "--max-in-flight", help="Open loop: most requests in flight per worker (default 64 http, 32 grpc).",
        min=1)] = None,
    window_s: Annotated[float, typer.Option(
        "--window-s", help="Width of a timeline window in seconds.", min=0.05)] = 1.0,
    input_data: Annotated[Optional[Path], typer.Option(
        "--input-data", help="Real inputs: .npz (an array per input) or .json {NAME: array}.")] = None,
    shape: Annotated[Optional[List[str]], typer.Option(
        "--shape", help="An input's dims without the batch axis, NAME:D1,D2,... (repeatable; "
                        "as perf_analyzer's): the size of each dynamic (-1) dimension.")] = None,
    sequence_length: Annotated[Optional[int], typer.Option(
        "--sequence-length", help="Stateful model (sequence_batching): requests per sequence, "
                                  "START to END (default 20, as perf_analyzer's).")] = None,
    sequence_length_variation: Annotated[Optional[float], typer.Option(
        "--sequence-length-variation", help="Stateful model: each sequence's length varies by up to "
                                            "this many percent (default 20).")] = None,
    sequence_id_range: Annotated[Optional[str], typer.Option(
        "--sequence-id-range", help="Stateful model: correlation IDs START[:END] (END excluded; "
                                    "default: a random range far from warm-up's and small counters).")] = None,
    num_of_sequences: Annotated[Optional[int], typer.Option(
        "--num-of-sequences", help="Stateful model, open loop: sequences live at once, one request "
                                   "in flight each (default 4).")] = None,
    request_timeout: Annotated[float, typer.Option(
        "--request-timeout", help="Seconds before one request counts as failed.", min=0.1)] = 30.0,
    sla_p99_ms: Annotated[Optional[float], typer.Option(
        "--sla-p99-ms", help="SLA: p99 latency at most this many ms at every level.")] = None,
    sla_min_qps: Annotated[Optional[float], typer.Option(
        "--sla-min-qps", help="SLA: at least this many successful requests per second at every "
                              "level (QPS; a request of --batch-size B carries B inferences).")] = None,
    sla_max_error_rate: Annotated[Optional[float], typer.Option(
        "--sla-max-error-rate", help="SLA: at most this fraction of requests may fail; more "
                                     "(by default: any) is a run error, exit 4.")] = None,
    json_out: JsonOut = None,
    csv_out: Annotated[Optional[Path], typer.Option("--csv", help="Write the timeline as CSV.")] = None,
    plot: Annotated[Optional[Path], typer.Option(
        "--plot", help="Write a PNG: latency timeline with spikes, and the histogram.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace existing --json/--csv/--plot files.")] = False,
) -> None:
    """Load a model closed-loop (--concurrency) or open-loop (--rate) and judge it against an SLA.

    Exit code: 0 the SLA held, 3 it was missed, 4 requests failed (beyond --sla-max-error-rate)
    or the server went away;
    1 when the SLA held but a --json/--csv/--plot file could not be written;
    130 on Ctrl-C (128 + the signal): the levels that finished are reported and written, no verdict.
    """
    check_outputs({"--json": json_out, "--csv": csv_out, "--plot": plot}, force=force)
    if repository is None and url is None:
        repository = DEFAULT_REPOSITORY
    sla = report.Sla(p99_ms=sla_p99_ms, min_qps=sla_min_qps, max_error_rate=sla_max_error_rate)
    spec = loadtest_lib.LoadSpec(
        model=model, concurrency=_numbers(concurrency, int, "--concurrency"),
        rates=_numbers(rate, float, "--rate"), arrivals=arrivals, duration_s=duration,
        warmup_s=warmup_s, batch_size=batch_size, protocol=protocol, workers=workers,
        max_in_flight=max_in_flight, window_s=window_s, timeout_s=request_timeout, input_data=input_data,
        shapes=loadtest_lib.parse_shapes(shape or ()), sequence_length=sequence_length,
        sequence_length_variation=sequence_length_variation, num_sequences=num_of_sequences,
        sequence_id_range=loadtest_lib.parse_id_range(sequence_id_range))
    endpoint = resolve_endpoint(repository, url, grpc_url=grpc_url)
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[done]} requests"),
               TimeRemainingColumn())
    # SIGTERM (a cancelled CI job) and SIGHUP (a closed terminal) end the run as Ctrl-C
    # does, its workers stopped: a signal's default action would leave them loading the server.
    # One that comes once the run is over waits until the report is written and said (a
    # second Ctrl-C, pressed to hurry the first, lost the table and named no file).
    with signals_deferred():
        with signals_interrupt(), Progress(*columns, console=err_console, transient=True,
                                           disable=not err_console.is_terminal) as progress:
            result = loadtest_lib.run_loadtest(
                endpoint, spec, progress=_ProgressBar(progress),
                repository=repository if url is None else None,
                warn=lambda line: err_console.print(f"[yellow]warning:[/yellow] {escape(line)}",
                                                    soft_wrap=True))
        verdict = report.judge(result, sla)
        # Files first: what was measured is kept even if the terminal cannot show it. A file
        # that cannot be written (checked before the run, yet the disk filled up) loses
        # neither the report nor the verdict.
        written, unwritten = [], []
        for path, write in ((json_out, lambda p: report.write_json(p, result, verdict)),
                            (csv_out, lambda p: report.write_csv(p, result)),
                            (plot, lambda p: report.write_plot(p, result))):
            if path is not None:
                try:
                    write(path)
                except OSError as exc:
                    unwritten.append(f"error: could not write {path}: {exc.strerror or exc}")
                else:
                    written.append(path)
        report.print_report(console, result, verdict, errors=err_console)
        for path in written:
            console.print(f"wrote {path}", markup=False, highlight=False, soft_wrap=True)
        for line in unwritten:
            err_console.print(line, markup=False, highlight=False, soft_wrap=True)
    if result.interrupted is not None:
        # The finished levels are reported; the last line and the exit code stay the
        # signal's (the CLI's error boundary says it: "error: interrupted", 130).
        raise Interrupted(result.interrupted.signum)
    raise typer.Exit(verdict.exit_code or (EXIT_ERROR if unwritten else EXIT_OK))
