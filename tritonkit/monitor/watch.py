"""The sampling loop behind ``tritonkit monitor``: NVML and Triton's metrics, every interval.

Every sample shares one clock. NVML is optional when Triton's metrics are watched (a
host without a driver still shows what the server counts); a Triton scrape that fails
after the first one is reported on the sample, not raised, so a server restart does
not end a day's recording.

The GPUs are the server's: NVML's where this host is the server's (only those Triton
reports, by UUID: the host's other cards are named in a note and not watched), else (no
driver here, or none of the GPUs NVML sees is among those Triton reports: a server
watched from another host) Triton's own GPU gauges. Pairing one host's GPUs with
another's traffic would diagnose a card that serves nothing.

A GPU's load is what Triton ran on it: the series Triton labels with its ``gpu_uuid``
(a CPU model's traffic is no GPU's, and a GPU the server's models do not run on serves
nothing). A server that labels no series (Triton 2.51 with every model loaded at its
start, server#7479) gives only the whole server's counters: then a GPU whose own
utilization is at the idle threshold or below while another's is above it served none
of it, and is not called starved for it (every GPU idle under traffic: each is).

The Triton counters a snapshot records are carried on model by model: unloading one
model (or swapping its version) removes its counters from Triton's sum, which read as
a server restart would pour every other model's lifetime count into one interval.

Those totals, and the server's and each GPU's load, leave ensembles out: Triton counts
an ensemble's request again in each model it runs, and its steps are the work the
server did. Which models are ensembles is asked of the server's HTTP address
(``EnsembleCheck``); where it cannot be asked they count as before, said in a note. The
per-model figures keep them: an ensemble's requests per second are what clients sent.
Each model version's own counters (``Snapshot.model_totals``, the per-model CSV) are
carried on the same way, version by version.
"""

from __future__ import annotations

import math
import signal
import time
from dataclasses import dataclass, field, fields, replace
from typing import Callable, Iterator

from tritonkit.errors import Interrupted, ServerError, TritonkitError, UsageError
from tritonkit.monitor.alerts import Alert, AlertThresholds, AlertTracker
from tritonkit.monitor.nvml import GpuSample, GpuUnavailableError, Nvml
from tritonkit.monitor.recording import ModelRow, MonitorRow, model_rows_for, rows_for
from tritonkit.monitor.triton_metrics import (EnsembleCheck, ModelCounters, ModelRates,
                                               TritonMetrics, gpu_increase, model_increase,
                                               plus, rates_of, scrape, server_gpus,
                                               since_load, version_increase)


@dataclass(frozen=True)
class Snapshot:
    """One sample of everything watched, with what changed since the previous one."""

    timestamp: float
    elapsed_s: float
    gpus: list[GpuSample]
    triton: TritonMetrics | None = None
    # Per model only: Triton counts an ensemble's request again in each model it runs
    # (measured: 5 requests to an ensemble of one step count 5 in each), so a sum over
    # models is no rate of what clients asked for. On the first sample (``since_load``)
    # there is no interval: they hold each model's means since it loaded, and no rates.
    model_rates: dict[str, ModelRates] = field(default_factory=dict)
    triton_error: str | None = None
    alerts: list[Alert] = field(default_factory=list)
    notes: tuple[str, ...] = ()      # what this sample cannot tell, or where it comes from
    # Triton's counters summed over models but ensembles, as the CSV records them (see
    # carry_counters)
    triton_totals: ModelCounters | None = None
    # the same per GPU uuid, of the series Triton labels with it; None: it labels none
    gpu_totals: dict[str, ModelCounters] | None = None
    # what Triton ran since the last sample, ensembles left out (ModelCounters.served)
    served: float | None = None
    # each (model, version)'s counters, ensembles too, carried on as triton_totals are
    model_totals: dict[tuple[str, str], ModelCounters] = field(default_factory=dict)
    since_load: bool = False         # the first sample: model_rates are means since load

    def rows(self) -> list[MonitorRow]:
        return rows_for(self.timestamp, self.elapsed_s, self.gpus, self.triton_totals,
                        self.gpu_totals)

    def model_rows(self) -> list[ModelRow]:
        """The per-model CSV's rows of this sample (none where the scrape failed)."""
        return model_rows_for(self.timestamp, self.elapsed_s, self.model_totals)


class Monitor:
    """Takes snapshots of the GPUs (``nvml``) and of Triton (``metrics_url``); the
    server's HTTP address (``http_url``, host:port) tells its ensembles apart."""

    def __init__(self, nvml: Nvml | None, metrics_url: str | None,
                 thresholds: AlertThresholds, *, http_url: str | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        if nvml is None and metrics_url is None:
            raise TritonkitError("nothing to monitor: no GPU and no Triton server given",
                                 hint="pass --url host:port or --repository DIR")
        self.nvml = nvml
        self.metrics_url = metrics_url
        self.ensembles = EnsembleCheck(http_url)
        self.tracker = AlertTracker(thresholds)
        self.clock = clock
        self._wall_clock = wall_clock
        self._start: float | None = None
        self._previous: TritonMetrics | None = None
        # Set by the first scrape that reports GPUs: whether NVML's are the server's, and
        # which they are. Both outlast a failed scrape, which would otherwise record this
        # host's cards in the remote server's place, or all of them.
        self._gpus_from_server = False
        self._server_uuids: set[str] = set()
        self._totals: ModelCounters | None = None
        self._gpu_totals: dict[str, ModelCounters] = {}
        self._model_totals: dict[tuple[str, str], ModelCounters] = {}

    def snapshot(self) -> Snapshot:
        now = self.clock()
        if self._start is None:
            self._start = now
        elapsed = now - self._start
        gpus = self.nvml.sample() if self.nvml else []
        triton, error = self._scrape(elapsed)
        notes = list(triton.notes) if triton else []
        if triton and triton.gpus:
            self._server_uuids = set(triton.gpus)
            self._gpus_from_server = not {g.uuid for g in gpus} & self._server_uuids
        if self._gpus_from_server:
            if triton and gpus:
                notes.append("the GPUs NVML sees on this host are not the server's (no UUID "
                             "in common with Triton's GPU metrics): showing the server's GPUs "
                             "from Triton's own gauges (no temperature, clocks or PCIe)")
            gpus = server_gpus(triton) if triton else []
        elif self._server_uuids:
            others = [g for g in gpus if g.uuid not in self._server_uuids]
            if others:
                names = ", ".join(f"GPU {g.index} ({g.uuid or 'no UUID'})" for g in others)
                notes.append(f"{names} on this host {'is' if len(others) == 1 else 'are'} not "
                             "among the server's GPUs (Triton's GPU metrics do not name "
                             f"{'it' if len(others) == 1 else 'them'}): not watched")
                gpus = [g for g in gpus if g.uuid in self._server_uuids]
        model_rates: dict[str, ModelRates] = {}
        served = None                        # what Triton ran since the last sample
        on_gpus = None                       # the same per GPU uuid, where Triton labels it
        previous = self._previous
        work = None                          # the scrape less its ensembles: the server's work
        if triton:
            left_out, note = self.ensembles.left_out(triton)
            notes += [note] if note else []
            work = triton.without(left_out)
        if triton and previous:
            seconds = triton.at - previous.at
            # model by model and version by version (a counter reset is a model's, a
            # version swap unloads one version's counters), then summed
            counted = {name: model_increase(previous, triton, name) for name in triton.models}
            model_rates = {name: rates_of(c, seconds) for name, c in counted.items()}
            before = previous.without(left_out)
            total = sum((model_increase(before, work, name) for name in work.models),
                        ModelCounters())
            served = total.served
            self._totals = carry_counters(self._totals, total, work.total())
            on_gpus = gpu_increase(before, work)
        elif triton:
            self._totals = work.total()
            model_rates = {name: since_load(c) for name, c in triton.models.items()}
        gpu_totals = self._carry_gpu_totals(work, on_gpus)
        model_totals = self._carry_model_totals(previous, triton)
        if triton:
            self._previous = triton
        alerts = [a for g in gpus
                  for a in self.tracker.observe(elapsed, g,
                                                self._served_by(g, served, gpus, on_gpus))]
        return Snapshot(timestamp=self._wall_clock(), elapsed_s=elapsed, gpus=gpus,
                        triton=triton, model_rates=model_rates,
                        triton_error=error, alerts=alerts, notes=tuple(notes),
                        triton_totals=self._totals if triton else None,
                        gpu_totals=gpu_totals, served=served, model_totals=model_totals,
                        since_load=triton is not None and previous is None)

    def _carry_model_totals(self, previous: TritonMetrics | None,
                            triton: TritonMetrics | None) -> dict[tuple[str, str], ModelCounters]:
        """Each model version's recorded counters, carried on as the server's are
        (``carry_counters``): a reload or restart takes nothing back. Empty for a sample
        whose scrape failed."""
        if triton is None:
            return {}
        now = {}
        for name, version in triton.model_versions():
            counters = triton.version_counters(name, version)
            counted = version_increase(previous, triton, name, version) if previous else counters
            now[(name, version)] = self._model_totals[(name, version)] = carry_counters(
                self._model_totals.get((name, version)), counted, counters)
        return now

    def _carry_gpu_totals(self, triton: TritonMetrics | None,
                          counted: dict[str, ModelCounters] | None
                          ) -> dict[str, ModelCounters] | None:
        """Each GPU's recorded totals, carried on as the server's are (``carry_counters``);
        None for a sample whose scrape failed or labels no series with a GPU."""
        now = triton.gpu_totals() if triton else None
        if now is None:
            return None
        for uuid, counters in now.items():
            self._gpu_totals[uuid] = carry_counters(
                self._gpu_totals.get(uuid), (counted or {}).get(uuid, counters), counters)
        return {uuid: self._gpu_totals[uuid] for uuid in now}

    def _served_by(self, gpu: GpuSample, served: float | None, gpus: list[GpuSample],
                   on_gpus: dict[str, ModelCounters] | None = None) -> float | None:
        """What Triton ran that counts as ``gpu``'s load: where Triton labels its series
        with GPUs, what it ran on this one (none, for a GPU it runs no model on). Else the
        server's count, except for a GPU idle by its own utilization while another is busy
        (the traffic was the other's). Every GPU idle under traffic: each is starved."""
        if on_gpus is not None:
            return on_gpus.get(gpu.uuid, ModelCounters()).served
        idle = self.tracker.thresholds.idle_utilization_pct
        others_busy = any(other is not gpu and other.utilization_pct is not None
                          and other.utilization_pct > idle for other in gpus)
        if (served and others_busy and gpu.utilization_pct is not None
                and gpu.utilization_pct <= idle):
            return 0.0
        return served

    def _scrape(self, elapsed: float) -> tuple[TritonMetrics | None, str | None]:
        if not self.metrics_url:
            return None, None
        try:
            return scrape(self.metrics_url, at=elapsed), None
        except ServerError as exc:
            if self._previous is None:
                raise  # the first scrape: a wrong address, say so now
            return None, exc.message

    def close(self) -> None:
        if self.nvml:
            self.nvml.close()


def open_monitor(metrics_url: str | None, thresholds: AlertThresholds,
                 nvml: Nvml | None = None, http_url: str | None = None
                 ) -> tuple[Monitor, str | None]:
    """A monitor on this host's GPUs and/or Triton's metrics (its HTTP address
    ``http_url`` tells its ensembles apart), and a note on what is missing.

    Without a driver the GpuUnavailableError is raised unless Triton's metrics are
    watched; then the note says the GPU part is absent. A GPU NVML counts but cannot
    reach (lost, or not this user's) is named in the note; the others are watched.
    """
    nvml = nvml or Nvml()
    try:
        nvml.open()
    except GpuUnavailableError as exc:
        if metrics_url is None:
            raise
        return Monitor(None, metrics_url, thresholds, http_url=http_url), (
            f"{exc.message}; watching Triton's metrics only")
    unreachable = "; ".join(map(str, nvml.unreachable))
    return Monitor(nvml, metrics_url, thresholds, http_url=http_url), (
        f"{unreachable}: not watched" if unreachable else None)


def watch(monitor: Monitor, interval: float, duration: float | None = None,
          once: bool = False, sleep: Callable[[float], None] = time.sleep) -> Iterator[Snapshot]:
    """Snapshots every ``interval`` seconds until ``duration`` (None: until interrupted).

    The schedule is fixed (start + k * interval), so slow scrapes do not drift it; the
    slots a slow sample ran past are skipped, not caught up on: samples fired back to
    back would give rates over a few milliseconds.
    """
    start = monitor.clock()
    slot = 0
    while True:
        yield monitor.snapshot()
        if once:
            return
        # the first slot still ahead (and never the one just taken, whatever the rounding)
        slot = max(slot + 1, math.floor((monitor.clock() - start) / interval) + 1)
        due = start + slot * interval
        if duration is not None and due - start > duration + 1e-9:
            return
        sleep(max(0.0, due - monitor.clock()))


def carry_counters(recorded: ModelCounters | None, counted: ModelCounters,
                   now: ModelCounters) -> ModelCounters:
    """The totals to record after ``recorded``: plus what the models ``counted`` since the
    last scrape (each model's increase, a reset taken as its own), so they never fall.
    A counter that was unknown starts again from Triton's sum ``now``; the pending
    requests, a gauge, are Triton's now."""
    if recorded is None:
        return now
    values = {f.name: getattr(now, f.name) if getattr(recorded, f.name) is None
              else plus(getattr(recorded, f.name), getattr(counted, f.name))
              for f in fields(ModelCounters)}
    return replace(ModelCounters(**values), pending_request_count=now.pending_request_count)


@dataclass
class Recording:
    """What ``diagnose --live`` sampled: the rows, the signal that ended it early (Ctrl-C's,
    or None), and the samples' notes (where the GPUs' figures came from, what they cannot
    tell), each once."""

    rows: list[MonitorRow] = field(default_factory=list)
    interrupted: int | None = None
    notes: list[str] = field(default_factory=list)


def record(monitor: Monitor, interval: float, duration: float,
           sleep: Callable[[float], None] = time.sleep) -> Recording:
    """Sample for ``duration`` seconds (``diagnose --live``). What was sampled before
    Ctrl-C (or SIGTERM, SIGHUP: ``Interrupted``) is kept, to be diagnosed: it is how a
    user stops a recording that has shown enough."""
    recording = Recording()
    try:
        for snapshot in watch(monitor, interval, duration, sleep=sleep):
            # Only the first sample can tell there is nothing to record: a later one
            # without a GPU is a failed scrape of the server whose gauges give them (a
            # restart), not the end. Without a GPU but with Triton's counters (a CPU
            # server) there is the server's verdict to give, as from a monitor CSV.
            if not snapshot.gpus and snapshot.triton is None and not recording.rows:
                raise UsageError("nothing to record: NVML reaches no GPU on this host and "
                                 "no Triton server is watched",
                                 hint="pass --repository DIR or --url host:port for Triton's "
                                      "counters, or run it on the GPU host")
            recording.rows += snapshot.rows()
            recording.notes += [n for n in snapshot.notes if n not in recording.notes]
    except (KeyboardInterrupt, Interrupted) as stop:
        if not recording.rows:
            raise
        recording.interrupted = getattr(stop, "signum", signal.SIGINT)
    return recording
