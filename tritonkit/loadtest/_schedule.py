"""When requests are sent: closed loop (fixed concurrency) or open loop (an arrival schedule)."""

from __future__ import annotations

import numpy as np

ARRIVALS = ("poisson", "constant")


def closed_loop(concurrency: int, workers: int) -> list[int]:
    """Virtual users per worker process: ``concurrency`` spread as evenly as possible.

    Workers that would get no user are dropped, so ``len(result) <= workers``.
    """
    if concurrency < 1 or workers < 1:
        raise ValueError("concurrency and workers must be >= 1")
    workers = min(workers, concurrency)
    base, extra = divmod(concurrency, workers)
    return [base + (1 if i < extra else 0) for i in range(workers)]


def open_loop_schedule(rate: float, duration: float, arrivals: str = "poisson",
                       seed: int = 0) -> np.ndarray:
    """Scheduled send times in seconds from the start, for ``rate`` requests/s over ``duration`` s.

    ``constant`` spaces requests exactly ``1/rate`` apart. ``poisson`` draws the
    arrivals of a Poisson process conditioned on its count: ``round(rate * duration)``
    uniform times, sorted, so the gaps are exponential yet the offered rate is exact
    (an unconditioned process misses its rate by ``1/sqrt(n)`` in a short run).
    """
    if rate <= 0 or duration <= 0:
        raise ValueError("rate and duration must be > 0")
    if arrivals not in ARRIVALS:
        raise ValueError(f"arrivals must be one of {', '.join(ARRIVALS)}")
    count = max(1, int(round(rate * duration)))
    if arrivals == "constant":
        return np.arange(count, dtype=np.float64) / rate
    rng = np.random.default_rng(seed)
    return np.sort(rng.uniform(0.0, duration, size=count))


def split_schedule(schedule: np.ndarray, workers: int) -> list[np.ndarray]:
    """Deal a schedule round-robin to ``workers`` processes (each keeps the overall rhythm)."""
    workers = max(1, min(workers, len(schedule)))
    return [schedule[i::workers] for i in range(workers)]
