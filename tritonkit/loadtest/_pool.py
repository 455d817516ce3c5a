"""Load-test worker processes: started for one level, or kept between runs by a pool.

Workers are forked from multiprocessing's fork server, which has imported numpy, gevent
and the clients once (``_forkserver``): a worker spawned fresh imports them itself, 0.16-0.45
CPU s and up to seconds on a busy host, at every level of a run. Even forked, a worker is a
process to start and connections to open, which a run of many short measurements — a
tune's probes, two seconds each — pays again and again. A ``WorkerPool`` keeps the workers
once started and hands each run's plans to idle ones; a run ends as it would with fresh
workers, and a run that did not finish (an error, Ctrl-C) ends its workers rather than
trusting them with the next. A process is set up once for a kind of plan (open or
closed loop, one user or several: ``worker_kind``), and takes only plans of its kind.

Either way a run sees ``Crew``: its workers' pipes and processes, the shared ``stop``
flag and ``done`` counters, started together and let go together.
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from typing import Callable, ContextManager

from tritonkit.loadtest._worker import WorkerPlan, pooled_worker_main, worker_kind, worker_main

# A worker's process name starts with this (see _run's _WORKER_NAME).
WORKER_NAME = "tritonkit-loadtest-"
MAX_WORKERS = 64
_CLOSE_PATIENCE_S = 5.0         # idle workers leave at once when their pipe closes


def worker_context() -> multiprocessing.context.BaseContext:
    """Where workers are started from: multiprocessing's fork server, preloaded with what a
    worker imports (spawn where there is none). The fork server is one per process: its
    preload is set here, before it starts."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    # A worker imports the main script again (as spawn does): the console script's commands
    # come from the fork server too when this process runs them.
    main = ["tritonkit.cli"] if "tritonkit.cli" in sys.modules else []
    context.set_forkserver_preload(["tritonkit.loadtest._forkserver", *main])
    return context


class Crew:
    """One run's workers. ``start`` starts (or takes) one per plan, in order, holding
    signals with ``hold`` while each is started and counted; ``let_go`` ends the run for
    them — a finished run's go back to the pool, or end — and ``reap`` waits until those
    that end have, by ``give_up_at``, killing the rest."""

    def __init__(self, plans: list[WorkerPlan], hold: Callable[[], ContextManager]) -> None:
        self.plans, self._hold = plans, hold
        self.pipes: list = []
        self.procs: list = []
        self._ending: list = []
        self.stop = self.done = None    # the shared flag and counters: the subclass's

    def start(self) -> None:
        raise NotImplementedError

    def let_go(self, finished: bool) -> None:
        for pipe in self.pipes:     # a worker still waiting for its start time reads the end and leaves
            pipe.close()
        self._ending = list(self.procs)

    def reap(self, give_up_at: float) -> None:
        end_workers(self._ending, give_up_at)


class FreshCrew(Crew):
    """Workers started for this run alone, each with its plan: they end with it."""

    def __init__(self, plans: list[WorkerPlan], hold: Callable[[], ContextManager]) -> None:
        super().__init__(plans, hold)
        self._ctx = worker_context()
        self.stop = self._ctx.RawValue("b", 0)
        self.done = self._ctx.RawArray("q", len(plans))

    def start(self) -> None:
        for plan in self.plans:
            parent, child = self._ctx.Pipe()
            proc = self._ctx.Process(target=worker_main, args=(plan, child, self.done, self.stop),
                                     name=f"{WORKER_NAME}{plan.index}", daemon=True)
            with self._hold():          # a worker is started and counted, or neither
                proc.start()
                self.procs.append(proc)
                self.pipes.append(parent)
                child.close()


class WorkerPool:
    """Workers kept for many runs, one run at a time: pass it to ``run_loadtest``
    (``pool=``) and close it at the end (it is a context manager). Idle workers wait on
    their pipe and cost nothing; closing the pool ends them. Not for two threads at once."""

    def __init__(self) -> None:
        self._ctx = worker_context()
        self.stop = self._ctx.RawValue("b", 0)
        self.done = self._ctx.RawArray("q", MAX_WORKERS)
        self._idle: dict[tuple[bool, bool], list[tuple]] = {}
        self._started = 0
        self._closed = False

    @property
    def started(self) -> int:
        """Worker processes this pool has started so far."""
        return self._started

    @property
    def idle(self) -> int:
        return sum(len(kept) for kept in self._idle.values())

    def crew(self, plans: list[WorkerPlan], hold: Callable[[], ContextManager]) -> Crew:
        if self._closed:
            raise RuntimeError("this WorkerPool is closed")
        return _PooledCrew(self, plans, hold)

    def close(self) -> None:
        """End every idle worker: its pipe closed, it leaves; one that lingers is killed."""
        self._closed = True
        kept = [worker for workers in self._idle.values() for worker in workers]
        self._idle.clear()
        for pipe, _ in kept:
            pipe.close()
        end_workers([proc for _, proc in kept], time.monotonic() + _CLOSE_PATIENCE_S)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _take(self, kind: tuple[bool, bool], hold: Callable[[], ContextManager],
              taken: Callable[[object, object], None]) -> None:
        """An idle worker of ``kind``, or a new one: ``taken(pipe, proc)`` once it is counted."""
        kept = self._idle.get(kind)
        while kept:
            pipe, proc = kept.pop()
            if proc.is_alive():
                taken(pipe, proc)
                return
            pipe.close()
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=pooled_worker_main, args=(kind, child, self.done, self.stop),
                                 name=f"{WORKER_NAME}pool-{self._started}", daemon=True)
        with hold():
            proc.start()
            self._started += 1
            taken(parent, proc)
            child.close()

    def _keep(self, kind: tuple[bool, bool], pipe, proc) -> None:
        if self._closed:
            pipe.close()
            end_workers([proc], time.monotonic() + _CLOSE_PATIENCE_S)
            return
        self._idle.setdefault(kind, []).append((pipe, proc))


class _PooledCrew(Crew):
    """A pool's workers for one run: each is sent its plan; a finished run gives them back."""

    def __init__(self, pool: WorkerPool, plans: list[WorkerPlan],
                 hold: Callable[[], ContextManager]) -> None:
        super().__init__(plans, hold)
        self._pool = pool
        self.stop, self.done = pool.stop, pool.done
        self.stop.value = 0
        for index in range(len(plans)):
            self.done[index] = 0

    def start(self) -> None:
        def taken(pipe, proc) -> None:
            self.pipes.append(pipe)
            self.procs.append(proc)

        for plan in self.plans:
            self._pool._take(worker_kind(plan), self._hold, taken)
            self.pipes[-1].send(plan)

    def let_go(self, finished: bool) -> None:
        if not finished:            # a worker of a run cut short may be anywhere in it: it ends
            super().let_go(finished)
            return
        for plan, pipe, proc in zip(self.plans, self.pipes, self.procs):
            self._pool._keep(worker_kind(plan), pipe, proc)


def end_workers(procs: list, give_up_at: float) -> None:
    """Every worker leaves by ``give_up_at`` (one deadline for all), or is killed then."""
    for proc in procs:
        proc.join(timeout=max(0.0, give_up_at - time.monotonic()))
    left = [proc for proc in procs if proc.is_alive()]
    for proc in left:
        proc.kill()
    reaped_by = time.monotonic() + 1.0
    for proc in left:
        proc.join(timeout=max(0.0, reaped_by - time.monotonic()))

