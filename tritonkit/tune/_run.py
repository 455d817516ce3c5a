"""A whole tune: the baselines, the search within the budget, the interleaved comparison
of the winner with the baselines, the served config put back, the winner written."""

from __future__ import annotations

import dataclasses
import math
import socket
import statistics
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from tritonkit import __version__
from tritonkit.client import Endpoint
from tritonkit.errors import (EXIT_OK, EXIT_SLA_MISS, LoadTestError, ServerError, TritonkitError,
                              UsageError)
from tritonkit.loadtest import WorkerPool
from tritonkit.loadtest._run import MAX_CONCURRENCY as MOST_IN_FLIGHT
from tritonkit.loadtest._run import MAX_DURATION_S as MOST_PROBE_S
from tritonkit.profiles import TuneSpace, load_profile
from tritonkit.report import Sla
from tritonkit.server.state import load_deployment
from tritonkit.tune._interval import RatioInterval, interleave, paired_interval
from tritonkit.tune._search import Found, coordinate_search, highest_load, throughput_at_sla
from tritonkit.tune._space import (KNOBS, Candidate, applicable, candidate_config, check_space,
                                   cpu_space, merged, on_gpu, parse_served, served_point)
from tritonkit.tune._trial import Refused, ServedModel
from tritonkit.tune._write import WriteTarget, write_winner

SERVED, BARE = "served", "bare default"
DEFAULT_BUDGET_S = 300.0
# The longest --budget-s: a day (as a load test's longest --warmup-s); more is a typo
# (inf, 1e300) that would hold the server's config swapped out for as long.
MAX_BUDGET_S = 86_400.0
# A change of knob is kept when it beats the config it replaces by this much: less is the
# noise of a shared machine (one config measured four times back to back spread 1.85x).
MIN_GAIN = 0.05
# The comparison's rounds: at least, at most, and the width it stops at (each side).
MIN_ROUNDS, MAX_ROUNDS, PRECISION, CONFIDENCE = 2, 10, 0.05, 0.95
#: The most requests in flight the search tries a config at.
MAX_CONCURRENCY = 256
# The comparison's share of the budget: the search leaves it that much, and it takes no more
# (a search done early ends the tune early, not in longer comparison rounds).
COMPARE_SHARE = 1 / 3


@dataclass
class Trial:
    """One config tried: its knobs, its figures, or why it has none."""

    point: Candidate
    role: str = ""                      # SERVED, BARE, or "" for a point of the search
    found: Found | None = None
    load_s: float | None = None
    skipped: str | None = None          # Triton's refusal, a failed warm-up, failed requests
    seconds: float = 0.0                # the trial's wall time, swap and search

    @property
    def label(self) -> str:
        return f"{self.point.label} ({self.role})" if self.role and not self.point.bare else self.point.label

    def meets(self, sla: Sla) -> bool:
        return (self.found is not None and self.found.judged is not None
                and (sla.min_qps is None or self.found.throughput >= sla.min_qps))

    def score(self, sla: Sla) -> float | None:
        """Higher is better: the throughput at the SLA where it is met, else minus how many
        times over it the config stayed (its best p99 against the limit, or the minimum
        throughput against what it carried). None: not measured."""
        if self.found is None:
            return None
        if self.meets(sla):
            return self.found.throughput
        if self.found.judged is not None:
            return -(sla.min_qps / max(self.found.throughput, 1e-9))
        best = self.found.best_p99_ms
        return None if best is None else -(best / sla.p99_ms)

    def as_dict(self, sla: Sla) -> dict:
        found = self.found
        return {"config": self.point.label, "role": self.role or None, "knobs": self.point.knobs(),
                "bare": self.point.bare, "meets_sla": self.meets(sla), "skipped": self.skipped,
                "load_s": self.load_s, "seconds": self.seconds,
                "throughput_at_sla": found.throughput if found else None,
                "concurrency_at_sla": found.concurrency if found else None,
                "judged": dataclasses.asdict(found.judged) if found and found.judged else None,
                "best_p99_ms": found.best_p99_ms if found else None,
                "not_judged_below_qps": found.below if found else None,
                "probes": [dataclasses.asdict(p) for p in found.probes] if found else []}


@dataclass
class Comparison:
    """The winner against one baseline, re-measured interleaved: each round's throughput
    (closed loop, each side at its own highest concurrency under the SLA that round, and
    that concurrency) and the ratio's interval."""

    baseline: str
    winner_runs: list[float]
    baseline_runs: list[float]
    interval: RatioInterval | None
    winner_concurrency: list[int | None] = field(default_factory=list)
    baseline_concurrency: list[int | None] = field(default_factory=list)

    def describe(self) -> str:
        if self.interval is None:
            return f"vs {self.baseline}: too few rounds for an interval"
        return f"vs {self.baseline}: {self.interval.describe()}"

    def as_dict(self) -> dict:
        return {"baseline": self.baseline, "winner_runs": self.winner_runs,
                "baseline_runs": self.baseline_runs,
                "winner_concurrency": self.winner_concurrency,
                "baseline_concurrency": self.baseline_concurrency,
                "interval": self.interval.as_dict() if self.interval else None}


@dataclass
class TuneResult:
    """Everything a tune did and found."""

    model: str
    server: str
    sla: Sla
    space: TuneSpace
    trials: list[Trial]
    best: Trial | None = None           # the highest throughput at the SLA the search measured
    winner: Trial | None = None         # what the tune stands by: best, or the served config
    closest: Trial | None = None        # none met the SLA: the one that came nearest
    comparisons: list[Comparison] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    not_tried: int = 0                  # points the budget left out
    written: Path | None = None
    elapsed_s: float = 0.0
    budget_s: float = DEFAULT_BUDGET_S
    started_at: str = ""
    host: str = ""
    target: str = ""                    # "cpu" (the local copy, or a CPU server) or "gpu"
    profile: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.winner is not None else EXIT_SLA_MISS

    def as_dict(self) -> dict:
        return {"model": self.model, "server": self.server, "started_at": self.started_at,
                "host": self.host, "tritonkit_version": __version__, "target": self.target,
                "profile": self.profile, "sla": dataclasses.asdict(self.sla),
                "space": dataclasses.asdict(self.space), "budget_s": self.budget_s,
                "elapsed_s": self.elapsed_s, "exit_code": self.exit_code,
                "winner": self.winner.label if self.winner else None,
                "best": self.best.label if self.best else None,
                "closest": self.closest.label if self.closest else None,
                "comparisons": [c.as_dict() for c in self.comparisons],
                "notes": self.notes, "not_tried": self.not_tried,
                "written": str(self.written) if self.written else None,
                "trials": [t.as_dict(self.sla) for t in self.trials]}


@dataclass(frozen=True)
class TuneProgress:
    """What a progress bar shows: the phase, the config in hand, trials done, the clock."""

    phase: str
    current: str
    trials_done: int
    elapsed_s: float
    budget_s: float


def check_times(budget_s: float, probe_s: float) -> None:
    """A UsageError naming --budget-s or --probe-s for a time that is not one (0, nan,
    inf) or past its bound, before anything needs a server: a load level is measured as a
    load test's --duration is, at most MOST_PROBE_S."""
    if not budget_s > 0 or not probe_s > 0:
        raise UsageError(f"--budget-s ({budget_s:g}) and --probe-s ({probe_s:g}) must be > 0",
                         hint="e.g. --budget-s 300 --probe-s 2")
    for flag, seconds, most in (("--budget-s", budget_s, MAX_BUDGET_S),
                                ("--probe-s", probe_s, MOST_PROBE_S)):
        if not seconds <= most:
            raise UsageError(f"{flag} {seconds:g} is not a time of at most {most:g} s",
                             hint=f"give {flag} in seconds, e.g. {flag} "
                                  f"{DEFAULT_BUDGET_S if flag == '--budget-s' else 2:g}")


def tune(endpoint: Endpoint, model: str, sla: Sla, *, space: TuneSpace | None = None,
         space_keys: set[str] | None = None, gpu: str | None = None,
         budget_s: float = DEFAULT_BUDGET_S, protocol: str = "http", shapes: tuple = (),
         probe_s: float = 2.0, max_concurrency: int = MAX_CONCURRENCY,
         write: WriteTarget | None = None,
         repository: Path | None = None,
         progress: Callable[[TuneProgress], None] | None = None,
         clock: Callable[[], float] = time.monotonic) -> TuneResult:
    """Find the config of ``model`` with the highest throughput that meets ``sla`` on the
    server at ``endpoint``, within ``budget_s`` seconds, and show that its gain is real.

    The space: on a server that runs the model on the CPU (the local target), the local
    the CPU profile's (``configs/gpus/cpu.toml``); on a GPU, the ``[tune]`` table of the profile ``gpu``
    (by default the one the deployment in ``repository`` serves);
    ``space`` replaces the lists it gives (``space_keys``: the keys its file named).
    ``probe_s``: seconds measured per load level; ``max_concurrency``: the most requests in
    flight a config is tried at. ``write``: where the winner goes
    (checked before anything runs). The served config is put back at the end, on an error
    and on Ctrl-C or SIGTERM (``Interrupted``), before the exception goes on.
    """
    if sla.p99_ms is None:
        raise UsageError("tune needs a p99 limit to meet", hint="e.g. --sla-p99-ms 10")
    if not 1 <= max_concurrency <= MOST_IN_FLIGHT:
        raise UsageError(f"--max-concurrency must be 1 to {MOST_IN_FLIGHT}, what one load "
                         f"generator holds in flight (got {max_concurrency})",
                         hint="e.g. --max-concurrency 64")
    check_times(budget_s, probe_s)
    started = clock()
    result = TuneResult(model=model, server=endpoint.http_url, sla=sla, space=TuneSpace(),
                        trials=[], budget_s=budget_s, host=socket.gethostname(),
                        started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    phase = {"name": "baselines", "current": ""}

    def tell(current: str | None = None) -> None:
        if current is not None:
            phase["current"] = current
        if progress is not None:
            progress(TuneProgress(phase["name"], phase["current"], len(result.trials),
                                  clock() - started, budget_s))

    # The load generator's workers are started once for the whole tune, and end with it.
    pool = WorkerPool()
    served_model = ServedModel(endpoint, model, protocol=protocol, shapes=tuple(shapes),
                               probe_s=probe_s, repository=repository, tick=tell, pool=pool)
    original = served_model.served_config()
    served = parse_served(original)
    result.target = "gpu" if on_gpu(served) else "cpu"
    gpu = gpu or _deployed_profile(repository)
    profile = load_profile(gpu) if gpu else None
    result.profile = profile.name if profile else None
    if result.target == "gpu" and profile is None:
        raise UsageError(f"'{model}' runs on a GPU: its space is its card's profile's",
                         hint="pass --gpu with the card's profile, e.g. --gpu a10")
    base = cpu_space() if result.target == "cpu" else profile.tune
    wanted, notes = applicable(served, merged(base, space, space_keys), local=result.target == "cpu")
    check_space(wanted)
    result.space, result.notes = wanted, notes
    if write is not None:
        write.check()
    start_point = served_point(served, wanted)
    with pool:
        try:
            _search(result, served_model, served, start_point, sla, max_concurrency, clock, started,
                    phase, tell)
            _compare(result, served_model, served, sla, max_concurrency, clock, started, phase,
                     tell)
        except ServerError as exc:          # the server failed or went away in the middle
            error = LoadTestError(exc.message, hint=exc.hint, detail=exc.detail)
            _restore(served_model, original, phase, tell, error)
            raise error from None
        except BaseException as exc:        # Ctrl-C, SIGTERM, a run error: put it back, then go on
            _restore(served_model, original, phase, tell, exc)
            raise
        _restore(served_model, original, phase, tell)
    result.elapsed_s = clock() - started
    if write is not None and result.winner is not None:
        result.written = write_winner(write, result, served_point=start_point)
    return result


def _deployed_profile(repository: Path | None) -> str | None:
    """The profile a recorded deployment serves (its deploy's --gpu), if any."""
    if repository is None:
        return None
    try:
        return load_deployment(repository).extra.get("gpu")
    except UsageError:
        return None


def _restore(served_model: ServedModel, original: dict, phase: dict, tell,
             failing: BaseException | None = None) -> None:
    """The served config back. When the run is failing already, a restore that fails too is
    added to that error's hint rather than hiding it."""
    phase["name"] = "restoring"
    tell("the served config")
    try:
        served_model.restore(original)
    except TritonkitError as exc:
        if failing is None:
            raise
        if isinstance(failing, TritonkitError):
            failing.hint = "; ".join(filter(None, [failing.hint, f"and {exc.message}"]))


def _search(result: TuneResult, served_model: ServedModel, served, start_point: Candidate,
            sla: Sla, most: int, clock, started: float, phase: dict, tell) -> None:
    """The baselines (served, bare default), then the walk over the space."""
    budget_s = result.budget_s
    hint = {"start": min(4, most)}
    shares: list[float] = []            # each config's open-loop share (Found.rate_share)
    reserve = budget_s * COMPARE_SHARE

    def out_of_time() -> bool:
        trials = [t.seconds for t in result.trials]
        typical = sum(trials) / len(trials) if trials else 0.0
        return clock() - started + typical + reserve > budget_s

    def run(point: Candidate, role: str = "", swap: bool = True, to_keep: float = 0.0) -> Trial:
        trial = Trial(point=point, role=role)
        began = clock()
        tell(trial.label)
        try:
            if swap:
                trial.load_s = served_model.swap(candidate_config(served, point))
            else:
                served_model.warm()
            # A point of the search is judged no lower than it must reach to be kept by the
            # walk and to be the best figure so far: under that it changes neither. (A
            # baseline's figure is reported whatever it is.)
            best_so_far = max([0.0, *(t.score(sla) or 0.0 for t in result.trials)])
            floor = 0.0 if role else min(to_keep, best_so_far)
            trial.found = highest_load(served_model.measure, sla.p99_ms, start=hint["start"],
                                       most=most, out_of_time=out_of_time, floor=floor,
                                       rate_share=statistics.median(shares) if shares else 1.0)
        except Refused as refused:
            if role == SERVED:
                raise LoadTestError(f"the served config of '{result.model}' could not be "
                                    f"measured: {refused.reason}",
                                    hint="check the model with tritonkit loadtest") from None
            trial.skipped = refused.reason
        trial.seconds = clock() - began
        if trial.found and trial.found.concurrency:
            hint["start"] = trial.found.concurrency
        if trial.found and trial.found.rate_share is not None:
            shares.append(trial.found.rate_share)
        result.trials.append(trial)
        tell()
        return trial

    by_point: dict[Candidate, Trial] = {}
    by_point[start_point] = run(start_point, SERVED, swap=False)
    by_point[Candidate(bare=True)] = run(Candidate(bare=True), BARE)
    phase["name"] = "search"
    values = {k: getattr(result.space, k) for k in KNOBS if getattr(result.space, k)}
    def evaluate(point: Candidate, to_keep: float) -> float | None:
        if point not in by_point:
            by_point[point] = run(point, to_keep=to_keep)
        return by_point[point].score(sla)

    coordinate_search(start_point, values, evaluate, min_gain=MIN_GAIN, out_of_time=out_of_time)
    result.not_tried = max(0, _space_size(values) - len([p for p in by_point if not p.bare]))
    measured = [t for t in result.trials if t.score(sla) is not None]
    if not measured:
        return
    best = max(measured, key=lambda t: t.score(sla))
    if best.meets(sla):
        result.best = best
    else:
        result.closest = best


def _space_size(values: dict) -> int:
    return math.prod(len(v) for v in values.values()) if values else 0


def _compare(result: TuneResult, served_model: ServedModel, served, sla: Sla, most: int, clock,
             started: float, phase: dict, tell) -> None:
    """The best config against the served config and the bare default, interleaved, each
    side in each round at its own load under the SLA, found again from where it met last
    (``throughput_at_sla``: what an independent perf_analyzer climb measures of it, not the
    figure at a concurrency the search found minutes before); the winner is the best
    unless the served config meets the SLA and the best is not shown to beat it."""
    best = result.best
    if best is None:
        return
    phase["name"] = "compare"
    sides = {best.label: best}
    for trial in result.trials:
        if trial.role and trial is not best and trial.found and trial.found.concurrency:
            sides[trial.label] = trial
    if len(sides) == 1:
        result.winner = best
        return
    names = list(sides)
    levels: dict[str, list[int | None]] = {name: [] for name in names}
    start = {name: trial.found.concurrency for name, trial in sides.items()}

    def run(name: str) -> float:
        trial = sides[name]
        tell(f"{name} (round {len(levels[name]) + 1})")
        try:
            served_model.swap(candidate_config(served, trial.point))
            at = throughput_at_sla(served_model.measure, sla.p99_ms, start=start[name], most=most)
        except Refused as refused:
            raise LoadTestError(f"a comparison run of {name} failed: {refused.reason}",
                                hint="rerun tune; if it persists, the config is unstable") from None
        levels[name].append(at.concurrency)
        start[name] = at.concurrency or start[name]
        return at.qps

    began = clock()

    def time_left() -> float:
        now = clock()
        return min(result.budget_s - (now - started), result.budget_s * COMPARE_SHARE - (now - began))

    figures = interleave(names, run, min_rounds=MIN_ROUNDS, max_rounds=MAX_ROUNDS,
                         precision=PRECISION, confidence=CONFIDENCE, time_left=time_left, clock=clock)
    for name in names[1:]:
        result.comparisons.append(Comparison(
            baseline=sides[name].role, winner_runs=figures[names[0]], baseline_runs=figures[name],
            interval=paired_interval(figures[names[0]], figures[name], CONFIDENCE),
            winner_concurrency=levels[names[0]], baseline_concurrency=levels[name]))
    served_trial = next((t for t in result.trials if t.role == SERVED), None)
    versus_served = next((c for c in result.comparisons if c.baseline == SERVED), None)
    if (best is not served_trial and served_trial is not None and served_trial.meets(sla)
            and versus_served is not None
            and (versus_served.interval is None or versus_served.interval.low <= 1.0)):
        result.winner = served_trial
        result.notes.append(f"the served config stays: {best.point.label} measured best in the "
                            f"search, but not shown to beat it ({versus_served.describe()})")
    else:
        result.winner = best
