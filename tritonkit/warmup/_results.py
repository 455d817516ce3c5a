"""What warm-up is asked (``SteadyRule``) and what it gives back: each model's
``ModelWarmup``, its ``ColdStart`` figures among them."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from tritonkit.errors import UsageError

DEFAULT_REQUESTS = 500              # per model, all shapes together

# Keys ``as_dict`` derives, which ``from_dict`` leaves aside.
_DERIVED = ("ratio", "first_to_p50", "first_response_ratio", "first_response_to_p50", "loaded",
            "shape_p50_ms", "worst")


@dataclass(frozen=True)
class SteadyRule:
    """Latency is steady when the last ``window`` requests are each within ``tolerance``
    (a fraction) of their median, and that median is within ``tolerance`` of the median
    of the ``window`` before them: latency has settled, not merely slowed its fall (as
    perf_analyzer asks consecutive measurement windows to agree).

    A difference of up to ``floor_ms`` passes whatever the fraction: a request under a
    millisecond varies by more than 25 % on any host (a timer, an interrupt, a busy CPU's
    scheduler) with no cold start left, and a cold start costs several milliseconds at
    least (~30 on the local Triton here, a CUDA one hundreds). perf_analyzer's windows
    average away what each request here is judged on."""

    window: int = 5
    tolerance: float = 0.25
    floor_ms: float = 1.0

    def __post_init__(self) -> None:
        if self.window < 2:
            raise UsageError(f"the steady window must be at least 2 requests (got {self.window})",
                             hint="e.g. --steady-window 5")
        if not 0 < self.tolerance < 10:
            raise UsageError(f"the steady tolerance must be a fraction above 0 (got {self.tolerance})",
                             hint="e.g. --steady-tolerance 0.25 for 25 %")
        if not 0 <= self.floor_ms <= 1000:
            raise UsageError(f"the steady floor must be 0 to 1000 ms (got {self.floor_ms})",
                             hint="e.g. --steady-floor-ms 1; 0 judges by the fraction alone")

    def is_steady(self, latencies: Sequence[float]) -> bool:
        if len(latencies) < 2 * self.window:
            return False
        last = latencies[-self.window:]
        median = statistics.median(last)
        allowed = max(self.tolerance * median, self.floor_ms)
        if not all(abs(x - median) <= allowed for x in last):
            return False
        before = statistics.median(latencies[-2 * self.window:-self.window])
        return abs(before - median) <= allowed


@dataclass(frozen=True)
class ColdStart:
    """A fresh client's first request to a model, against the p50 of the requests after it
    (the medians over ``clients`` fresh clients, one after the other).

    The client opens its connection first (a readiness check), so ``first_ms`` holds
    no TCP set-up, then sends its first inference right away. Above the p50 it holds
    the model's cold start, if any is left, and a wake-up that any request after a
    pause pays, on a model warm for hours too (its stub process and caches gone cold:
    ~1x p50 after 50 ms idle and ~2x after 1 s on the local Triton here). One first
    request is one sample; on a busy machine compare medians over several."""

    first_ms: float
    p50_ms: float
    clients: int = 1
    # A decoupled model: the median fresh client's first request's time to its first
    # response (what a streaming user waits for); None for any other model.
    first_response_ms: float | None = None

    @property
    def ratio(self) -> float:
        return self.first_ms / self.p50_ms if self.p50_ms else float("inf")


@dataclass(frozen=True)
class ShapeColdStart:
    """One shape's cold first sample against its own steady p50 (ms): a model's headline
    is its first, smallest shape; the largest batch's cold start can cost far more."""

    shape: str
    first_ms: float
    p50_ms: float

    @property
    def penalty_ms(self) -> float:
        """What the cold start cost above the norm: what a user's P99 sees of it."""
        return self.first_ms - self.p50_ms

    @property
    def ratio(self) -> float:
        return self.first_ms / self.p50_ms if self.p50_ms else float("inf")


@dataclass(frozen=True)
class ModelWarmup:
    """What warming one model took and what it left behind (times in ms, load in s)."""

    model: str
    steady: bool
    requests: int                       # warm-up requests sent, all shapes together
    load_s: float | None = None         # the explicit load request; None: none was sent
    first_ms: float | None = None       # the first warm-up request (the cold one)
    steady_p50_ms: float | None = None  # p50 of the steady window of the first shape (``worst``:
                                        # the shape whose cold start cost the most)
    after: ColdStart | None = None      # a fresh client's first request, after warm-up
    shapes: list[str] = field(default_factory=list)
    note: str = ""
    # The first request was the model's first since it loaded (this call loaded it, the
    # server had just started, or its statistics showed no request served since its load
    # but its model_warmup): only then is ``first_ms`` a cold start.
    cold: bool = True
    # False: a model warm-up cannot send requests to (decoupled, with no gRPC address known);
    # ``note`` says why.
    warmed: bool = True
    # Each shape's samples in the order sent, its cold first one first (ms; a stateful
    # model's sample is its sequence's mean request): how the cold start decayed.
    series_ms: dict[str, list[float]] = field(default_factory=dict)
    # A decoupled model, streamed: ``first_ms`` and ``steady_p50_ms`` run to the final
    # response; these to the first one (a streaming user's time to first token): the cold
    # request's, and the p50 of the same steady window. None for any other model.
    first_response_ms: float | None = None
    first_response_p50_ms: float | None = None
    # READY before this warm-up (no load was needed); None where not known (an older record).
    was_ready: bool | None = None
    # Not steady for want of requests: a --requests that would give every shape room to
    # get there (None when steady, or when the time ran out first).
    suggested_requests: int | None = None
    # The steady window each shape's p50 is the median of (the rule's, at least one per
    # instance); None where not known (an older record): then at most the rule's default.
    steady_window: int | None = None
    # Why the model failed to load or to warm up (its figures then are what it got to);
    # None when it did not fail.
    error: str | None = None

    def shape_cold_starts(self) -> list[ShapeColdStart]:
        """Each shape's first sample (a stateful model's: its first sequence's mean request)
        against the median of its own steady window, in the order warmed. Empty unless
        every shape got steady: an unsteady shape has no p50, and the worst may be it."""
        if not self.steady:
            return []
        figures = []
        for shape, series in self.series_ms.items():
            # A steady series holds two windows at least: its last one is the steady one.
            window = min(self.steady_window or SteadyRule.window, len(series) // 2)
            if window >= 1:
                figures.append(ShapeColdStart(shape, series[0],
                                              statistics.median(series[-window:])))
        return figures

    @property
    def worst(self) -> ShapeColdStart | None:
        """The shape whose cold first sample stood the most milliseconds above its own
        steady p50 (None unless the model was cold and every shape got steady). By the
        milliseconds, not the ratio: a small shape's 5x of 0.4 ms costs a user less than a
        batch of 32's 4x of 6.5 ms."""
        if not self.cold:
            return None
        return max(self.shape_cold_starts(), key=lambda s: s.penalty_ms, default=None)

    @property
    def ratio(self) -> float | None:
        """The cold first request over the steady p50 (None unless it was cold)."""
        if not self.cold or self.first_ms is None or not self.steady_p50_ms:
            return None
        return self.first_ms / self.steady_p50_ms

    @property
    def first_response_ratio(self) -> float | None:
        """A decoupled model's cold first response over its steady p50 (None unless cold)."""
        if not self.cold or self.first_response_ms is None or not self.first_response_p50_ms:
            return None
        return self.first_response_ms / self.first_response_p50_ms

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelWarmup":
        """The inverse of ``as_dict`` (a deployment's state keeps its warm-up this way)."""
        fields = {k: v for k, v in data.items() if k not in _DERIVED}
        after = fields.pop("after", None)
        return cls(**fields, after=None if after is None else ColdStart(
            **{k: v for k, v in after.items() if k not in _DERIVED}))

    def as_dict(self) -> dict[str, Any]:
        """The figures as JSON; the ratios under their plain names (``first_to_p50``) and
        their earlier ones (``ratio``), ``loaded``: whether a load request was sent
        (``load_s`` is its time), each shape's steady p50 (``shape_p50_ms``) and the
        ``worst`` shape's cold start. ``tritonkit.warmup.ABOUT`` says what each key means."""
        data = asdict(self)
        data["loaded"] = self.load_s is not None
        data["ratio"] = data["first_to_p50"] = self.ratio
        data["first_response_ratio"] = data["first_response_to_p50"] = self.first_response_ratio
        data["after"] = None if self.after is None else {
            **asdict(self.after), "ratio": self.after.ratio, "first_to_p50": self.after.ratio}
        data["shape_p50_ms"] = {s.shape: round(s.p50_ms, 3) for s in self.shape_cold_starts()}
        worst = self.worst
        data["worst"] = None if worst is None else {
            **asdict(worst), "penalty_ms": round(worst.penalty_ms, 3),
            "first_to_p50": worst.ratio}
        return data
