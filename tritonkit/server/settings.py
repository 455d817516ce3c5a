"""tritonserver settings as data (``configs/server.toml``) and the one place the argv is built.

Every deployment target — the embedded local server, docker-compose, Kubernetes —
starts tritonserver with ``tritonserver_argv``, so explicit model control, strict
readiness, the minimum compute capability and the restricted model-repository API
are the same everywhere.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from tritonkit.datafiles import configs_dir, dataclass_from_table, load_toml
from tritonkit.errors import ProfileError, UsageError

MODEL_CONTROL_MODES = ("none", "poll", "explicit")
# What tritonserver's --http-restricted-api and --grpc-restricted-protocol accept (2.51's
# --help): another name stops the server at start-up, on the GPU host for compose and k8s.
RESTRICTED_CATEGORIES = ("health", "metadata", "inference", "shared-memory", "model-config",
                         "model-repository", "statistics", "trace", "logging")
# The header travels as gRPC metadata too, whose keys are lower-case (0-9 a-z _ - .); Triton
# reads the flag as <categories>:<header>=<value>, so ':', '=' and ',' cannot be in it.
_HEADER = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


@dataclass(frozen=True)
class RestrictedApi:
    """Which API categories need the deployment's secret header, and its name."""

    header: str
    categories: tuple[str, ...] = ("model-repository", "shared-memory", "logging", "trace")


@dataclass(frozen=True)
class ServerSettings:
    """The tritonserver flags tritonkit deploys with (see configs/server.toml)."""

    restricted_api: RestrictedApi
    model_control_mode: str = "explicit"
    strict_readiness: bool = True
    exit_timeout_secs: int = 30
    pinned_memory_pool_byte_size: int = 268435456
    min_supported_compute_capability: float = 6.0
    log_verbose: int = 0
    # Where the local target listens. Containers listen on 0.0.0.0 inside and publish
    # on the host's 127.0.0.1 (compose --public: every interface).
    bind_address: str = "127.0.0.1"

    def __post_init__(self) -> None:
        if self.model_control_mode not in MODEL_CONTROL_MODES:
            raise ProfileError(
                f"server settings: model_control_mode '{self.model_control_mode}' is not one "
                f"of {', '.join(MODEL_CONTROL_MODES)}",
                hint="tritonkit deploys with 'explicit'")
        header = self.restricted_api.header
        if not _HEADER.match(header) or header.endswith("-bin") or header.startswith("grpc-"):
            raise ProfileError(f"server settings: restricted_api.header '{header}' cannot name "
                               "the header (gRPC metadata takes lower-case names only, and "
                               "Triton's flag splits at ':' and '=')",
                               hint="lower-case letters, digits, '-', '_' and '.', e.g. "
                                    "header = \"tritonkit-repository-key\"")
        categories = self.restricted_api.categories
        unknown = [c for c in categories if c not in RESTRICTED_CATEGORIES]
        if unknown or len(set(categories)) != len(categories):
            what = f"'{unknown[0]}' is not one Triton knows" if unknown else "one is listed twice"
            raise ProfileError(f"server settings: restricted_api.categories: {what}",
                               hint=f"choose from {', '.join(RESTRICTED_CATEGORIES)}")
        if "model-repository" not in categories:
            # Without it anyone who reaches the port loads and unloads models, and a load
            # can carry a model's files: code the python backend runs.
            raise ProfileError("server settings: restricted_api.categories must include "
                               "'model-repository': every deployment restricts model loads "
                               "and unloads to the secret header",
                               hint="add \"model-repository\" to restricted_api.categories")

    def replace(self, **changes: object) -> "ServerSettings":
        """A copy with some fields changed (a GPU profile's compute capability, say)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Ports:
    """The three ports tritonserver listens on."""

    http: int = 8000
    grpc: int = 8001
    metrics: int = 8002

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    def require_distinct(self) -> None:
        """A UsageError unless the three ports differ (0, "pick one", may repeat)."""
        chosen = [(name, port) for name, port in self.as_dict().items() if port]
        for i, (name, port) in enumerate(chosen):
            same = [other for other, p in chosen[i + 1:] if p == port]
            if same:
                spelled = {"http": "HTTP", "grpc": "gRPC"}
                names = " and ".join(spelled.get(n, n) for n in (name, *same))
                raise UsageError(f"the {names} ports are both {port}",
                                 hint="give each its own port (0 picks a free one)")


# What tritonkit, and an orchestrator's probes, ask without the secret header: health
# (readiness waits), metadata and model-config (warm-up, load tests), inference.
_READ_WITHOUT_SECRET = ("health", "metadata", "inference", "model-config")


def load_server_settings(path: Path | None = None) -> ServerSettings:
    """Read server settings from ``path`` (default ``configs/server.toml``); settings
    tritonkit cannot deploy with are a ProfileError naming the field and the fix, before
    any server starts."""
    path = path or configs_dir() / "server.toml"
    settings = dataclass_from_table(ServerSettings, load_toml(path), source=str(path))
    _refuse_conflicts(settings, str(path))
    return settings


_FLAG_MOST = {"exit_timeout_secs": 2**31 - 1, "pinned_memory_pool_byte_size": 2**63 - 1,
              "log_verbose": 2**31 - 1}


def _refuse_conflicts(settings: ServerSettings, where: str) -> None:
    """Settings Triton takes but that cannot work with how tritonkit runs it."""
    if settings.model_control_mode != "explicit":
        raise ProfileError(
            f"{where}: model_control_mode = \"{settings.model_control_mode}\" cannot work with "
            "tritonkit: it loads every model itself (--load-model at start-up, loads at "
            "warm-up), which Triton allows in explicit mode only",
            hint='set model_control_mode = "explicit"')
    for name in ("exit_timeout_secs", "pinned_memory_pool_byte_size",
                 "min_supported_compute_capability", "log_verbose"):
        if getattr(settings, name) < 0:
            raise ProfileError(f"{where}: field '{name}' = {getattr(settings, name)} must be 0 "
                               "or more", hint=f"see {name} in configs/server.toml")
        # tritonserver parses its flags as int32 (the pool's size as int64) and refuses more
        # only once started, in its usage text.
        most = _FLAG_MOST.get(name)
        if most is not None and getattr(settings, name) > most:
            raise ProfileError(f"{where}: field '{name}' = {getattr(settings, name)} is more "
                               f"than tritonserver takes ({most})",
                               hint=f"see {name} in configs/server.toml")
    try:
        ipaddress.IPv4Address(settings.bind_address)
    except ValueError:
        # A name resolves to whichever address comes first for Triton, and maybe another
        # for its clients (localhost: ::1 for them, 127.0.0.1 for it): never ready.
        raise ProfileError(f"{where}: field 'bind_address' = '{settings.bind_address}' is not "
                           "an IPv4 address", hint="an IPv4 address of this host: 127.0.0.1, "
                                                  "or 0.0.0.0 for every interface") from None
    unreadable = [c for c in settings.restricted_api.categories if c in _READ_WITHOUT_SECRET]
    if unreadable:
        raise ProfileError(
            f"{where}: restricted_api.categories restricts {', '.join(unreadable)}, which "
            "tritonkit's readiness waits, warm-ups and load tests (and an orchestrator's "
            "probes) ask without the secret header",
            hint=f"take {', '.join(unreadable)} out of restricted_api.categories")


def restricted_api_value(settings: ServerSettings, secret: str) -> str:
    """What ``--http-restricted-api`` and ``--grpc-restricted-protocol`` say: the categories
    behind the secret header, its name and the secret. Triton 2.51 takes the secret nowhere
    but there, on its command line."""
    return f"{','.join(settings.restricted_api.categories)}:" \
           f"{settings.restricted_api.header}={secret}"


def tritonserver_argv(
    settings: ServerSettings,
    *,
    binary: str,
    model_repository: str,
    ports: Ports,
    models: Sequence[str],
    secret: str | None,
    bind_address: str | None = None,
    backend_directory: str | None = None,
    model_config_name: str | None = None,
    gpu_metrics: bool = True,
    python_shm_prefix: str | None = None,
) -> list[str]:
    """The full tritonserver command line for one deployment.

    ``models`` are loaded at start-up (``--load-model``), so a model that fails to
    load stops the server with Triton's own message instead of leaving it half-up.
    ``secret`` is the value of ``settings.restricted_api.header`` that the
    restricted API categories require; None leaves their flags to a caller that adds them
    as the server starts (a container's shell, from its environment).
    ``python_shm_prefix`` names the python backend's shared-memory regions: servers
    sharing one host's /dev/shm need different ones.
    """
    if secret is not None and not secret:
        raise ValueError("a deployment needs a secret for the restricted API")
    host = bind_address or settings.bind_address
    argv = [
        binary,
        f"--model-repository={model_repository}",
        f"--model-control-mode={settings.model_control_mode}",
        *[f"--load-model={name}" for name in models],
        f"--strict-readiness={str(settings.strict_readiness).lower()}",
        f"--exit-timeout-secs={settings.exit_timeout_secs}",
        f"--pinned-memory-pool-byte-size={settings.pinned_memory_pool_byte_size}",
        f"--min-supported-compute-capability={settings.min_supported_compute_capability}",
        f"--log-verbose={settings.log_verbose}",
        f"--http-address={host}",
        f"--grpc-address={host}",
        f"--metrics-address={host}",
        f"--http-port={ports.http}",
        f"--grpc-port={ports.grpc}",
        f"--metrics-port={ports.metrics}",
        *([f"--http-restricted-api={restricted_api_value(settings, secret)}",
           f"--grpc-restricted-protocol={restricted_api_value(settings, secret)}"]
          if secret is not None else []),
        f"--allow-gpu-metrics={str(gpu_metrics).lower()}",
    ]
    if backend_directory:
        argv.append(f"--backend-directory={backend_directory}")
    if model_config_name:
        argv.append(f"--model-config-name={model_config_name}")
    if python_shm_prefix:
        argv.append(f"--backend-config=python,shm-region-prefix-name={python_shm_prefix}")
    return argv
