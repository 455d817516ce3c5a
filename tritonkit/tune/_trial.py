"""The model on the running server, as a tune sees it: its served config, another config
loaded in its place and warmed up, a load measured, the original put back.

A config is swapped without a restart: Triton's load API takes a config override
(``POST /v2/repository/models/NAME/load`` with ``parameters.config``) behind the
deployment's secret header, and the old config serves until the new one is READY. Our
warm-up then runs before anything is measured, so no cold start lands in a figure."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable

from tritonclient.grpc import model_config_pb2 as mc

from tritonkit.client import Endpoint, health, triton_message
from tritonkit.errors import (Interrupted, LoadTestError, ModelLoadError, ServerError, TritonkitError,
                              UsageError)
from tritonkit.loadtest import NOT_SENT, Flags, LoadSpec, WorkerPool, run_loadtest
from tritonkit.server.local import Deadline
from tritonkit.tune._search import CLOSED, Probe
from tritonkit.tune._space import as_json
from tritonkit.warmup import (check_triton, load_and_warm, load_model, quiet_interrupts,
                              repository_index)

# Warm-up requests per swap: every batch size of the config until steady, as a deploy's.
WARMUP_REQUESTS = 500
# Seconds of untimed load before each probe (less for a shorter probe).
PROBE_WARMUP_S = 0.5
# tune's own flags, as the load test's hints name them: --shape alone sizes its requests.
TUNE_FLAGS = Flags(request=("--shape",), load="--max-concurrency",
                   grpc="pass --repository DIR of the deployment (its state holds the gRPC port)")


class Refused(Exception):
    """A config that could not be measured: Triton refused to load it, its warm-up failed,
    or requests to it failed. ``reason`` says which, in the server's words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ServedModel:
    """``model`` on the server at ``endpoint``: loads and measurements, each bounded."""

    def __init__(self, endpoint: Endpoint, model: str, *, protocol: str = "http",
                 shapes: tuple = (), probe_s: float = 2.0, probe_warmup_s: float | None = None,
                 load_timeout_s: float = 120.0, repository: Path | None = None,
                 tick: Callable[[], None] | None = None, pool: WorkerPool | None = None) -> None:
        self.endpoint, self.model, self.protocol, self.shapes = endpoint, model, protocol, shapes
        # The load generator's workers, kept from one measurement to the next: a fresh
        # one costs seconds to start here, more than a short probe measures.
        self.pool = pool
        # Untimed load before each probe, as long as the probe at most: one asked short is
        # asked for speed (a warm-up of 0.5 s beside 0.3 s measured was 60 % of a tune's load).
        self.probe_s = probe_s
        self.probe_warmup_s = (min(PROBE_WARMUP_S, probe_s) if probe_warmup_s is None
                               else probe_warmup_s)
        self.load_timeout_s, self.repository = load_timeout_s, repository
        self._tick = tick or (lambda: None)
        # The config the last swap loaded and warmed, while nothing has failed since: the
        # comparison's rounds run A B, then B A, and the side that ends one round starts the
        # next, served and warm already.
        self._swapped: dict | None = None

    def served_config(self) -> dict:
        """The config the server serves now (its JSON), after checking that the secret
        opens the model-repository API (a wrong or missing one is said before anything is
        touched) and that the model is READY."""
        quiet_interrupts()
        client = self.endpoint.http(connection_timeout=5.0, network_timeout=30.0)
        try:
            check_triton(client)            # Triton 2, or NotTriton
            index = repository_index(client, self.endpoint)
            if self.model not in index:
                raise UsageError(f"no model named '{self.model}' in the server's repository",
                                 hint=f"models there: {', '.join(sorted(index)) or 'none'}")
            if not client.is_model_ready(self.model):
                raise UsageError(f"model '{self.model}' is not READY on {self.endpoint.http_url}",
                                 hint="load it first: tritonkit warmup --model " + self.model)
            return client.get_model_config(self.model)
        except TritonkitError:
            raise
        except Exception as exc:
            raise ServerError(f"could not read model '{self.model}' from "
                              f"{self.endpoint.http_url} ({triton_message(exc)})",
                              hint="is the server up? tritonkit deploy starts one") from None
        finally:
            client.close()

    def warm(self) -> None:
        """Warm up the config served now, as every trial is before it is measured."""
        try:
            self._warm_up(Deadline(self.load_timeout_s))
        except TritonkitError as exc:
            raise self._refused_or_gone(exc, "was warmed") from None
        except Exception as exc:            # the server went away
            raise self._stopped_answering("was warmed", exc) from None
        self._tick()

    def swap(self, config: mc.ModelConfig | dict) -> float:
        """Load ``config`` in place of the served one and warm it up; the seconds it took.
        ``Refused`` when Triton will not load it or its warm-up fails (the old config then
        keeps serving, or the model is out until the next swap). The config the last swap
        loaded is served and warm: swapped again, nothing is done (0 s)."""
        body = config if isinstance(config, dict) else as_json(config)
        if body == self._swapped:
            return 0.0
        self._swapped = None
        deadline = Deadline(self.load_timeout_s)
        try:
            seconds = load_model(self.endpoint, self.model, deadline, config=body)
            self._tick()
            self._warm_up(deadline)
        except ModelLoadError as exc:
            raise Refused(exc.message.removeprefix(f"Triton could not load '{self.model}': ")) from None
        except TritonkitError as exc:
            raise self._refused_or_gone(exc, "loaded") from None
        except Exception as exc:            # the server went away
            raise self._stopped_answering("loaded", exc) from None
        self._swapped = copy.deepcopy(body)
        self._tick()
        return seconds

    def _warm_up(self, deadline: Deadline) -> None:
        # The server answered a moment ago: one not live now is gone (a restart would serve
        # other configs than the ones measured), not waited for until the deadline, as a
        # warm-up waits for a server it may be starting.
        if (why := health(self.endpoint.http_url)) is not None:
            raise ServerError(why)
        load_and_warm(self.endpoint, [self.model], requests=WARMUP_REQUESTS, deadline=deadline,
                      check=False, max_restarts=0, refused_grace_s=0.0)

    def _refused_or_gone(self, exc: TritonkitError, while_it: str) -> TritonkitError:
        """A warm-up's error: the user's to fix (the secret refused, exit 2) as it is; a
        server no longer live, a run error (``_stopped_answering``); else the config's
        ``Refused``."""
        if exc.exit_code == 2:
            return exc
        if (why := health(self.endpoint.http_url)) is not None:
            return self._stopped_answering(while_it, ServerError(why))
        return Refused(f"warm-up failed: {exc.message}")

    def _stopped_answering(self, while_it: str, exc: Exception) -> ServerError:
        """A server gone in the middle of a tune: a run error at once, not a wait for a
        restart (which would serve other configs than the ones measured)."""
        return ServerError(f"the server at {self.endpoint.http_url} stopped answering while "
                           f"'{self.model}' {while_it} ({triton_message(exc)})",
                           hint="read the server's log")

    def measure(self, mode: str, level: float, seconds: float | None = None) -> Probe:
        """One load level: closed loop at concurrency ``level`` or open loop (Poisson
        arrivals) at ``level`` requests/s. ``Refused`` when requests failed (the config is
        then loaded anew at its next swap)."""
        try:
            return self._measure(mode, level, seconds)
        except BaseException:
            self._swapped = None
            raise

    def _measure(self, mode: str, level: float, seconds: float | None) -> Probe:
        # Closed loop from one process, as perf_analyzer drives it: on a small host every
        # client process takes CPU from the server it measures.
        load = ({"concurrency": (int(level),), "workers": 1} if mode == CLOSED
                else {"rates": (float(level),)})
        seconds = seconds or self.probe_s
        spec = LoadSpec(model=self.model, duration_s=seconds, warmup_s=self.probe_warmup_s,
                        protocol=self.protocol, shapes=self.shapes, window_s=min(1.0, seconds),
                        flags=TUNE_FLAGS, **load)
        result = run_loadtest(self.endpoint, spec, repository=self.repository,
                              progress=lambda *_: self._tick(), pool=self.pool)
        if result.interrupted is not None:
            raise Interrupted(result.interrupted.signum)
        level_result = result.levels[0]
        if level_result.ended_early:
            raise LoadTestError(f"'{self.model}': {level_result.ended_early}",
                                hint="read the server's log")
        # Arrivals the load generator could not send on time say nothing against the config:
        # that rate is not shown to meet the SLA (``Probe.behind``), no more.
        failed = {kind: n for kind, n in level_result.errors.items() if kind != NOT_SENT}
        if failed:
            kinds = "; ".join(f"{n} x {kind}" for kind, n in failed.items())
            raise Refused(f"requests failed at {level_result.label}: {kinds}")
        split = level_result.server_split_ms or {}
        compute = [split.get(k) for k in ("compute_input", "compute_infer", "compute_output")]
        latency = level_result.latency_ms
        return Probe(mode=mode, level=level, qps=level_result.qps, p50_ms=latency.get("p50"),
                     p99_ms=latency.get("p99"), behind=level_result.errors.get(NOT_SENT, 0),
                     batch=level_result.server_batch, queue_ms=split.get("queue"),
                     compute_ms=sum(compute) if all(c is not None for c in compute) else None)

    def restore(self, original: dict) -> None:
        """The original config served again, warmed up."""
        try:
            self.swap(original)
        except Refused as exc:
            raise ServerError(f"could not load the original config of '{self.model}' again: "
                              f"{exc.reason}",
                              hint="redeploy to serve the model's config files again") from None
