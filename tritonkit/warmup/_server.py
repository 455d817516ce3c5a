"""Talking to the server: waiting until it is live, its model repository, loads, and
what a failed request means (the server gone, out of time, or the input refused).

Every call is bounded by what is left of the caller's one deadline."""

from __future__ import annotations

import errno
import json
import os
import time
from datetime import datetime, timezone
from typing import Callable

from tritonkit.answers import not_triton
from tritonkit.client import (SECRET_ENV, Endpoint, health, split_message, triton_message,
                              wait_until)
from tritonkit.errors import Interrupted, ModelLoadError, NotTriton, ServerError, UsageError
from tritonkit.server.local import Deadline, Progress
from tritonkit.server.loading import stub_crash
from tritonkit.warmup._errors import InputRefused, ModelCrashed, ServerGone

_BACKOFF_START, _BACKOFF_MAX = 0.05, 1.0
_REFUSED = os.strerror(errno.ECONNREFUSED)       # how ``health`` says it: "Connection refused"

# What Triton (2.51 measured here) answers a load or unload request in any model control
# mode but explicit: "none" too, though its words speak of polling (its
# ModelRepositoryManager::LoadUnloadModel checks only that model control is enabled).
_NOT_EXPLICIT = "explicit model load / unload is not allowed"

#: A one-line message for the user, always shown (a progress line is shown only on a terminal).
Notice = Callable[[str], None]

#: The parameter a reload adds to the model's config, its value the reload's time: Triton
#: (2.51 measured here) answers a load request for a model whose files did not change with
#: nothing at all, and one carrying the model's own config unchanged with an update in
#: place (no new instance, no cold start). A changed parameter is a changed config, which
#: it loads anew beside the old model and swaps in once READY (no gap in availability).
RELOAD_PARAMETER = "tritonkit_reloaded_at"

#: One version's counts from the server's statistics: (executions, inferences, the last
#: inference's time in ms since the epoch).
Counts = tuple[int, int, int]


def quiet_interrupts() -> None:
    """Ctrl-C in the middle of a request: gevent's hub (tritonclient.http's event loop) prints
    the KeyboardInterrupt (or ``Interrupted``, SIGTERM's too) and a timestamp on stderr before
    passing it on, stray lines above the command's one-line error. Still raised, no longer
    printed (this thread's hub: the signal comes to the main thread only)."""
    from gevent import get_hub

    hub = get_hub()
    for quiet in (KeyboardInterrupt, Interrupted):
        if not issubclass(quiet, hub.NOT_ERROR):
            hub.NOT_ERROR = (*hub.NOT_ERROR, quiet)


def http_client(endpoint: Endpoint, deadline: Deadline):
    # Bounded by what is left of the deadline, so no single call outlives it.
    left = max(0.5, deadline.left())
    return endpoint.http(connection_timeout=min(5.0, left), network_timeout=left)


def wait_live(endpoint: Endpoint, deadline: Deadline,
              rediscover: Callable[[], Endpoint] | None = None,
              progress: Progress | None = None,
              server_exited: Callable[[], Exception | None] | None = None,
              notice: Notice | None = None,
              refused_grace_s: float | None = None) -> Endpoint:
    """Wait until the server is live, backing off between tries, within ``deadline``.

    ``rediscover`` finds the server again on every try (a restarted deployment may have
    new ports or a new secret); the endpoint that answered is returned. ``server_exited``
    (a server this process started) says why it is gone for good: then the wait ends at
    once with that error instead of running out the deadline. ``notice`` is told once,
    as soon as a try gets no answer, what is waited for and for how long.

    ``refused_grace_s``, for a server that nothing here records as deployed (``--url``
    alone): an address that has refused every connection for that long has no server
    behind it, and the wait ends then with that said, not at the deadline (120 s by
    default, in silence). Any other miss (a port that accepts but is not live yet, a
    timeout) keeps the wait going: that server is there, starting. Refusals after it
    count from the first of them: a server killed while it was checked (its port still
    open as it went, or the connection reset) is gone, not waited for to the deadline.
    None (a recorded deployment, which may be starting or restarting): the deadline."""
    started = time.monotonic()
    refused_since: float | None = None          # the first refusal since any other miss
    told = False

    def check() -> str | None:
        nonlocal endpoint, refused_since, told
        if server_exited is not None and (error := server_exited()) is not None:
            raise error
        if progress:
            progress(f"waiting for the server at {endpoint.http_url} to be live")
        if rediscover is not None:
            try:
                endpoint = rediscover()
            except UsageError:
                pass  # between a stop and a start there is no state: keep the last one
        why = _why_not_live(endpoint, deadline)
        if why is None:
            return None
        now = time.monotonic()
        if why != _REFUSED:
            refused_since = None
        elif refused_since is None:
            refused_since = now
        refused_for = now - refused_since if refused_since is not None else -1.0
        if refused_grace_s is not None and refused_for >= refused_grace_s:
            raise ServerError(
                f"nothing listens at {endpoint.http_url}: connection refused for "
                f"{refused_for:.1f} s",
                hint="is the server up, and is this its HTTP port (Triton's default: 8000)? "
                     "Start one with tritonkit deploy")
        if notice is not None and not told:
            told = True
            notice(_waiting_for(endpoint, deadline, why, refused_grace_s))
        return why

    last = wait_until(check, deadline, _BACKOFF_START, _BACKOFF_MAX)
    if last is not None:
        raise ServerError(
            f"no Triton server answers at {endpoint.http_url} "
            f"(waited {time.monotonic() - started:.1f} s; last: {last})",
            hint="start one with tritonkit deploy, or raise --timeout")
    deadline.moved()
    return endpoint


def _waiting_for(endpoint: Endpoint, deadline: Deadline, why: str,
                 refused_grace_s: float | None) -> str:
    left = deadline.left()          # to a tenth: the first check took some of the timeout
    line = (f"waiting up to {round(left, 1) if left >= 0.1 else round(left, 2):g} s for Triton "
            f"at {endpoint.http_url} to answer ({why})")
    if refused_grace_s is not None and why == _REFUSED and refused_grace_s < left:
        line += f"; giving up after {refused_grace_s:g} s if every connection is refused"
    return line + " …"


def gone(exc: Exception) -> Exception:
    """What a failed call to the server means: it went away (ServerGone, warmed again once it
    is back), unless it answered as no Triton does (NotTriton, said as it is)."""
    return exc if isinstance(exc, NotTriton) else ServerGone(triton_message(exc))


def check_triton(client) -> None:
    """The server says it is Triton 2 (its metadata), or NotTriton; ServerGone if it is not there."""
    try:
        client.get_server_metadata()
    except Exception as exc:
        raise gone(exc) from None


def repository_index(client, endpoint: Endpoint) -> dict[str, set[str]]:
    """Model name → the states of its versions (empty: known, never loaded)."""
    from tritonclient.utils import InferenceServerException

    try:
        index = client.get_model_repository_index(headers=endpoint.repository_headers)
    except InferenceServerException as exc:
        if exc.status() == "403":
            if endpoint.repository_headers:
                what, hint = "a wrong secret", (
                    "the secret sent (from --secret-file, " + SECRET_ENV + ", or the "
                    "deployment's record, in that order) is not the server's: pass the server's "
                    "own, or redeploy (tritonkit down, then tritonkit deploy)")
            else:
                what, hint = "no secret", (
                    "pass --repository DIR of the running deployment (its state holds the "
                    f"secret), or the server's secret with --secret-file FILE or {SECRET_ENV}")
            raise UsageError(f"the server at {endpoint.http_url} refused the model-repository "
                             f"API with {what} ({triton_message(exc)})", hint=hint) from None
        raise gone(exc) from None
    except Exception as exc:
        raise gone(exc) from None
    states: dict[str, set[str]] = {}
    for entry in index:
        states.setdefault(entry["name"], set())
        if entry.get("state"):
            states[entry["name"]].add(entry["state"])
    return states


def model_ready(client, name: str) -> bool:
    try:
        return bool(client.is_model_ready(name))
    except Exception as exc:
        raise gone(exc) from None


def server_config(client, name: str) -> dict:
    try:
        return client.get_model_config(name)
    except Exception as exc:
        raise gone(exc) from None


def ready_versions(client, name: str) -> list[str]:
    """The versions of a model the server serves now (its metadata lists the READY ones)."""
    try:
        return [str(v) for v in client.get_model_metadata(name).get("versions", [])]
    except Exception as exc:
        raise gone(exc) from None


def served_counts(client, endpoint: Endpoint, name: str) -> dict[str, Counts] | None:
    """Each loaded version's counts since its load (the server's inference statistics), by
    version; None when the server does not say (statistics restricted, or not answered)."""
    try:
        stats = client.get_inference_statistics(name, headers=endpoint.repository_headers)
    except Exception:
        return None
    entries = stats.get("model_stats") or []
    return {str(e.get("version", "")): (int(e.get("execution_count", 0)),
                                       int(e.get("inference_count", 0)),
                                       int(e.get("last_inference", 0)))
            for e in entries} or None


def warmup_counts(config: dict) -> tuple[int, int]:
    """The executions and inferences a model's config's ``model_warmup`` runs at each load:
    every entry ``count`` times (0: once) on every instance, each of ``batch_size``
    inferences (0: one); Triton counts them in the model's statistics (2.51 measured here)."""
    from tritonkit.warmup._config import model_instances

    entries = config.get("model_warmup") or []
    runs = [max(1, int(e.get("count", 0) or 0)) for e in entries]
    sizes = [max(1, int(e.get("batch_size", 0) or 0)) for e in entries]
    instances = model_instances(config)
    return (instances * sum(runs), instances * sum(r * b for r, b in zip(runs, sizes)))


def never_served(counts: dict[str, Counts] | None, config: dict) -> bool:
    """Whether no request has reached the model since its load: every version has run
    nothing, or exactly what its config's ``model_warmup`` runs at load. Its next request
    is then its cold start. False when the server does not say."""
    at_load = {(0, 0), warmup_counts(config)}
    return bool(counts) and all(c[:2] in at_load for c in counts.values())


def load_model(endpoint: Endpoint, name: str, deadline: Deadline, *,
               reload: bool = False, config: dict | None = None) -> float:
    """Load ``name`` explicitly; the seconds it took. On a client of its own, bounded by
    what is left of the deadline now: loads one after another (a TensorRT engine can take
    minutes each) must not each get the time that was left before the first.

    ``reload``, for a model READY now: a new copy of it loaded, whatever its files. A
    plain load first, which reloads files that changed (a new config.pbtxt included);
    Triton answers it with nothing when none did, which the model's statistics tell (a
    reloaded model's start again from what its ``model_warmup`` runs). Then a second,
    carrying the model's config as the server serves it with ``RELOAD_PARAMETER`` set to
    now: a config Triton has not loaded, so it loads the model anew, the old copy serving
    until the new one is READY.

    ``config`` (a model config as the server's JSON gives it): load the model with that
    config instead of its files' (Triton's config override), the old one serving until
    the new one is READY."""
    started = time.perf_counter()
    client = http_client(endpoint, deadline)
    try:
        before = served_counts(client, endpoint, name) if reload else None
        _load(client, endpoint, name, deadline, started, config)
        if reload:
            after = served_counts(client, endpoint, name)
            config = server_config(client, name)
            if not (after != before and never_served(after, config)):
                config.setdefault("parameters", {})[RELOAD_PARAMETER] = {
                    "string_value": datetime.now(timezone.utc).isoformat(
                        timespec="microseconds").replace("+00:00", "Z")}
                _load(client, endpoint, name, deadline, started, config)
    finally:
        client.close()
    deadline.moved()
    return time.perf_counter() - started


def _load(client, endpoint: Endpoint, name: str, deadline: Deadline, started: float,
          config: dict | None = None) -> None:
    """One load request (``config``: the config to load it with), Triton's refusal said."""
    from tritonclient.utils import InferenceServerException

    try:
        client.load_model(name, headers=endpoint.repository_headers,
                          config=None if config is None else json.dumps(config))
    except InferenceServerException as exc:
        if exc.status() == "403":
            raise UsageError(f"the server refused to load '{name}': {triton_message(exc)}",
                             hint="pass --repository DIR of the running deployment (its secret)") from None
        if _not_live(endpoint, deadline):
            raise gone(exc) from None
        message, detail = split_message(triton_message(exc))
        if crash := stub_crash(name, message, endpoint.log_path, during="while it loaded"):
            raise ModelLoadError(crash, hint=read_the_log(endpoint.log_path),
                                 detail=detail) from None
        if _NOT_EXPLICIT in message:
            raise ModelLoadError(
                f"the server at {endpoint.http_url} is not in explicit model-control mode, so "
                f"it loads no model on request ('{name}'; Triton: {message})",
                hint="start it with --model-control-mode=explicit (tritonkit deploy does), or "
                     "warm only the models it has loaded already, without --reload") from None
        raise ModelLoadError(f"Triton could not load '{name}': {message}",
                             hint=read_the_log(endpoint.log_path),
                             detail=detail) from None
    except Exception as exc:
        if _timed_out(exc):
            raise _out_of_time(f"loading '{name}' did not finish", started, deadline) from None
        raise gone(exc) from None


def read_the_log(log_path: str | None = None) -> str:
    """Where Triton's reasons are: the recorded deployment's log file, when one is known."""
    if log_path:
        return f"read the server's log: {log_path}"
    return "read the server's log (tritonkit deploy prints where it is)"


def _timed_out(exc: BaseException) -> bool:
    """A client-side timeout: the server took longer than the deadline left, which says
    nothing about whether it is up. By type (tritonclient's sockets raise TimeoutError,
    gevent its Timeout): a model's own error may well say "timed out"."""
    from gevent import Timeout

    return isinstance(exc, (TimeoutError, Timeout))


def _out_of_time(what: str, started: float, deadline: Deadline) -> ServerError:
    return ServerError(
        f"{what} within {time.perf_counter() - started:.1f} s: {deadline.ran_out()} "
        "(Triton may still be loading or executing it)",
        hint="raise --timeout (a first request on a GPU can build TensorRT engines for "
             "minutes), or read the server's log")


def infer_failed(exc: Exception, endpoint: Endpoint, name: str, deadline: Deadline,
                 started: float, log_from: int | None = None) -> Exception:
    """What a failed warm-up request means: out of time, the server gone, the model's
    process crashed (its lines in the server's log past ``log_from``, where the log is a
    file here), the peer not Triton, or the input refused."""
    if isinstance(exc, NotTriton):
        return exc
    if _timed_out(exc):
        return _out_of_time(f"'{name}' did not answer a warm-up request", started, deadline)
    if _not_live(endpoint, deadline) or not _ready_quietly(endpoint, name, deadline):
        return ServerGone(triton_message(exc))
    message, detail = split_message(triton_message(exc))
    if crash := stub_crash(name, message, endpoint.log_path, during="during a warm-up request",
                           since=log_from):
        return ModelCrashed(crash, hint=f"no input was refused: its process died or hung "
                                        f"(out of memory? see dmesg); {read_the_log(endpoint.log_path)}",
                            detail=detail)
    if error_status(exc) == "StatusCode.UNIMPLEMENTED":    # a gRPC server, not Triton's
        return not_triton(endpoint.grpc_url or endpoint.http_url,
                          f"its gRPC port has no Triton inference service ({message})")
    if error_status(exc) == "StatusCode.UNAVAILABLE":      # HTTP answers (above), gRPC does not
        return ServerError(
            f"no gRPC answer at {endpoint.grpc_url} for '{name}' ({message}), though the "
            f"server answers HTTP at {endpoint.http_url}",
            hint="a decoupled model is warmed over gRPC streaming: with --url pass --grpc-url "
                 "HOST:PORT of the same server; a deployment's server must have its gRPC port "
                 "open (read its log)", detail=detail)
    return InputRefused(f"a warm-up request to '{name}' failed: {message}",
                        hint="the model is READY but refused an input built from its config",
                        detail=detail)


def error_status(exc: Exception) -> str | None:
    status = getattr(exc, "status", None)
    return status() if callable(status) else None


def _not_live(endpoint: Endpoint, deadline: Deadline) -> bool:
    return _why_not_live(endpoint, deadline) is not None


def _why_not_live(endpoint: Endpoint, deadline: Deadline) -> str | None:
    """One liveness poll, bounded by what is left of the deadline (at most 2 s)."""
    return health(endpoint.http_url, timeout=min(2.0, max(0.1, deadline.left())))


def _ready_quietly(endpoint: Endpoint, name: str, deadline: Deadline) -> bool:
    client = http_client(endpoint, deadline)
    try:
        return model_ready(client, name)
    except ServerGone:
        return False
    finally:
        client.close()
