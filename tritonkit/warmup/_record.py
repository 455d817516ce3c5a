"""What a local deployment's record says before its server is asked anything: a server
that is gone (nothing restarts a local server by itself, so waiting for it only runs out
the timeout), or one started on the repository at the place it had before it was moved
(every load would read a folder that is no longer there); models added to its folder
after the deploy, which its server may not serve; and, during the warm-up, when its
server is gone for good rather than restarting."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence

from tritonkit.errors import ServerError, UsageError, shell_word
from tritonkit.repository import model_names
from tritonkit.server.local import how_it_ended, is_our_server, mirror_dir, repository_of_mirror
from tritonkit.server.state import Deployment, load_deployment, redeploy_command

#: How long a recorded local server may be gone with no deploy recording another before
#: the warm-up stops waiting for one (a deploy records its server within a second or two
#: of starting; a supervisor's restart delay is seconds).
RESTART_GRACE_S = 10.0


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
        hint=f"restart it from here: tritonkit down --repository {shell_word(here)}, then tritonkit "
             f"deploy --repository {shell_word(here)}")


class GoneForGood:
    """``server_exited`` for the warm-up of a recorded local server: None while the
    recorded server runs, or while a restart may be under way (a deploy that replaced the
    record is followed, and watched in turn); a ServerError once the server has been gone
    ``grace_s`` with the record still naming it, or none. Without it a server that died
    in the middle (an out-of-memory kill on the first big batch, say) ran the warm-up's
    whole timeout out, 120 s by default, saying only that no server answered."""

    def __init__(self, deployment: Deployment, grace_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.deployment = deployment
        self.grace_s = RESTART_GRACE_S if grace_s is None else grace_s
        self.clock = clock
        self.gone_since: float | None = None

    def __call__(self) -> ServerError | None:
        if self.deployment.target != "local" or is_our_server(self.deployment):
            self.gone_since = None
            return None
        try:
            recorded = load_deployment(Path(self.deployment.repository))
        except UsageError:
            recorded = None                     # a down cleared it: a deploy may follow
        if recorded is not None and recorded.pid != self.deployment.pid:
            self.deployment, self.gone_since = recorded, None     # restarted: watch the new one
            return None
        now = self.clock()
        if self.gone_since is None:
            self.gone_since = now
        if now - self.gone_since < self.grace_s:
            return None
        repository = self.deployment.repository
        return ServerError(
            f"the local server recorded in {repository} (pid {self.deployment.pid}) stopped "
            f"during the warm-up and no deploy replaced it within {self.grace_s:g} s: "
            f"{how_it_ended(self.deployment)}",
            hint=f"start it again: tritonkit deploy --repository {shell_word(repository)}; its log: "
                 f"{self.deployment.log_path}")


def added_after_deploy(deployment: Deployment) -> list[str]:
    """The models in the deployment's repository folder that it was not deployed with
    (its record lists what the deploy found there), sorted."""
    try:
        here = model_names(Path(deployment.repository))
    except UsageError:
        return []                    # the folder is gone or empty: nothing was added
    return [name for name in here if name not in deployment.models]


def serves_a_mirror(deployment: Deployment) -> bool:
    """Whether the server reads a copy made at the deploy (the local target's CPU mirror,
    compose's folder of the models deployed), not the repository folder itself: a model
    added to the folder since is not there."""
    if deployment.target == "compose":
        return True
    served = deployment.extra.get("served_repository")
    return bool(served) and Path(served) != Path(deployment.repository)


def refuse_models_added_after_deploy(deployment: Deployment, asked: Sequence[str]) -> None:
    """A UsageError for models asked for that were added to the folder after the deploy of
    a server that reads its mirror: its index lacks them, and saying so ("no model named
    'cnn' in the server's repository", though cnn is right there) hid why."""
    if not serves_a_mirror(deployment):
        return                       # the server reads the folder: it loads them
    added = [name for name in asked if name in added_after_deploy(deployment)]
    if added:
        repository = deployment.repository
        raise UsageError(f"{_were_added(added, repository)}: its server serves the models "
                         f"deployed then ({', '.join(deployment.models)})",
                         hint=f"redeploy: {_redeploy(repository)}")


def unserved_warning(deployment: Deployment) -> str:
    """A warning for models in the folder that the warm-up of the deployment leaves out
    ("" if none): added after the deploy, they are not among the models its record names."""
    added = added_after_deploy(deployment)
    if not added:
        return ""
    repository = deployment.repository
    if serves_a_mirror(deployment):
        return (f"warning: {_were_added(added, repository)}: its server does not serve "
                f"{'it' if len(added) == 1 else 'them'}, and nothing warms "
                f"{'it' if len(added) == 1 else 'them'}; redeploy: {_redeploy(repository)}")
    return (f"warning: {_were_added(added, repository)}, so the warm-up leaves "
            f"{'it' if len(added) == 1 else 'them'} out; to load and warm: tritonkit warmup "
            f"-r {shell_word(repository)} " + " ".join(f"--model {shell_word(name)}" for name in added))


def _were_added(names: Sequence[str], repository: str) -> str:
    quoted = ", ".join(f"'{name}'" for name in names)
    if len(names) == 1:
        return f"model {quoted} was added to {repository} after the deploy"
    return f"models {quoted} were added to {repository} after the deploy"


def _redeploy(repository: str) -> str:
    return redeploy_command(Path(repository))
