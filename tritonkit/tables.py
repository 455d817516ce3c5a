"""Terminal tables with one look, that fit the width they are printed at and never lose
their row names.

    table = new_table("warm-up (first: the cold start)", caption="start: loaded at start")
    table.add_column("model"); table.add_column("first ms", justify="right", no_wrap=True)
    console.print(fitted(table))

Every table has a rule under its headers and nothing else: no boxes, no blank lines, two
spaces between columns (``gap=1`` for the densest, a monitor's).

Where ``table`` fits, it is printed as it is. Where it does not (an 80-column terminal),
its headers stack a word a line ("first ms" over "first" / "ms") before any figure is cut,
and its first column, the one that names the rows, folds long names but keeps them: rich,
short of room, shrinks a wrappable column to nothing and drops it (a warm-up table once
lost its model column at 80 columns), and cuts figures with '…'.
"""

from __future__ import annotations

import copy
import dataclasses
import re

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Column, Table

from tritonkit.errors import printable

__all__ = ["NAME_FLOOR", "fitted", "new_table"]

# The narrowest a row-naming column folds to: a model or tensor name cut to fewer
# characters a line is hard to read back.
NAME_FLOOR = 12


class _Table(Table):
    """A table whose every text cell says a control character as its escape: a model name a
    server gives, or a user's, never drives the terminal or splits a row."""

    def add_row(self, *renderables, **kwargs) -> None:
        super().add_row(*(printable(r) if isinstance(r, str) else r for r in renderables),
                        **kwargs)


def new_table(title: str | None = None, *, caption: str | None = None, gap: int = 2) -> Table:
    """An empty table in our look, its title and caption (one line each) left-aligned."""
    title = printable(title) if title is not None else None
    caption = printable(caption) if caption is not None else None
    return _Table(title=title, caption=caption, title_justify="left", caption_justify="left",
                 box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                 padding=(0, gap - 1, 0, 0))


def fitted(table: Table) -> "Fitted":
    """``table`` laid out for the width it is printed at (see the module's docstring)."""
    return Fitted(table)


class Fitted:
    """A table that fits its width: as it is, else stacked headers and a folded name column."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.table)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        table = self.table
        if _needed_width(console, options, table) > width:
            table = _stacked(table)
            needed = _needed_width(console, options, table)
            if needed > width and table.columns:
                table = _name_folded(console, options, table, needed - width)
        yield table


def _needed_width(console: Console, options: ConsoleOptions, table: Table) -> int:
    """The width ``table`` needs with its figures whole: a column that may wrap (a cause,
    a shape) at its longest word, every other one on one line."""
    wide = options.update_width(10_000)
    natural = Measurement.get(console, wide, table).maximum
    for column in table.columns:
        if not column.no_wrap:
            sizes = [Measurement.get(console, wide, cell) for cell in [column.header, *column.cells]]
            natural -= max(size.maximum for size in sizes) - max(size.minimum for size in sizes)
    return natural


def _stacked(table: Table) -> Table:
    """A copy whose headers put each word on a line of its own (and split "first/p50"
    after its slash): a column is then as wide as its figures, not its title."""
    stacked = copy.copy(table)
    stacked.columns = [dataclasses.replace(column, header=_stack(column.header))
                       if isinstance(column.header, str) else column
                       for column in table.columns]
    return stacked


def _stack(header: str) -> str:
    words = header.split(" ")
    # "first/p50" -> "first/" "p50"; "req/s" stays whole (its parts too short to be words)
    words = [part for word in words for part in re.split(r"(?<=\w{3}/)(?=\w{3})", word)]
    return "\n".join(words)


def _name_folded(console: Console, options: ConsoleOptions, table: Table,
                 excess: int) -> Table:
    """A copy whose first column is ``excess`` narrower (not below ``NAME_FLOOR``, nor
    below what it needs), its names folded onto more lines rather than cut or dropped."""
    name: Column = table.columns[0]
    longest = max((Measurement.get(console, options, cell).maximum
                   for cell in [name.header, *name.cells]), default=0)
    width = max(min(longest, NAME_FLOOR), longest - excess)
    folded = copy.copy(table)
    folded.columns = [dataclasses.replace(name, width=width, min_width=None, no_wrap=False,
                                          overflow="fold"), *table.columns[1:]]
    return folded
