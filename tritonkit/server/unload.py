"""A server's models unloaded through the repository API before it is told to stop (local
and compose).

A tritonserver told to stop (SIGINT) unloads its models, then counts the live ones once a
second until none is left: the first count comes before any unload has finished, so every
stop sleeps at least a second it need not (two, for a python-backend model, whose stub
takes about one to exit). Asked to unload them first, it has none left when the signal
comes and exits at once.

Best effort, bounded: a server that does not answer, refuses the secret, or keeps a model
unloading (a slow ``finalize``, a request in flight) is stopped by the signal as before,
and what Triton then waits for is said as before."""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
import urllib.request
from typing import Callable

from tritonkit.client import open_direct
from tritonkit.deadline import Deadline
from tritonkit.server.state import Deployment

#: The longest a stop waits for its models to unload before it signals the server.
UNLOAD_WAIT_S = 3.0
#: The most of a repository index answer read (a model's entry is ~100 bytes).
INDEX_MAX_BYTES = 8 << 20
#: Live states in Triton's repository index: a model in one is counted by a stop.
LIVE = frozenset({"READY", "LOADING", "UNLOADING"})


def unload_models(deployment: Deployment, deadline: Deadline,
                  progress: Callable[[str], None] | None = None) -> None:
    """Unload every live model of ``deployment``'s server and wait until none is live:
    at most UNLOAD_WAIT_S, and half of what is left of ``deadline``."""
    wait = Deadline(min(UNLOAD_WAIT_S, deadline.left() / 2))
    try:
        headers = deployment.repository_headers()
        live = _live(deployment, headers, wait)
        for name in live:
            _post(deployment, f"/v2/repository/models/{urllib.parse.quote(name, safe='')}"
                  "/unload", headers, wait)
        while live and not wait.expired():
            if progress:
                progress(f"stopping tritonserver (pid {deployment.pid}): unloading "
                         f"{len(live)} model{'s' if len(live) > 1 else ''}")
            time.sleep(min(0.05, wait.left()))
            live = _live(deployment, headers, wait)
    except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError,
            AttributeError):
        return                      # no answer, refused, or not an index: the signal does it
    # Each request's connection was closed by the server after its answer, but it counts
    # one that closes as open for a moment; a stop that counts one waits a second for it.
    time.sleep(min(0.05, max(0.0, deadline.left())))


def _live(deployment: Deployment, headers: dict[str, str], wait: Deadline) -> list[str]:
    answer = _post(deployment, "/v2/repository/index", headers, wait)
    return sorted({entry["name"] for entry in json.loads(answer)
                   if entry.get("state") in LIVE})


def _post(deployment: Deployment, path: str, headers: dict[str, str], wait: Deadline) -> bytes:
    request = urllib.request.Request(f"http://{deployment.http_url}{path}", data=b"{}",
                                     headers={**headers, "Content-Type": "application/json"},
                                     method="POST")
    with open_direct(request, timeout=max(wait.left(), 0.05)) as response:
        return response.read(INDEX_MAX_BYTES)
