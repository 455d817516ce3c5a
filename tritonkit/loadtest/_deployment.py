"""What the user named the server by — a deployment's folder (``--repository``) or an
address (``--url``) — and what that says when the server or the model cannot be used:
a recorded local server that is gone, a model added to the folder after the deploy, and
the command that fixes either, spelled with the real folder or address."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tritonkit.client import Endpoint
from tritonkit.errors import UsageError, shell_word
from tritonkit.repository import is_model_dir
from tritonkit.server.state import load_deployment, redeploy_command


def refuse_gone_server(repository: Path | None) -> None:
    """A ServerError at once if ``repository`` records a local server that no longer runs
    (``warmup``'s own check): without it the first request said "connection refused" and
    left the user to guess why. Nothing is said for a folder with no record, or a record
    of another target (compose, Kubernetes), which this host cannot see."""
    if repository is None:
        return
    from tritonkit.server.local import refuse_gone_local_server   # lazy: workers never need it

    try:
        deployment = load_deployment(repository)
    except UsageError:
        return              # resolving the endpoint said what is wrong with the record
    refuse_gone_local_server(deployment)


# Files a serving Triton opens besides the load's connections (model files, logs, the python
# backend's shared memory, the load test's watcher) while a run goes on: left free.
_SERVER_SPARE_FILES = 64


def refuse_crowding_the_server(repository: Path | None, connections: int,
                               load: str = "--concurrency (or --max-in-flight)") -> None:
    """A UsageError before any worker starts if the local server ``repository`` records
    cannot hold ``connections`` more open files: past its open-files limit it stops taking
    connections, and the rest hang until their request timeout. Nothing is said where
    the server's limits cannot be read (another target, another user's process). ``load``:
    the running command's flags that set the connections, which the hint names."""
    if repository is None:
        return
    try:
        deployment = load_deployment(repository)
    except UsageError:
        return
    if deployment.target != "local" or not deployment.pid:
        return
    try:
        limits = Path(f"/proc/{deployment.pid}/limits").read_text()
        in_use = len(os.listdir(f"/proc/{deployment.pid}/fd"))
    except OSError:
        return
    found = re.search(r"^Max open files\s+(\S+)", limits, re.MULTILINE)
    if found is None or not found[1].isdigit():
        return                                  # "unlimited"
    limit = int(found[1])
    room = limit - in_use - _SERVER_SPARE_FILES
    if connections > room:
        raise UsageError(
            f"the server (pid {deployment.pid}) may open {limit} files and holds {in_use}: "
            f"{connections} connections do not fit (past its limit it takes no more, and the "
            "rest hang)",
            hint=f"lower {load} to {max(room, 0)} connections or "
                 f"fewer, or redeploy with a higher limit: ulimit -n {_enough(connections)}, "
                 f"then {redeploy_command(repository)}")


def _enough(connections: int) -> int:
    """A round open-files limit with room for ``connections`` and the server's own files."""
    return 1 << (connections + 4 * _SERVER_SPARE_FILES).bit_length()


def server_hint(endpoint: Endpoint, repository: Path | None, protocol: str = "http") -> str:
    """What to check when nothing answers: the deployment's folder to deploy again, or the
    address given (``repository`` None: the server was named by ``--url``)."""
    if repository is not None:
        return f"is the server up? start it: tritonkit deploy --repository {shell_word(repository)}"
    if protocol == "grpc":
        return (f"is a Triton server listening at {endpoint.grpc_url}? check --grpc-url (its gRPC "
                "port, 8001 by default)")
    return (f"is a Triton server listening at {endpoint.http_url}? check --url (its HTTP port, "
            "8000 by default)")


def unknown_model(client, endpoint: Endpoint, model: str, message: str,
                  repository: Path | None) -> UsageError:
    """Why the server has no model ``model`` to run, from its repository index (the
    restricted API: readable with the deployment's secret), and what to do about it:
    a model it knows but has not loaded is warmed (loaded); one in the deployment's folder
    that it does not know was added after the deploy, which a local server does not see (it
    serves the mirror made at the deploy), so it is redeployed; any other name is checked."""
    known = _index(client, endpoint)
    where = f"--repository {shell_word(repository)}" if repository is not None else f"--url {endpoint.http_url}"
    if known is not None and model not in known:
        if repository is not None and is_model_dir(Path(repository) / model):
            return UsageError(
                f"model '{model}' is in {repository} but was added after the deploy: the server "
                f"at {endpoint.http_url} does not know it",
                hint=f"redeploy: {redeploy_command(repository)}")
        return UsageError(
            f"the server at {endpoint.http_url} has no model '{model}' "
            f"(its models: {', '.join(sorted(known)) or 'none'})",
            hint="check the name given to --model")
    return UsageError(f"model '{model}' is not loaded on the server ({message})",
                      hint=f"load it: tritonkit warmup {where} --model {shell_word(model)}"
                           + ("" if known is not None else "; or check the name"))


def _index(client, endpoint: Endpoint) -> set[str] | None:
    """The names the server's model repository holds, loaded or not; None when they cannot
    be read (no secret, or a server that restricts the API to another one)."""
    try:
        index = client.get_model_repository_index(headers=dict(endpoint.repository_headers) or None)
    except Exception:
        return None
    return {entry["name"] for entry in index if entry.get("name")}
