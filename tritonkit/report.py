"""A load test's verdict against an SLA, and the same result as tables, JSON, CSV and a PNG.

    verdict = judge(result, Sla(p99_ms=20, min_qps=500))
    console.print(levels_table(result)); print_verdict(console, verdict)
    write_json(path, result, verdict); write_csv(path, result); write_plot(path, result)

The verdict is an exit code: 0 the SLA held, ``EXIT_SLA_MISS`` a limit was missed,
``EXIT_RUN_ERRORS`` the run itself went wrong (requests failed beyond the error budget —
with none given, any failure — or the server stopped answering). A failed request is
never silently tolerated: errors are only acceptable up to ``--sla-max-error-rate``.
A run a signal cut short is no verdict at all: 128 + the signal (130 for Ctrl-C), its
finished levels reported all the same.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tritonkit import __version__
from tritonkit.errors import EXIT_OK, EXIT_RUN_ERRORS, EXIT_SLA_MISS, UsageError, interrupted_by
from tritonkit.fileio import atomic_write
from tritonkit.loadtest import (
    ERROR_WINDOW_SHARE, PERCENTILES, LevelResult, LoadTestResult, Spike, Window)
from tritonkit.tables import fitted, new_table

__all__ = [
    "Check",
    "Sla",
    "Verdict",
    "judge",
    "levels_table",
    "print_report",
    "result_dict",
    "server_split_table",
    "spike_warning",
    "spikes_table",
    "timeline_csv",
    "write_csv",
    "write_json",
    "write_plot",
]

PASS, MISS, ERRORS, INTERRUPTED = "pass", "sla-miss", "errors", "interrupted"
LATE_SEND_MS = 1.0      # open loop: a p99 send lag above this is worth a warning
CLIENT_CPU_BOUND = 0.8  # open loop: a process busy this share of a core may itself send late


@dataclass(frozen=True)
class Sla:
    """The limits a deployment must hold, at every level of the run; None: not asked for."""

    p99_ms: float | None = None
    min_qps: float | None = None
    max_error_rate: float | None = None     # a fraction; None: any failed request is an error

    def __post_init__(self) -> None:
        for flag, value in (("--sla-p99-ms", self.p99_ms), ("--sla-min-qps", self.min_qps),
                            ("--sla-max-error-rate", self.max_error_rate)):
            if value is not None and not math.isfinite(value):
                raise UsageError(f"{flag} takes a finite number (got {value:g})",
                                 hint="e.g. --sla-p99-ms 20 --sla-min-qps 500")
        if self.p99_ms is not None and self.p99_ms <= 0:
            raise UsageError(f"--sla-p99-ms must be > 0 (got {self.p99_ms:g})", hint="e.g. --sla-p99-ms 20")
        if self.min_qps is not None and self.min_qps < 0:
            raise UsageError(f"--sla-min-qps must be >= 0 (got {self.min_qps:g})",
                             hint="e.g. --sla-min-qps 500; leave it out for no minimum")
        if self.max_error_rate is not None and not 0 <= self.max_error_rate <= 1:
            raise UsageError(f"--sla-max-error-rate is a fraction between 0 and 1 (got {self.max_error_rate:g})",
                             hint="e.g. --sla-max-error-rate 0.001 for 0.1 %")

    @property
    def given(self) -> bool:
        return any(v is not None for v in (self.p99_ms, self.min_qps, self.max_error_rate))


@dataclass(frozen=True)
class Check:
    """One limit at one level: what was measured against what was allowed."""

    level: str
    metric: str          # "p99_ms" | "qps" | "error_rate"
    measured: float | None   # None: nothing to measure (no request succeeded)
    limit: float
    passed: bool

    def describe(self) -> str:
        if self.measured is None:
            return f"{self.level}: no successful request to take a {self.metric} from"
        # Both sides of a comparison in one format: "1,405.0 QPS < 100,000.0 QPS"
        if self.metric == "p99_ms":
            return (f"{self.level}: p99 {self.measured:,.2f} ms {'<=' if self.passed else '>'} "
                    f"{self.limit:,.2f} ms")
        if self.metric == "qps":
            return (f"{self.level}: {self.measured:,.1f} QPS {'>=' if self.passed else '<'} "
                    f"{self.limit:,.1f} QPS")
        if self.passed:
            return f"{self.level}: error rate {self.measured:.4%} <= {self.limit:.4%}"
        return (f"{self.level}: error rate {self.measured:.4%} > {self.limit:.4%}: "
                f"more requests failed than the budget allows (a run error, exit {EXIT_RUN_ERRORS})")


@dataclass(frozen=True)
class Verdict:
    """The outcome of a run against its SLA, and the exit code that carries it."""

    outcome: str                       # PASS | MISS | ERRORS | INTERRUPTED
    checks: tuple[Check, ...]
    reasons: tuple[str, ...]           # why it is not a pass, one line each
    warnings: tuple[str, ...] = field(default_factory=tuple)
    sla: Sla = field(default_factory=Sla)
    signum: int | None = None          # INTERRUPTED: the signal that ended the run

    @property
    def exit_code(self) -> int:
        if self.outcome == INTERRUPTED:
            return 128 + (self.signum or 0)
        return {PASS: EXIT_OK, MISS: EXIT_SLA_MISS, ERRORS: EXIT_RUN_ERRORS}[self.outcome]

    def as_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "exit_code": self.exit_code, "sla": asdict(self.sla),
                "checks": [asdict(c) | {"text": c.describe()} for c in self.checks],
                "reasons": list(self.reasons), "warnings": list(self.warnings)}


def judge(result: LoadTestResult, sla: Sla) -> Verdict:
    """Check every level of ``result`` against ``sla``.

    A run that ended early or had more failed requests than the error budget allows
    (none given: any) is ERRORS (it says nothing reliable about latency), a budget of 0
    the same as none; otherwise any failed check is a MISS.
    Cold-start spikes never pass silently: they are listed as warnings even when the
    SLA holds, since the next restart brings them back.
    A run a signal cut short (``result.interrupted``) is INTERRUPTED, exit 128 + the
    signal, whatever its finished levels show: an SLA is judged at every level, and one
    level was not measured. Their checks are still listed, and their errors and misses
    follow the interruption in ``reasons``.
    """
    checks: list[Check] = []
    errors: list[str] = []
    for lv in result.levels:
        p99 = lv.latency_ms.get("p99")
        if sla.p99_ms is not None:
            checks.append(Check(lv.label, "p99_ms", p99, sla.p99_ms, p99 is not None and p99 <= sla.p99_ms))
        if sla.min_qps is not None:
            checks.append(Check(lv.label, "qps", lv.qps, sla.min_qps, lv.qps >= sla.min_qps))
        budget = sla.max_error_rate
        if budget is not None:
            checks.append(Check(lv.label, "error_rate", lv.error_rate, budget, lv.error_rate <= budget))
        if lv.error_count and (budget is None or lv.error_rate > budget):
            errors.append(_failed_requests(lv, budget))
        if lv.sent and not lv.ok:
            errors.append(f"{lv.label}: no request succeeded")
        elif not lv.sent and not result.ended_early:
            errors.append(f"{lv.label}: no request was sent in the {lv.duration_s:g} s measured "
                          "(lengthen --duration, or --warmup-s may swallow the run)")
    if result.ended_early:
        errors.insert(0, result.ended_early)
    warnings = [spike_warning(lv, s) for lv in result.levels for s in lv.spikes]
    warnings += [w for lv in result.levels for w in _open_loop_warnings(lv)]
    warnings += [w for lv in result.levels for w in _sequence_warnings(lv)]
    warnings += [f"{lv.label}: the server began shutting down {e['t_s']:.2f} s into the measurement "
                 "(it refused new connections, answering only those already open): what came after "
                 "measures a server on its way out"
                 for lv in result.levels for e in lv.events if e["kind"] == "draining"]
    if result.cold_first_request_ms is not None:
        warnings.insert(0, _cold_first_request(result))
    missed = [c.describe() for c in checks if not c.passed]
    if result.interrupted is not None:
        return Verdict(outcome=INTERRUPTED, checks=tuple(checks),
                       reasons=(_interruption(result), *errors, *missed), warnings=tuple(warnings),
                       sla=sla, signum=result.interrupted.signum)
    outcome = ERRORS if errors else MISS if missed else PASS
    return Verdict(outcome=outcome, checks=tuple(checks), reasons=tuple(errors or missed),
                   warnings=tuple(warnings), sla=sla)


def _interruption(result: LoadTestResult) -> str:
    """What a signal left of the run: the levels that finished, the one cut short, the rest."""
    cut = result.interrupted
    done = ", ".join(lv.label for lv in result.levels)
    not_run = f"; not run: {', '.join(cut.not_run)}" if cut.not_run else ""
    left_out = f"; {cut.level}, cut short, is left out" if cut.level else ""
    return (f"{_when_cut(result)}, so no SLA verdict: the figures are those of the levels that "
            f"finished ({done}){left_out}{not_run}")


def _when_cut(result: LoadTestResult) -> str:
    """The signal and when it came: during the level it cut short, or between two levels."""
    cut = result.interrupted
    said = interrupted_by(cut.signum)
    return f"{said} during {cut.level}" if cut.level else f"{said} after {result.levels[-1].label}"


def _cold_first_request(result: LoadTestResult) -> str:
    """The model had served nothing since its load (its model_warmup, which Triton runs at
    load, aside): its first request, sent before the levels and not counted in them, was
    its cold start."""
    p50 = next((lv.latency_ms["p50"] for lv in result.levels if lv.latency_ms.get("p50")), None)
    ratio = f", {result.cold_first_request_ms / p50:.1f}x the p50" if p50 else ""
    return (f"cold start: model '{result.spec.model}': first request since its load (model_warmup "
            f"aside) {result.cold_first_request_ms:.2f} ms{ratio}; run tritonkit warmup")


def spike_warning(lv: LevelResult, spike: Spike) -> str:
    """A spike, stall or error window as a warning (the JSON's; the terminal shows it in
    ``spikes_table``)."""
    return (f"{lv.label} at {spike.start_s:g} s: {spike.cause} ({_spike_figures(spike)}typical p99 "
            f"{spike.typical_p99_ms:.2f} ms)")


def _spike_figures(spike: Spike) -> str:
    """A spike's own latencies, for a warning line; a stall in which no request was sent,
    or an error window, has none."""
    if spike.p99_ms is None:
        return ""
    return f"p99 {spike.p99_ms:.2f} ms, max {spike.max_ms:.2f} ms, "


def _failed_requests(lv: LevelResult, budget: float | None) -> str:
    """Why a level's failed requests make the run fail: how many, the commonest kind, the budget."""
    kind, count = next(iter(lv.errors.items()))
    beyond = "" if budget is None else f", more than the {budget:.4%} allowed"
    return f"{lv.label}: {lv.error_count} of {lv.sent} requests failed (most: {count}x {kind}){beyond}"


def _open_loop_warnings(lv: LevelResult) -> list[str]:
    """Open loop: the rate that was not offered on time, and whose doing that was.

    Latency runs from the scheduled send, so a late send is in it either way. When every
    in-flight slot of a load-generating process was waiting on the server, the server was
    saturated: the wait is its latency. Otherwise the client was short of CPU: more workers
    — said alongside the saturation too when the processes were near a core each.
    """
    behind = (lv.achieved_rate is not None and bool(lv.offered_rate)
              and lv.achieved_rate < 0.95 * lv.offered_rate)
    late = bool(lv.send_lag_ms) and lv.send_lag_ms.get("p99", 0.0) > LATE_SEND_MS
    if lv.saturated:
        sent = f"; sent {lv.achieved_rate:,.1f} requests/s of the {lv.offered_rate:g} offered" if behind else ""
        # The slots are each process's own: an arrival found its process's slots all out.
        per = lv.max_in_flight // max(1, lv.workers) if lv.max_in_flight else "allowed"
        whose = "the load generator" if lv.workers == 1 else \
            f"their load-generating process (one of {lv.workers})"
        warnings = [f"{lv.label}: the server was saturated: {lv.saturated} requests fell due while all "
                    f"{per} requests {whose} may have in flight waited on it, and left late or never"
                    f"{sent}; the wait is in their latencies (--max-in-flight allows more per process)"]
        busy = _client_cores_per_worker(lv)
        if busy is not None and busy >= CLIENT_CPU_BOUND:
            warnings.append(f"{lv.label}: the load generator was short of CPU too ({busy:.0%} of a core "
                            "per process; add --workers)")
        return warnings
    warnings = []
    if behind:
        warnings.append(f"{lv.label}: sent {lv.achieved_rate:,.1f} requests/s of the {lv.offered_rate:g} "
                        "offered (the load generator fell behind; add --workers)")
    if late:
        warnings.append(f"{lv.label}: requests left late (p99 {lv.send_lag_ms['p99']:.2f} ms), the load "
                        "generator behind; the latencies include it (add --workers)")
    return warnings


def _sequence_warnings(lv: LevelResult) -> list[str]:
    """A stateful model's: sequences beyond what its sequence batcher runs at once, which
    wait in its backlog (their requests' latency holds the wait); sequences left open."""
    seq = lv.sequences
    if not seq:
        return []
    warnings = []
    if seq["live"] > seq["batcher_slots"]:
        warnings.append(f"{lv.label}: {seq['live']} sequences live at once, more than the "
                        f"{seq['batcher_slots']} the model's sequence batcher runs at once (its "
                        "max_batch_size, or the oldest strategy's max_candidate_sequences, x its "
                        "instances): the others wait in its backlog until a sequence ends, and their "
                        "requests' latencies include that wait")
    if seq["left_open"]:
        warnings.append(f"{lv.label}: {seq['left_open']} sequences may be left open on the server (their "
                        "END was not answered): it holds their sequence slots until "
                        "max_sequence_idle_microseconds passes")
    return warnings


def _client_cores_per_worker(lv: LevelResult) -> float | None:
    """Open loop: the share of a core each load-generating process kept busy (its CPU per
    request sent times the rate it sent)."""
    if lv.client_cpu_us is None or not lv.achieved_rate or not lv.workers:
        return None
    return lv.client_cpu_us * 1e-6 * lv.achieved_rate / lv.workers


# -- the terminal ------------------------------------------------------------------------

def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _short(lv: LevelResult) -> str:
    return f"c={lv.level:g}" if lv.mode == "closed" else f"{lv.level:g}/s"


def levels_table(result: LoadTestResult) -> Table:
    """One row per concurrency or rate: counts, QPS (requests/s), with a batch of several
    inferences/s too (what perf_analyzer reports), and the latency percentiles (ms)."""
    table = new_table(escape(f"{result.spec.model} over {result.spec.protocol.upper()} at {result.server} "
                             f"({result.request})"))
    batched = result.spec.batch_size > 1
    columns = ["level", "QPS", *(["infer/s"] if batched else []), *[f"p{p:g}" for p in PERCENTILES],
               "max", "errors"]
    for name in columns:
        table.add_column(name, justify="left" if name == "level" else "right", no_wrap=True)
    for lv in result.levels:
        lat = lv.latency_ms
        table.add_row(_short(lv), f"{lv.qps:,.1f}", *([f"{lv.infer_per_s:,.1f}"] if batched else []),
                      *[_ms(lat.get(f"p{p:g}")) for p in PERCENTILES],
                      _ms(lat.get("max")), f"[red]{lv.error_count}[/red]" if lv.error_count else "0")
    # A footnote a line: each fits a terminal line, as one sentence joined by ';' did not.
    notes = ["latency in ms; c= concurrency (closed loop)" if result.spec.mode == "closed" else
             "latency in ms from each request's scheduled send time; /s offered rate (open loop)"]
    if batched:
        notes.append(f"QPS: requests/s, each a batch of {result.spec.batch_size}; "
                     "infer/s: inferences/s (perf_analyzer's figure)")
    if result.interrupted is not None:
        notes.append(_cut_short(result))
    seq = next((lv.sequences for lv in result.levels if lv.sequences), None)
    if seq:
        notes.append(f"stateful: each {'user' if result.spec.mode == 'closed' else 'live sequence'}"
                     f" sends whole sequences (START ... END) of {_sequence_length(seq)} requests")
    table.caption = "\n".join(notes)
    return table


def _cut_short(result: LoadTestResult) -> str:
    cut = result.interrupted
    first = _when_cut(result) + (": not shown" if cut.level else "")
    return first + (f", {', '.join(cut.not_run)} not run" if cut.not_run else "")


def _sequences_line(lv: LevelResult) -> str:
    seq = lv.sequences
    cut = f", {seq['ended_at_the_end']} of them ended early by one more request at the end" \
        if seq["ended_at_the_end"] else ""
    return (f"{lv.label}: {seq['completed']} sequences completed (warm-up included{cut}), "
            f"{seq['live']} live at once")


def _sequence_length(seq: dict) -> str:
    spread = int(seq["length"] * seq["variation_pct"] / 100)
    return f"{seq['length']} +/- {spread}" if spread else str(seq["length"])


def server_split_table(result: LoadTestResult) -> Table | None:
    """Where the mean request's time went, from Triton's statistics before and after the run."""
    rows = [(_short(lv), lv.server_split_ms, lv.server_batch) for lv in result.levels if lv.server_split_ms]
    if not rows:
        return None
    table = new_table("where a request's time went (ms, means; Triton's statistics)")
    for name in ("level", "queue", "input", "infer", "output", "server", "client+net", "batch"):
        table.add_column(name, justify="left" if name == "level" else "right", no_wrap=name != "level")
    for label, split, batch in rows:
        table.add_row(label, _ms(split.get("queue")), _ms(split.get("compute_input")),
                      _ms(split.get("compute_infer")), _ms(split.get("compute_output")),
                      _ms(split.get("request")), _ms(split.get("client_and_network")),
                      "-" if batch is None else f"{batch:.1f}")
    return table


def spikes_table(result: LoadTestResult) -> Table | None:
    """Every flagged window, and the server event that explains it if one does."""
    rows = [(_short(lv), s) for lv in result.levels for s in lv.spikes]
    if not rows:
        return None
    table = new_table("spikes, stalls and error windows")
    for name in ("level", "at s", "p99 ms", "max ms", "typical p99 ms", "cause"):
        table.add_column(name, justify="left" if name in ("level", "cause") else "right",
                         no_wrap=name not in ("level", "cause"))
    for label, s in rows:
        cause = f"[bold yellow]{escape(s.cause)}[/bold yellow]" if s.cold_start else escape(s.cause)
        table.add_row(label, f"{s.start_s:g}", _ms(s.p99_ms), _ms(s.max_ms), _ms(s.typical_p99_ms), cause)
    return table


def print_report(console: Console, result: LoadTestResult, verdict: Verdict,
                 errors: Console | None = None) -> None:
    """Everything a person reads after a run: levels, server split, spikes, the verdict.
    A failed run's verdict is an error: on ``errors`` (stderr) as ``error: run failed: …``
    where it is given."""
    console.print(fitted(levels_table(result)))
    for table in (server_split_table(result), spikes_table(result)):
        if table is not None:
            console.print(fitted(table))
    for lv in result.levels:
        if lv.sequences:
            console.print(_sequences_line(lv))
    # Error kinds, causes and reasons carry the server's own words: printed, never parsed as markup.
    for lv in result.levels:
        for kind, count in lv.errors.items():
            console.print(f"[red]{escape(f'{lv.label}: {count} x {kind}')}[/red]")
    in_table = {spike_warning(lv, s) for lv in result.levels for s in lv.spikes}
    for warning in verdict.warnings:
        if warning not in in_table:     # a spike's line is its row in the spikes table
            console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    for check in verdict.checks:
        mark = "[green]PASS[/green]" if check.passed else "[red]FAIL[/red]"
        console.print(f"{mark} {escape(check.describe())}")
    if verdict.outcome == PASS:
        console.print("[bold green]SLA met[/bold green]" if verdict.sla.given
                      else "no SLA given (--sla-p99-ms, --sla-min-qps, --sla-max-error-rate): nothing to fail")
    elif verdict.outcome == MISS:
        console.print(f"[bold red]SLA missed[/bold red]: {escape('; '.join(verdict.reasons))}")
    elif verdict.outcome == INTERRUPTED:
        console.print(f"[bold red]run cut short[/bold red]: {escape('; '.join(verdict.reasons))}")
    elif errors is not None:
        errors.print(f"error: run failed: {escape('; '.join(verdict.reasons))}", highlight=False,
                     soft_wrap=True)
    else:
        console.print(f"[bold red]run failed[/bold red]: {escape('; '.join(verdict.reasons))}")


# -- files -------------------------------------------------------------------------------

def _level_dict(lv: LevelResult) -> dict[str, Any]:
    data = {name: getattr(lv, name) for name in (
        "mode", "level", "workers", "duration_s", "sent", "ok", "errors", "qps", "infer_per_s",
        "latency_ms", "offered_rate", "achieved_rate", "send_lag_ms", "max_in_flight", "saturated",
        "server_split_ms",
        "client_cpu_us", "server_batch", "ended_early", "events", "outages", "sequences")}
    data.update(label=lv.label, error_rate=lv.error_rate,
                timeline=[asdict(w) for w in lv.timeline],
                spikes=[asdict(s) for s in lv.spikes],
                # The merged histogram, HdrHistogram's compressed base64 form: other runs'
                # histograms can be added to it (hdrh.histogram.HdrHistogram.decode).
                hdr_histogram=lv.histogram.encode().decode("ascii")
                if lv.histogram is not None and lv.histogram.get_total_count() else None)
    return data


def result_dict(result: LoadTestResult, verdict: Verdict) -> dict[str, Any]:
    """Everything the run measured, and its verdict, as plain JSON-able data."""
    spec = asdict(result.spec)
    del spec["flags"]           # the running command's names for its hints, not the run's
    spec["input_data"] = str(spec["input_data"]) if spec["input_data"] else None
    spec["shapes"] = {name: list(dims) for name, dims in result.spec.shapes}
    return {"model": result.spec.model, "server": result.server, "request": result.request,
            "started_at": result.started_at, "tritonkit_version": __version__, "host": result.host,
            "server_version": result.server_version, "model_version": result.model_version,
            "spec": spec, "verdict": verdict.as_dict(),
            "cold_first_request_ms": result.cold_first_request_ms, "unwarmed": result.unwarmed,
            # A signal ended the run: "levels" holds the levels that finished only.
            "interrupted": result.interrupted is not None,
            "interruption": None if result.interrupted is None else {
                "signal": result.interrupted.signal_name, "level_cut_short": result.interrupted.level,
                "not_run": list(result.interrupted.not_run)},
            "levels": [_level_dict(lv) for lv in result.levels]}


def write_json(path: Path, result: LoadTestResult, verdict: Verdict) -> Path:
    """Strict JSON: a value that is not a finite number (nothing measured) is written as null."""
    data = _finite(result_dict(result, verdict))
    return atomic_write(path, json.dumps(data, indent=2, allow_nan=False) + "\n")


def _finite(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# (came_back, waiting_ms, stall, failed and partly_failed last: files read by position keep
# their columns)
CSV_COLUMNS = ("level", "window", "start_s", "qps", "ok", "errors", "p50_ms", "p99_ms", "max_ms",
               "spike", "cause", "came_back", "waiting_ms", "stall", "failed", "partly_failed")


def timeline_csv(result: LoadTestResult) -> str:
    """The per-window timeline of every level, one row a window."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for lv in result.levels:
        for w in lv.timeline:
            writer.writerow([lv.label, w.index, f"{w.start_s:g}", f"{w.qps:.3f}", w.ok, w.errors,
                             "" if w.p50_ms is None else f"{w.p50_ms:.3f}",
                             "" if w.p99_ms is None else f"{w.p99_ms:.3f}",
                             "" if w.max_ms is None else f"{w.max_ms:.3f}", int(w.spike), w.cause,
                             w.came_back, "" if w.waiting_ms is None else f"{w.waiting_ms:.3f}",
                             int(w.stall), int(w.failed), int(w.partly_failed)])
    return out.getvalue()


def write_csv(path: Path, result: LoadTestResult) -> Path:
    return atomic_write(path, timeline_csv(result))


def write_plot(path: Path, result: LoadTestResult) -> Path:
    """A PNG: the latency timeline of each level (p50, p99 and each window's max; spikes
    marked, stalls, error windows and model outages shaded, a window with no latency a gap
    in its line) above the latency histogram of each level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 8), constrained_layout=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    partly = f"errors ({ERROR_WINDOW_SHARE:.0%} or more of requests failed)"
    legend = {"spike (window max)", "model not READY", "stall (none came back)",   # each named once
              "errors (every request failed)", partly}
    for i, lv in enumerate(result.levels):
        color = colors[i % len(colors)]
        half = result.spec.window_s / 2          # each point in the middle of its window
        # Every window, None as NaN: a window without latencies breaks the line rather than
        # being bridged (a stall drawn as a straight line looked like a quiet spell); a dot
        # on each window keeps one alone between two gaps visible.
        xs = [w.start_s + half for w in lv.timeline]
        if any(w.p99_ms is not None for w in lv.timeline):
            # Each window's slowest request, thin and light: a lone slow one (a cold request
            # below the spike threshold) moves no percentile and would be one histogram count.
            top.plot(xs, [_nan(w.max_ms) for w in lv.timeline], ".-", markersize=2, linewidth=0.8, alpha=0.35,
                     color=color, label=f"{lv.label} max")
            top.plot(xs, [_nan(w.p99_ms) for w in lv.timeline], ".-", markersize=3, color=color,
                     label=f"{lv.label} p99")
            top.plot(xs, [_nan(w.p50_ms) for w in lv.timeline], ".:", markersize=3, color=color,
                     label=f"{lv.label} p50")
        spiked = [w for w in lv.timeline if w.spike and w.max_ms is not None]
        if spiked:
            top.scatter([w.start_s + half for w in spiked], [w.max_ms for w in spiked], marker="v", s=70,
                        color="red", zorder=5, label=_once(legend, "spike (window max)"))
        for left, right in _spans(lv, result.spec.window_s, lambda w: w.stall):
            top.axvspan(left, right, color="red", alpha=0.15, label=_once(legend, "stall (none came back)"))
        for left, right in _spans(lv, result.spec.window_s, lambda w: w.failed and not w.stall):
            top.axvspan(left, right, color="purple", alpha=0.15,
                        label=_once(legend, "errors (every request failed)"))
        for left, right in _spans(lv, result.spec.window_s, lambda w: w.partly_failed and not w.stall):
            top.axvspan(left, right, color="purple", alpha=0.06, label=_once(legend, partly))
        for left, right in _outages(lv):
            top.axvspan(left, right, color="orange", alpha=0.2, label=_once(legend, "model not READY"))
        _histogram(bottom, lv, color)
    top.set_yscale("log")
    _plain_log_labels(top.yaxis)
    top.set_xlabel("seconds into the measurement")
    top.set_ylabel("latency per window (ms)")
    top.set_title(f"{result.spec.model}: latency timeline ({result.spec.protocol}, "
                  f"{result.spec.window_s:g} s windows)"
                  + ("" if result.interrupted is None else f"\n{_cut_short(result)}"))
    _legend(top)
    top.grid(True, which="both", alpha=0.3)
    bottom.set_xscale("log")
    _plain_log_labels(bottom.xaxis)
    bottom.set_xlabel("latency (ms)")
    bottom.set_ylabel("requests")
    bottom.set_title("latency histogram")
    _legend(bottom)
    bottom.grid(True, alpha=0.3)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return atomic_write(path, buffer.getvalue())


def _plain_log_labels(axis) -> None:
    """Label a log axis in plain numbers (0.5, 2, 30: not 3x10^0), and only as many of its
    ticks as fit: matplotlib's own choice for a log axis (every minor tick within a small
    span, some of them over a decade or so, only the powers of ten beyond). Labelling
    every minor tick ran them into each other: '0.70.80.9'."""
    import matplotlib.ticker

    class Plain(matplotlib.ticker.LogFormatter):
        def __call__(self, x, pos=None):
            return f"{x:g}" if super().__call__(x, pos) else ""

    axis.set_major_formatter(Plain(labelOnlyBase=False, minor_thresholds=(2, 0.5)))
    axis.set_minor_formatter(Plain(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def _legend(ax) -> None:
    """A legend for what was drawn, beside the panel: inside, it covered the lines it names
    (a run's max is near the top right). A level where nothing succeeded draws nothing."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def _once(unused: set[str], label: str) -> str | None:
    if label in unused:
        unused.discard(label)
        return label
    return None


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def _spans(lv: LevelResult, window_s: float, which: Callable[[Window], bool]) -> list[tuple[float, float]]:
    """Spans of consecutive windows ``which`` picks (stalled, failed), clipped to the measurement."""
    spans: list[tuple[float, float]] = []
    for w in lv.timeline:
        if not which(w):
            continue
        right = min(w.start_s + window_s, lv.duration_s)
        if spans and spans[-1][1] >= w.start_s - 1e-9:      # the window just before: one span
            spans[-1] = (spans[-1][0], right)
        else:
            spans.append((w.start_s, right))
    return spans


def _outages(lv: LevelResult) -> list[tuple[float, float]]:
    """Spans in which the tested model was not READY, clipped to the measurement."""
    end = lv.duration_s
    spans = [(max(0.0, o["from_s"]), end if o["to_s"] is None else min(end, o["to_s"])) for o in lv.outages]
    return [(a, b) for a, b in spans if b >= a and a <= end]


def _histogram(ax, lv: LevelResult, color: str) -> None:
    """The level's merged histogram, re-binned into 60 log-spaced bins for the eye."""
    import numpy as np

    hist = lv.histogram
    if hist is None or not hist.get_total_count():
        return
    values, counts = [], []
    for item in hist.get_recorded_iterator():
        values.append(item.value_iterated_to / 1000)
        counts.append(item.count_added_in_this_iter_step)
    low, high = min(values), max(values)
    edges = np.geomspace(low * 0.95, high * 1.05, 61) if high > low else np.array([low * 0.9, low * 1.1])
    binned, edges = np.histogram(values, bins=edges, weights=counts)
    ax.stairs(binned, edges, color=color, label=lv.label)
    p99 = lv.latency_ms.get("p99")
    if p99 is not None:
        ax.axvline(p99, color=color, linestyle="--", alpha=0.7, label=f"{lv.label} p99")
