"""How long a wait may last: one deadline shared by nested waits (``Deadline``), or one
that bounds stalls rather than the whole wait (``StallDeadline``).

Waits bound each blocking call by ``left()``, so neither kind lets a call outlive it.
Code that sees work move on (a model READY, a request answered, a line in the server's
log) says so with ``moved()``: a fixed deadline ignores it, a stall deadline starts its
count again.
"""

from __future__ import annotations

import time


class Deadline:
    """One deadline shared by nested waits, so timeouts never add up."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def expired(self) -> bool:
        return self.left() <= 0.0

    def moved(self) -> None:
        """Work moved on: a fixed deadline stays where it is."""

    def ran_out(self) -> str:
        """How an error says that this deadline passed."""
        return f"the {self.seconds:g} s timeout ran out"


class StallDeadline(Deadline):
    """Expires once nothing has moved for ``seconds``: a repository of big models that keeps
    loading and warming gets the time it needs, and a hang fails ``seconds`` after it began."""

    def moved(self) -> None:
        self.end = time.monotonic() + self.seconds

    def ran_out(self) -> str:
        return f"nothing moved for {self.seconds:g} s"
