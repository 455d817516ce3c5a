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


def write_warmup_plot(path: Path, results: list[ModelWarmup]) -> Path:
    """One panel per warmed model (log latency per sample, a line per shape, its first
    request marked, the steady p50 dashed); a model not warmed gets its panel's note."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    panels = results or [None]
    columns = min(COLUMNS, len(panels))
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(6 * columns, 3.6 * rows),
                             constrained_layout=True, squeeze=False)
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")   # 0.5, 2, 30: not 3x10^0
    for ax, result in zip(axes.flat, panels):
        if result is None or not result.series_ms:
            why = "no model warmed" if result is None else (result.note or "no samples")
            ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True, transform=ax.transAxes)
            ax.set_axis_off()
            if result is not None:
                ax.set_title(result.model)
            continue
        for label, series in result.series_ms.items():
            xs = range(1, len(series) + 1)
            [line] = ax.plot(xs, series, ".-", markersize=3, linewidth=1, label=label)
            ax.scatter([1], series[:1], marker="o", s=40, color=line.get_color(), zorder=5)
        if result.steady_p50_ms:
            ax.axhline(result.steady_p50_ms, color="grey", linestyle="--", linewidth=1,
                       label=f"steady p50 {result.steady_p50_ms:.2f} ms")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain)
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_xlabel("warm-up sample (the first: the cold one)")
        ax.set_ylabel("latency (ms)")
        ax.set_title(_title(result))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="xx-small" if len(result.series_ms) > 6 else "x-small",
                  loc="upper right", ncols=2 if len(result.series_ms) > 6 else 1)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_axis_off()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return atomic_write(path, buffer.getvalue())


def _title(result: ModelWarmup) -> str:
    title = result.model
    if result.first_ms is not None:
        title += f": 1st {result.first_ms:.2f} ms"
        if result.ratio is not None:
            title += f", {result.ratio:.1f}x the steady p50"
        elif not result.cold:
            title += " (already warm)"
    if not result.steady:
        title += " — not steady"
    return title
