"""The monitor CSV: one row per sample per GPU, written by monitor, read by diagnose.

Columns (units in the names; an empty cell is a value the card or server did not give):

    timestamp                  UTC time of the sample, ISO 8601
    elapsed_s                  seconds since the first sample
    gpu, name, uuid            NVML index, name and UUID (empty on a row without a GPU;
                               no uuid column in CSVs recorded before it was added)
    util_pct                   GPU utilization, % of the sample period a kernel ran
    mem_used_mib, mem_total_mib
    temp_c, power_w
    sm_clock_mhz, mem_clock_mhz
    pcie_rx_mb_s, pcie_tx_mb_s host->GPU (rx) and GPU->host (tx), decimal MB/s
    pcie_gen, pcie_width       the PCIe link the card runs on now (generation, lanes)
    clock_events               NVML's clocks-event reasons, the bitmask as an integer
                               (nvidia-smi's clocks_event_reasons.active): 4 = power
                               cap, 8 = hardware slowdown, 32/64 = thermal, 128 = power brake
    request_success ...        Triton's nv_inference_* counters, summed over models and
                               counted on model by model: from the first sample's totals,
                               each later sample adds what every model counted since the
                               one before (a model unloaded, a version swapped or the
                               server restarted takes nothing back, so they never fall;
                               CSVs recorded before this hold the raw sums, which do).
                               Ensembles are left out: Triton counts an ensemble's request
                               again in each model it runs, and those are the work. Where
                               the server's HTTP address could not say which models are
                               ensembles, they are counted (monitor says so); CSVs
                               recorded before this count them, so requests to an
                               ensemble of N steps count N + 1 times there.
                               The same on every GPU row of one sample; empty without
                               --url/--repository, and each one Triton does not report
                               (batch counts under counter_latencies=false):
                               request_success, request_failure, inference_count,
                               exec_count, request_duration_us, queue_duration_us,
                               compute_input_duration_us, compute_infer_duration_us,
                               compute_output_duration_us, pending_request_count (a gauge)
    nvml_error                 why NVML could not read the GPU in this sample (lost, its
                               driver gone): that row's GPU cells are empty because it
                               failed, not because the card does not report them (last,
                               so files read by position keep their columns; none in
                               CSVs recorded before it was added)
    gpu_request_success ...    the same counters, this GPU's own: the series Triton
                               labels with its gpu_uuid (model instances of kind GPU
                               on it), counted on the same way; 0 for a GPU the server
                               runs no model on, gpu_pending_request_count always empty
                               (requests wait in a model's scheduler, before any GPU).
                               Empty where Triton labels no series with a GPU (a CPU
                               server; Triton 2.51 with every model loaded at its start,
                               server#7479). After nvml_error for the same reason; none
                               in CSVs recorded before they were added

Counters rather than rates: diagnose takes differences over any window it likes and a
missed sample loses nothing.

Beside it, where Triton is watched, ``<stem>.models.csv`` (``models_csv_path``) holds the
same counters model by model, so that with two models one can tell which one spiked: one
row per sample per model version Triton reports (long format; a sample whose scrape
failed has none). A file of its own, so the GPU CSV keeps its columns and meaning and
older recordings read as before:

    timestamp, elapsed_s       as in the GPU CSV, the same values for the same sample
    model, version             as Triton labels them (namespace/model under
                               --model-namespacing=true); ensembles too, whose requests
                               their steps count again
    request_success ...        that version's counters (its GPUs summed), carried on as
                               the server's are: its lifetime count at its first sample,
                               then what it counted since, so they never fall across a
                               restart or a reload; empty where Triton does not report one
"""

from __future__ import annotations

import csv
import io
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Iterator

from tritonkit.errors import TritonkitError, UsageError
from tritonkit.fileio import open_regular, refuse_overwrite
from tritonkit.monitor.nvml import GpuSample, slowdowns
from tritonkit.monitor.triton_metrics import ModelCounters

GPU_COLUMNS = ("util_pct", "mem_used_mib", "mem_total_mib", "temp_c", "power_w",
               "sm_clock_mhz", "mem_clock_mhz", "pcie_rx_mb_s", "pcie_tx_mb_s", "pcie_gen",
               "pcie_width", "clock_events")
TRITON_COLUMNS = tuple(f.name for f in fields(ModelCounters))
OWN_PREFIX = "gpu_"        # a GPU's own Triton counters: gpu_request_success, ...
OWN_TRITON_COLUMNS = tuple(OWN_PREFIX + c for c in TRITON_COLUMNS)
COLUMNS = ("timestamp", "elapsed_s", "gpu", "name", "uuid", *GPU_COLUMNS, *TRITON_COLUMNS,
           "nvml_error", *OWN_TRITON_COLUMNS)
# What Triton ran on a GPU it runs no model on (its labelled series name other GPUs).
_NOTHING_ON_GPU = ModelCounters(pending_request_count=None)
REQUIRED_COLUMNS = ("elapsed_s", "util_pct", "mem_used_mib", "mem_total_mib")
# What each column can hold (a value outside is no reading: a sum or mean of it overflows);
# any other column, Triton's counters among them, a uint64 counter's range.
_COUNTED_MOST = float(2**64)
COLUMN_RANGES = {"elapsed_s": (0.0, 1e10), "gpu": (0.0, 2.0**31), "util_pct": (0.0, 100.0),
                 "mem_used_mib": (0.0, 2.0**40), "mem_total_mib": (0.0, 2.0**40),
                 "temp_c": (-273.0, 1000.0), "power_w": (0.0, 1e6),
                 "sm_clock_mhz": (0.0, 1e6), "mem_clock_mhz": (0.0, 1e6),
                 "pcie_rx_mb_s": (0.0, 1e9), "pcie_tx_mb_s": (0.0, 1e9),
                 "pcie_gen": (0.0, 100.0), "pcie_width": (0.0, 1024.0)}
MODEL_COLUMNS = ("timestamp", "elapsed_s", "model", "version", *TRITON_COLUMNS)


def models_csv_path(path: Path) -> Path:
    """Where the per-model CSV of the GPU CSV ``path`` goes: ``<stem>.models.csv`` beside it."""
    path = Path(path)
    return path.with_name(path.stem + ".models.csv")


@dataclass(frozen=True)
class MonitorRow:
    """One CSV row: a GPU's sample, with Triton's counters at the same instant."""

    elapsed_s: float
    gpu: int | None = None
    name: str = ""
    timestamp: str = ""
    uuid: str = ""
    util_pct: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    pcie_rx_mb_s: float | None = None
    pcie_tx_mb_s: float | None = None
    pcie_gen: float | None = None
    pcie_width: float | None = None
    clock_events: float | None = None
    triton: ModelCounters | None = None
    nvml_error: str = ""
    # this GPU's own counters (Triton's series labelled with its uuid); None: not labelled
    gpu_triton: ModelCounters | None = None

    @property
    def mem_pct(self) -> float | None:
        if self.mem_used_mib is None or not self.mem_total_mib:
            return None
        return 100.0 * self.mem_used_mib / self.mem_total_mib

    @property
    def slowdowns(self) -> tuple[str, ...]:
        return slowdowns(self.clock_events)


@dataclass(frozen=True)
class ModelRow:
    """One row of the per-model CSV: a model version's counters at one sample."""

    elapsed_s: float
    model: str
    version: str
    counters: ModelCounters
    timestamp: str = ""


def _stamp(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).isoformat(timespec="seconds")


def model_rows_for(timestamp: float, elapsed_s: float,
                   models: dict[tuple[str, str], ModelCounters]) -> list[ModelRow]:
    """The per-model rows of one sample: ``models`` is (model, version) -> counters."""
    stamp = _stamp(timestamp)
    return [ModelRow(elapsed_s=elapsed_s, model=model, version=version, counters=counters,
                     timestamp=stamp) for (model, version), counters in models.items()]


def rows_for(timestamp: float, elapsed_s: float, gpus: list[GpuSample],
             triton: ModelCounters | None,
             on_gpus: dict[str, ModelCounters] | None = None) -> list[MonitorRow]:
    """The rows of one sample: one per GPU, or one without a GPU when there is none.
    ``on_gpus``: each GPU's own counters by uuid, None where Triton labels none."""
    stamp = _stamp(timestamp)
    if not gpus:
        return [MonitorRow(elapsed_s=elapsed_s, timestamp=stamp, triton=triton)]
    return [MonitorRow(
        elapsed_s=elapsed_s, gpu=g.index, name=g.name, timestamp=stamp, uuid=g.uuid,
        util_pct=g.utilization_pct, mem_used_mib=g.memory_used_mib,
        mem_total_mib=g.memory_total_mib, temp_c=g.temperature_c, power_w=g.power_w,
        sm_clock_mhz=g.sm_clock_mhz, mem_clock_mhz=g.memory_clock_mhz,
        pcie_rx_mb_s=g.pcie_rx_mb_s, pcie_tx_mb_s=g.pcie_tx_mb_s, pcie_gen=g.pcie_gen,
        pcie_width=g.pcie_width, clock_events=g.clock_events, triton=triton,
        nvml_error=g.error or "",
        gpu_triton=None if on_gpus is None else on_gpus.get(g.uuid, _NOTHING_ON_GPU))
        for g in gpus]


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if not math.isfinite(value):    # no reading: diagnose refuses nan and inf
            return ""
        return f"{value:.6g}" if abs(value) < 1e6 else f"{value:.0f}"
    return str(value)


class CsvRecorder:
    """Writes monitor rows to a CSV file, flushed per sample (a Ctrl-C loses nothing), and
    with ``models`` the per-model rows to ``models_csv_path(path)`` the same way.

    A file that exists is kept unless ``force``: a day's recording is not replaced by
    mistake."""

    def __init__(self, path: Path, *, force: bool = False, models: bool = False) -> None:
        self.path = Path(path)
        self.models_path = models_csv_path(self.path) if models else None
        self.force = force
        self._files: list[IO[str]] = []
        self._writer: csv.writer | None = None
        self._models_writer: csv.writer | None = None

    def __enter__(self) -> "CsvRecorder":
        # both refused before either is created: no stray file beside one that exists
        refuse_overwrite(self.path, force=self.force, what="monitor CSV")
        if self.models_path:
            refuse_overwrite(self.models_path, force=self.force, what="per-model CSV")
        try:
            self._writer = self._open(self.path, COLUMNS)
            if self.models_path:
                self._models_writer = self._open(self.models_path, MODEL_COLUMNS)
        except BaseException:
            # the one opened before the other failed goes too: a header-only CSV left
            # behind would be refused by the next run without --force
            opened = [Path(file.name) for file in self._files]
            self.__exit__()
            for path in opened:
                path.unlink(missing_ok=True)
            raise
        return self

    def _open(self, path: Path, columns: tuple[str, ...]) -> csv.writer:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:      # a file where a folder must be, no permission
            raise UsageError(f"cannot write the CSV file {path} ({exc.strerror})",
                             hint="pass --csv with a writable path") from None
        try:
            if self.force and os.path.lexists(path):
                # Replaced, not written through: a link's target is not the file named.
                path.unlink()
            file = open(path, "x", newline="")
        except FileExistsError:
            refuse_overwrite(path, force=False, what="monitor CSV")   # it raises (a race)
        except OSError as exc:
            raise UsageError(f"cannot write the CSV file {path} ({exc.strerror})",
                             hint="pass --csv with a writable path") from None
        self._files.append(file)
        writer = csv.writer(file)
        writer.writerow(columns)
        file.flush()
        return writer

    def __exit__(self, *exc: object) -> None:
        files, self._files = self._files, []
        with self._writing():
            for file in files:
                file.close()

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """A write the disk refuses (full, gone, read-only now) is said with the file's
        name: the samples taken before it are in the file."""
        try:
            yield
        except OSError as exc:
            raise TritonkitError(f"could not write the monitor CSV {self.path} "
                                 f"({exc.strerror or exc})",
                                 hint="free space on its disk or pass --csv with another "
                                      "path; the rows written before are kept") from None

    def write(self, rows: list[MonitorRow], model_rows: list[ModelRow] = ()) -> None:
        """One sample: its GPU rows, and its per-model rows where this recorder keeps them."""
        with self._writing():
            for row in rows:
                counters = row.triton
                values = {"timestamp": row.timestamp, "elapsed_s": round(row.elapsed_s, 3),
                          "gpu": row.gpu, "name": row.name, "uuid": row.uuid,
                          **{c: getattr(row, c) for c in GPU_COLUMNS},
                          **{c: getattr(counters, c) if counters else None for c in TRITON_COLUMNS},
                          "nvml_error": row.nvml_error or None,
                          **{OWN_PREFIX + c: getattr(row.gpu_triton, c) if row.gpu_triton else None
                             for c in TRITON_COLUMNS}}
                self._writer.writerow([_cell(values[c]) for c in COLUMNS])
            if self._models_writer:
                for row in model_rows:
                    self._models_writer.writerow(
                        [row.timestamp, _cell(round(row.elapsed_s, 3)), row.model, row.version,
                         *(_cell(getattr(row.counters, c)) for c in TRITON_COLUMNS)])
            for file in self._files:
                file.flush()


#: The largest recording diagnose reads whole (a week of 1 s samples of 8 GPUs is 1.4 GB).
CSV_MAX_BYTES = 2 << 30


# A row of a recording is under 1 KB; a longer line is no recording (a binary, a log).
CSV_LINE_MAX_CHARS = 1 << 20
_RECORDED_HINT = "give a file recorded by tritonkit monitor --csv FILE"


@contextmanager
def _csv_records(path: Path) -> Iterator[csv.DictReader]:
    """A recording's rows, read as they are iterated (a 2 GiB file is not held whole, nor
    one of its lines past CSV_LINE_MAX_CHARS); a file that is no UTF-8 CSV is a UsageError
    naming it."""
    fd = open_regular(path, what="the monitor CSV", limit=CSV_MAX_BYTES, hint=_RECORDED_HINT)
    with io.TextIOWrapper(os.fdopen(fd, "rb"), encoding="utf-8", newline="") as handle:
        try:
            yield csv.DictReader(_bounded_lines(handle, path))
        except UnicodeDecodeError:
            raise UsageError(f"{path} is not a text CSV (it is not UTF-8)",
                             hint=_RECORDED_HINT) from None
        except csv.Error as exc:
            raise UsageError(f"{path} is not a CSV tritonkit monitor wrote ({exc})",
                             hint=_RECORDED_HINT) from None


def _bounded_lines(handle: IO[str], path: Path) -> Iterator[str]:
    number = 0
    while line := handle.readline(CSV_LINE_MAX_CHARS + 1):
        number += 1
        if len(line) > CSV_LINE_MAX_CHARS:
            raise UsageError(f"line {number} of {path} is longer than "
                             f"{CSV_LINE_MAX_CHARS:,} characters: it is no recording of "
                             "tritonkit monitor", hint=_RECORDED_HINT)
        yield line


def read_models_csv(path: Path) -> list[ModelRow]:
    """Read a per-model CSV (``<stem>.models.csv``); UsageError naming the file, line and
    column on bad input."""
    path = Path(path)
    with _csv_records(path) as reader:
        missing = [c for c in MODEL_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise UsageError(f"{path} has no column '{missing[0]}': it is no per-model CSV",
                             hint="give the <stem>.models.csv tritonkit monitor --csv wrote")
        return [ModelRow(elapsed_s=_number(record["elapsed_s"], path, line, "elapsed_s") or 0.0,
                         model=record["model"], version=record["version"],
                         counters=ModelCounters(**{c: _number(record[c], path, line, c)
                                                   for c in TRITON_COLUMNS}),
                         timestamp=record["timestamp"])
                for line, record in enumerate(reader, start=2)]


def read_monitor_csv(path: Path) -> list[MonitorRow]:
    """Read a monitor CSV; UsageError naming the file, line and column on bad input."""
    path = Path(path)
    with _csv_records(path) as reader:
        header = reader.fieldnames or []
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            # Its header is not quoted: the file may be any file (a link), its first line a secret.
            raise UsageError(f"{path} has no column '{missing[0]}' in its first line: it is no "
                             "recording of tritonkit monitor",
                             hint="record it with tritonkit monitor --csv FILE")
        has_triton = "request_success" in header
        rows = []
        for line, record in enumerate(reader, start=2):
            number = lambda column: _number(record.get(column), path, line, column)  # noqa: E731
            counters = own = None
            if has_triton and (record.get("request_success") or "").strip():
                counters = ModelCounters(**{c: number(c) for c in TRITON_COLUMNS})
            if (record.get(OWN_PREFIX + "request_success") or "").strip():
                own = ModelCounters(**{c: number(OWN_PREFIX + c) for c in TRITON_COLUMNS})
            gpu = number("gpu")
            rows.append(MonitorRow(
                elapsed_s=number("elapsed_s") or 0.0,
                gpu=None if gpu is None else int(gpu), name=record.get("name") or "",
                timestamp=record.get("timestamp") or "", uuid=record.get("uuid") or "",
                **{c: number(c) for c in GPU_COLUMNS}, triton=counters,
                nvml_error=record.get("nvml_error") or "", gpu_triton=own))
    if not rows:
        raise UsageError(f"{path} has a header but no samples",
                         hint="record for longer: tritonkit monitor --duration 300 --csv FILE")
    return rows


def _number(text: str | None, path: Path, line: int, column: str) -> float | None:
    if text is None or not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{path}:{line}: column '{column}' is not a number",
                         hint="fix or drop that row") from None
    if math.isnan(value):               # no reading: earlier recordings wrote one as nan
        return None
    least, most = COLUMN_RANGES.get(column.removeprefix(OWN_PREFIX), (0.0, _COUNTED_MOST))
    if not least <= value <= most:     # inf too: no reading or counter is one
        raise UsageError(f"{path}:{line}: column '{column}' is not a number from {least:g} to "
                         f"{most:g}", hint="fix or drop that row")
    return value
