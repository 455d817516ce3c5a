"""A tune as a person reads it (a table of every config tried, the comparisons, the verdict)
and as files: JSON (everything), CSV (a row per config), PNG (throughput against p99)."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tritonkit.fileio import atomic_write
from tritonkit.tables import fitted, new_table
from tritonkit.tune._run import TuneResult, Trial
from tritonkit.tune._search import CLOSED, OPEN
from tritonkit.tune._space import LABEL_LEGEND

CSV_COLUMNS = ("config", "role", "meets_sla", "throughput_at_sla", "concurrency_at_sla",
               "rate_at_sla", "p50_ms", "p99_ms", "batch", "queue_ms", "compute_ms", "load_s",
               "probes", "skipped")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _row(trial: Trial) -> dict[str, Any]:
    found = trial.found
    judged = found.judged if found else None
    return {"config": trial.point.label, "role": trial.role, "throughput_at_sla":
            found.throughput if found and judged else None,
            "concurrency_at_sla": found.concurrency if found else None,
            "rate_at_sla": judged.level if judged else None,
            "p50_ms": judged.p50_ms if judged else None, "p99_ms": judged.p99_ms if judged else None,
            "batch": judged.batch if judged else None, "queue_ms": judged.queue_ms if judged else None,
            "compute_ms": judged.compute_ms if judged else None, "load_s": trial.load_s,
            "probes": len(found.probes) if found else 0, "skipped": trial.skipped}


def trials_table(result: TuneResult) -> Table:
    """A row per config tried: throughput at the SLA (open loop), its p50/p99, the batch
    Triton formed, queue against compute time. Why a config has no figure is a line under
    the table (``unmet_lines``)."""
    table = new_table(escape(f"{result.model} at {result.server}: p99 <= {result.sla.p99_ms:g} ms"
                             + (f", >= {result.sla.min_qps:g} QPS" if result.sla.min_qps else "")))
    for name in ("config", "QPS at SLA", "c", "p50 ms", "p99 ms", "batch", "queue ms",
                 "comp ms", "load s", "probes"):
        table.add_column(name, justify="left" if name == "config" else "right",
                         no_wrap=name != "config")
    for trial in result.trials:
        row = _row(trial)
        label = escape(_label(trial, result))
        table.add_row(f"[bold green]{label}[/bold green]" if trial is result.winner else label,
                      "-" if row["throughput_at_sla"] is None else f"{row['throughput_at_sla']:,.1f}",
                      "-" if row["concurrency_at_sla"] is None else str(row["concurrency_at_sla"]),
                      _ms(row["p50_ms"]), _ms(row["p99_ms"]),
                      "-" if row["batch"] is None else f"{row['batch']:.1f}",
                      _ms(row["queue_ms"]), _ms(row["compute_ms"]),
                      "-" if row["load_s"] is None else f"{row['load_s']:.1f}",
                      str(row["probes"]))
    table.caption = (f"config: {LABEL_LEGEND}\nQPS at SLA: the highest open-loop rate whose p99 "
                     "met the SLA; c: the highest concurrency that did")
    return table


def _label(trial: Trial, result: TuneResult) -> str:
    """The config's label with its role: ``i1 b32 d0 t0 (served, winner)``, ``bare default``."""
    roles = [trial.role] if trial.role and not trial.point.bare else []
    roles += ["winner"] if trial is result.winner else []
    return trial.point.label + (f" ({', '.join(roles)})" if roles else "")


def unmet_lines(result: TuneResult) -> list[str]:
    """A line for each config measured that has no figure at the SLA, saying why."""
    return [f"{_label(trial, result)}: {_unmet(trial.found)}" for trial in result.trials
            if not trial.skipped and trial.found is not None and trial.found.judged is None]


def _unmet(found) -> str:
    """Why a config has no figure at the SLA: no load met its p99, or only a closed loop's
    (open loop adds the queueing a closed loop hides, or the load generator fell behind)."""
    best = found.best_p99_ms
    if found.concurrency is None:
        return "SLA not met at any load" + (f" (best p99 {best:.2f} ms)" if best else "")
    if found.below is not None:
        return (f"met at c={found.concurrency}; not judged under {found.below:,.1f} QPS, what it "
                "had to reach to be kept or the best: it could not win")
    opened = [p for p in found.probes if p.mode == OPEN]
    best_open = min((p.p99_ms for p in opened if p.p99_ms is not None), default=None)
    behind = " (the load generator fell behind)" if any(p.behind for p in opened) else ""
    return (f"met at c={found.concurrency}, not in open loop"
            + (f" (best p99 {best_open:.2f} ms)" if best_open is not None and not behind else behind))


def print_report(console: Console, result: TuneResult) -> None:
    """The table, the comparisons, notes, and the verdict."""
    console.print(fitted(trials_table(result)))
    say = lambda text: console.print(text, highlight=False, soft_wrap=True)  # noqa: E731
    for line in unmet_lines(result):
        say(escape(line))
    for trial in result.trials:
        if trial.skipped:
            say(f"skipped {escape(trial.point.label)}: {escape(trial.skipped)}")
    for note in result.notes:
        say(f"note: {escape(note)}")
    if result.not_tried:
        say(f"{result.not_tried} other points of the space not tried (one knob at a time from "
            "the served config, within the budget)")
    for comparison in result.comparisons:
        say(f"throughput, {escape(result.best.point.label)} {escape(comparison.describe())}")
    say(f"tune took {result.elapsed_s:.0f} s of its {result.budget_s:g} s budget")
    if result.winner is not None:
        say(f"[bold green]SLA met[/bold green]: {escape(result.winner.label)}, "
            f"{result.winner.found.throughput:,.1f} QPS at p99 {result.winner.found.judged.p99_ms:.2f} ms")
    elif result.closest is not None:
        best = result.closest.found.best_p99_ms
        say(f"[bold red]no config met the SLA[/bold red]; closest: {escape(result.closest.label)}"
            + (f" (best p99 {best:.2f} ms)" if best is not None else ""))
    else:
        say("[bold red]no config could be measured[/bold red]")


def write_json(path: Path, result: TuneResult) -> Path:
    """Everything the tune measured; a value that is no finite number is null."""
    return atomic_write(path, json.dumps(_finite(result.as_dict()), indent=2, allow_nan=False) + "\n")


def _finite(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_csv(path: Path, result: TuneResult) -> Path:
    """A row per config tried."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for trial in result.trials:
        writer.writerow(_row(trial) | {"meets_sla": trial.meets(result.sla)})
    return atomic_write(path, buffer.getvalue())


def write_plot(path: Path, result: TuneResult) -> Path:
    """A PNG: each config's probes as throughput against p99 (closed loop joined by a line,
    open loop as crosses), the SLA's p99 as a line, each config's point at the SLA ringed
    and the winner's a star."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 7), constrained_layout=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, trial in enumerate(t for t in result.trials if t.found and t.found.probes):
        color = colors[index % len(colors)]
        closed = sorted((p for p in trial.found.probes if p.mode == CLOSED and p.p99_ms),
                        key=lambda p: p.level)
        opened = [p for p in trial.found.probes if p.mode == OPEN and p.p99_ms]
        ax.plot([p.qps for p in closed], [p.p99_ms for p in closed], ".-", color=color,
                label=trial.label)
        ax.scatter([p.qps for p in opened], [p.p99_ms for p in opened], marker="x", color=color)
        judged = trial.found.judged
        if judged is not None:
            winner = trial is result.winner
            ax.scatter([judged.qps], [judged.p99_ms], marker="*" if winner else "o", zorder=5,
                       s=260 if winner else 60, facecolors=color if winner else "none",
                       edgecolors="black" if winner else color,
                       label=f"winner: {trial.label}" if winner else None)
    ax.axhline(result.sla.p99_ms, color="red", linestyle="--",
               label=f"SLA: p99 <= {result.sla.p99_ms:g} ms")
    ax.set_yscale("log")
    ax.set_xlabel("throughput (requests/s)")
    ax.set_ylabel("p99 latency (ms)")
    ax.set_title(f"{result.model}: throughput against p99 per config\n(line: closed loop by "
                 "concurrency; x: open loop; ring: the highest rate meeting the SLA; star: the "
                 "winner)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:        # beside the panel, never over the points
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return atomic_write(path, buffer.getvalue())
