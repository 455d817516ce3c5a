"""Which wall is this deployment against? A monitor recording, read for its pattern.

The four walls of the field notes, checked in this order (the first that fits wins,
because the earlier ones make the later ones' symptoms):

    memory       memory near full while utilization stays low (OOM is next)
    bandwidth    PCIe rx or tx near what the link carries in most samples under load,
                 whatever the utilization: NVML's utilization counts time a kernel
                 runs, not copies, so a GPU waiting on a saturated link reads low (the
                 field notes' "utilization near 100 %" missed it, called it the I/O wall
                 or no wall at all). What a link carries is a share of its rated
                 bandwidth (the profile's, or the slower link the card was recorded
                 running on): a P100's Gen3 x16, rated 15.75 GB/s, moves ~11.7 GB/s
                 host to device from pinned memory (bandwidthTest), below 80 % of the
                 rating, so a wall judged against the rating could never show
    scheduling   Triton runs about one inference per execution with short compute
                 times while requests wait in its queue (at least one at a time on
                 average): launch and scheduling overhead dominate. With nothing waiting
                 there is nothing to batch: a client that sends one request at a time
                 is the I/O or client wall, and batching advice would not help it
    io           utilization low with memory to spare: the GPU is not fed (requests
                 queue in Triton, the input copy dominates, or the client sends too little)

Only samples taken under load count (Triton ran inferences in the interval, or without
Triton's columns the GPU was above the idle threshold). The server's counters leave
ensembles out (the recording module says how; older recordings count an ensemble's
requests and times in it as well as in its steps). Where the recording has a GPU's
own counters (the series Triton labels with its gpu_uuid), they are its load and its
figures: a GPU no model runs on is ``idle``, and a CPU model's traffic is no GPU's.
Where it has only the whole server's (Triton labels no series with a GPU: a CPU
server, Triton 2.51 with every model loaded at its start), a GPU's sample does not
count where the GPU itself was at the idle threshold or below while another was above
it (the traffic was the other's), so a card that served none of it is ``idle``, not
starved; where every GPU was idle under traffic, each was starved. Nothing fits:
``none``. No load at all: ``idle``. Every verdict carries its evidence numbers and
what to try.

A recording without GPU samples (a CPU server, or NVML unreadable) but with Triton's
columns, read from monitor's CSV or sampled by ``diagnose --live``, gets the server's
verdict alone: the scheduling wall or none, judged from Triton's counters (batches
formed, queue against compute time, requests waiting), with no GPU profile needed; the
memory, bandwidth and I/O walls need NVML's samples of a GPU.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from statistics import fmean

from tritonkit.errors import UsageError, shell_word
from tritonkit.monitor.alerts import Thresholds
from tritonkit.monitor.nvml import pcie_link_gb_s
from tritonkit.monitor.recording import MonitorRow
from tritonkit.monitor.triton_metrics import ModelCounters, increase, plus, ratio
from tritonkit.profiles import GpuProfile, available_profiles, load_profile

WALLS = ("memory", "bandwidth", "scheduling", "io", "none", "idle")
# Requests waiting in Triton's queue on average for small batches to be the scheduler's
# doing: below one, most requests found no other to be batched with.
BATCHABLE_QUEUE_DEPTH = 1.0

TITLES = {
    "memory": "memory wall",
    "bandwidth": "bandwidth wall (PCIe)",
    "scheduling": "scheduling wall",
    "io": "I/O or client wall",
    "none": "no wall: the GPU is doing the work",
    "idle": "no load recorded",
}
# The server's verdict, for a recording without GPU samples: only the scheduling wall shows.
SERVER_TITLES = {
    "scheduling": "scheduling wall",
    "none": "no scheduling wall: Triton forms batches or requests do not wait for them",
    "idle": "no load recorded",
}
NVML_NEEDED = ("only Triton's scheduling was judged: the memory, bandwidth and I/O walls "
               "need GPU samples (record on a GPU host)")


@dataclass(frozen=True)
class Figures:
    """The numbers a verdict rests on (None where the recording lacks them)."""

    samples: int
    loaded_samples: int
    seconds_under_load: float
    util_mean_pct: float | None
    mem_peak_pct: float | None
    mem_total_mib: float | None
    pcie_rx_mean_gb_s: float | None
    pcie_tx_mean_gb_s: float | None
    link_gb_s: float                     # the link the card ran on (at most the profile's)
    achievable_gb_s: float = 0.0         # what that link carries (a share of link_gb_s)
    # loaded samples whose rx or tx was near what the link carries, of those with PCIe figures
    saturated_samples: int = 0
    pcie_samples: int = 0
    link: str = ""                       # "PCIe Gen3 x16"
    link_below_profile: bool = False     # the host gave it a slower link than it is rated for
    requests: float | None = None
    inferences: float | None = None
    executions: float | None = None
    avg_batch: float | None = None
    compute_us: float | None = None
    queue_us: float | None = None
    queue_share: float | None = None
    input_share: float | None = None
    pending_max: float | None = None
    queue_depth: float | None = None     # requests waiting in Triton's queue, on average
    # loaded samples whose clocks something held down, by reason (NVML's clocks events)
    slowdown_samples: dict[str, int] = field(default_factory=dict)
    # intervals judged by the GPU's own counters (Triton's gpu_uuid label), not the server's
    own_intervals: int = 0

    @property
    def pcie_peak_direction_gb_s(self) -> float | None:
        values = [v for v in (self.pcie_rx_mean_gb_s, self.pcie_tx_mean_gb_s) if v is not None]
        return max(values) if values else None

    @property
    def saturated_share(self) -> float | None:
        return self.saturated_samples / self.pcie_samples if self.pcie_samples else None

    @property
    def has_triton(self) -> bool:
        return self.requests is not None


@dataclass(frozen=True)
class Diagnosis:
    """A GPU's verdict; or, with ``gpu`` None and no profile, the server's (a recording
    without GPU samples, judged from Triton's counters alone)."""

    gpu: int | None
    gpu_name: str
    profile: str
    wall: str
    title: str
    evidence: list[str]
    advice: list[str]
    figures: Figures
    notes: list[str] = field(default_factory=list)
    gpu_uuid: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def diagnose(rows: list[MonitorRow], profile: GpuProfile | None,
             thresholds: Thresholds) -> list[Diagnosis]:
    """One diagnosis per GPU in the recording; without GPU samples, the server's one from
    Triton's counters. ``profile`` None: the one the recorded GPU name matches."""
    by_gpu: dict[int, list[MonitorRow]] = {}
    lost: dict[int, list[MonitorRow]] = {}      # samples NVML could not read (nvml_error)
    for row in rows:
        if _is_gpu_sample(row):
            by_gpu.setdefault(row.gpu, []).append(row)
        elif row.gpu is not None and row.nvml_error:
            lost.setdefault(row.gpu, []).append(row)
    triton = _triton_intervals(rows)
    if not by_gpu:
        if any(r.triton is not None for r in rows):
            return [_diagnose_server(rows, triton, thresholds, profile,
                                     lost=[r for gpu_rows in lost.values() for r in gpu_rows])]
        raise UsageError("the recording has neither GPU samples (no util_pct values) nor "
                         "Triton's counters (no request_success values)",
                         hint="record on the GPU host: tritonkit monitor --csv FILE, with "
                              "--url or --repository for Triton's metrics")
    if profile is None:
        profile = choose_profile(rows, None)
    idle = thresholds.alerts.idle_utilization_pct
    busy = {gpu: {r.elapsed_s for r in gpu_rows if r.util_pct > idle}
            for gpu, gpu_rows in by_gpu.items()}
    return [_diagnose_gpu(gpu, sorted(gpu_rows, key=lambda r: r.elapsed_s), triton, profile,
                          thresholds, shared=len(by_gpu) > 1,
                          others_busy=frozenset().union(*(b for g, b in busy.items() if g != gpu)),
                          lost=lost.get(gpu, []))
            for gpu, gpu_rows in sorted(by_gpu.items())]


def _is_gpu_sample(row: MonitorRow) -> bool:
    return row.gpu is not None and row.util_pct is not None


def guess_profile(rows: list[MonitorRow]) -> str | None:
    """The profile whose name is a word of the recorded GPU name ("NVIDIA A10" -> a10)."""
    names = {r.name.lower() for r in rows if r.name}
    for profile in available_profiles("gpu"):
        pattern = re.compile(rf"\b{re.escape(profile.lower())}\b")
        if any(pattern.search(n) for n in names):
            return profile
    return None


# --- figures ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Interval:
    """What Triton counted between two scrapes, and the seconds between them: after a
    failed scrape, two sample steps or more, not one."""

    seconds: float
    counted: ModelCounters


def _triton_intervals(rows: list[MonitorRow]) -> dict[float, _Interval]:
    """Triton's counter increase over the interval ending at each sample time that has
    them, from the one before that has them.

    Monitor records totals that never fall (carried on model by model); a CSV recorded
    before it did holds raw sums, in which an unloaded model still reads as a restart."""
    series: dict[float, ModelCounters] = {}
    for row in rows:
        if row.triton is not None:
            series.setdefault(row.elapsed_s, row.triton)
    times = sorted(series)
    # a server restart in between: counted from zero (pending, a gauge, is kept)
    return {after: _Interval(after - before, increase(series[before], series[after]))
            for before, after in zip(times, times[1:])}


def _own_intervals(rows: list[MonitorRow]) -> dict[float, _Interval]:
    """A GPU's own counter increase (the series Triton labels with its uuid) over the
    interval ending at each of its samples that has them, from the one before that has
    them (a failed scrape between them is bridged, as the server's counters are)."""
    counted = [r for r in rows if r.gpu_triton is not None]
    return {after.elapsed_s: _Interval(after.elapsed_s - before.elapsed_s,
                                       increase(before.gpu_triton, after.gpu_triton))
            for before, after in zip(counted, counted[1:])}


def _figures(rows: list[MonitorRow], triton: dict[float, _Interval], profile: GpuProfile | None,
             thresholds: Thresholds, others_busy: frozenset[float] = frozenset()) -> Figures:
    """An interval's load is what the GPU's own counters counted where the recording has
    them. Else the server's: ``others_busy`` says when another GPU of the recording was
    busy, and where this one was idle and another busy the traffic was the other's;
    where every GPU was idle under traffic, each was starved."""
    idle = thresholds.alerts.idle_utilization_pct
    own = _own_intervals(rows)

    def window(row: MonitorRow) -> _Interval | None:
        if row.elapsed_s in own:
            return own[row.elapsed_s]
        if (row.elapsed_s in others_busy and row.util_pct is not None
                and row.util_pct <= idle):
            return None
        return triton.get(row.elapsed_s)

    if triton or own:
        loaded = [r for r in rows if window(r) is not None and window(r).counted.served]
        windows = [window(r) for r in loaded]
        # the time each interval took: one after a failed scrape spans two steps or more
        seconds = sum(w.seconds for w in windows)
    else:
        loaded = [r for r in rows if (r.util_pct or 0.0) > idle]
        windows = []
        seconds = _seconds_covered(rows, loaded)
    mean = lambda values: fmean(values) if values else None  # noqa: E731
    mem = [r.mem_pct for r in loaded if r.mem_pct is not None]
    rx = [r.pcie_rx_mb_s / 1000 for r in loaded if r.pcie_rx_mb_s is not None]
    tx = [r.pcie_tx_mb_s / 1000 for r in loaded if r.pcie_tx_mb_s is not None]
    link = _link(loaded, profile) if profile else dict(link_gb_s=0.0)   # no GPU: no link
    achievable = link["link_gb_s"] * thresholds.walls.pcie_achievable_fraction
    busiest = [max(v for v in (r.pcie_rx_mb_s, r.pcie_tx_mb_s) if v is not None) / 1000
               for r in loaded if (r.pcie_rx_mb_s, r.pcie_tx_mb_s) != (None, None)]
    near = thresholds.walls.pcie_link_fraction * achievable
    figures = dict(
        samples=len(rows), loaded_samples=len(loaded), seconds_under_load=seconds,
        util_mean_pct=mean([r.util_pct for r in loaded if r.util_pct is not None]),
        mem_peak_pct=max(mem) if mem else None,
        mem_total_mib=max((r.mem_total_mib or 0.0 for r in rows), default=None) or None,
        pcie_rx_mean_gb_s=mean(rx), pcie_tx_mean_gb_s=mean(tx),
        slowdown_samples=dict(Counter(r for row in loaded for r in row.slowdowns)),
        achievable_gb_s=achievable, pcie_samples=len(busiest),
        saturated_samples=sum(1 for v in busiest if v >= near),
        own_intervals=sum(1 for r in rows if r.elapsed_s in own), **link)
    if windows:
        total = sum((w.counted for w in windows), ModelCounters())
        compute = total.compute_duration_us
        requests = total.request_success
        pending = [w.counted.pending_request_count for w in windows]
        figures.update(
            requests=requests, inferences=total.inference_count, executions=total.exec_count,
            avg_batch=ratio(total.inference_count, total.exec_count),
            compute_us=ratio(compute, requests), queue_us=ratio(total.queue_duration_us, requests),
            queue_share=ratio(total.queue_duration_us,
                             plus(total.queue_duration_us, compute)),
            input_share=ratio(total.compute_input_duration_us, compute),
            pending_max=None if None in pending else max(pending),
            # Little's law: the time requests spent queued over the time it took
            queue_depth=ratio(total.queue_duration_us, seconds * 1e6))
    return Figures(**figures)


def _link(loaded: list[MonitorRow], profile: GpuProfile) -> dict:
    """The link the card ran on under load, as recorded, where slower than the profile's
    (a Gen4 card in a Gen3 slot, or on eight lanes); else the profile's."""
    rated = dict(link_gb_s=profile.bus.link_gb_s,
                 link=f"PCIe Gen{profile.bus.pcie_gen} x{profile.bus.pcie_lanes}")
    links = [(pcie_link_gb_s(r.pcie_gen, r.pcie_width), r) for r in loaded]
    links = [(speed, r) for speed, r in links if speed is not None]
    if not links:
        return rated
    speed, row = max(links, key=lambda pair: pair[0])   # an idle moment may train down
    if speed >= profile.bus.link_gb_s:
        return rated
    return dict(link_gb_s=speed, link=f"PCIe Gen{row.pcie_gen:.0f} x{row.pcie_width:.0f}",
                link_below_profile=True)


def _seconds_covered(rows: list[MonitorRow], loaded: list[MonitorRow]) -> float:
    if len(rows) < 2 or not loaded:
        return 0.0
    step = (rows[-1].elapsed_s - rows[0].elapsed_s) / (len(rows) - 1)
    return step * len(loaded)


# --- verdict ---------------------------------------------------------------------------------

def _classify(f: Figures, t: Thresholds) -> str:
    w = t.walls
    if f.loaded_samples == 0 or f.util_mean_pct is None:
        return "idle"
    low_util = f.util_mean_pct < w.low_utilization_pct
    if f.mem_peak_pct is not None and f.mem_peak_pct >= w.memory_full_pct and low_util:
        return "memory"
    share = f.saturated_share
    if share is not None and share >= w.pcie_saturated_share:
        return "bandwidth"
    if _scheduling(f, t):
        return "scheduling"
    if low_util:
        return "io"
    return "none"


def _scheduling(f: Figures, t: Thresholds) -> bool:
    """About one inference per execution, short compute, and requests waiting to be batched."""
    w = t.walls
    return (f.avg_batch is not None and f.avg_batch <= w.small_batch
            and f.compute_us is not None and f.compute_us <= w.short_compute_us
            and f.queue_depth is not None and f.queue_depth >= BATCHABLE_QUEUE_DEPTH)


def _diagnose_server(rows: list[MonitorRow], triton: dict[float, _Interval],
                     thresholds: Thresholds, profile: GpuProfile | None = None,
                     lost: list[MonitorRow] | None = None) -> Diagnosis:
    """The verdict Triton's counters give alone: the scheduling wall, or none."""
    figures = _figures(rows, triton, None, thresholds)
    if not figures.loaded_samples:
        wall = "idle"
    else:
        wall = "scheduling" if _scheduling(figures, thresholds) else "none"
    notes = [NVML_NEEDED]
    if lost:
        notes.append(f"NVML could not read the GPU in any of its {len(lost)} sample(s) (last: "
                     f"{lost[-1].nvml_error}): the card needs looking at (dmesg for Xid errors)")
    if profile is not None:
        notes.append(f"--gpu {shell_word(profile.name)} is not used: without GPU samples there is no "
                     "link or memory to judge against it")
    notes += _triton_gaps(figures)
    return Diagnosis(gpu=None, gpu_name="", profile="", wall=wall, title=SERVER_TITLES[wall],
                     evidence=[_load_line(figures)]
                     + _triton_evidence(figures, input_time="input preparation"),
                     advice=_server_advice(wall, figures, thresholds), figures=figures,
                     notes=notes)


def _triton_gaps(f: Figures) -> list[str]:
    """What Triton left uncounted, so that a check could not be made."""
    notes = []
    if f.has_triton and f.inferences is None:
        notes.append("Triton did not count inferences and executions (it runs with "
                     "--metrics-config counter_latencies=false): batch sizes could not be checked")
    if f.has_triton and f.compute_us is None:
        notes.append("Triton reported no queue or compute times (its latency counters and "
                     "summaries are off): queueing could not be checked")
    return notes


def _diagnose_gpu(gpu: int, rows: list[MonitorRow], triton: dict[float, _Interval],
                  profile: GpuProfile, thresholds: Thresholds, shared: bool = False,
                  others_busy: frozenset[float] = frozenset(),
                  lost: list[MonitorRow] | None = None) -> Diagnosis:
    figures = _figures(rows, triton, profile, thresholds, others_busy)
    wall = _classify(figures, thresholds)
    notes = []
    if lost:
        notes.append(f"NVML could not read this GPU in {len(lost)} sample(s), from "
                     f"{lost[0].elapsed_s:g} s (last: {lost[-1].nvml_error}): they are left "
                     "out, and the card needs looking at (dmesg for Xid errors)")
    if figures.own_intervals:
        notes.append("Triton's figures here are this GPU's own (the series Triton labels "
                     "with its gpu_uuid): traffic Triton does not place on a GPU (CPU model "
                     "instances; on Triton 2.51, GPU models loaded at server start, which it "
                     "leaves unlabelled) is not counted, and pending requests are the "
                     "models' schedulers', no GPU's")
    elif shared and figures.has_triton:
        notes.append("Triton's counters are the whole server's, not this GPU's: requests, "
                     "batches and queue times here are every GPU's together, and a sample "
                     "where this GPU was idle while another was busy (above "
                     f"{thresholds.alerts.idle_utilization_pct:g} % utilization) is not its load")
    if not figures.has_triton and wall not in ("idle",):
        notes.append("no Triton columns in the recording: batches and queueing could not be "
                     "checked (record with --url or --repository)")
    notes += _triton_gaps(figures)
    if figures.slowdown_samples:
        held = ", ".join(f"{reason} in {count}" for reason, count in
                         sorted(figures.slowdown_samples.items(), key=lambda kv: -kv[1]))
        notes.append(f"clocks were held down in samples under load ({held} of "
                     f"{figures.loaded_samples}): requests are slower while they are, P99 "
                     "spikes no wall explains" + (
                         "; the power cap is where a busy card runs, heat or the power brake "
                         "is not: check cooling, airflow and the board's power"
                         if set(figures.slowdown_samples) - {"sw_power_cap"} else ""))
    if figures.link_below_profile and wall != "bandwidth":
        notes.append(f"the card ran on {figures.link} ({figures.link_gb_s:g} GB/s), slower than "
                     f"the {profile.name}'s PCIe Gen{profile.bus.pcie_gen} "
                     f"x{profile.bus.pcie_lanes}: the slot, a riser or the BIOS limits it")
    if (wall != "memory" and figures.mem_peak_pct is not None
            and figures.mem_peak_pct > thresholds.alerts.memory_pct):
        notes.append(f"memory peaked at {figures.mem_peak_pct:.1f} %: OOM risk at a larger "
                     "batch or a second model")
    return Diagnosis(gpu=gpu, gpu_name=rows[0].name, profile=profile.name, wall=wall,
                     title=TITLES[wall], evidence=_evidence(figures, profile, thresholds),
                     advice=_advice(wall, figures, profile, thresholds), figures=figures,
                     notes=notes, gpu_uuid=next((r.uuid for r in rows if r.uuid), ""))


def _load_line(f: Figures) -> str:
    return f"{f.loaded_samples} of {f.samples} samples under load (~{f.seconds_under_load:.0f} s)"


def _evidence(f: Figures, profile: GpuProfile, t: Thresholds) -> list[str]:
    lines = [_load_line(f)]
    if f.util_mean_pct is not None:
        lines.append(f"utilization {f.util_mean_pct:.0f} % (mean under load)")
    if f.mem_peak_pct is not None:
        lines.append(f"memory {f.mem_peak_pct:.1f} % at peak"
                     + (f" of {f.mem_total_mib / 1024:.1f} GiB" if f.mem_total_mib else ""))
    pcie = f.pcie_peak_direction_gb_s
    if pcie is not None:
        lines.append(f"PCIe rx {f.pcie_rx_mean_gb_s or 0:.1f} / tx {f.pcie_tx_mean_gb_s or 0:.1f} "
                     f"GB/s (mean) = {100 * pcie / f.achievable_gb_s:.0f} % of the "
                     f"~{f.achievable_gb_s:.1f} GB/s that the "
                     + (f"card's link as recorded carries ({f.link}, rated {f.link_gb_s:g} GB/s; "
                        f"the {profile.name} is rated for PCIe Gen{profile.bus.pcie_gen} "
                        f"x{profile.bus.pcie_lanes}, {profile.bus.link_gb_s:g} GB/s)"
                        if f.link_below_profile else
                        f"{profile.name} link carries ({f.link}, rated {f.link_gb_s:g} GB/s)"))
        lines.append(f"PCIe near that limit (at least {100 * t.walls.pcie_link_fraction:.0f} % "
                     f"of it) in {f.saturated_samples} of {f.pcie_samples} samples under load")
    elif f.loaded_samples:      # (with none under load there is no mean to take at all)
        lines.append("PCIe: not recorded (the GPU's figures came without PCIe throughput, as "
                     "Triton's own gauges give them for a server watched from another host), "
                     "so the bandwidth wall is not judged")
    return lines + _triton_evidence(f)


def _triton_evidence(f: Figures, input_time: str = "input copy") -> list[str]:
    """Triton's side: batches formed, queue against compute time, requests waiting.

    ``input_time`` names Triton's compute_input time: on a GPU it is the copy of the
    inputs to the card; a CPU server (the server-side verdict) copies nothing over PCIe,
    its compute_input is input preparation."""
    lines = []
    if f.avg_batch is not None:
        lines.append(f"Triton: {f.inferences:.0f} inferences in {f.executions:.0f} executions "
                     f"= {f.avg_batch:.2f} per execution")
    elif f.requests is not None:
        lines.append(f"Triton: {f.requests:.0f} requests")
    if f.compute_us is not None:
        lines.append(f"Triton: compute {f.compute_us / 1000:.2f} ms, queue "
                     f"{(f.queue_us or 0) / 1000:.2f} ms per request "
                     f"(queue {100 * (f.queue_share or 0):.0f} % of server time, {input_time} "
                     f"{100 * (f.input_share or 0):.0f} % of compute)")
    if f.queue_depth is not None:
        lines.append(f"Triton: {f.queue_depth:.2f} requests waiting in its queue on average")
    if f.pending_max:
        lines.append(f"Triton: up to {f.pending_max:.0f} requests pending")
    return lines


def _other_profiles(profile: GpuProfile) -> list[GpuProfile]:
    others = []
    for name in available_profiles("gpu"):
        if name != profile.name:
            try:
                others.append(load_profile(name))
            except UsageError:
                continue
    return others


BATCHING_ADVICE = (
    "turn on dynamic batching (dynamic_batching { }) so Triton forms larger batches from "
    "small requests; if batches stay small under load, allow a queue delay "
    "(max_queue_delay_microseconds: 100 is a common first step) and check the p99 with "
    "tritonkit loadtest",
    "send batches from the client where it can (several inputs per request)")


def _server_advice(wall: str, f: Figures, t: Thresholds) -> list[str]:
    if wall == "scheduling":
        return [*BATCHING_ADVICE,
                "a second model instance (instance_group count one more) overlaps one "
                "execution with another"]
    if wall == "none":
        w = t.walls
        if f.avg_batch is not None and f.avg_batch > w.small_batch:
            why = f"batches form ({f.avg_batch:.2f} inferences per execution)"
        elif f.queue_depth is not None and f.queue_depth < BATCHABLE_QUEUE_DEPTH:
            why = (f"requests do not wait to be batched ({f.queue_depth:.2f} in the queue on "
                   "average): the client sends too little to batch")
        elif f.compute_us is not None and f.compute_us > w.short_compute_us:
            why = f"compute is long ({f.compute_us / 1000:.2f} ms per request)"
        else:
            why = "Triton's counters show no small batches waiting"
        advice = [f"{why}: Triton's scheduling is not what limits this server"]
        if (f.queue_share or 0) >= t.walls.queue_share or (f.pending_max or 0) > 0:
            advice.append(f"requests still wait in Triton's queue ({100 * (f.queue_share or 0):.0f} % "
                          "of server time): more model instances (instance_group count) or "
                          "more cores for them")
        return advice
    return ["record under load: start tritonkit monitor --csv FILE, then run tritonkit loadtest"]


def _advice(wall: str, f: Figures, profile: GpuProfile, t: Thresholds) -> list[str]:
    serving = profile.serving
    if wall == "memory":
        advice = []
        if profile.supports("fp16") and serving.precision == "fp32":
            advice.append("serve in FP16: it halves weights and activations")
        advice += [
            "lower max_batch_size, or the instance_group count "
            f"(the {profile.name} profile runs {serving.instance_count}); each instance holds "
            "its own copy of the weights",
            f"keep the profile's memory headroom ({serving.memory_headroom:.0%} free) and "
            "unload models that take no traffic"]
        bigger = [p for p in _other_profiles(profile) if p.memory.gib > profile.memory.gib]
        if bigger:
            best = max(bigger, key=lambda p: p.memory.gib)
            advice.append(f"a card with more memory: {best.display_name} has {best.memory.gib:g} GiB "
                          f"(the {profile.name} has {profile.memory.gib:g}) — --gpu {shell_word(best.name)}")
        else:
            advice.append("a card with more memory than "
                          f"{profile.memory.gib:g} GiB")
        return advice
    if wall == "bandwidth":
        advice = [
            "move less over PCIe: send FP16 or uint8 inputs and decode/preprocess on the GPU",
            "raise the pinned memory pool (server.toml pinned_memory_pool_byte_size): copies "
            "from pageable memory are slower and serialize",
            "batch on the server (dynamic_batching) so each copy is large, and keep outputs small"]
        if f.link_below_profile:
            advice.insert(0, f"give the card the link it is rated for: it ran on {f.link}, the "
                             f"{profile.name} takes PCIe Gen{profile.bus.pcie_gen} "
                             f"x{profile.bus.pcie_lanes} ({profile.bus.link_gb_s:g} GB/s) — another "
                             "slot, the riser, or the BIOS's PCIe setting")
        faster = [p for p in _other_profiles(profile) if p.bus.link_gb_s > profile.bus.link_gb_s]
        if faster:
            best = max(faster, key=lambda p: p.bus.link_gb_s)
            advice.append(f"a card on a faster link: {best.display_name} is PCIe Gen{best.bus.pcie_gen} "
                          f"({best.bus.link_gb_s:g} GB/s vs {profile.bus.link_gb_s:g}) — --gpu {shell_word(best.name)}")
        return advice
    if wall == "scheduling":
        advice = list(BATCHING_ADVICE)
        if serving.cuda_graphs:
            advice.append(f"CUDA graphs (optimization {{ cuda {{ graphs: true }} }}) cut launch "
                          f"overhead; the {profile.name} profile serves TensorRT plans, which honour them")
        else:
            advice.append(f"CUDA graphs would cut launch overhead but need the TensorRT backend, "
                          f"which the {profile.name} profile does not use: batching is the lever here")
        advice.append(f"a second model instance (instance_group count {serving.instance_count + 1}) "
                      "overlaps one execution's launches with another's")
        return advice
    if wall == "io":
        queueing = ((f.queue_share or 0) >= t.walls.queue_share or (f.pending_max or 0) > 0)
        input_bound = (f.input_share or 0) >= t.walls.input_share
        advice = []
        if queueing:
            advice.append("requests wait in Triton's queue while the GPU idles: raise the "
                          f"instance_group count (now {serving.instance_count}) and turn on dynamic "
                          "batching so queued requests run together")
        if input_bound:
            advice.append("the input copy dominates compute: pinned memory, smaller input "
                          "dtypes, or the shared-memory protocol on the same host")
        advice += [
            "feed the GPU faster: more data-loader workers, pinned memory, preprocessing off "
            "the request path",
            "check the client: more concurrency (tritonkit loadtest --concurrency N), several "
            "clients, gRPC instead of HTTP for large tensors",
            "a bigger card will not help until the GPU is fed"]
        return advice
    if wall == "none":
        return [f"the GPU is busy ({f.util_mean_pct:.0f} %) and no wall shows: throughput now "
                "scales with the card — lower precision or a faster card is the next lever"]
    return ["record under load: start tritonkit monitor --csv FILE, then run tritonkit loadtest"]


def choose_profile(rows: list[MonitorRow], gpu: str | None) -> GpuProfile | None:
    """``--gpu`` if given, else the profile the recorded GPU name matches; None for a
    recording without GPU samples (the server's verdict needs no profile)."""
    gpu_samples = any(_is_gpu_sample(r) for r in rows)
    if gpu:
        profile = load_profile(gpu)
        if profile.has_gpu:
            return profile
        if gpu_samples:
            raise UsageError(f"--gpu {shell_word(gpu)}: the {profile.name} profile has no GPU to judge the "
                             "recording's GPU samples against",
                             hint=f"name the GPU's profile ({', '.join(available_profiles('gpu'))}), "
                                  "or leave --gpu out to pick it by the GPU's name")
        return None                # a CPU server's recording: its verdict needs no profile
    if not gpu_samples:
        return None
    guessed = guess_profile(rows)
    if guessed is None:
        names = sorted({r.name for r in rows if r.name}) or ["no GPU name recorded"]
        raise UsageError(f"cannot tell which GPU profile the recording is from "
                         f"({', '.join(names)})",
                         hint=f"pass --gpu ({', '.join(available_profiles('gpu'))}); its PCIe link "
                              "limit decides the bandwidth wall")
    return load_profile(guessed)
