"""`tritonkit monitor`, `tritonkit diagnose` and `tritonkit doctor`."""

from __future__ import annotations

import json
import signal
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from tritonkit.cli import app
from tritonkit.cli.options import (
    DAY_S,
    Force,
    JsonOut,
    OptionalRepository,
    Url,
    console,
    err_console,
)
from tritonkit.errors import Interrupted, TritonkitError, UsageError, printable
from tritonkit.fileio import atomic_write, check_output
from tritonkit.monitor import doctor as doctor_lib
from tritonkit.monitor.alerts import load_thresholds
from tritonkit.monitor.diagnose import Diagnosis, choose_profile, diagnose as diagnose_rows
from tritonkit.monitor.recording import (COLUMNS, MODEL_COLUMNS, CsvRecorder, models_csv_path,
                                         read_monitor_csv)
from tritonkit.monitor.triton_metrics import DEFAULT_METRICS_PORT, resolve_server_urls
from tritonkit.monitor.watch import Snapshot, open_monitor, record, watch
from tritonkit.profiles import load_profile
from tritonkit.server.local import signals_deferred, signals_interrupt
from tritonkit.tables import fitted, new_table

MetricsPort = Annotated[int, typer.Option(
    help="Triton's metrics port on the --url host.", min=1, max=65535)]
ThresholdsFile = Annotated[Optional[Path], typer.Option(
    "--thresholds", help="Alert and wall thresholds TOML (default configs/alerts.toml).")]
Gpu = Annotated[Optional[str], typer.Option(
    "--gpu", help="GPU profile (a10, cpu, p100, or a .toml path).")]


@app.command(epilog="Example: tritonkit monitor --interval 10 --csv gpu.csv "
                    "--repository model_repository")
def monitor(
    interval: Annotated[float, typer.Option(help="Seconds between samples.", min=0.05,
                                            max=DAY_S)] = 10.0,
    duration: Annotated[Optional[float], typer.Option(
        help="Stop after this many seconds (default: until Ctrl-C).", min=0)] = None,
    csv: Annotated[Optional[Path], typer.Option(
        "--csv", help="Write one row per sample per GPU to this CSV (columns: "
                      + ", ".join(COLUMNS) + "); where Triton is watched, one row per sample "
                      "per model version to <stem>.models.csv beside it (columns: "
                      + ", ".join(MODEL_COLUMNS) + "; counters carried across restarts "
                      "as the server's are).")] = None,
    once: Annotated[bool, typer.Option("--once", help="Take one sample and stop.")] = False,
    url: Url = None,
    metrics_port: MetricsPort = DEFAULT_METRICS_PORT,
    repository: OptionalRepository = None,
    thresholds: ThresholdsFile = None,
    force: Force = False,
) -> None:
    """Sample the GPU's vital signs (NVML) and Triton's metrics; alert on thresholds.
    Ctrl-C ends it (the CSV keeps every sample taken)."""
    if csv:
        check_output(csv, force=force, what="monitor CSV", suffix=".csv")
    limits = load_thresholds(thresholds)
    metrics_url, http_url = resolve_server_urls(repository, url, metrics_port)
    models_csv = models_csv_path(csv) if csv and metrics_url else None
    if models_csv:
        check_output(models_csv, force=force, what="per-model CSV", suffix=".csv")
    sampler, note = open_monitor(metrics_url, limits.alerts, http_url=http_url)
    if note:
        err_console.print(f"warning: {escape(note)}", highlight=False, soft_wrap=True)
    samples, said, stopped_by = 0, set(), None
    with ExitStack() as stack:
        # SIGTERM and SIGHUP end it too, each file closed whole, then 128 + the signal
        stack.enter_context(signals_interrupt())
        stack.callback(sampler.close)
        recorder = stack.enter_context(
            CsvRecorder(csv, force=force, models=bool(models_csv))) if csv else None
        live = None
        if console.is_terminal and not once:
            live = stack.enter_context(Live(console=console, auto_refresh=False))
        try:
            for snapshot in watch(sampler, interval, duration, once=once):
                with signals_deferred():    # a Ctrl-C here waits: the sample said is written
                    if recorder:
                        recorder.write(snapshot.rows(), snapshot.model_rows())
                    samples += 1
                view = _snapshot_view(snapshot)
                if live:
                    live.update(view, refresh=True)
                else:
                    console.print(view)
                for alert in snapshot.alerts:
                    console.print(f"[bold red]ALERT[/bold red] {escape(alert.message)}",
                                  highlight=False)
                for line in [n for n in snapshot.notes if n not in said]:
                    said.add(line)      # once: what the server cannot report stays so
                    err_console.print(f"warning: {escape(line)}", highlight=False,
                                      soft_wrap=True)
        except KeyboardInterrupt:
            pass    # Ctrl-C is how a monitor without --duration ends: not an error
        except Interrupted as stop:
            if stop.signum != signal.SIGINT:
                stopped_by = stop.signum
    if csv:
        console.print(f"{samples} samples written to {escape(str(csv))}"
                      + (f" (per model: {escape(str(models_csv))})" if models_csv else ""),
                      highlight=False)
    if stopped_by is not None:
        raise Interrupted(stopped_by)


def _fmt(value: float | None, spec: str = ".0f") -> str:
    return "—" if value is None else format(value, spec)


def _failure_rate(per_s: float | None) -> str:
    """Failures per second, red when there are any; one failure in a long interval
    (0.017/s over a minute) keeps its digits rather than reading 0.0."""
    if not per_s:
        return _fmt(per_s, ".1f")
    return f"[bold red]{format(per_s, '.1f' if per_s >= 0.1 else '.2g')}[/bold red]"


def _table(title: str, headers: tuple[str, ...], rows: list[list[str]]) -> Table:
    # One space between columns: the densest table, Triton's fits 80 columns with 7-digit counts.
    table = new_table(title, gap=1)
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i == 0 else "right", no_wrap=i > 0)
    for row in rows:
        table.add_row(*row)
    return table


def _snapshot_view(snapshot: Snapshot) -> Group:
    parts = []
    at = f"at {round(snapshot.elapsed_s, 1):g} s"
    if snapshot.gpus:
        table = _table(f"GPUs {at}", (
            "GPU", "util%", "mem MiB", "mem%", "°C", "W", "SM MHz", "mem MHz", "rx MB/s",
            "tx MB/s"), [[
                str(g.index), _fmt(g.utilization_pct),
                f"{_fmt(g.memory_used_mib)}/{_fmt(g.memory_total_mib)}", _fmt(g.memory_pct, ".1f"),
                _fmt(g.temperature_c), _fmt(g.power_w), _fmt(g.sm_clock_mhz),
                _fmt(g.memory_clock_mhz), _fmt(g.pcie_rx_mb_s), _fmt(g.pcie_tx_mb_s)]
                for g in snapshot.gpus])
        table.caption = escape(", ".join(
            f"{g.index} = {g.name or g.uuid}" + (f" (PCIe Gen{g.pcie_gen} x{g.pcie_width})"
                                       if g.pcie_gen and g.pcie_width else "")
            + (f"; clocks held down by {'+'.join(g.slowdowns)}" if g.slowdowns else "")
            + (f"; cannot be read: {g.error}" if g.error else "")
            for g in snapshot.gpus))
        parts.append(table)
    if snapshot.triton:
        rows = []
        for name, c in snapshot.triton.models.items():
            r = snapshot.model_rates.get(name)
            ms = lambda us: None if us is None else us / 1000  # noqa: E731
            rows.append([escape(name), _fmt(c.request_success), _fmt(c.inference_count),
                         _fmt(c.request_failure),
                         _fmt(r and r.requests_per_s, ".1f"), _failure_rate(r and r.failures_per_s),
                         _fmt(r and r.inferences_per_s, ".1f"), _fmt(r and r.avg_batch, ".2f"),
                         _fmt(r and ms(r.queue_us), ".2f"), _fmt(r and ms(r.compute_us), ".2f"),
                         _fmt(c.pending_request_count)])
        # No total row: Triton counts an ensemble's request in each model it runs. The
        # lifetime execution count is left out (batch gives the interval's) so that the
        # table, fail/s with it, fits in 80 columns with 7-digit counts.
        table = _table(f"Triton {at}", (
            "model", "req", "infer", "fail", "req/s", "fail/s", "inf/s", "batch", "queue ms",
            "comp ms", "pend"), rows)
        table.caption = ("counts and means since load; the rates need a second sample"
                         if snapshot.since_load else
                         "counts since load; rates and means since the last sample")
        parts.append(table)
    if snapshot.triton_error:
        parts.append(f"Triton: {escape(snapshot.triton_error)}")
    return Group(*[fitted(part) if isinstance(part, Table) else part for part in parts])


@app.command(epilog="Example: tritonkit diagnose gpu.csv --gpu a10")
def diagnose(
    file: Annotated[Optional[Path], typer.Argument(metavar="FILE",
        help="A CSV recorded by tritonkit monitor --csv.", show_default=False)] = None,
    gpu: Gpu = None,
    live: Annotated[bool, typer.Option(
        "--live", help="Record now for --duration seconds instead of reading a file "
                       "(Ctrl-C stops it early; what was sampled is diagnosed).")] = False,
    duration: Annotated[float, typer.Option(help="Seconds to record with --live.", min=1,
                                            max=DAY_S)] = 60.0,
    interval: Annotated[float, typer.Option(help="Seconds between samples with --live.",
                                            min=0.05, max=DAY_S)] = 1.0,
    url: Url = None,
    metrics_port: MetricsPort = DEFAULT_METRICS_PORT,
    repository: OptionalRepository = None,
    thresholds: ThresholdsFile = None,
    json_out: JsonOut = None,
    force: Force = False,
) -> None:
    """Name the bottleneck (memory, bandwidth, I/O or scheduling wall) from a monitor CSV."""
    if (file is None) == (not live):
        raise UsageError("give a recorded CSV or --live, not both" if file else
                         "no recording given", hint="tritonkit diagnose gpu.csv, or --live")
    _check_json(json_out, force)      # before a --live recording, not after it
    if file is not None and json_out is not None and str(json_out) != "-" \
            and Path(json_out).resolve() == Path(file).resolve():
        # --force or not: the report would replace the recording it was made from
        raise UsageError(f"--json {json_out} is the recording diagnose reads",
                         hint="give the report a path of its own, e.g. --json diagnosis.json")
    limits = load_thresholds(thresholds)
    if live:
        metrics_url, http_url = resolve_server_urls(repository, url, metrics_port)
        sampler, note = open_monitor(metrics_url, limits.alerts, http_url=http_url)
        if note:        # why there is no GPU to judge (a CPU host), or one is not watched
            err_console.print(f"warning: {escape(note)}", highlight=False, soft_wrap=True)
        try:
            with signals_interrupt():       # SIGTERM and SIGHUP stop it too (then 128 + the signal)
                recording = record(sampler, interval, duration)
        finally:
            sampler.close()
        rows = recording.rows
        for note in recording.notes:
            err_console.print(f"warning: {escape(note)}", highlight=False, soft_wrap=True)
        if recording.interrupted:
            by = ("Ctrl-C" if recording.interrupted == signal.SIGINT
                  else signal.Signals(recording.interrupted).name)
            err_console.print(f"recording stopped by {by} after {rows[-1].elapsed_s:.0f} s: "
                              "diagnosing the samples taken", highlight=False)
    else:
        rows = read_monitor_csv(file)
    results = diagnose_rows(rows, choose_profile(rows, gpu), limits)
    out = err_console if json_out is not None and str(json_out) == "-" else console
    for result in results:
        _print_diagnosis(result, out)   # with --json -, stdout holds the JSON alone
    if json_out:
        _write_json(json_out, {"diagnoses": [r.to_dict() for r in results]})
    if live and recording.interrupted not in (None, signal.SIGINT):
        raise Interrupted(recording.interrupted)


def _print_diagnosis(d: Diagnosis, out=console) -> None:
    color = {"none": "green", "idle": "yellow"}.get(d.wall, "red")
    judged = ("Triton server (no GPU samples)" if d.gpu is None else
              f"GPU {d.gpu} ({escape(d.gpu_name or 'unnamed')}, profile {d.profile})")
    out.print(f"{judged}: [bold {color}]{d.title}[/bold {color}]", highlight=False)
    out.print("  evidence:", highlight=False)
    for line in d.evidence:
        out.print(f"    - {escape(line)}", highlight=False)
    for line in d.notes:
        out.print(f"  note: {escape(line)}", highlight=False)
    out.print("  what to try:", highlight=False)
    for line in d.advice:
        out.print(f"    - {escape(line)}", highlight=False)


@app.command(epilog="Example: tritonkit doctor --gpu a10 --repository model_repository")
def doctor(
    gpu: Gpu = None,
    image: Annotated[Optional[str], typer.Option(
        help="Triton image to check for (default: the one deploy runs --repository in, else the profile's).")] = None,
    repository: Annotated[Optional[Path], typer.Option(
        "--repository", "-r", help="Model repository to check (default: ./model_repository "
        "if there is one; a host prepared before its models came is not a problem).")] = None,
    host: Annotated[str, typer.Option(help="Address the server will bind.")] = "127.0.0.1",
    http_port: Annotated[int, typer.Option(min=1, max=65535)] = 8000,
    grpc_port: Annotated[int, typer.Option(min=1, max=65535)] = 8001,
    metrics_port: Annotated[int, typer.Option(min=1, max=65535)] = 8002,
    json_out: JsonOut = None,
    force: Force = False,
) -> None:
    """Check a deployment host: driver, compute capability, Docker, ports, repository."""
    _check_json(json_out, force)
    if repository is None and Path("model_repository").is_dir():
        repository = Path("model_repository")
    profile = load_profile(gpu) if gpu else None
    facts = doctor_lib.gather_host_facts(
        host, {"http": http_port, "grpc": grpc_port, "metrics": metrics_port},
        repository=repository)
    report = doctor_lib.doctor_report(profile, facts, image=image, repository=repository)
    checks = report.checks
    to_stdout = json_out is not None and str(json_out) == "-"
    width = max(len(c.name) for c in checks)
    for check in [] if to_stdout else checks:
        status = {"ok": "[green]ok     [/green]", "warning": "[yellow]warning[/yellow]",
                  "problem": "[red]problem[/red]"}[check.status]
        line = f"{status} {check.name:<{width}}  {escape(printable(check.detail))}"
        if check.fix:
            line += f" [dim]— fix: {escape(printable(check.fix))}[/dim]"
        console.print(line, highlight=False, soft_wrap=True)
    if json_out:
        _write_json(json_out, report.to_json())
    problems = [c.name for c in checks if not c.ok]
    if problems:
        raise TritonkitError(f"{len(problems)} of {len(checks)} checks found a problem "
                             f"({', '.join(problems)})",
                             hint="apply each fix listed, then rerun tritonkit doctor")


def _check_json(path: Path | None, force: bool) -> None:
    if path is not None and str(path) != "-":
        check_output(path, force=force, what="JSON report", suffix=".json")


def _write_json(path: Path, data: dict) -> None:
    text = json.dumps(data, indent=2) + "\n"
    if str(path) == "-":
        sys.stdout.write(text)
        return
    try:
        atomic_write(path, text)   # a reader, or a failed write, never sees half a report
    except OSError as exc:
        raise UsageError(f"cannot write {path} ({exc.strerror})",
                         hint="pass --json with a writable path, or - for stdout") from None
