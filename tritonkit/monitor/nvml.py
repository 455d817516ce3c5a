"""The GPU's vital signs through NVML (``nvidia-ml-py``, imported as ``pynvml``).

One ``GpuSample`` per GPU per call: utilization, memory, temperature, power, SM and
memory clocks and what holds them down, PCIe rx/tx and the link they run on. A field the
card or driver does not report (power on some boards, PCIe counters under some
hypervisors) is ``None`` rather than an error. Any other NVML error is the GPU failing
(it fell off the bus, its driver went away): that sample is empty and carries the error.

Each GPU is handled on its own: one NVML cannot reach (another user's or container's,
NVML_ERROR_NO_PERMISSION) is named in ``Nvml.unreachable`` and the others are watched.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache
from types import ModuleType
from typing import Any, Callable

from tritonkit.errors import TritonkitError

NO_DRIVER_HINT = ("install the NVIDIA driver on this host (nvidia-smi must work); "
                  "without one, --url/--repository still shows Triton's metrics")


class GpuUnavailableError(TritonkitError):
    """NVML cannot be used here: no NVIDIA driver, no library, or no GPU. When the driver
    answered but no GPU could be reached, ``driver_version`` and ``faults`` say so."""

    driver_version: str | None = None
    faults: tuple = ()


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one instant. Throughputs in decimal MB/s, memory in MiB."""

    index: int
    name: str
    uuid: str
    utilization_pct: float | None
    memory_used_mib: float | None
    memory_total_mib: float | None
    temperature_c: float | None
    power_w: float | None
    sm_clock_mhz: float | None
    memory_clock_mhz: float | None
    pcie_rx_mb_s: float | None
    pcie_tx_mb_s: float | None
    # The link as it runs now: an idle card may train down to save power; under load it
    # is what the slot gives (an A10 in a Gen3 slot runs Gen3, half its rated link).
    pcie_gen: int | None = None
    pcie_width: int | None = None
    # NVML's clocks-event ("throttle") reasons: a bitmask, several at once (nvidia-smi's
    # clocks_event_reasons.active); see slowdowns.
    clock_events: int | None = None
    # Why this sample has no readings: NVML failed on this GPU ("GPU is lost
    # (NVML_ERROR_GPU_IS_LOST)"); None for a sample that was read.
    error: str | None = None

    @classmethod
    def failed(cls, index: int, name: str, uuid: str, error: str) -> "GpuSample":
        """A GPU that could not be read: every reading None, and why."""
        readings = {f.name: None for f in fields(cls) if f.name not in ("index", "name", "uuid")}
        return cls(index=index, name=name, uuid=uuid, **{**readings, "error": error})

    @property
    def slowdowns(self) -> tuple[str, ...]:
        """What holds the clocks below what the load asks for, now (an idle card is not)."""
        return slowdowns(self.clock_events)

    @property
    def memory_pct(self) -> float | None:
        if self.memory_used_mib is None or not self.memory_total_mib:
            return None
        return 100.0 * self.memory_used_mib / self.memory_total_mib


@dataclass(frozen=True)
class GpuIdentity:
    """What doctor needs to know about a GPU. None: the card or driver does not say.

    Bad memory is handled differently by generation: a Pascal card (the P100) retires
    pages, which takes effect at the next reboot or GPU reset; an Ampere card (the A10)
    remaps rows, pending a reset likewise, and a remap that failed means the card has
    run out of spare rows. NVML answers each only on the cards that do it."""

    index: int
    name: str
    compute_capability: float
    memory_total_mib: float | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_pending: bool | None = None
    row_remap_failed: bool | None = None
    ecc_mode_change_pending: bool | None = None


@dataclass(frozen=True)
class GpuFault:
    """A GPU NVML counts but cannot read: its index and NVML's error."""

    index: int
    error: str

    def __str__(self) -> str:
        return f"gpu {self.index}: {self.error}"


def _load_pynvml() -> ModuleType:
    try:
        import pynvml
    except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency
        raise GpuUnavailableError("nvidia-ml-py is not installed",
                                  hint="pip install nvidia-ml-py") from None
    return pynvml


class Nvml:
    """An open NVML session (a context manager): ``with Nvml() as nvml: nvml.sample()``.

    ``module`` is the pynvml module; tests pass a stand-in to check unit conversions.
    """

    def __init__(self, module: ModuleType | Any | None = None) -> None:
        self._nv = module or _load_pynvml()
        self._handles: list[tuple[int, Any]] = []       # (NVML index, handle) of those reached
        self._faults: dict[int, str] = {}               # NVML index -> why it cannot be read
        self._known: dict[int, tuple[str, str]] = {}    # NVML index -> (name, uuid) last read
        self._clock_events: Callable[[Any], int] | None = None

    def __enter__(self) -> "Nvml":
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        """Initialize NVML; GpuUnavailableError (one clear line) when there is no driver."""
        nv = self._nv
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise GpuUnavailableError(f"no NVIDIA driver: NVML could not start ({exc})",
                                      hint=NO_DRIVER_HINT) from None
        self._handles, self._faults, self._known, self._clock_events = [], {}, {}, None
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as exc:
            self.close()
            raise GpuUnavailableError(f"NVML could not list the GPUs ({exc})",
                                      hint=NO_DRIVER_HINT) from None
        # nvmlDeviceGetCount_v2 counts the GPUs this process may not use as well: their
        # handle is NVML_ERROR_NO_PERMISSION. Each GPU is reached, or named, on its own;
        # its name and UUID are read now, to name it if it is lost before a sample is.
        for index in range(count):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
                self._known[index] = self._name_and_uuid(index, handle)
            except nv.NVMLError as exc:
                self._faults[index] = describe_nvml_error(exc)
            else:
                self._handles.append((index, handle))
        if not self._handles:
            faults = "; ".join(map(str, self.unreachable))
            if faults:
                error = GpuUnavailableError(
                    f"NVML cannot reach any of this host's {count} GPUs ({faults})",
                    hint="run nvidia-smi as this user: a GPU held by another user or "
                         "container (device permissions, cgroups) cannot be read from here")
                error.faults = self.unreachable
                try:                            # the driver itself answered
                    error.driver_version = _text(nv.nvmlSystemGetDriverVersion())
                except nv.NVMLError:
                    pass
                self.close()
                raise error
            self.close()
            raise GpuUnavailableError("the NVIDIA driver is loaded but reports no GPU",
                                      hint="check nvidia-smi; a GPU passed through to a VM "
                                           "or container must be visible to it")

    def close(self) -> None:
        try:
            self._nv.nvmlShutdown()
        except self._nv.NVMLError:
            pass
        self._handles = []

    @property
    def unreachable(self) -> tuple[GpuFault, ...]:
        """The GPUs NVML counts but could not open or identify, each with NVML's error
        (``str()``: "gpu 2: Insufficient Permissions (NVML_ERROR_NO_PERMISSION)")."""
        return tuple(GpuFault(i, error) for i, error in sorted(self._faults.items()))

    def driver_version(self) -> str:
        try:
            return _text(self._nv.nvmlSystemGetDriverVersion())
        except self._nv.NVMLError as exc:
            raise GpuUnavailableError(f"NVML could not tell the driver's version ({exc})",
                                      hint=NO_DRIVER_HINT) from None

    def identities(self) -> list[GpuIdentity]:
        """What doctor needs of each GPU reached; one that fails is added to ``unreachable``."""
        found = []
        for index, handle in self._handles:
            try:
                found.append(self._identity(index, handle))
            except self._nv.NVMLError as exc:
                self._faults[index] = describe_nvml_error(exc)
        return found

    def _identity(self, index: int, handle: Any) -> GpuIdentity:
        nv = self._nv
        major, minor = nv.nvmlDeviceGetCudaComputeCapability(handle)
        read = lambda fn: _optional(nv, fn)  # noqa: E731
        memory = read(lambda: nv.nvmlDeviceGetMemoryInfo(handle))
        rows = read(lambda: nv.nvmlDeviceGetRemappedRows(handle))
        pages = read(lambda: nv.nvmlDeviceGetRetiredPagesPendingStatus(handle))
        ecc = read(lambda: nv.nvmlDeviceGetEccMode(handle))     # (current, pending)
        return GpuIdentity(
            index, _text(nv.nvmlDeviceGetName(handle)), float(f"{major}.{minor}"),
            memory_total_mib=None if memory is None else memory.total / 2**20,
            retired_pages_pending=None if pages is None else pages == nv.NVML_FEATURE_ENABLED,
            remapped_rows_pending=None if rows is None else bool(rows[2]),
            row_remap_failed=None if rows is None else bool(rows[3]),
            ecc_mode_change_pending=None if ecc is None else ecc[0] != ecc[1])

    def sample(self) -> list[GpuSample]:
        """One sample of every GPU reached. A GPU that fails (lost, its driver gone) gives
        a sample with ``error`` set and no readings, under the name it last had."""
        return [self._sample_one(i, h) for i, h in self._handles]

    def _sample_one(self, index: int, handle: Any) -> GpuSample:
        try:
            sample = self._read(index, handle)
        except self._nv.NVMLError as exc:
            name, uuid = self._known[index]
            return GpuSample.failed(index, name, uuid, describe_nvml_error(exc))
        self._known[index] = (sample.name, sample.uuid)
        return sample

    def _name_and_uuid(self, index: int, handle: Any) -> tuple[str, str]:
        nv = self._nv
        return (_text(_optional(nv, lambda: nv.nvmlDeviceGetName(handle)) or f"GPU {index}"),
                _text(_optional(nv, lambda: nv.nvmlDeviceGetUUID(handle)) or ""))

    def _read(self, index: int, handle: Any) -> GpuSample:
        nv = self._nv
        read = lambda fn: _optional(nv, fn)  # noqa: E731
        name, uuid = self._name_and_uuid(index, handle)
        util = read(lambda: nv.nvmlDeviceGetUtilizationRates(handle).gpu)
        memory = read(lambda: nv.nvmlDeviceGetMemoryInfo(handle))
        # PCIe counters are KB/s (1024 bytes) over a 20 ms window; links are rated in
        # decimal GB/s (Gen3 x16 = 15.75), so report decimal MB/s.
        rx = read(lambda: nv.nvmlDeviceGetPcieThroughput(handle, nv.NVML_PCIE_UTIL_RX_BYTES))
        tx = read(lambda: nv.nvmlDeviceGetPcieThroughput(handle, nv.NVML_PCIE_UTIL_TX_BYTES))
        power_mw = read(lambda: nv.nvmlDeviceGetPowerUsage(handle))
        return GpuSample(
            index=index, name=name, uuid=uuid,
            utilization_pct=_float(util),
            memory_used_mib=None if memory is None else memory.used / 2**20,
            memory_total_mib=None if memory is None else memory.total / 2**20,
            temperature_c=_float(read(lambda: nv.nvmlDeviceGetTemperature(
                handle, nv.NVML_TEMPERATURE_GPU))),
            power_w=None if power_mw is None else power_mw / 1000.0,
            sm_clock_mhz=_float(read(lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM))),
            memory_clock_mhz=_float(read(lambda: nv.nvmlDeviceGetClockInfo(handle,
                                                                           nv.NVML_CLOCK_MEM))),
            pcie_rx_mb_s=None if rx is None else rx * 1024 / 1e6,
            pcie_tx_mb_s=None if tx is None else tx * 1024 / 1e6,
            pcie_gen=read(lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
            pcie_width=read(lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(handle)),
            clock_events=read(lambda: self._read_clock_events(handle)),
        )

    def _read_clock_events(self, handle: Any) -> int:
        """The clocks-event reasons. NVML 12.2 (R535) renamed them from "throttle"; the
        binding has both names whatever the driver, and a driver older than the new name
        answers it NVML_ERROR_FUNCTION_NOT_FOUND: then the old one is asked (same bits),
        from then on."""
        nv = self._nv
        if self._clock_events is None:
            event = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
            if event is not None:           # an old binding has only the throttle name
                try:
                    value = event(handle)
                except nv.NVMLError as exc:
                    if _code(exc) != _error_code("FUNCTION_NOT_FOUND"):
                        raise
                else:
                    self._clock_events = event
                    return value
            self._clock_events = nv.nvmlDeviceGetCurrentClocksThrottleReasons
        return self._clock_events(handle)


# The clocks-event reasons that slow a loaded GPU, by pynvml's constant names. Not
# among them: GpuIdle (no load), ApplicationsClocksSetting, SyncBoost and
# DisplayClockSetting (settings, not slowdowns).
SLOWDOWN_REASONS = {"sw_power_cap": "SwPowerCap", "hw_slowdown": "HwSlowdown",
                    "sw_thermal": "SwThermalSlowdown", "hw_thermal": "HwThermalSlowdown",
                    "hw_power_brake": "HwPowerBrakeSlowdown"}
# Those a card should never show: heat, or the board's power supply pulling the brake.
# (The power cap is where a busy card runs by design: shown and counted, not alerted.)
ALARMING_SLOWDOWNS = ("hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")


@cache
def _reason_bits() -> dict[str, int]:
    import pynvml as nv     # its constants only: the bits are NVML's ABI, whatever the driver

    return {name: getattr(nv, f"nvmlClocksEventReason{suffix}",
                          getattr(nv, f"nvmlClocksThrottleReason{suffix}", 0))
            for name, suffix in SLOWDOWN_REASONS.items()}


def slowdowns(clock_events: float | None) -> tuple[str, ...]:
    """The slowdown reasons set in an NVML clocks-event bitmask."""
    if clock_events is None:
        return ()
    mask = int(clock_events)
    return tuple(name for name, bit in _reason_bits().items() if bit and mask & bit)


# PCIe bandwidth per lane and direction in decimal GB/s, after line encoding
# (Gen3 x16 = 15.75, Gen4 x16 = 31.5, as the profiles rate their links).
PCIE_LANE_GB_S = {1: 0.25, 2: 0.5, 3: 0.984375, 4: 1.96875, 5: 3.9375, 6: 7.875}


def pcie_link_gb_s(gen: int | None, width: int | None) -> float | None:
    """One direction's bandwidth of a PCIe link; None for a link NVML did not report."""
    if not gen or not width or int(gen) not in PCIE_LANE_GB_S:
        return None
    return PCIE_LANE_GB_S[int(gen)] * int(width)


# The NVML errors that mean the GPU or its driver failed (off the bus, needs a reset, the
# kernel module gone or mismatched, NVML's own "unknown"): the sample fails with it. Any
# other error of a reading (NOT_SUPPORTED, NO_PERMISSION, NO_DATA, FUNCTION_NOT_FOUND: the
# card or driver does not report it; TIMEOUT, IN_USE, a vGPU's ECC, ...: not this time)
# leaves that reading empty, never a lost card.
FAILED = ("GPU_IS_LOST", "RESET_REQUIRED", "DRIVER_NOT_LOADED", "UNKNOWN",
          "LIB_RM_VERSION_MISMATCH", "IRQ_ISSUE", "GPU_NOT_FOUND")


@cache
def _error_names() -> dict[int, str]:
    import pynvml     # its constants only: the return codes are NVML's ABI, whatever the driver

    return {value: name for name, value in vars(pynvml).items()
            if name.startswith("NVML_ERROR_") and isinstance(value, int)}


@cache
def _error_code(name: str) -> int:
    return {n: code for code, n in _error_names().items()}[f"NVML_ERROR_{name}"]


def _code(exc: BaseException) -> int | None:
    return getattr(exc, "value", None)      # pynvml's NVMLError carries nvmlReturn_t


def describe_nvml_error(exc: BaseException) -> str:
    """NVML's error in one line: "GPU is lost (NVML_ERROR_GPU_IS_LOST)"."""
    name = _error_names().get(_code(exc))
    return f"{exc} ({name})" if name else str(exc)


def _optional(nv: Any, read: Callable[[], Any]) -> Any:
    """A reading, or None when it cannot be had; an error that says the GPU or its driver
    failed (FAILED: the GPU lost, the driver gone) is raised."""
    try:
        return read()
    except nv.NVMLError as exc:
        if _code(exc) in {_error_code(name) for name in FAILED if _known(name)}:
            raise
        return None


def _known(name: str) -> bool:
    return f"NVML_ERROR_{name}" in _error_names().values()


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
