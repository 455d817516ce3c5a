"""``tritonkit doctor``: is this host ready to serve the chosen profile's Triton image?

Facts are gathered once (``gather_host_facts``: NVML, docker, sockets) into a
``HostFacts`` value, and judged separately (``check_host``), so every judgment can be
tested with the facts of a host we do not have: a P100 with a 25.01 image, a 470
driver under a CUDA 13 image. Each check is one line: ok, a warning (doctor cannot
tell), or a problem and its fix. What an image asks of the driver is data:
``configs/triton_images.toml``, one row per NGC release, from its release notes.

A CPU profile (``--gpu cpu``) is judged on what a host without a GPU needs: the image, the
host's memory against the profile's, Docker and Compose, the ports and the repository;
no driver, GPU or NVIDIA runtime.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

from tritonkit.datafiles import configs_dir, dataclass_from_table, load_toml, shipped_configs_dir
from tritonkit.errors import ProfileError, UsageError, shell_word
from tritonkit.fileio import open_regular
from tritonkit.monitor.nvml import GpuFault, GpuIdentity, GpuUnavailableError, Nvml
from tritonkit.profiles import GpuProfile, available_profiles, load_profile
from tritonkit.repository import ONNX_FILENAME
from tritonkit.server.compose import NVIDIA_HOOK, docker_gives_gpus

# Triton containers are CUDA 13 from 25.08 (2.60.0) and CUDA 12 from 23.01 before it
# (release notes); the CUDA toolkit release notes give each major's minimum driver. What
# one image asks for (24.04: 545, 24.10: 560) and which older branches run it in
# forward-compatibility mode on a data-center GPU is in IMAGE_RELEASES_FILE, per release.
CUDA13_FROM = (25, 8)
MIN_DRIVER = {12: 525, 13: 580}
IMAGE_RELEASES_FILE = "triton_images.toml"
RELEASE_NOTES = "https://docs.nvidia.com/deeplearning/triton-inference-server/release-notes/"
NGC_TRITON = "nvcr.io/nvidia/tritonserver"
# The tag the release notes describe: nvcr.io/nvidia/tritonserver:24.10-py3 (a digest may
# follow). Other tags of a release (-trtllm-python-py3, -vllm-python-py3) carry another CUDA.
_PY3_TAG = re.compile(r":(\d{2}\.\d{2})-py3(?:@|$)")
_RELEASE_KEY = re.compile(r"\d{2}\.\d{2}")
_CUDA_VERSION = re.compile(r"\d+(?:\.\d+)+")
_DRIVER_RELEASE = re.compile(r"\d{3}\.\d+")
# A card of the profile's compute capability with less memory than this share of the
# profile's is another card (an A2 or A16 is 8.6 like the A10; a P100 comes in 12 GB):
# configs sized for the profile's memory would not fit it. NVML reports a little less
# than the datasheet: an A10 with ECC on shows 22.5 of its 24 GiB.
MIN_MEMORY_SHARE = 0.9
# The NVIDIA container toolkit's binaries doctor looks for; only the hook makes --gpus work.
NVIDIA_CONTAINER_TOOLS = (NVIDIA_HOOK, "nvidia-ctk", "nvidia-container-runtime",
                          "nvidia-container-cli")
DEFAULT_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}


@dataclass(frozen=True)
class DockerFacts:
    cli: str | None = None                   # path of the docker binary
    server_version: str | None = None        # the engine's version, when it answered
    runtimes: tuple[str, ...] = ()           # the engine's registered runtimes
    error: str | None = None                 # why the engine could not be asked
    nvidia_tools: tuple[str, ...] = ()       # NVIDIA container toolkit binaries on PATH
    compose: str | None = None               # "docker compose" or "docker-compose", if any


@dataclass(frozen=True)
class PortFact:
    role: str
    port: int
    free: bool
    problem: str = ""        # what the OS said when it was not: "in use", "permission denied"...
    # in use by the repository's own local deployment, recorded and alive: its repository
    held_by_deployment: str = ""


@dataclass(frozen=True)
class HostFacts:
    """What this host is, gathered before anything is judged."""

    driver_version: str | None = None
    driver_error: str | None = None
    gpus: tuple[GpuIdentity, ...] = ()
    gpu_faults: tuple[GpuFault, ...] = ()      # GPUs NVML counts but cannot reach
    docker: DockerFacts = field(default_factory=DockerFacts)
    ports: tuple[PortFact, ...] = ()
    memory_total_mib: int | None = None        # the host's memory (a CPU profile's check)
    cpus: int | None = None


@dataclass(frozen=True)
class Check:
    """One line of the report. A warning (doctor cannot tell) does not block a deploy:
    ``ok`` is true, ``status`` says "warning"."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    warning: bool = False

    @property
    def status(self) -> str:
        return "warning" if self.warning else "ok" if self.ok else "problem"


@dataclass(frozen=True)
class ImageRelease:
    """One NGC Triton release (``tritonserver:YY.MM-py3``) as IMAGE_RELEASES_FILE records
    it. Unset fields were not recorded: doctor does not guess them."""

    onnxruntime: str                          # Triton's compatibility matrix
    cuda: str | None = None                   # } its release notes,
    driver: int | None = None                 # } "Driver Requirements"
    forward_compatible: tuple[str, ...] = ()  # } ("470.57": 470.57 or later R470)
    source: str | None = None                 # the release notes page they come from

    @property
    def cuda_major(self) -> int | None:
        return int(self.cuda.split(".")[0]) if self.cuda else None

    def first_releases(self) -> dict[int, tuple[int, int]]:
        """Each forward-compatible branch and its first release: {470: (470, 57)}."""
        return {release[0]: release for release in map(_driver_release, self.forward_compatible)
                if release}


@dataclass(frozen=True)
class ImageNeeds:
    """What a Triton image asks of the host."""

    image: str
    cuda_major: int
    min_driver: int | None           # the CUDA major's own floor
    image_driver: int | None         # the image's own requirement; None: not recorded
    min_compute_capability: float
    # below image_driver, the branches that run it on a data-center GPU, from this release
    forward_compatible: dict[int, tuple[int, int]] = field(default_factory=dict)


# --- facts -----------------------------------------------------------------------------------

Runner = Callable[..., subprocess.CompletedProcess]


def gather_host_facts(host: str = "127.0.0.1", ports: dict[str, int] | None = None, *,
                      nvml: Nvml | None = None, run: Runner = subprocess.run,
                      which: Callable[[str], str | None] = shutil.which,
                      repository: Path | None = None) -> HostFacts:
    """Ask NVML, docker and the sockets what this host has (nothing here raises). A port
    in use that ``repository``'s running local deployment listens on is told as its."""
    driver, driver_error, gpus, faults = None, None, (), ()
    nvml = nvml or Nvml()
    try:
        nvml.open()
        try:
            driver, gpus = nvml.driver_version(), tuple(nvml.identities())
            faults = nvml.unreachable
        finally:
            nvml.close()
    except GpuUnavailableError as exc:
        # the driver answered, its GPUs did not (permissions, say): the driver is judged
        # by its version, and each GPU is named with why
        driver, faults = exc.driver_version, exc.faults
        driver_error = None if driver else exc.message
    return HostFacts(driver_version=driver, driver_error=driver_error, gpus=gpus,
                     gpu_faults=faults,
                     docker=_docker_facts(run, which),
                     ports=_port_facts(host, ports or DEFAULT_PORTS, repository),
                     memory_total_mib=_memory_total_mib(), cpus=os.cpu_count())


def _memory_total_mib() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    except (ValueError, OSError):
        return None


def _docker_facts(run: Runner, which: Callable[[str], str | None]) -> DockerFacts:
    tools = tuple(t for t in NVIDIA_CONTAINER_TOOLS if which(t))
    cli = which("docker")
    compose = _compose_found(cli, run, which)
    if not cli:
        return DockerFacts(nvidia_tools=tools, compose=compose)
    try:
        done = run([cli, "info", "--format", "{{json .}}"], capture_output=True, text=True,
                   timeout=15)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return DockerFacts(cli=cli, error=str(exc), nvidia_tools=tools, compose=compose)
    try:
        info = json.loads(done.stdout or "{}")
    except json.JSONDecodeError:
        info = {}
    errors = info.get("ServerErrors") or ([] if done.returncode == 0 else
                                          [(done.stderr or "docker info failed").strip()])
    if errors or not info.get("ServerVersion"):
        return DockerFacts(cli=cli, error=(errors or ["no engine answered"])[0].splitlines()[0],
                           nvidia_tools=tools, compose=compose)
    return DockerFacts(cli=cli, server_version=info["ServerVersion"],
                       runtimes=tuple(sorted(info.get("Runtimes") or {})), nvidia_tools=tools,
                       compose=compose)


def _compose_found(cli: str | None, run: Runner, which: Callable[[str], str | None]) -> str | None:
    """The Compose deploy would run (``compose.compose_command``'s order): the plugin, else
    docker-compose."""
    if cli:
        try:
            if run([cli, "compose", "version"], capture_output=True, text=True,
                   timeout=15).returncode == 0:
                return "docker compose"
        except (OSError, subprocess.TimeoutExpired):
            pass
    return "docker-compose" if which("docker-compose") else None


def _port_facts(host: str, ports: dict[str, int], repository: Path | None) -> tuple[PortFact, ...]:
    from tritonkit.server.local import IN_USE, port_problem, running_deployment

    facts = []
    for role, port in ports.items():
        problem = port_problem(host, port)
        facts.append(PortFact(role, port, free=problem is None, problem=problem or ""))
    if repository is None or all(p.problem != IN_USE for p in facts):
        return tuple(facts)
    # The deployment's record says which ports it listens on, and running_deployment that
    # its pid is still that tritonserver. Whatever address it bound, a port of the same
    # number doctor finds in use is its (sockets on two addresses of a host do not clash).
    deployment = running_deployment(Path(repository))
    if deployment is None:
        return tuple(facts)
    held = {deployment.http_port, deployment.grpc_port, deployment.metrics_port}
    return tuple(replace(p, held_by_deployment=deployment.repository)
                 if p.problem == IN_USE and p.port in held else p for p in facts)


# --- the image table ------------------------------------------------------------------------

def image_releases_path() -> Path:
    """The table in the configs folder, or, where a $TRITONKIT_CONFIGS folder made for its
    settings has none, the one tritonkit ships: facts about NGC's images, not settings."""
    chosen = configs_dir() / IMAGE_RELEASES_FILE
    return chosen if chosen.is_file() else shipped_configs_dir() / IMAGE_RELEASES_FILE


def load_image_releases(path: Path | None = None) -> dict[str, ImageRelease]:
    """The NGC releases ``configs/triton_images.toml`` records, by "YY.MM"; a bad row is a
    ProfileError naming the file and the field."""
    path = Path(path) if path is not None else image_releases_path()
    table = load_toml(path)
    unknown = sorted(set(table) - {"onnxruntime_source", "releases"})
    if unknown:
        raise ProfileError(f"{path}: unknown field '{unknown[0]}'",
                           hint="known fields here: onnxruntime_source, releases")
    rows = table.get("releases")
    if not isinstance(rows, dict):
        raise ProfileError(f"{path}: missing table 'releases'",
                           hint='add one [releases."YY.MM"] table per release')
    releases = {}
    for key, row in rows.items():
        where = f"releases.{key}"
        if not _RELEASE_KEY.fullmatch(key) or not isinstance(row, dict):
            raise ProfileError(f"{path}: '{where}' is not a release table",
                               hint='name each [releases."YY.MM"], e.g. [releases."24.10"]')
        release = dataclass_from_table(ImageRelease, row, source=str(path), prefix=f"{where}.")
        _validate_release(path, where, release)
        releases[key] = release
    return releases


def _validate_release(path: Path, where: str, release: ImageRelease) -> None:
    def bad(name: str, why: str, hint: str) -> ProfileError:
        value = getattr(release, name)
        value = list(value) if isinstance(value, tuple) else value
        return ProfileError(f"{path}: field '{where}.{name}' = {value!r} {why}", hint=hint)

    if release.cuda is not None and not _CUDA_VERSION.fullmatch(release.cuda):
        raise bad("cuda", "is not a CUDA version", 'e.g. cuda = "12.6.2"')
    if release.driver is None:
        if release.forward_compatible:
            raise bad("forward_compatible", "is given without 'driver'",
                      "add the driver the release notes say it requires")
        return
    if release.cuda is None or release.source is None:
        raise bad("driver", "needs 'cuda' and 'source' beside it",
                  "add the CUDA version and the release notes page the driver comes from")
    floor = MIN_DRIVER.get(release.cuda_major)
    if floor is not None and release.driver < floor:
        raise bad("driver", f"is below {floor}, the floor of CUDA {release.cuda_major} itself",
                  "take it from the release notes' Driver Requirements")
    for version in release.forward_compatible:
        if not _DRIVER_RELEASE.fullmatch(version) or int(version[:3]) > release.driver:
            raise bad("forward_compatible",
                      f"lists {version!r}, not a driver release at or below R{release.driver}",
                      'list the first release of each branch, e.g. ["470.57", "525.85"]')


def _release_key(image: str) -> str | None:
    """ "24.10" for ...tritonserver:24.10-py3; None for any other tag."""
    match = _PY3_TAG.search(image)
    return match.group(1) if match else None


# --- judgment --------------------------------------------------------------------------------

def image_needs(image: str, profile: GpuProfile,
                releases: dict[str, ImageRelease] | None = None) -> ImageNeeds:
    """CUDA major, driver and compute capability an image needs.

    A ``YY.MM-py3`` tag with a driver recorded in IMAGE_RELEASES_FILE is judged by its row.
    Otherwise the profile's own image uses the profile's stack numbers, a tag that names no
    release is assumed to be built like the profile's image, and any other tag's driver
    requirement is unknown (``image_driver`` None).
    """
    from tritonkit.server.container import image_release

    releases = load_image_releases() if releases is None else releases
    release = image_release(image)
    if release is None and image != profile.stack.triton_image:
        return replace(image_needs(profile.stack.triton_image, profile, releases), image=image)
    min_cc = 7.5 if release is not None and release >= (25, 1) else 6.0
    row = releases.get(_release_key(image) or "")
    if row is not None and row.driver is not None:
        cuda = row.cuda_major
        return ImageNeeds(image, cuda, MIN_DRIVER.get(cuda), row.driver, min_cc,
                          row.first_releases())
    if image == profile.stack.triton_image:
        stack = profile.stack
        return ImageNeeds(image, stack.cuda_major, stack.min_driver,
                          stack.image_driver or stack.min_driver, min_cc)
    cuda = (row and row.cuda_major) or (13 if release >= CUDA13_FROM else 12)
    return ImageNeeds(image, cuda, MIN_DRIVER.get(cuda), None, min_cc)


def check_host(facts: HostFacts, profile: GpuProfile, image: str | None = None,
               releases: dict[str, ImageRelease] | None = None, *,
               tensorrt: bool = False) -> list[Check]:
    """Judge the facts against the profile and image: one Check per line of the report.
    ``tensorrt``: the repository serves TensorRT plans (the image must run them)."""
    image = image or profile.stack.triton_image
    if not profile.has_gpu:
        return [_check_image(profile, image, tensorrt), _check_host_memory(facts, profile),
                _check_docker(facts.docker), _check_compose(facts.docker),
                _check_ports(facts.ports)]
    releases = load_image_releases() if releases is None else releases
    needs = image_needs(image, profile, releases)
    return [_check_driver(facts, needs, releases), _check_image(profile, image, tensorrt),
            *_check_gpus(facts, profile, needs), _check_docker(facts.docker),
            _check_nvidia_runtime(facts.docker), _check_ports(facts.ports)]


def _driver_release(version: str) -> tuple[int, int] | None:
    """(branch, release) of a driver version: 470.223.02 -> (470, 223); a bare branch,
    580, is (580, 0)."""
    parts = (version.split(".") + ["0"])[:2]
    if not all(part.isdigit() for part in parts):
        return None
    return int(parts[0]), int(parts[1])


def _first_release(image_driver: int, forward_compatible: dict[int, tuple[int, int]],
                   branch: int) -> tuple[int, int] | None:
    """The first release of driver ``branch`` that runs an image asking for driver
    ``image_driver``, or None when no release of that branch does.

    Every branch above the image's requirement runs it, and its own branch from the release
    the notes list (if they list one: 24.04 asks for 545 and lists 545.23); below it only the
    forward-compatible branches do, each from its first release. So a driver that passes
    never fails once upgraded within its branch, and nothing at or above the requirement
    fails."""
    listed = forward_compatible.get(branch)
    if branch > image_driver:
        return branch, 0
    if branch == image_driver:
        return listed or (branch, 0)
    return listed


def _runs(needs: ImageNeeds, release: tuple[int, int]) -> tuple[int, int] | None:
    """Whether a driver of (branch, release) runs the image: the first release of its
    branch that does when it does, None when no release of the branch does."""
    assert needs.image_driver is not None
    return _first_release(needs.image_driver, needs.forward_compatible, release[0])


def _release_text(release: tuple[int, int]) -> str:
    return f"{release[0]}.{release[1]}"


def _requirement_text(needs: ImageNeeds) -> str:
    """ "545.23" where the notes name the requirement branch's first release, else "560"."""
    listed = needs.forward_compatible.get(needs.image_driver)
    return _release_text(listed) if listed else str(needs.image_driver)


def _ways_out(needs: ImageNeeds, branch: int) -> str:
    """The upgrades that run the image from a driver of ``branch``: the image's own
    requirement, or a newer forward-compatible branch its release notes list."""
    listed = [f"R{newer} ≥ {_release_text(first)}"
              for newer, first in sorted(needs.forward_compatible.items())
              if branch < newer < needs.image_driver]
    return (f"upgrade the NVIDIA driver to ≥ {_requirement_text(needs)}"
            + (f", or on a data-center GPU to a forward-compatible {', '.join(listed)}"
               if listed else ""))


def _newest_cuda12_release(release: tuple[int, int],
                           releases: dict[str, ImageRelease]) -> str | None:
    """The newest CUDA 12 image in the table that a driver of (branch, release) runs."""
    for key in sorted(releases, reverse=True):
        row = releases[key]
        if row.driver is None or row.cuda_major != 12:
            continue
        image = f"{NGC_TRITON}:{key}-py3"
        first = _runs(ImageNeeds(image, 12, MIN_DRIVER[12], row.driver, 6.0,
                                 row.first_releases()), release)
        if first and release >= first:
            return f"{image} (CUDA {row.cuda})"
    return None


def _check_driver(facts: HostFacts, needs: ImageNeeds,
                  releases: dict[str, ImageRelease]) -> Check:
    if needs.image_driver is None:
        return _unknown_driver(facts, needs)
    want = f"{needs.image_driver} (CUDA {needs.cuda_major}, needed by {needs.image})"
    if facts.driver_version is None:
        return Check("driver", False, facts.driver_error or "no NVIDIA driver",
                     f"install NVIDIA driver ≥ {want}")
    release = _driver_release(facts.driver_version)
    branch = release[0] if release else 0
    first = _runs(needs, release or (0, 0))
    if release and first and release >= first:
        if branch < needs.image_driver:
            return Check("driver", True,
                         f"driver {facts.driver_version} is older than {want}, which runs it in "
                         f"forward-compatibility mode on data-center GPUs (R{branch} from "
                         f"{_release_text(first)}; NGC release notes)")
        return Check("driver", True, f"driver {facts.driver_version} ≥ {want}")
    if release and first:            # the branch runs the image, from a later release on
        return Check("driver", False,
                     f"driver {facts.driver_version} is older than {_release_text(first)}, the "
                     f"first R{branch} release that runs {needs.image} (NGC release notes)",
                     f"upgrade the NVIDIA driver to {_release_text(first)} or a later R{branch}"
                     + (f", or to ≥ {_requirement_text(needs)}"
                        if branch < needs.image_driver else ""))
    listed = sorted(needs.forward_compatible)
    why = (f"; R{branch} is not forward-compatible with it (NGC lists "
           f"{', '.join(f'R{b}' for b in listed)} for data-center GPUs)" if release and listed else "")
    older = release and needs.cuda_major == 13 and _newest_cuda12_release(release, releases)
    return Check("driver", False, f"driver {facts.driver_version} is older than {want}{why}",
                 _ways_out(needs, branch) + (f", or use {older}, the newest CUDA 12 image "
                                             f"in {IMAGE_RELEASES_FILE} it runs" if older else ""))


def _unknown_driver(facts: HostFacts, needs: ImageNeeds) -> Check:
    """An image whose driver requirement the table does not record: a warning (neither a
    pass nor a failure), unless there is no driver at all."""
    fix = (f"read the Driver Requirements in its release notes ({RELEASE_NOTES}), and add "
           f"them to configs/{IMAGE_RELEASES_FILE}")
    if facts.driver_version is None:
        return Check("driver", False, facts.driver_error or "no NVIDIA driver",
                     f"install the NVIDIA driver {needs.image}'s release notes ask for "
                     f"({RELEASE_NOTES})")
    return Check("driver", True,
                 f"unknown: check its release notes — configs/{IMAGE_RELEASES_FILE} does not "
                 f"record which driver {needs.image} needs (this host has "
                 f"{facts.driver_version})", fix, warning=True)


def _check_image(profile: GpuProfile, image: str, tensorrt: bool = False) -> Check:
    from tritonkit.server.container import check_image

    try:
        check_image(profile, image, tensorrt=tensorrt)
    except UsageError as exc:
        return Check("image", False, exc.message, exc.hint or "")
    if not profile.has_gpu:
        return Check("image", True, f"{image} serves on the CPU: ONNX Runtime's CPU provider, "
                                    "no GPU, driver or NVIDIA runtime needed")
    plans = ", with the repository's TensorRT plans" if tensorrt else ""
    return Check("image", True, f"{image} runs on the {profile.display_name} "
                                f"(compute capability {profile.cc_key}){plans}")


def _check_host_memory(facts: HostFacts, profile: GpuProfile) -> Check:
    """A CPU profile's memory is what its configs let the models take (their batch limits
    are sized for it): the host must have it."""
    cores = f", {facts.cpus} cores" if facts.cpus else ""
    if facts.memory_total_mib is None:
        return Check("memory", True, f"unknown: this host's memory could not be read; the "
                                     f"{profile.name} profile's configs take up to "
                                     f"{profile.memory.gib:g} GiB", warning=True)
    have = facts.memory_total_mib / 1024
    if have < profile.memory.gib:
        return Check("memory", False,
                     f"{have:.1f} GiB{cores}: the {profile.name} profile's configs size batches "
                     f"for {profile.memory.gib:g} GiB of models",
                     f"copy configs/gpus/{profile.name}.toml with memory.gib below "
                     f"{have:.0f}, pass --gpu with it and write the configs again "
                     "(tritonkit config NAME --gpu FILE --force)")
    return Check("memory", True, f"{have:.1f} GiB{cores}; the {profile.name} profile's configs "
                                 f"take up to {profile.memory.gib:g} GiB")


def _check_compose(docker: DockerFacts) -> Check:
    if docker.compose:
        return Check("compose", True, f"Docker Compose ({docker.compose})")
    return Check("compose", False, "no Docker Compose (neither 'docker compose' nor "
                                   "'docker-compose')",
                 "install the Compose plugin (docker-compose-plugin) or docker-compose")


def _matching_profile(cc: float) -> str | None:
    for name in available_profiles("gpu"):
        try:
            if abs(load_profile(name).compute_capability - cc) < 1e-6:
                return name
        except UsageError:
            continue
    return None


def _fix_for_older_card(gpu: GpuIdentity, profile: GpuProfile) -> str:
    """The fix for a card the image ignores: the profile made for that card, with its own
    image, when the card is not the profile's (a P100 checked against the A10's 25.12)."""
    other = _matching_profile(gpu.compute_capability)
    if other is None:
        return (f"add a profile for it: copy configs/gpus/{profile.name}.toml with an image of "
                "24.12 or earlier")
    if other != profile.name:
        return f"--gpu {shell_word(other)} (its image: {load_profile(other).stack.triton_image})"
    return f"use {profile.stack.triton_image}, an image of 24.12 or earlier"


def _check_gpus(facts: HostFacts, profile: GpuProfile, needs: ImageNeeds) -> list[Check]:
    # A card NVML counts and cannot reach: lost (off the bus, Xid), or not this user's to read.
    faults = [Check(f"gpu {fault.index}", "NO_PERMISSION" in fault.error,
                    f"NVML counts it but cannot reach it: {fault.error}",
                    "give this user the GPU's device node (ls -l /dev/nvidia*: its group, "
                    "or the container's device list), or run doctor as the user who deploys"
                    if "NO_PERMISSION" in fault.error else
                    "read the kernel log for Xid errors (dmesg), then reset the card "
                    f"(nvidia-smi -r -i {fault.index}) or reboot the host",
                    warning="NO_PERMISSION" in fault.error)
              for fault in facts.gpu_faults]
    return faults + _check_reached_gpus(facts, profile, needs)


def _check_reached_gpus(facts: HostFacts, profile: GpuProfile, needs: ImageNeeds) -> list[Check]:
    if not facts.gpus and facts.gpu_faults:
        return []                                # each is named, with why, above
    if not facts.gpus:
        return [Check("gpu", False, "no NVIDIA GPU visible on this host",
                      f"run doctor on the host with the {profile.display_name}")]
    checks = []
    for gpu in facts.gpus:
        name = f"gpu {gpu.index}"
        cc = f"{gpu.compute_capability:.1f}"
        if gpu.compute_capability < needs.min_compute_capability:
            checks.append(Check(name, False,
                                f"{gpu.name} (compute capability {cc}) is below {needs.image}'s "
                                f"minimum {needs.min_compute_capability:.1f}: Triton would ignore it",
                                _fix_for_older_card(gpu, profile)))
        elif abs(gpu.compute_capability - profile.compute_capability) > 1e-6:
            other = _matching_profile(gpu.compute_capability)
            checks.append(Check(name, False,
                                f"{gpu.name} is compute capability {cc}, the {profile.name} "
                                f"profile is for {profile.cc_key}",
                                f"--gpu {shell_word(other)}" if other else
                                f"add a profile for it: copy configs/gpus/{profile.name}.toml"))
        elif (gpu.memory_total_mib is not None
              and gpu.memory_total_mib < MIN_MEMORY_SHARE * profile.memory.gib * 1024):
            checks.append(Check(name, False,
                                f"{gpu.name} is compute capability {cc} like the "
                                f"{profile.display_name} but has {gpu.memory_total_mib / 1024:.1f} "
                                f"GiB, not {profile.memory.gib:g}: the {profile.name} profile's "
                                "configs size batches and instances for memory it does not have",
                                f"add a profile for it: copy configs/gpus/{profile.name}.toml "
                                "with its own memory, bus and power, and pass --gpu with it"))
        elif problem := _memory_problem(gpu):
            checks.append(Check(name, False, f"{gpu.name}: {problem[0]}", problem[1]))
        else:
            checks.append(Check(name, True, f"{gpu.name}, compute capability {cc} "
                                            f"matches the {profile.name} profile"))
    return checks


def _memory_problem(gpu: GpuIdentity) -> tuple[str, str] | None:
    """What the card's own memory bookkeeping says is wrong, and the fix."""
    reset = (f"reset the GPU with nothing running on it (nvidia-smi -r -i {gpu.index}) or "
             "reboot, then run doctor again")
    if gpu.row_remap_failed:
        return ("a memory row remap failed: the card has no spare rows left for its bad "
                "memory and may corrupt results or fail",
                "take the card out of service and have it replaced")
    if gpu.remapped_rows_pending:
        return ("a memory row remap is pending: bad memory stays in use until the GPU resets",
                reset)
    if gpu.retired_pages_pending:
        return ("retired memory pages are pending: bad pages stay in use until the GPU "
                "resets", reset)
    if gpu.ecc_mode_change_pending:
        return ("an ECC mode change is pending: memory size and speed change at the next "
                "reset", reset)
    return None


def _check_docker(docker: DockerFacts) -> Check:
    if not docker.cli:
        return Check("docker", False, "docker is not installed",
                     "install Docker Engine (docs.docker.com/engine/install)")
    if docker.error:
        return Check("docker", False, f"the docker engine does not answer ({docker.error})",
                     "start it (sudo systemctl start docker) or add your user to the docker group")
    return Check("docker", True, f"Docker engine {docker.server_version}")


def _check_nvidia_runtime(docker: DockerFacts) -> Check:
    fix = ("install nvidia-container-toolkit, then: sudo nvidia-ctk runtime configure "
           "--runtime=docker && sudo systemctl restart docker")
    if docker_gives_gpus(docker.runtimes, hook_found=NVIDIA_HOOK in docker.nvidia_tools):
        if "nvidia" in docker.runtimes:
            return Check("nvidia runtime", True, "the docker engine has the nvidia runtime")
        works = "; --gpus works" if docker.server_version else ""
        return Check("nvidia runtime", True, "NVIDIA container toolkit installed "
                                             f"({', '.join(docker.nvidia_tools)}{works})")
    if docker.nvidia_tools:
        return Check("nvidia runtime", False,
                     f"{', '.join(docker.nvidia_tools)} found, but not {NVIDIA_HOOK}, which "
                     "Docker's --gpus and the compose file's GPU request run", fix)
    return Check("nvidia runtime", False, "no NVIDIA container runtime or toolkit found", fix)


def _check_ports(ports: tuple[PortFact, ...]) -> Check:
    """Free ports are ok; ports the repository's own running deployment holds are a
    warning (doctor knows what holds them, and deploy asks for it to be stopped first);
    any other port in use, or unusable, is a problem."""
    busy = [p for p in ports if not p.free and not p.held_by_deployment]
    ours = [p for p in ports if p.held_by_deployment]
    held = down = ""
    if ours:
        repository = ours[0].held_by_deployment
        held = (f"in use by this repository's running deployment ({repository}): "
                + ", ".join(f"{p.port} ({p.role})" for p in ours))
        down = f"tritonkit down --repository {shell_word(repository)} first to redeploy on them"
    if busy:
        listed = ", ".join(f"{p.port} ({p.role}) {p.problem or 'in use'}" for p in busy)
        flags = " ".join(f"--{p.role}-port N" for p in busy)
        return Check("ports", False, f"not usable: {listed}" + (f"; {held}" if held else ""),
                     f"stop what listens there (or use an address of this host), or deploy "
                     f"with {flags}" + (f"; {down}" if down else ""))
    free = ", ".join(f"{p.port} ({p.role})" for p in ports if p.free)
    if held:
        return Check("ports", True, held + (f"; free: {free}" if free else ""), down,
                     warning=True)
    return Check("ports", True, f"free: {free}")


def check_repository(repository: Path) -> Check:
    """The repository lays out models Triton can load: configs parse, names match, versions,
    and each ONNX model file reads as ONNX (``onnx_file_problem``: its fields' headers only)."""
    from tritonkit.model_config import read_config
    from tritonkit.repository import model_names, refuse_versionless, version_folders

    try:
        names = model_names(repository)
    except UsageError as exc:
        return Check("repository", False, exc.message, exc.hint or "")
    onnx_read = 0
    for name in names:
        model_dir = Path(repository) / name
        config_path = model_dir / "config.pbtxt"
        config = None
        if config_path.is_file():
            try:
                config = read_config(config_path)
            except UsageError as exc:
                return Check("repository", False, exc.message, exc.hint or "")
            if config.name and config.name != name:
                return Check("repository", False,
                             f"{config_path} names the model '{config.name}' in folder '{name}'",
                             "make the config's name match its folder (Triton refuses it)")
        try:
            refuse_versionless(Path(repository), [name])
        except UsageError as exc:
            return Check("repository", False, exc.message, exc.hint or "")
        versions = version_folders(model_dir)
        for model_file in _onnx_files(versions, config):
            problem = onnx_file_problem(model_file)
            if problem:
                return Check("repository", False,
                             f"{model_file} cannot be read as ONNX: {problem}",
                             f"copy the model file again, or export it again: tritonkit "
                             f"export SPEC --name {shell_word(name)} --force")
            onnx_read += 1
    return Check("repository", True, f"{repository}: {len(names)} model(s) "
                                     f"({', '.join(names)}), configs parse"
                                     + (f", {onnx_read} ONNX file(s) read" if onnx_read else ""))


def _onnx_files(versions: list[Path], config) -> list[Path]:
    """The ONNX model files Triton's onnxruntime backend would load from these version
    folders: the config's default_model_filename (else model.onnx) of an ONNX model; of a
    model whose config names no backend (or that has none), its model.onnx. A model.onnx
    folder holds its model.onnx."""
    from tritonkit.server.local_repository import is_onnx

    named = config is not None and (config.backend or config.platform)
    if named and not is_onnx(config):
        return []
    filename = (config.default_model_filename if config is not None else "") or ONNX_FILENAME
    files = []
    for version in versions:
        path = version / filename
        if path.is_dir():
            path = path / ONNX_FILENAME
        if os.path.lexists(path):       # a FIFO or a device too: onnx_file_problem names it
            files.append(path)
    return files


# ModelProto's fields whose wire type is known (onnx.proto): ir_version is a varint, the
# graph and opset_import are messages. A file whose first bytes are a Git LFS pointer is
# the pointer, not the model: the clone was made without `git lfs pull`.
_MODEL_FIELDS = {1: 0, 7: 2, 8: 2}
_GRAPH_FIELD, _OPSET_FIELD = 7, 8
_LFS_POINTER = b"version https://git-lfs"


def onnx_file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be an ONNX model (a ModelProto), or None.

    Cheap for a model of gigabytes: it walks the top-level protobuf fields by their headers
    and seeks past their contents (the graph, weights and all), so a truncated copy shows
    as a field running past the end of the file. The contents themselves are not parsed;
    external data files are neither opened nor required."""
    try:
        fd = open_regular(path, what="model file", hint="")
    except UsageError as exc:               # a folder, a FIFO, a device: never opened to wait
        said = f"model file {path} "
        return "it " + exc.message[len(said):] if exc.message.startswith(said) else exc.message
    try:
        size = os.fstat(fd).st_size
        with os.fdopen(fd, "rb") as f:
            if f.read(len(_LFS_POINTER)) == _LFS_POINTER:
                return "it is a Git LFS pointer, not the model (git lfs pull fetches it)"
            f.seek(0)
            fields = set()
            while f.tell() < size:
                at = f.tell()
                key = _varint(f)
                field_number, wire_type = (key >> 3, key & 7) if key is not None else (0, 0)
                if (key is None or field_number == 0 or wire_type not in (0, 1, 2, 5)
                        or _MODEL_FIELDS.get(field_number, wire_type) != wire_type):
                    return f"no ONNX model field at byte {at} (not an ONNX file, or a damaged one)"
                what = "its graph" if field_number == _GRAPH_FIELD else f"field {field_number}"
                length = 0 if wire_type == 0 else {1: 8, 5: 4}.get(wire_type) or _varint(f)
                if length is None or (wire_type == 0 and _varint(f) is None):
                    return (f"the file ends at byte {size}, inside {what}: it is truncated "
                            "(an interrupted copy or download)")
                end = f.tell() + length
                if end > size:
                    return (f"the file ends at byte {size}, inside {what}, which runs to byte "
                            f"{end}: it is truncated (an interrupted copy or download)")
                f.seek(end)
                fields.add(field_number)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    if _GRAPH_FIELD not in fields:
        return "it has no graph (an empty or truncated file)"
    if _OPSET_FIELD not in fields:      # ONNX Runtime refuses a model without one
        return "it has no opset_import after its graph (a truncated file)"
    return None


def _varint(f) -> int | None:
    """A protobuf varint read from ``f``, or None where the file ends inside it or it is
    longer than 10 bytes."""
    value = 0
    for shift in range(0, 70, 7):
        byte = f.read(1)
        if not byte:
            return None
        value |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return value
    return None


@dataclass(frozen=True)
class DoctorReport:
    """What doctor judged against (the profile, the image and the driver that image
    requires; None where no profile was given or found) and its checks."""

    profile: str | None
    image: str | None
    required_driver: int | None       # None: the image's requirement is not recorded
    checks: list[Check]

    def to_json(self) -> dict:
        return {"profile": self.profile, "image": self.image,
                "required_driver": self.required_driver, **checks_to_json(self.checks)}


def doctor_report(profile: GpuProfile | None, facts: HostFacts, *, image: str | None = None,
                  repository: Path | None = None) -> DoctorReport:
    """Every check for this host, with the profile and image they judged it against.
    Without a profile, the GPU found picks one; without an image, the one deploy would run
    the repository in (``deploy_image``), else the profile's."""
    extra = [check_repository(repository)] if repository else []
    if profile is None:
        found = next((_matching_profile(g.compute_capability) for g in facts.gpus), None)
        if found is None:
            cpu = available_profiles("cpu")
            checks = [Check("profile", False, "no --gpu given and no known GPU found to pick one",
                            f"pass --gpu ({', '.join(available_profiles())})"
                            + (f"; --gpu {shell_word(cpu[0])} for a host without an NVIDIA GPU"
                               if cpu else ""))]
            if facts.driver_version is None:
                checks.append(Check("driver", False, facts.driver_error or "no NVIDIA driver",
                                    "install the NVIDIA driver (≥ 525 for CUDA 12 images, "
                                    "≥ 580 for CUDA 13)"))
            checks += [_check_docker(facts.docker), _check_nvidia_runtime(facts.docker),
                       _check_ports(facts.ports)]
            return DoctorReport(None, image, None, checks + extra)
        profile = load_profile(found)
    deploys, tensorrt = profile.stack.triton_image, False
    if repository and extra[0].ok:
        try:
            deploys, tensorrt = deploy_image(profile, repository)
        except UsageError as exc:             # deploy would refuse the repository as well
            extra.append(Check("deploy", False, exc.message, exc.hint or ""))
    image = image or deploys
    releases = load_image_releases()
    driver = image_needs(image, profile, releases).image_driver if profile.has_gpu else None
    return DoctorReport(profile.name, image, driver,
                        check_host(facts, profile, image, releases, tensorrt=tensorrt) + extra)


def deploy_image(profile: GpuProfile, repository: Path) -> tuple[str, bool]:
    """The image ``deploy`` runs ``repository`` in on the profile's card (the TensorRT image
    where it serves plans), and whether it serves plans: deploy's own choice."""
    from tritonkit.server.container import container_spec

    spec = container_spec(repository, profile.name)
    return spec.image, spec.tensorrt


def run_doctor(profile: GpuProfile | None, facts: HostFacts, *, image: str | None = None,
               repository: Path | None = None) -> list[Check]:
    """Every check for this host. Without a profile, the GPU found picks one."""
    return doctor_report(profile, facts, image=image, repository=repository).checks


def checks_to_json(checks: list[Check]) -> dict:
    return {"ok": all(c.ok for c in checks),
            "warnings": [c.name for c in checks if c.warning],
            "checks": [{**asdict(c), "status": c.status} for c in checks]}
