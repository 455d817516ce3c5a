"""Thresholds (``configs/alerts.toml``) and the alerts ``tritonkit monitor`` raises.

An alert fires when a threshold is crossed and again only after the value has come
back: a card at 90 °C for an hour is one alert, not 360, and one hovering at the
threshold is one too (a temperature alert ends only ``temperature_hysteresis_c`` below
it). Clocks held down by heat or by the board's power brake (NVML's clocks-event
reasons) alert the same way: each request takes longer while they are, a P99 spike no
model change explains. NVML's HwSlowdown alone alerts only once it has lasted
``hw_slowdown_samples`` samples: it is also set for a moment at P-state and clock
changes (nvml.h), and its lasting causes have bits of their own. Low utilization fires
only when it has lasted ``low_utilization_minutes`` while the GPU was under load; an
idle card is not starved. A GPU NVML cannot read any more (lost, its driver gone)
alerts once, ``gpu_lost``, naming NVML's error.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tritonkit.datafiles import configs_dir, dataclass_from_table, load_toml
from tritonkit.errors import ProfileError
from tritonkit.monitor.nvml import ALARMING_SLOWDOWNS, GpuSample


@dataclass(frozen=True)
class AlertThresholds:
    temperature_c: float
    memory_pct: float
    low_utilization_pct: float
    low_utilization_minutes: float
    idle_utilization_pct: float
    # Added after users had copied alerts.toml: a copy without them keeps loading, with the
    # values configs/alerts.toml gives them.
    temperature_hysteresis_c: float = 5.0
    hw_slowdown_samples: int = 3


@dataclass(frozen=True)
class WallThresholds:
    memory_full_pct: float
    low_utilization_pct: float
    pcie_link_fraction: float
    small_batch: float
    short_compute_us: float
    queue_share: float
    input_share: float
    pcie_achievable_fraction: float = 0.75     # (as above: later than the copies)
    pcie_saturated_share: float = 0.5


@dataclass(frozen=True)
class Thresholds:
    alerts: AlertThresholds
    walls: WallThresholds


_PERCENT = (0.0, 100.0)
_SHARE = (0.0, 1.0)
_ANY = (0.0, 1e9)           # a count or a time: 0 or more (no threshold is near this)
# Each threshold's range and an example, as configs/alerts.toml gives it.
_RANGES = (("alerts.temperature_c", (0.0, 200.0), "85 (°C)"),
           ("alerts.memory_pct", _PERCENT, "95 (% of the card's memory)"),
           ("alerts.low_utilization_pct", _PERCENT, "60 (%)"),
           ("alerts.low_utilization_minutes", _ANY, "5 (minutes)"),
           ("alerts.idle_utilization_pct", _PERCENT, "5 (%)"),
           ("alerts.temperature_hysteresis_c", (0.0, 200.0),
            "5 (°C below temperature_c before the alert ends)"),
           ("alerts.hw_slowdown_samples", (1, _ANY[1]),
            "3 (1 alerts on the first sample that shows it)"),
           ("walls.memory_full_pct", _PERCENT, "90 (% of the card's memory, peak)"),
           ("walls.low_utilization_pct", _PERCENT, "60 (%)"),
           ("walls.small_batch", _ANY, "1.5 (inferences per execution)"),
           ("walls.short_compute_us", _ANY, "2000 (µs per request)"),
           ("walls.queue_share", _SHARE, "0.3 (of the server time)"),
           ("walls.input_share", _SHARE, "0.5 (of the compute time)"))


def default_thresholds_path() -> Path:
    return configs_dir() / "alerts.toml"


def load_thresholds(path: Path | None = None) -> Thresholds:
    """Read the thresholds file (default ``configs/alerts.toml``); errors name the field."""
    path = Path(path) if path else default_thresholds_path()
    thresholds = dataclass_from_table(Thresholds, load_toml(path), source=str(path))
    for field_name, example in (("pcie_link_fraction", "0.8 (80 % of what the link carries)"),
                                ("pcie_achievable_fraction", "0.75 (what copies achieve of the rating)"),
                                ("pcie_saturated_share", "0.5 (half the samples under load)")):
        if not 0 < getattr(thresholds.walls, field_name) <= 1:
            raise ProfileError(f"{path}: field 'walls.{field_name}' must be in (0, 1]",
                               hint=f"e.g. {example}")
    # nan and inf are refused as every file's are (dataclass_from_table).
    for dotted, (least, most), example in _RANGES:
        table, _, field_name = dotted.partition(".")
        value = getattr(getattr(thresholds, table), field_name)
        if not least <= value <= most:
            raise ProfileError(f"{path}: field '{dotted}' = {value:g} must be from {least:g} to "
                               f"{most:g}", hint=f"e.g. {example}")
    return thresholds


@dataclass(frozen=True)
class Alert:
    gpu: int
    kind: str        # "temperature" | "memory" | "clocks" | "low_utilization" | "gpu_lost"
    message: str


class AlertTracker:
    """Feeds on samples, returns the alerts that fire now (edge-triggered, per GPU)."""

    def __init__(self, thresholds: AlertThresholds) -> None:
        self.thresholds = thresholds
        self._active: set[tuple[int, str]] = set()
        self._starved_since: dict[int, float] = {}
        self._hw_slowdown_run: dict[int, int] = {}      # consecutive samples showing it

    def under_load(self, sample: GpuSample, triton_inferences: float | None) -> bool:
        """Triton ran inferences (or, where it does not count them, requests) since the last
        sample, or (no Triton) the GPU is not idle."""
        if triton_inferences is not None:
            return triton_inferences > 0
        return (sample.utilization_pct or 0.0) > self.thresholds.idle_utilization_pct

    def observe(self, elapsed_s: float, sample: GpuSample,
                triton_inferences: float | None = None) -> list[Alert]:
        t = self.thresholds
        fired = []
        # A failed sample has no readings: the other alerts keep their state through it.
        if self._crossed(sample.index, "gpu_lost", sample.error is not None):
            fired.append(Alert(sample.index, "gpu_lost",
                               f"GPU {sample.index} ({sample.name or sample.uuid}) cannot be "
                               f"read: {sample.error}: it fell off the bus or its driver "
                               "failed; check dmesg for Xid errors and nvidia-smi, then "
                               "reset the GPU (nvidia-smi -r) or reboot"))
        if sample.error is not None:
            return fired
        temperature = sample.temperature_c
        if self._crossed(sample.index, "temperature",
                         temperature is not None and temperature > t.temperature_c,
                         clear=temperature is not None
                         and temperature < t.temperature_c - t.temperature_hysteresis_c):
            fired.append(Alert(sample.index, "temperature",
                               f"GPU {sample.index} at {temperature:.0f} °C (> {t.temperature_c:g} °C):"
                               " check cooling and fan/airflow, or the load"))
        memory = sample.memory_pct
        if self._crossed(sample.index, "memory", memory is not None and memory > t.memory_pct):
            fired.append(Alert(sample.index, "memory",
                               f"GPU {sample.index} memory {memory:.1f} % full (> {t.memory_pct:g} %):"
                               " the next larger batch or model will run out of memory"))
        alarming = [r for r in sample.slowdowns if r in ALARMING_SLOWDOWNS]
        run = self._hw_slowdown_run.get(sample.index, 0) + 1 if "hw_slowdown" in alarming else 0
        self._hw_slowdown_run[sample.index] = run
        lasting = [r for r in alarming if r != "hw_slowdown" or run >= t.hw_slowdown_samples]
        if self._crossed(sample.index, "clocks", bool(lasting)):
            clock = "" if sample.sm_clock_mhz is None else f" (SM at {sample.sm_clock_mhz:.0f} MHz)"
            fired.append(Alert(sample.index, "clocks",
                               f"GPU {sample.index} clocks held down by {', '.join(alarming)}"
                               f"{clock}: every request is slower while they are; check cooling "
                               "and airflow, and the board's power cables and supply"))
        util = sample.utilization_pct
        starved = (util is not None and util < t.low_utilization_pct
                   and self.under_load(sample, triton_inferences))
        if starved:
            since = self._starved_since.setdefault(sample.index, elapsed_s)
        else:
            self._starved_since.pop(sample.index, None)
        minutes = (elapsed_s - since) / 60 if starved else 0.0
        if self._crossed(sample.index, "low_utilization",
                         starved and minutes >= t.low_utilization_minutes):
            fired.append(Alert(sample.index, "low_utilization",
                               f"GPU {sample.index} utilization {util:.0f} % (< "
                               f"{t.low_utilization_pct:g} %) under load for {minutes:.1f} min: "
                               "it is starved; run tritonkit diagnose on the CSV"))
        return fired

    def _crossed(self, gpu: int, kind: str, condition: bool, clear: bool | None = None) -> bool:
        """Whether ``kind`` fires now: ``condition`` holds and it was not active. It stays
        active until ``clear`` (by default: until ``condition`` no longer holds)."""
        key = (gpu, kind)
        if condition and key not in self._active:
            self._active.add(key)
            return True
        if (not condition) if clear is None else clear:
            self._active.discard(key)
        return False
