"""Tables on stdout (warmup, loadtest, monitor, tune, export) say a control character in a
model name or any other cell as its escape, as errors do: a name from a server or a user
never drives the terminal (the third adversarial pass found rich printing them raw)."""

from __future__ import annotations

import io

from rich.console import Console

from tritonkit.tables import fitted, new_table


def test_a_control_character_in_a_table_cell_or_title_is_printed_as_its_escape():
    table = new_table("warm-up of m\x1b]0;owned\x07")
    table.add_column("model")
    table.add_column("first ms", justify="right")
    table.add_row("evil\x1b[2J\rname", "1.0")
    out = io.StringIO()
    Console(file=out, width=120, force_terminal=False).print(fitted(table))
    text = out.getvalue()
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert "evil\\x1b[2J\\rname" in text
    assert "\\x1b]0;owned\\x07" in text
