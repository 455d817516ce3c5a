"""What a warm-up's JSON says besides its figures: when and where it ran, against which
server, and what each of its keys means (``ABOUT``), so that a file read weeks later, or
by someone else, explains itself."""

from __future__ import annotations

import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import tritonkit
from tritonkit.client import resolve_endpoint, server_version
from tritonkit.errors import TritonkitError
from tritonkit.warmup._model import CHECK_CLIENTS

#: What the JSON's keys mean, written into the file itself. The ratios are named for what
#: they divide (``first_to_p50``); ``ratio``, their earlier name, stays for readers of
#: earlier files and the deployment state, and says here what it is.
ABOUT: dict[str, str] = {
    "units": "times in milliseconds (*_ms), the load in seconds (load_s)",
    "started_at": "when the warm-up started, ISO 8601 UTC",
    "host": "the machine tritonkit ran on (the server's address is url)",
    "triton_version": "the server's own version (its /v2 metadata); null if it did not say",
    "first_ms": "the model's first warm-up request: its cold start when cold is true",
    "steady_p50_ms": "median of the last steady window of the first shape (the smallest; "
                     "worst names the shape whose cold start cost the most)",
    "steady_window": "how many samples a steady window holds (each shape's p50 is the median "
                     "of its last one); null in a record from before it",
    "shape_p50_ms": "each shape's own steady p50, by the shape's label (as series_ms); empty "
                    "unless every shape got steady",
    "worst": "the shape whose cold start stood the most ms above its own steady p50: "
             "shape, first_ms (its first sample in series_ms), p50_ms (its shape_p50_ms), "
             "penalty_ms (first_ms - p50_ms) and first_to_p50 (first_ms / p50_ms); null "
             "unless cold and every shape got steady",
    "first_to_p50": "first_ms / steady_p50_ms: how far the cold first request stood above "
                    "the steady p50; null unless it was cold (cold: true) and steady",
    "ratio": "the same as first_to_p50 (its earlier name, kept for compatibility)",
    "first_response_to_p50": "a decoupled model's first_response_ms / first_response_p50_ms "
                             "(time to its first response, e.g. first token); "
                             "first_response_ratio is its earlier name",
    "after": f"once warm, the median of {CHECK_CLIENTS} (clients) fresh clients' first "
             "requests (first_ms) against the p50 of the requests after them (p50_ms); its "
             "first_to_p50 (and ratio) divides the two",
    "loaded": "this warm-up sent the model a load request, which took load_s seconds; "
              "false: load_s is null",
    "was_ready": "the model was READY before this warm-up (not loaded unless --reload)",
    "cold": "the first request was the model's first since it loaded",
    "warmed": "false: no requests could be sent (note says why)",
    "suggested_requests": "when not steady for want of requests: a --requests to try",
    "error": "why the model failed to load or to warm up (refused, crashed, stalled); null "
             "when it did not fail",
}


def run_context(repository: Path | None, url: str | None, started_at: datetime, *,
                secret: str | None = None) -> dict[str, Any]:
    """The run's own facts for its JSON: when it started, tritonkit's version, the host it
    ran on, the server (its address, its repository folder if recorded here, its Triton
    version: asked once more, briefly; null if it does not answer)."""
    context: dict[str, Any] = {
        "started_at": started_at.astimezone(timezone.utc).isoformat(timespec="seconds")
                                .replace("+00:00", "Z"),
        "tritonkit_version": tritonkit.__version__,
        "host": socket.gethostname(),
        "url": url,
        "repository": str(Path(repository).resolve()) if repository is not None else None,
        "triton_version": None,
    }
    try:
        endpoint = resolve_endpoint(repository=repository, url=url, secret=secret)
    except TritonkitError:
        return context               # the record went away since: what was asked stands
    context["url"] = endpoint.http_url
    context["triton_version"] = server_version(endpoint)
    return context


def utc_now() -> datetime:
    return datetime.now(timezone.utc)
