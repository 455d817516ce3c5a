"""What a local deployment's record says before its server is asked anything: a server
that is gone (nothing restarts a local server by itself, so waiting for it only runs out
the timeout), or one started on the repository at the place it had before it was moved
(every load would read a folder that is no longer there)."""

from __future__ import annotations

from pathlib import Path

from tritonkit.errors import ServerError
from tritonkit.server.local import how_it_ended, is_our_server, mirror_dir, repository_of_mirror
from tritonkit.server.state import Deployment


def refuse_gone_local_server(deployment: Deployment) -> None:
    """A ServerError at once if the record names a local server that no longer runs.

    Only a local record, and only before the warm-up: a server that dies in the middle
    may be redeployed (new ports, new secret), and that restart is followed."""
    if deployment.target != "local" or is_our_server(deployment):
        return
    repository = deployment.repository
    raise ServerError(
        f"the local server recorded in {repository} (pid {deployment.pid}) is no longer "
        f"running: {how_it_ended(deployment)}",
        hint=f"start it again: tritonkit deploy --repository {repository} (it replaces the "
             f"stale record); its log: {deployment.log_path}")


def refuse_moved_repository(deployment: Deployment) -> None:
    """A ServerError if the recorded local server serves the repository from the place
    it was deployed from, not from where its record is now (the folder was moved): its
    loads would read a folder that is gone, or another repository's."""
    served = deployment.extra.get("served_repository")
    here = Path(deployment.repository)
    if deployment.target != "local" or not served or Path(served) in (here, mirror_dir(here)):
        return
    old = repository_of_mirror(Path(served))
    raise ServerError(
        f"the server recorded in {here} serves this repository from its old place, {old} "
        "(it was moved after its deploy)",
        hint=f"restart it from here: tritonkit down --repository {here}, then tritonkit "
             f"deploy --repository {here}")
