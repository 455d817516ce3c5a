"""What a local deployment's record says before its server is asked anything: a server
that is gone (nothing restarts a local server by itself, so waiting for it only runs out
the timeout)."""

from __future__ import annotations

import re
import signal
from pathlib import Path

from tritonkit.errors import ServerError
from tritonkit.server.local import is_our_server
from tritonkit.server.state import Deployment

_SIGNALLED = re.compile(r"^Signal \((\d+)\) received\.", re.MULTILINE)
_SERVER_ERROR = re.compile(r"^error: (.*)$", re.MULTILINE)


def refuse_gone_local_server(deployment: Deployment) -> None:
    """A ServerError at once if the record names a local server that no longer runs.

    Only a local record, and only before the warm-up: a server that dies in the middle
    may be redeployed (new ports, new secret), and that restart is followed."""
    if deployment.target != "local" or is_our_server(deployment):
        return
    repository = deployment.repository
    raise ServerError(
        f"the local server recorded in {repository} (pid {deployment.pid}) is no longer "
        f"running: {_how_it_ended(deployment.log_path)}",
        hint=f"start it again: tritonkit deploy --repository {repository} (it replaces the "
             f"stale record); its log: {deployment.log_path}")


def _how_it_ended(log_path: str | None) -> str:
    """How the server ended, as far as its log tells (a SIGKILL leaves nothing there)."""
    try:
        log = Path(log_path).read_text(errors="replace") if log_path else ""
    except OSError:
        return "its log cannot be read to say how it ended"
    if signalled := _SIGNALLED.findall(log):
        return f"it was stopped by {_signal_name(int(signalled[-1]))}"
    if errors := _SERVER_ERROR.findall(log):
        return f"it exited on an error: {errors[-1]}"
    return "its log ends with no shutdown (killed, as by kill -9 or the OOM killer, or crashed)"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
