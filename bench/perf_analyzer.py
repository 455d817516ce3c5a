"""Running NVIDIA's perf_analyzer 2.51.0 (from tritonclient[all]==2.51.0) on this machine.

It links against libb64.so.0d and libcudart.so.12, which the nvidia-pytriton wheel
bundles under hashed names: we symlink them into a private folder on its
LD_LIBRARY_PATH. Used by the benchmarks as the reference load generator.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from tritonkit.server.binary import find_install


@dataclass(frozen=True)
class PerfResult:
    concurrency: int
    throughput: float        # inferences per second
    p50_us: float
    p90_us: float
    p95_us: float
    p99_us: float
    avg_us: float
    client_us: float | None = None           # its own send + receive time, mean per request
    server_us: float | None = None           # Triton's queue + compute, mean per request
    # perf_analyzer's exit status: not 0 when it found no stable window (it still writes the
    # last window's figures, which are then not the stable measurement asked for)
    returncode: int = 0
    # why it exited non-zero: "no stable window", or the last line it printed when it was not that
    failure: str | None = None
    # how it was run: its window (-p; the run's, after any retry), stability threshold (-s),
    # most windows (-r), the requests it sent before measuring (--warmup-request-count),
    # whether this is the second run (no figures from the first: windows twice as long),
    # and the windows it took (from -v's "Pass [n]" lines; None when it printed none)
    interval_ms: int | None = None
    stability_pct: int | None = None
    stability_percentile: int | None = None      # None: mean latency (and throughput)
    max_trials: int | None = None
    warmup_requests: int = 0
    retried: bool = False
    trials: int | None = None

    @property
    def measured_span_s(self) -> float | None:
        """What its figures cover: a stable result merges its last 3 windows."""
        return 3 * self.interval_ms / 1000 if self.interval_ms else None

    @property
    def stable(self) -> bool:
        return self.returncode == 0


def perf_analyzer_binary() -> Path:
    found = shutil.which("perf_analyzer") or str(Path(sys.executable).parent / "perf_analyzer")
    if not Path(found).exists():
        raise SystemExit("perf_analyzer not found: pip install 'tritonclient[all]==2.51.0'")
    return Path(found)


def _library_dir() -> Path:
    libs = find_install().libs
    target = Path(tempfile.gettempdir()) / "tritonkit-perf-analyzer-libs"
    target.mkdir(exist_ok=True)
    for pattern, name in (("libb64-*.so.0d", "libb64.so.0d"), ("libcudart-*.so.12*", "libcudart.so.12")):
        source = next(libs.glob(pattern))
        link = target / name
        # is_symlink, not exists: a link left dangling by an older wheel is pointed anew
        if link.is_symlink() and Path(os.readlink(link)) == source:
            continue
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(source)
    return target


def run_perf_analyzer(url: str, model: str, concurrency: int, *, protocol: str = "http",
                      interval_ms: int = 3000, batch_size: int = 1, shape: str | None = None,
                      stability_pct: int = 10, max_trials: int = 10, warmup_requests: int = 0,
                      stability_percentile: int | None = None,
                      extra: list[str] | None = None, timeout_s: float = 600) -> PerfResult:
    """One perf_analyzer measurement at a fixed concurrency (sync, stable windows).

    ``warmup_requests``: requests it sends at that concurrency before its first window
    (2.51's ``--warmup-request-count``, which its --help does not list but it takes:
    "Sending N warmup requests"), none counted. Its last 3 windows must agree within
    ``stability_pct`` in throughput and in mean latency (its default), or in the
    ``stability_percentile`` latency when given (--percentile). A run that ends without a
    stable window still reports its last one, with ``returncode`` set (``stable`` False):
    the benchmarks leave such rounds out. One that wrote no figures because no window was stable is run
    once more with windows twice as long (perf_analyzer's own advice: "increase the
    --measurement-interval"), ``retried`` set; a run that still wrote none raises, as does
    one still running after ``timeout_s`` (with the last lines it printed).
    """
    common = dict(protocol=protocol, batch_size=batch_size, shape=shape, stability_pct=stability_pct,
                  max_trials=max_trials, warmup_requests=warmup_requests,
                  stability_percentile=stability_percentile, extra=extra, timeout_s=timeout_s)
    try:
        return _run_perf_analyzer(url, model, concurrency, interval_ms=interval_ms, **common)
    except _NoFigures as unstable:
        if not unstable.unstable:
            raise RuntimeError(str(unstable)) from None
    try:
        return replace(_run_perf_analyzer(url, model, concurrency, interval_ms=2 * interval_ms, **common),
                       retried=True)
    except _NoFigures as again:
        raise RuntimeError(f"{again} (also with {2 * interval_ms} ms windows)") from None


class _NoFigures(Exception):
    """perf_analyzer wrote no figures; ``unstable``: because no window was stable."""

    def __init__(self, message: str, unstable: bool) -> None:
        super().__init__(message)
        self.unstable = unstable


_PASS = re.compile(r"^\s*Pass \[(\d+)\]", re.MULTILINE)


def _run_perf_analyzer(url: str, model: str, concurrency: int, *, protocol: str, interval_ms: int,
                       batch_size: int, shape: str | None, stability_pct: int, max_trials: int,
                       warmup_requests: int, stability_percentile: int | None,
                       extra: list[str] | None, timeout_s: float) -> PerfResult:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(_library_dir()),
                                                           env.get("LD_LIBRARY_PATH")]))
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "pa.csv"
        argv = [str(perf_analyzer_binary()), "-m", model, "-u", url, "-i", protocol,
                "-b", str(batch_size), "--concurrency-range", f"{concurrency}:{concurrency}",
                "-p", str(interval_ms), "-s", str(stability_pct), "-r", str(max_trials), "-f", str(report),
                "-v", *(extra or [])]
        if stability_percentile is not None:
            argv += ["--percentile", str(stability_percentile)]
        if warmup_requests > 0:
            argv += ["--warmup-request-count", str(warmup_requests)]
        if shape:
            argv += ["--shape", shape]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout_s)
        except subprocess.TimeoutExpired as late:
            said = _lines(_text(late.stdout)) + _lines(_text(late.stderr))
            raise RuntimeError(f"perf_analyzer still running after {timeout_s:.0f} s at concurrency "
                               f"{concurrency}; its last lines: {' | '.join(said[-4:]) or 'none'}") from None
        rows = []
        if report.exists():
            with report.open(newline="") as figures:
                rows = list(csv.DictReader(figures))
        if not rows:
            raise _NoFigures(f"perf_analyzer failed ({done.returncode}): "
                             f"{(done.stderr or done.stdout).strip()[-500:]}",
                             unstable=_failure(done) == "no stable window")
        row = rows[0]
    passes = [int(n) for n in _PASS.findall(done.stdout)]
    return PerfResult(
        concurrency=concurrency, throughput=float(row["Inferences/Second"]),
        p50_us=float(row["p50 latency"]), p90_us=float(row["p90 latency"]),
        p95_us=float(row["p95 latency"]), p99_us=float(row["p99 latency"]),
        avg_us=sum(float(row[k]) for k in ("Client Send", "Network+Server Send/Recv",
                                           "Server Queue", "Server Compute Input",
                                           "Server Compute Infer", "Server Compute Output",
                                           "Client Recv") if k in row),
        client_us=_sum(row, ("Client Send", "Client Recv")),
        server_us=_sum(row, ("Server Queue", "Server Compute Input", "Server Compute Infer",
                             "Server Compute Output")),
        returncode=done.returncode, failure=_failure(done),
        interval_ms=interval_ms, stability_pct=stability_pct, stability_percentile=stability_percentile,
        max_trials=max_trials, warmup_requests=max(0, warmup_requests),
        trials=max(passes) if passes else None)


_UNSTABLE = "Failed to obtain stable measurement"


def _failure(done: subprocess.CompletedProcess) -> str | None:
    """Why perf_analyzer exited non-zero, in a few words: "no stable window" when it said
    so, else the last line it printed (stderr first)."""
    if done.returncode == 0:
        return None
    if _UNSTABLE in done.stdout or _UNSTABLE in done.stderr:
        return "no stable window"
    said = _lines(done.stderr) or _lines(done.stdout)
    return f"exit {done.returncode}: {said[-1] if said else 'it printed nothing'}"


def _text(said: bytes | str | None) -> str:
    return said.decode(errors="replace") if isinstance(said, bytes) else (said or "")


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _sum(row: dict, keys: tuple[str, ...]) -> float | None:
    return sum(float(row[k]) for k in keys) if all(k in row for k in keys) else None


def warmup_requests_for(rate: float | None, warmup_s: float, concurrency: int) -> int:
    """How many warm-up requests give perf_analyzer about ``warmup_s`` of load, as our load
    generator gets (its --warmup-s), at ``rate`` requests/s (the last rate measured at this
    level; without one, 500 per concurrent request). At least one per concurrent request."""
    if warmup_s <= 0:
        return 0
    estimate = rate * warmup_s if rate and rate > 0 else 500 * concurrency
    return max(concurrency, round(estimate))
