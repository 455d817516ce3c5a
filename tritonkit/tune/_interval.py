"""How sure a gain is: the winner and each baseline re-measured interleaved, and a
confidence interval on the ratio of their paired runs.

Each round runs every side once, back to back, in turns (A B C, then C B A, ...), so a
slow spell of a shared machine lands on both sides of a pair and neither side always runs
first. The interval is Student's t on the logs of the paired ratios: a ratio is a
multiplicative figure (its log is symmetric around no change), pairing cancels what the
two runs of a round share, and at the few pairs a tune can afford (3 to 10) the t-interval
holds its confidence where a bootstrap's percentile interval is known to be too narrow
(it cannot reach past the few ratios it resamples). The rounds stop when every interval
is narrow enough, at ``max_rounds``, or when the time is spent — never on whether an
interval excludes 1, which would make a gain out of noise by waiting for a lucky draw."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence


@dataclass(frozen=True)
class RatioInterval:
    """The geometric mean of paired ratios (A/B) and its confidence interval."""

    ratio: float
    low: float
    high: float
    pairs: int
    confidence: float

    @property
    def significant(self) -> bool:
        """Whether the interval leaves 1.0 out: a difference the runs can show."""
        return self.low > 1.0 or self.high < 1.0

    def describe(self) -> str:
        """``1.23x (95% CI 1.10-1.38, 6 pairs)``, or no significant difference."""
        figures = (f"{self.ratio:.2f}x ({self.confidence:.0%} CI {self.low:.2f}-{self.high:.2f}, "
                   f"{self.pairs} pairs)")
        return figures if self.significant else f"no significant difference: {figures}"

    def as_dict(self) -> dict:
        return {"ratio": self.ratio, "low": self.low, "high": self.high, "pairs": self.pairs,
                "confidence": self.confidence, "significant": self.significant}


def t_quantile(confidence: float, df: int) -> float:
    """The two-sided Student t critical value: P(|T| <= t) = ``confidence`` with ``df``
    degrees of freedom, from the closed form of its distribution for a whole ``df``
    (Abramowitz & Stegun 26.7.3-4), solved by bisection."""
    if df < 1 or not 0 < confidence < 1:
        raise ValueError(f"no t quantile for df {df}, confidence {confidence}")
    low, high = 0.0, 1.0
    while _central(high, df) < confidence:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if _central(middle, df) < confidence:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def _central(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with ``df`` degrees of freedom."""
    theta = math.atan(t / math.sqrt(df))
    cos2, sin = math.cos(theta) ** 2, math.sin(theta)
    term = total = 1.0
    if df % 2:
        for k in range(1, (df - 3) // 2 + 1):
            term *= cos2 * (2 * k) / (2 * k + 1)
            total += term
        series = sin * math.cos(theta) * total if df > 1 else 0.0
        return 2 / math.pi * (theta + series)
    for k in range(1, (df - 2) // 2 + 1):
        term *= cos2 * (2 * k - 1) / (2 * k)
        total += term
    return sin * total


def paired_interval(a: Sequence[float], b: Sequence[float],
                    confidence: float = 0.95) -> RatioInterval | None:
    """The ratio of ``a`` to ``b`` over their pairs (a[i] ran beside b[i]), with its
    t-interval on the log scale; None with fewer than two pairs (no spread to judge)."""
    logs = [math.log(x / y) for x, y in zip(a, b) if x > 0 and y > 0]
    if len(logs) < 2:
        return None
    mean = statistics.fmean(logs)
    half = t_quantile(confidence, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return RatioInterval(ratio=math.exp(mean), low=math.exp(mean - half), high=math.exp(mean + half),
                         pairs=len(logs), confidence=confidence)


def precise(interval: RatioInterval | None, precision: float) -> bool:
    """Whether ``interval`` is within ``precision`` (a fraction) of its ratio either side."""
    return interval is not None and interval.high / interval.low <= (1 + precision) ** 2


def interleave(sides: Sequence[str], run: Callable[[str], float], *, min_rounds: int = 3,
               max_rounds: int = 10, precision: float = 0.05, confidence: float = 0.95,
               time_left: Callable[[], float] = lambda: math.inf,
               clock: Callable[[], float] = time.monotonic) -> dict[str, list[float]]:
    """Each side's figure per round: ``run(side)`` for every side each round, A B C then
    C B A. The first side is compared with each other one (``paired_interval``). Rounds go
    on until every interval is within ``precision``, ``max_rounds``, or (after
    ``min_rounds``) until ``time_left()`` would not hold another round as long as the last."""
    figures: dict[str, list[float]] = {side: [] for side in sides}
    last_round_s = 0.0
    for index in range(max_rounds):
        if index >= min_rounds:
            intervals = [paired_interval(figures[sides[0]], figures[other], confidence)
                         for other in sides[1:]]
            if all(precise(i, precision) for i in intervals) or time_left() < last_round_s:
                break
        began = clock()
        for side in (sides if index % 2 == 0 else list(reversed(sides))):
            figures[side].append(run(side))
        last_round_s = clock() - began
    return figures
