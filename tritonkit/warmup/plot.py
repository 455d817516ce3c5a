"""The warm-up as a PNG: for each model, every shape's latency from its cold first request
until steady, so a person sees how long a cold start lasts and how far it stands above
the norm (``tritonkit warmup --plot``)."""

from __future__ import annotations

import io
import math
from pathlib import Path

from tritonkit.fileio import atomic_write
from tritonkit.warmup._results import ModelWarmup

COLUMNS = 2
# A series' look: a colour of the 10-colour cycle, then a line style, then a marker, so no
# two of up to 10 x 4 x 4 shapes look alike (a BERT-like model has 15). Dashes are kept
# for the steady p50 line.
_STYLES = ("-", ":", "-.", (0, (3, 1, 1, 1, 1, 1)))
_MARKERS = (".", "x", "+", "1")


def write_warmup_plot(path: Path, results: list[ModelWarmup]) -> Path:
    """``warmup_figure`` as a PNG at ``path`` (written whole or not at all)."""
    import matplotlib.pyplot as plt

    fig = warmup_figure(results)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return atomic_write(path, buffer.getvalue())


def warmup_figure(results: list[ModelWarmup]):
    """One panel per warmed model (log latency per sample, a line per shape, its first
    request marked, the worst shape's steady p50 dashed, the legend beside the panel);
    a model not warmed gets its panel's note. The caller closes the figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    panels = results or [None]
    columns = min(COLUMNS, len(panels))
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(7.5 * columns, 3.6 * rows),
                             constrained_layout=True, squeeze=False)
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")   # 0.5, 2, 30: not 3x10^0
    colours = plt.get_cmap("tab10").colors
    for ax, result in zip(axes.flat, panels):
        if result is None or not result.series_ms:
            why = "no model warmed" if result is None else (result.note or "no samples")
            ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True, transform=ax.transAxes)
            ax.set_axis_off()
            if result is not None:
                ax.set_title(result.model)
            continue
        worst, colour_of = result.worst, {}
        for i, (label, series) in enumerate(result.series_ms.items()):
            colour = colour_of[label] = colours[i % len(colours)]
            style = _STYLES[i // len(colours) % len(_STYLES)]
            marker = _MARKERS[i // (len(colours) * len(_STYLES)) % len(_MARKERS)]
            xs = range(1, len(series) + 1)
            ax.plot(xs, series, color=colour, linestyle=style, marker=marker, markersize=3,
                    linewidth=1, label=label + (" (worst)" if worst and label == worst.shape
                                                else ""))
            ax.scatter([1], series[:1], marker="o", s=40, color=colour, zorder=5)
        _steady_line(ax, result, colour_of)
        ax.set_yscale("log")
        # Labels at 1, 2, 5 of each decade only: minor labels overlap ("0.80.9").
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_xlabel("warm-up request (the first: the cold start)")
        ax.set_ylabel("latency (ms)")
        ax.set_title(_title(result), fontsize="medium")
        ax.grid(True, which="both", alpha=0.3)
        # Beside the panel, never over the data.
        ax.legend(fontsize="xx-small" if len(result.series_ms) > 6 else "x-small",
                  loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0,
                  ncols=2 if len(result.series_ms) > 12 else 1)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_axis_off()
    return fig


def _steady_line(ax, result: ModelWarmup, colour_of: dict) -> None:
    """The steady p50 the title's ratio divides by, saying whose it is: the worst shape's
    (in its colour), else the first shape's (the only one an older record has)."""
    worst = result.worst
    if worst is not None:
        ax.axhline(worst.p50_ms, color=colour_of[worst.shape], linestyle="--", linewidth=1,
                   label=f"steady p50 of {worst.shape}: {worst.p50_ms:.2f} ms")
    elif result.steady_p50_ms and result.series_ms:
        first = next(iter(result.series_ms))
        ax.axhline(result.steady_p50_ms, color="grey", linestyle="--", linewidth=1,
                   label=f"steady p50 of {first}: {result.steady_p50_ms:.2f} ms")


def _title(result: ModelWarmup) -> str:
    """The model, and its worst shape's cold start (that of the first shape where the
    worst is not known), naming the shape when there are several."""
    title = result.model
    worst = result.worst
    several = len(result.series_ms) > 1
    if worst is not None:
        title += (f": worst cold start {worst.first_ms:.2f} ms, {worst.ratio:.1f}x its steady p50"
                  + (f"\n({worst.shape})" if several else ""))
    elif result.first_ms is not None:
        if result.ratio is not None:
            title += f": cold start {result.first_ms:.2f} ms, {result.ratio:.1f}x the steady p50"
        else:
            title += f": first request {result.first_ms:.2f} ms" + (
                "" if result.cold else " (already warm)")
        if several and result.series_ms:
            title += f"\n(first shape, {next(iter(result.series_ms))})"
    if not result.steady:
        title += " — not steady"
    return title
