"""The warm-up of a server: wait until it is live, load what is not READY (steps before
their ensembles), warm each model; start over on a server that restarted in the middle."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

from tritonkit.client import Endpoint, resolve_endpoint
from tritonkit.deadline import StallDeadline
from tritonkit.errors import ModelLoadError, ServerError, TritonkitError, UsageError
from tritonkit.server.local import Deadline, Progress, refuse_gone_local_server
from tritonkit.server.state import load_deployment
from tritonkit.warmup._config import ensemble_steps, file_config, load_order
from tritonkit.warmup._errors import ServerGone, WarmupFailed
from tritonkit.warmup._model import warm_model
from tritonkit.warmup._record import (
    GoneForGood,
    refuse_models_added_after_deploy,
    refuse_moved_repository,
    unserved_warning,
)
from tritonkit.warmup._results import DEFAULT_REQUESTS, ModelWarmup, SteadyRule
from tritonkit.warmup._server import (
    Notice,
    check_triton,
    http_client,
    load_model,
    model_ready,
    never_served,
    quiet_interrupts,
    repository_index,
    served_counts,
    server_config,
    wait_live,
)

MAX_RESTARTS = 3
#: How long an address given by --url alone (no deployment recorded here) may refuse
#: every connection before the warm-up says nothing listens there: a Triton that has
#: its port open but is not live yet is waited for the whole timeout all the same.
REFUSED_GRACE_S = 5.0


def load_and_warm(
    endpoint: Endpoint,
    models: Sequence[str] | None = None,
    *,
    requests: int = DEFAULT_REQUESTS,
    deadline: Deadline | None = None,
    rule: SteadyRule = SteadyRule(),
    reload: bool = False,
    config_dir: Path | None = None,
    rediscover: Callable[[], Endpoint] | None = None,
    check: bool = True,
    progress: Progress | None = None,
    server_exited: Callable[[], Exception | None] | None = None,
    fresh: bool = False,
    notice: Notice | None = None,
    refused_grace_s: float | None = None,
    max_restarts: int = MAX_RESTARTS,
) -> list[ModelWarmup]:
    """Load ``models`` (default: every model in the server's repository) and warm each up.

    ``requests`` bounds the warm-up requests per model, ``deadline`` the waits (for the
    server included; by default 120 s without progress, ``StallDeadline``). ``config_dir``
    is the folder the server reads; it gives the ensemble steps of models not loaded yet
    (without it, the steps Triton loads with an ensemble are read from the server once it
    has, and warmed too). ``check`` measures a fresh client's first request after the
    warm-up. ``progress`` is told what is being done (waiting, loading, warming which
    model and shape). A model that never
    became steady comes back with ``steady=False``. A model that fails to load or to warm
    up (refused, crashed, stalled) leaves the others to be warmed; then ``WarmupFailed``
    is raised, with every model's figures or failure.
    ``server_exited``, for a server the caller started, tells a crash (raised at once,
    with what the server said) from a restart (waited for, then warmed again). ``fresh``
    says the server has just started, so each model's first request is its cold one even
    though this call did not load it (``ModelWarmup.cold``); without it, a READY model is
    cold when the server's statistics show no request since its load but what its
    config's ``model_warmup`` ran (a restarted server that nothing has warmed yet).
    ``notice`` is told, always (a progress line shows only on a terminal), what the first
    wait for the server waits for; ``refused_grace_s`` ends that wait early for an address that refuses every
    connection (``wait_live``: a restart in the middle is always waited for).
    ``max_restarts``: how many times a server that goes away is waited for and warmed
    again; 0 raises its ``ServerGone`` at once (tune: a restart would void its figures).
    """
    if requests < 1:
        raise UsageError(f"--requests must be at least 1 (got {requests})")
    deadline = deadline or StallDeadline(120.0)
    quiet_interrupts()
    restarts = 0
    while True:
        endpoint = wait_live(endpoint, deadline, rediscover, progress, server_exited, notice,
                             refused_grace_s if restarts == 0 else None)
        try:
            results = _load_and_warm_once(endpoint, models, requests=requests, deadline=deadline,
                                          rule=rule, reload=reload and restarts == 0,
                                          config_dir=config_dir, check=check,
                                          fresh=fresh or restarts > 0,
                                          progress=progress or _quiet)
        except ServerGone as gone:
            if server_exited is not None and (error := server_exited()) is not None:
                raise error from None
            if max_restarts == 0:
                raise
            restarts += 1
            if restarts > max_restarts or deadline.expired():
                raise ServerError(
                    f"the server at {endpoint.http_url} went away during warm-up "
                    f"{restarts} time(s) (last: {gone})",
                    hint="read the server's log; rerun tritonkit warmup once it is stable") from None
            continue
        if restarts:
            note = f"server restarted {restarts}x during warm-up; warmed again"
            results = [replace(r, note="; ".join(filter(None, [r.note, note]))) for r in results]
        return results


def _quiet(_message: str) -> None:
    pass


def _load_and_warm_once(endpoint: Endpoint, models: Sequence[str] | None, *, requests: int,
                        deadline: Deadline, rule: SteadyRule, reload: bool,
                        config_dir: Path | None, check: bool, fresh: bool,
                        progress: Progress) -> list[ModelWarmup]:
    """One pass on one server. A model that fails to load or to warm up does not keep the
    others cold: they are loaded and warmed, then ``WarmupFailed`` is raised, every model's
    figures or failure on it."""
    client = http_client(endpoint, deadline)
    try:
        check_triton(client)
        index = repository_index(client, endpoint)
        names = (list(dict.fromkeys(models)) if models
                 else sorted(n for n in index if not n.startswith(".")))
        if not names:
            raise ServerError(f"the server at {endpoint.http_url} has no model in its "
                              "repository: nothing to warm up",
                              hint="export a model into the folder it serves, then load it: "
                                   "tritonkit warmup --model NAME (or redeploy)")
        unknown = [n for n in names if n not in index]
        if unknown:
            raise UsageError(
                f"no model named {', '.join(repr(n) for n in unknown)} in the server's repository",
                hint=f"models there: {', '.join(sorted(index)) or 'none'}")
        ready = {n for n in index if model_ready(client, n)}
        configs = {n: (server_config(client, n) if n in ready else file_config(config_dir, n))
                   for n in names}
        # Before any request: a READY model no request has reached since its load is as
        # cold as one this call loads.
        unserved = {n for n in names if n in ready and not fresh
                    and never_served(served_counts(client, endpoint, n), configs[n])}
        order = load_order(names, configs)
        load_s: dict[str, float] = {}
        failed: dict[str, TritonkitError] = {}
        for name in order:
            if lacking := [s for s in ensemble_steps(configs.get(name, {})) if s in failed]:
                failed[name] = ModelLoadError(      # Triton would refuse it for the step it lacks
                    f"'{name}' was not loaded: its step {', '.join(lacking)} failed")
                continue
            if name not in ready or reload:
                progress(f"loading {name}")
                deadline.moved()        # each load is a wait of its own
                try:
                    load_s[name] = load_model(endpoint, name, deadline, reload=name in ready)
                except (ServerGone, UsageError):
                    raise
                except TritonkitError as error:     # refused, crashed or stalled: this one
                    failed[name] = error
        # Out of time (a load that did not finish): the server is still at it, and a question
        # about its models now could wait for it.
        brought = {} if deadline.expired() else _steps_loaded_along(client, order, configs,
                                                                      failed)
        order = load_order(names, configs)
    finally:
        client.close()
    results = [_failed_load(name, error, was_ready=name in ready) for name, error in failed.items()]
    for position, name in enumerate(order, 1):
        if name in failed or name not in load_s and name not in ready and name not in brought:
            continue
        deadline.moved()        # a stall of one model's warm-up is its own: the next starts afresh
        if deadline.expired():
            results.append(ModelWarmup(model=name, steady=False, requests=0,
                                       load_s=load_s.get(name), note="not reached: out of time",
                                       was_ready=name in ready))
            continue
        try:
            result = warm_model(endpoint, name, load_s.get(name), requests=requests,
                                deadline=deadline, rule=rule, check=check,
                                cold=fresh or name in load_s or name in brought or name in unserved,
                                progress=_counted(progress, position, len(order)))
        except (ServerGone, UsageError):
            raise
        except TritonkitError as error:       # this model's: the others are warmed all the same
            failed[name] = error
            results.append(ModelWarmup(model=name, steady=False, requests=0,
                                       load_s=load_s.get(name), was_ready=name in ready,
                                       error=error.message))
            continue
        note = f"loaded by Triton with ensemble '{brought[name]}'" if name in brought else ""
        results.append(replace(result, was_ready=name in ready,
                               note="; ".join(filter(None, [note, result.note]))))
    if failed:
        results.sort(key=lambda r: order.index(r.model) if r.model in order else len(order))
        raise WarmupFailed(failed, results)
    return results


def _failed_load(name: str, error: TritonkitError, *, was_ready: bool) -> ModelWarmup:
    return ModelWarmup(model=name, steady=False, requests=0, warmed=False, was_ready=was_ready,
                       error=error.message)


def _counted(progress: Progress, position: int, count: int) -> Progress:
    """``progress`` with the model's place among those warmed, when there are several."""
    if count < 2:
        return progress
    return lambda message: progress(f"{message} (model {position} of {count})")


def _steps_loaded_along(client, order: list[str], configs: dict[str, dict],
                        failed: dict[str, TritonkitError]) -> dict[str, str]:
    """Steps Triton loaded with an ensemble whose config this call could not read before
    the load (a --url server's folder is not here): read from the server now, nested
    ensembles too, into ``configs``. Step → the ensemble that brought it."""
    brought: dict[str, str] = {}
    known = set(order)
    todo = [name for name in order if name not in failed]
    while todo:
        name = todo.pop(0)
        if not configs.get(name):
            if not model_ready(client, name):
                continue
            configs[name] = server_config(client, name)
        for step in ensemble_steps(configs[name]):
            if step not in known:
                known.add(step)
                brought[step] = name
                todo.append(step)
    return brought


def warm_up(repository: Path | None = None, url: str | None = None,
            models: Sequence[str] | None = None, *, timeout: float = 120.0,
            secret: str | None = None, grpc_url: str | None = None,
            **options: Any) -> list[ModelWarmup]:
    """Find the server (``url``, else the deployment recorded in ``repository``) and
    ``load_and_warm`` it under one deadline of ``timeout`` seconds.

    ``secret`` is the server's restricted-API secret for a server no state here records
    (Kubernetes, say); see ``resolve_endpoint``. ``grpc_url``, with ``url``, is that
    server's gRPC address, which decoupled models are warmed through (a deployment records
    its own). With a deployment, a restart in the middle is followed to its new state
    (ports, secret) and the ensembles' steps are read from the folder the server serves;
    a local one whose server is already gone when this starts, or that serves the
    repository from where it was before a move, fails at once, and one whose server
    stops in the middle fails once no deploy has replaced it for ``RESTART_GRACE_S``.
    A model added to the deployment's folder after its deploy is said so: asked for by
    name, a UsageError if its server reads a mirror made at the deploy (it lacks it);
    otherwise a warning to ``notice`` that the warm-up leaves it out.

    How long to wait for a server: a recorded deployment's (``repository``, with or
    without ``url``) may be starting or restarting, so it is waited for the whole
    ``timeout``; an address given by ``url`` alone that refuses every connection for
    ``REFUSED_GRACE_S`` has nothing listening (no server, or not its HTTP port) and
    fails then. One that accepts connections but is not live yet is waited for.

    ``timeout`` bounds a stall: each load done, request answered or model begun moves the
    deadline on (``StallDeadline``), so many big models warm as long as they need."""
    deadline = StallDeadline(timeout)
    endpoint = resolve_endpoint(repository=repository, url=url, grpc_url=grpc_url,
                                secret=secret)
    rediscover, config_dir, recorded = None, None, False
    if repository is not None:
        if url is None:
            rediscover = lambda: resolve_endpoint(repository=repository, secret=secret)  # noqa: E731
        try:
            deployment = load_deployment(repository)
        except UsageError:
            config_dir = Path(repository)
        else:
            recorded = True
            if url is None:                 # before any load is sent, --reload or not
                refuse_gone_local_server(deployment)
                refuse_moved_repository(deployment)
                refuse_models_added_after_deploy(deployment, models or [])
                if deployment.target == "local":
                    options.setdefault("server_exited", GoneForGood(deployment))
                if not models and (warning := unserved_warning(deployment)):
                    (options.get("notice") or _quiet)(warning)
            config_dir = Path(deployment.extra.get("served_repository") or deployment.repository)
            # The deployment's own models, not whatever else its repository folder holds.
            models = models or (deployment.models if url is None else None)
    if not recorded:                # --url alone: nothing here says a server is starting
        options.setdefault("refused_grace_s", REFUSED_GRACE_S)
    return load_and_warm(endpoint, models, deadline=deadline, rediscover=rediscover,
                         config_dir=config_dir, **options)
