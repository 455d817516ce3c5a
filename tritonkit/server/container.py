"""What runs inside a Triton container, for every container target (compose, Kubernetes).

``container_spec`` reads a model repository and a GPU profile once and decides the
image (the profile's, or ``--image`` checked against the card), whether TensorRT
plans are served, which per-GPU model configs to use and which plans must be built
on the target GPU first. ``ContainerSpec.argv`` is the command line, built by the
one argv builder (``tritonserver_argv``) with the container's own paths and ports.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import yaml

from tritonkit.errors import UsageError, shell_word
from tritonkit.model_config import read_config, read_report
from tritonkit.profiles import GpuProfile, load_profile
from tritonkit.repository import (REPORT_FILENAME, model_names,
                                  refuse_links_a_container_cannot_follow,
                                  refuse_missing_gpu_configs, refuse_versionless)
from tritonkit.server.local_repository import model_config_path, refuse_python_shell_fields
from tritonkit.server.settings import (Ports, ServerSettings, load_server_settings,
                                       restricted_api_value, tritonserver_argv)

TRITON_BINARY = "tritonserver"
CONTAINER_REPOSITORY = "/models"
CONTAINER_PORTS = Ports()
CONTAINER_BIND = "0.0.0.0"
#: The environment variable that carries the secret header's value into the container.
SECRET_VARIABLE = "TRITONKIT_REPOSITORY_KEY"
#: The one that carries what the restricted-API flags say before the secret.
RESTRICTED_VARIABLE = "TRITONKIT_RESTRICTED_API"
# A fixed shell line that starts tritonserver with its command line given as arguments
# ("$@", never parsed) and the restricted-API flags completed from the environment as the
# container starts: the secret is then in no file and no container command (docker
# inspect's Cmd, docker ps). tritonserver's own argv holds it, as Triton takes it nowhere
# else: `ps` on the host shows it, unless /proc is mounted with hidepid=2.
_EXEC_WITH_SECRET = ('exec "$@" '
                     '"--http-restricted-api=${TRITONKIT_RESTRICTED_API}${TRITONKIT_REPOSITORY_KEY}" '
                     '"--grpc-restricted-protocol=${TRITONKIT_RESTRICTED_API}${TRITONKIT_REPOSITORY_KEY}"')
RECIPE_KEY = "tensorrt_recipe"

# Triton 25.01 (2.54.0) and later need compute capability 7.5 (release notes); 24.05 and
# later ship TensorRT 10, which has no kernels below sm_70 (support matrix).
_NEEDS_CC75_FROM = (25, 1)
_TENSORRT10_FROM = (24, 5)
_TAG = re.compile(r":(\d{2})\.(\d{2})(?:-|$)")


def repository_tag(repository: Path) -> str:
    """8 hex characters of a hash of the repository's resolved path: what tells apart the
    Compose projects and Kubernetes objects of two repositories of one folder name."""
    return hashlib.sha256(str(Path(repository).resolve()).encode()).hexdigest()[:8]


@dataclass(frozen=True)
class PlanRecipe:
    """A TensorRT plan that must be built on the target GPU before the server starts."""

    model: str
    argv: tuple[str, ...]          # the recorded trtexec command, run in the model's folder
    image: str                     # an image that has trtexec, same TensorRT as the server


@dataclass(frozen=True)
class ContainerSpec:
    """One Triton container for one GPU profile: image, models, settings, plans to build."""

    gpu: str
    compute_capability: float
    image: str
    models: tuple[str, ...]
    settings: ServerSettings
    tensorrt: bool
    model_config_name: str | None
    recipes: tuple[PlanRecipe, ...]
    # The profile's kind: a GPU to reserve, GPU metrics to report (False: a CPU profile).
    uses_gpu: bool = True
    # ONNX Runtime's TensorRT accelerator builds engines, which a volume keeps across restarts.
    engine_cache: bool = True

    def argv(self, secret: str | None) -> list[str]:
        """tritonserver's command line inside the container (``secret`` may be a variable;
        None: without the restricted-API flags)."""
        return tritonserver_argv(
            self.settings, binary=TRITON_BINARY, model_repository=CONTAINER_REPOSITORY,
            ports=CONTAINER_PORTS, models=self.models, secret=secret,
            bind_address=CONTAINER_BIND, model_config_name=self.model_config_name,
            gpu_metrics=self.uses_gpu)

    def command_with_secret_from_env(self) -> tuple[list[str], dict[str, str]]:
        """The container's command, which reads the secret from ``SECRET_VARIABLE`` as it
        starts, and the environment it needs besides that variable."""
        return (["sh", "-c", _EXEC_WITH_SECRET, "tritonkit", *self.argv(None)],
                {RESTRICTED_VARIABLE: restricted_api_value(self.settings, "")})


def container_spec(repository: Path, gpu: str, *, image: str | None = None,
                   server_config: Path | None = None) -> ContainerSpec:
    """Decide what the Triton container for ``repository`` on a ``gpu`` card runs."""
    repository = Path(repository)
    models = model_names(repository)
    refuse_versionless(repository, models)
    refuse_links_a_container_cannot_follow(repository, models)
    profile = load_profile(gpu)
    refuse_missing_gpu_configs(repository, models, profile.name)
    settings = profile.server_settings(load_server_settings(server_config))
    for model in models:            # its python backend takes them onto a shell's line too
        config_path = model_config_path(repository / model, profile.name)
        if config_path.is_file() and (config := read_config(config_path)).backend == "python":
            refuse_python_shell_fields(model, config, repository / model, config_path)
    plans = [m for m in models if _serves_plans(repository / m, profile.name)]
    if plans and not profile.has_gpu:
        raise UsageError(f"model '{plans[0]}' is served from a TensorRT plan, which needs a GPU; "
                         f"the {profile.name} profile has none",
                         hint=f"give it an ONNX config for the profile: tritonkit config "
                              f"{shell_word(plans[0])} --gpu {shell_word(profile.name)} --force (from its model.onnx)")
    tensorrt = bool(plans)
    chosen = profile.stack.triton_image_tensorrt if tensorrt else profile.stack.triton_image
    chosen = chosen if image is None else image     # an empty --image is refused, not ignored
    check_image(profile, chosen, tensorrt=tensorrt)
    per_gpu = any((repository / m / "configs" / f"{profile.name}.pbtxt").is_file() for m in models)
    recipes = tuple(r for m in plans for r in [_recipe(repository / m, chosen)] if r)
    return ContainerSpec(
        gpu=profile.name, compute_capability=profile.compute_capability, image=chosen,
        models=tuple(models), settings=settings, tensorrt=tensorrt,
        # Triton falls back to config.pbtxt for a model without configs/<name>.pbtxt.
        model_config_name=profile.name if per_gpu else None, recipes=recipes,
        uses_gpu=profile.has_gpu, engine_cache=profile.serving.accelerator == "tensorrt")


class _PlainDumper(yaml.SafeDumper):
    """A safe dumper that writes a dict used twice out twice (no &anchors / *aliases)."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def to_yaml(data: dict) -> str:
    """A compose file or manifest as YAML, in the dict's own key order."""
    return yaml.dump(data, Dumper=_PlainDumper, sort_keys=False, width=10_000)


def image_release(image: str) -> tuple[int, int] | None:
    """(year, month) of an NGC ``...:YY.MM-py3`` tag; None for a tag that does not say."""
    match = _TAG.search(image)
    return (int(match.group(1)), int(match.group(2))) if match else None


_IMAGE = re.compile(r"^(?:[A-Za-z0-9.-]+(?::\d+)?/)?[a-z0-9]+(?:(?:[._]|__|-+|/)[a-z0-9]+)*"
                    r"(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$")


def check_image(profile: GpuProfile, image: str, *, tensorrt: bool) -> None:
    """Refuse an image reference Docker would refuse, or one whose Triton cannot use the
    card (or its plans) at all."""
    if not _IMAGE.match(image):
        raise UsageError(f"--image '{image}' is not an image reference",
                         hint="e.g. nvcr.io/nvidia/tritonserver:24.10-py3, or leave --image out "
                              "for the profile's")
    release = image_release(image)
    if release is None or not profile.has_gpu:
        return  # a custom tag: the user knows what is inside; a CPU has no capability to match
    fallback = profile.stack.triton_image_tensorrt if tensorrt else profile.stack.triton_image
    if profile.compute_capability < 7.5 and release >= _NEEDS_CC75_FROM:
        raise UsageError(
            f"image {image} (Triton 25.01 or later) needs compute capability 7.5; the "
            f"{profile.display_name} has {profile.compute_capability:.1f}",
            hint=f"use {fallback} (the profile's image), or leave --image out")
    if tensorrt and profile.compute_capability < 7.0 and release >= _TENSORRT10_FROM:
        raise UsageError(
            f"image {image} ships TensorRT 10, which cannot run plans on the "
            f"{profile.display_name} (compute capability {profile.compute_capability:.1f})",
            hint=f"use {profile.stack.triton_image_tensorrt} (TensorRT 8.6), or serve ONNX "
                 "with the ONNX Runtime backend")


def tensorrt_image(triton_image: str) -> str:
    """The NGC TensorRT image of the same release (same TensorRT, and it has trtexec)."""
    if "/tritonserver:" in triton_image:
        return triton_image.replace("/tritonserver:", "/tensorrt:", 1)
    return triton_image


def _serves_plans(model_dir: Path, gpu: str) -> bool:
    """Whether the config Triton will use for this card serves a TensorRT plan."""
    for config in (model_dir / "configs" / f"{gpu}.pbtxt", model_dir / "config.pbtxt"):
        if config.exists():
            parsed = read_config(config)
            return parsed.platform == "tensorrt_plan" or parsed.backend == "tensorrt"
    return any(model_dir.glob("*/*.plan"))


# The trtexec flags a recorded recipe may hold: what the exporter writes, and build options
# that read and write nothing else. A report is data a repository carries (downloaded,
# maybe): it must not choose an image, a program, a plugin library (--plugins loads code)
# or a file outside the model's folder for a container that has a GPU and the repository.
RECIPE_FLAGS = frozenset({"--fp16", "--bf16", "--best", "--noTF32", "--skipInference", "--verbose",
                          "--minShapes", "--optShapes", "--maxShapes", "--memPoolSize",
                          "--workspace", "--builderOptimizationLevel"})
RECIPE_PATH_FLAGS = frozenset({"--onnx", "--saveEngine"})


def _refuse_recipe(argv: list[str], report_path: Path) -> None:
    """A UsageError for a recorded plan-build command tritonkit would not run."""
    def refused(what: str) -> UsageError:
        return UsageError(f"{report_path}: '{RECIPE_KEY}' {what}, which tritonkit does not run "
                          "from a report", hint="re-export the model with --format tensorrt "
                          "--force (it records trtexec --onnx … --saveEngine … and shapes)")

    if argv[0] != "trtexec":
        raise refused(f"runs {shell_word(argv[0])}, not trtexec")
    for arg in argv[1:]:
        flag, _, value = arg.partition("=")
        if flag in RECIPE_PATH_FLAGS:
            path = Path(value)
            if not value or path.is_absolute() or ".." in path.parts:
                raise refused(f"gives {shell_word(arg)}, a path outside the model's folder")
        elif flag not in RECIPE_FLAGS:
            raise refused(f"passes {shell_word(arg)}")


def _recipe(model_dir: Path, triton_image: str) -> PlanRecipe | None:
    """The plan-build recipe the exporter recorded for a model, if any.

    ``tensorrt_recipe`` is a trtexec command line (a string or a list), or a table with
    ``command``; it runs in the TensorRT image of the profile's Triton, never in one the
    report names, and only with the flags ``_refuse_recipe`` lets through.
    """
    report_path = model_dir / REPORT_FILENAME
    if not report_path.exists():
        return None
    try:
        recipe = read_report(model_dir).get(RECIPE_KEY)
    except AttributeError as exc:
        raise UsageError(f"{report_path} is not a JSON object ({exc})",
                         hint="re-export the model with --force") from None
    if not recipe:
        return None
    if isinstance(recipe, dict):
        recipe = recipe.get("command")
    try:
        argv = shlex.split(recipe) if isinstance(recipe, str) else recipe
    except ValueError as exc:           # an unclosed quote
        raise UsageError(f"{report_path}: '{RECIPE_KEY}' is not a command line ({exc})",
                         hint="expected a trtexec command (a string or a list of strings)") from None
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise UsageError(f"{report_path}: '{RECIPE_KEY}' is not a command line",
                         hint="expected a trtexec command (a string or a list of strings)")
    _refuse_recipe(argv, report_path)
    return PlanRecipe(model=model_dir.name, argv=tuple(argv), image=tensorrt_image(triton_image))
