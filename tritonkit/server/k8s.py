"""Kubernetes manifests for a fleet of Triton replicas, one GPU each (a CPU profile: none).

``k8s_manifests`` builds, as dicts, a Deployment (``nvidia.com/gpu`` limits, liveness
on ``/v2/health/live``, readiness and startup probes on ``/v2/health/ready``), a
Service, the secret header's value as a Secret and a ReadWriteMany claim for the model
repository; ``write_k8s`` serializes them as YAML beside a kustomization, so
``kubectl apply -k DIR`` applies them all, and writes a one-off pod that mounts the
claim writable so the repository can be copied in (``K8sFiles.fill_commands``). A rewrite
keeps the secret of a ``secret.yaml`` tritonkit wrote for the same deployment and nobody
edited since (pods and the clients that hold it keep working); any other gets a new one.

A replica loads every model at start-up (``--load-model``: the same argv as every
target); each model's ``model_warmup`` (written by ``tritonkit config``) runs on that
load, and readiness stays false until it has — so traffic reaches a replica only once
it is loaded and warm. A postStart step waits until the server is live and loads, with
the secret header, any model that is not READY (a safety net: normally none). Plans
that must be built on the target GPU are built by init containers into a pod-local
copy of the repository. A rollout replaces one pod at a time without a surge pod (one
GPU per node leaves none for it), and ONNX Runtime's TensorRT engines are cached in a
pod volume that outlives container restarts.

Every pod runs as the NGC images' ``triton-server`` user (uid 1000), never as root,
without privilege escalation, capabilities or a service-account token. The server asks
for CPU and memory (``memory_request``), so it is not the first pod evicted under node
pressure; the init containers that copy the repository and build plans ask for the same
(and the same memory limit), the fill pod for a little (``FILL_RESOURCES``), so a
namespace whose quota requires requests admits them all; on SIGTERM it waits ``PRESTOP_S`` before Triton unloads its models, while the
Service stops routing to it. More than one replica get a PodDisruptionBudget.

A CPU profile's replicas ask for no ``nvidia.com/gpu``, tolerate no GPU taint and select
no GPU nodes; with no GPU to wait for, a rollout starts the new pod before it stops the
old one (``maxSurge: 1``, ``maxUnavailable: 0``).
"""

from __future__ import annotations

import math
import re
import secrets
import shlex
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import yaml

from tritonkit.errors import UsageError
from tritonkit.fileio import OwnedFolder, check_folder, check_owned_folder, ensure_ignored
from tritonkit.model_config import ORT_TRT_CACHE_ROOT
from tritonkit.server.container import (
    CONTAINER_PORTS,
    CONTAINER_REPOSITORY,
    SECRET_VARIABLE,
    ContainerSpec,
    repository_tag,
    to_yaml,
)
from tritonkit.server.provenance import (body_as_written, edited_by_hand, refuse_replacing,
                                         stamped)
from tritonkit.server.state import check_secret

K8S_DIRNAME = "k8s"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_LABELS = "nvidia.com/gpu"        # GPU Feature Discovery's node labels: <prefix>.compute.major ...
SECRET_KEY = "repository-key"
SHM_BYTES = 1024**3
SHM_SIZE = f"{SHM_BYTES // 1024**3}Gi"
# How long a replica may take to load (and warm) its models before Kubernetes gives up
# (--timeout): the startup probe's period x its failure threshold.
STARTUP_PERIOD_S = 10
STARTUP_S = 600
# The server's CPU request (--cpu). No CPU limit: CFS throttling at a limit stalls
# Triton's request and backend threads in bursts, a tail-latency spike, while the request
# already guarantees the share under contention and keeps the pod out of BestEffort.
DEFAULT_CPU = "2"
# tritonserver itself in host memory: the server, its backends' libraries (ONNX Runtime,
# TensorRT, the python backend's stubs) and the CUDA context's host side.
TRITON_BASE_MEMORY = 2 * 1024**3
# preStop: how long a terminating pod keeps serving while the endpoint controllers and
# kube-proxy take it out of the Service; Triton unloads its models only after SIGTERM.
PRESTOP_S = 10
# The NGC tritonserver images' user triton-server (Triton's deploy guide, "Run as a
# Non-Root User"); the fill pod and the init containers run as it too.
TRITON_UID = 1000
FILES = ("secret.yaml", "model-repository-pvc.yaml", "deployment.yaml", "service.yaml")
# In the kustomization with more than one replica only.
PDB_FILE = "pod-disruption-budget.yaml"
# Not in the kustomization: run once to copy the repository into the claim.
FILL_FILE = "fill-repository-pod.yaml"
FILL_IMAGE = "busybox:1.36"       # has tar, for `kubectl exec ... tar -x`
# The fill pod's requests (and memory limit): one tar reading a stream into the claim
# needs a fraction of a core and a few MiB; the page cache it fills is reclaimable. A
# namespace whose ResourceQuota covers cpu and memory refuses a pod without them.
FILL_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"},
                  "limits": {"memory": "256Mi"}}
# The longest name app_name gives: the claim and the fill pod add "-models" and "-fill" to
# it, and both the name and the fill pod's are label values too (63 characters at most).
NAME_LIMIT = 53
HEADER = ("# Generated by tritonkit deploy --target k8s: a rerun replaces it, "
          "an edit by hand only with --force.\n")


@dataclass(frozen=True)
class K8sFiles:
    """What ``write_k8s`` wrote."""

    directory: Path
    files: tuple[Path, ...]
    name: str
    claim: str                     # the PersistentVolumeClaim to fill with the repository
    secret: str = field(repr=False)
    fill_commands: tuple[str, ...] = ()   # copy the repository into the claim, then apply
    secret_kept: bool = False      # the secret.yaml written before kept its secret
    # Why the secret.yaml that was there did not keep its secret (None: it did, or there was
    # none): after ``kubectl apply -k`` pods started before still run with the old one.
    secret_replaced: str | None = None
    resources: dict = field(default_factory=dict)   # the server container's requests/limits
    memory_rule: str = ""          # how the memory was sized (or that --memory set it)
    startup_s: int = STARTUP_S     # the startup probe's budget
    replicas: int = 1
    pdb: str | None = None         # the PodDisruptionBudget's name (more than one replica)
    # A pod-disruption-budget.yaml of a run with more replicas, removed: the budget already
    # applied stays in the cluster (apply -k prunes nothing) and blocks every drain.
    pdb_removed: str | None = None
    gitignore: Path | None = None  # the .gitignore written or extended to ignore secret.yaml
    gitignore_created: bool = False
    surge: bool = False            # a rollout starts the new pod first (``rollout``: CPU)


_DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def app_name(repository: Path, gpu: str) -> str:
    """A DNS-1123 name for the deployment of a repository on one GPU profile: its folder's
    name, a hash of its path and the profile. Objects in a namespace are known by name, so
    two repositories of one name (model_repository, say) must not share one: applying the
    second would replace the first's Triton; a P100 and an A10 fleet of the same repository
    can share a namespace too. The folder's name is cut short to keep within NAME_LIMIT."""
    slug = re.sub(r"[^a-z0-9-]+", "-", Path(repository).resolve().name.lower()).strip("-") \
        or "models"
    card = re.sub(r"[^a-z0-9-]+", "-", gpu.lower()).strip("-")
    tail = f"-{repository_tag(repository)}-{card}"
    slug = slug[:max(0, NAME_LIMIT - len("tritonkit-") - len(tail))].rstrip("-")
    return f"tritonkit-{slug}{tail}"[:NAME_LIMIT].rstrip("-")


def node_selector(compute_capability: float) -> dict[str, str]:
    """Nodes whose GPUs have the profile's compute capability, by the labels NVIDIA's GPU
    Feature Discovery puts on every GPU node (the GPU Operator runs it). A config made for
    one card (its instances, precision, TensorRT engines, minimum compute capability) must
    not be scheduled onto another."""
    major, minor = f"{compute_capability:.1f}".split(".")
    return {f"{GPU_LABELS}.compute.major": major, f"{GPU_LABELS}.compute.minor": minor}


def claim_name(name: str) -> str:
    return f"{name}-models"


def fill_pod_name(name: str) -> str:
    return f"{name}-fill"


def secret_object_name(name: str) -> str:
    return f"{name}-repository-key"


def memory_request(spec: ContainerSpec, repository: Path) -> tuple[str, str]:
    """The server's memory request and limit (one value), with the rule as words.

    What the pod holds in host memory, each at its most: the ``/dev/shm`` emptyDir
    (``medium: Memory`` counts against the pod, up to its sizeLimit), Triton's pinned
    memory pool (server settings), the model files' size on disk (a floor for what the
    server reads in: weights pass through host memory before they reach the GPU, and
    ONNX Runtime keeps its session there) and ``TRITON_BASE_MEMORY`` for tritonserver
    itself, rounded up to whole GiB. The limit equals the request: a node must not promise
    the same memory to two pods."""
    pinned = spec.settings.pinned_memory_pool_byte_size
    models = _repository_bytes(repository)
    total = SHM_BYTES + pinned + models + TRITON_BASE_MEMORY
    rule = " + ".join(f"{what} {_binary_size(size)}" for what, size in (
        ("/dev/shm", SHM_BYTES), ("pinned pool", pinned), ("model files", models),
        ("tritonserver", TRITON_BASE_MEMORY)) if size or what != "pinned pool")
    return f"{-(-total // 1024**3)}Gi", rule


def _binary_size(size: int) -> str:
    if size and size % 1024**3 == 0:
        return f"{size // 1024**3}Gi"
    return f"{-(-size // 1024**2)}Mi"


_CPU = re.compile(r"^(?:\d+(?:\.\d{1,3})?|\d+m)$")
_MEMORY = re.compile(r"^\d+(?:\.\d+)?(?:Ki|Mi|Gi|Ti|k|M|G|T)?$")


_MEMORY_UNITS = {"": 1, "k": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4,
                 "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4}
# The most a --cpu or --memory may ask: more than any node has is a typo, written as is
# into a Deployment no node schedules (_MEMORY takes no suffix past T: below 1Ei).
MAX_CPU_CORES = 8192            # Linux's NR_CPUS at its largest
MAX_MEMORY_BYTES = 1024**5      # 1 PiB
# The most --timeout may give a replica to start: the startup probe's failureThreshold is
# an int32, and a day is longer than any load and warm-up (a typo: inf, 1e300).
MAX_STARTUP_S = 86_400


def check_quantities(cpu: str | None, memory: str | None) -> None:
    """Refuse a --cpu or --memory Kubernetes would not take (or one of 0, or more than
    any node has) before a file is written: ``kubectl apply`` would refuse the Deployment
    only at the end, or no node would ever schedule it."""
    if cpu is not None and (not _CPU.match(cpu) or not re.search(r"[1-9]", cpu)):
        raise UsageError(f"--cpu '{cpu}' is not a CPU quantity Kubernetes takes",
                         hint="cores, or millicores with m: e.g. --cpu 4 or --cpu 1500m")
    if memory is not None and (not _MEMORY.match(memory) or not re.search(r"[1-9]", memory)):
        raise UsageError(f"--memory '{memory}' is not a memory quantity Kubernetes takes",
                         hint="bytes with a binary suffix: e.g. --memory 8Gi or --memory 6144Mi")
    # Decimal: the digits as given, however many (a float would overflow or round).
    if cpu is not None and (Decimal(cpu[:-1]) / 1000 if cpu.endswith("m") else Decimal(cpu)) \
            > MAX_CPU_CORES:
        raise UsageError(f"--cpu '{cpu}' is more than any node has (at most {MAX_CPU_CORES} "
                         "cores)", hint="the cores one replica needs: e.g. --cpu 4")
    if memory is not None:
        number, unit = re.fullmatch(r"([\d.]+)(\D*)", memory).groups()  # type: ignore[union-attr]
        if Decimal(number) * _MEMORY_UNITS[unit] > MAX_MEMORY_BYTES:
            raise UsageError(f"--memory '{memory}' is more than any node has (at most 1Pi, "
                             f"{MAX_MEMORY_BYTES // 1024**4}Ti)",
                             hint="the memory one replica needs: e.g. --memory 8Gi")


def check_startup_timeout(seconds: float | None) -> None:
    """Refuse a --timeout the startup probe cannot count (inf, nan, more than a day)."""
    if seconds is not None and not 0 < seconds <= MAX_STARTUP_S:
        raise UsageError(f"--timeout {seconds:g} is not a time of at most {MAX_STARTUP_S} s",
                         hint=f"give --timeout in seconds, e.g. --timeout {STARTUP_S}")


def pod_security_context() -> dict:
    """Every pod: the images' non-root user, and group 1000 on the volumes (fsGroup) so the
    claim, the TensorRT cache and the pod-local repository copy are theirs to read and
    write; changed only when the volume's root is not already the group's (a large
    repository on a block volume is not chown'ed again at every start)."""
    return {"runAsNonRoot": True, "runAsUser": TRITON_UID, "runAsGroup": TRITON_UID,
            "fsGroup": TRITON_UID, "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"}}


def container_security_context() -> dict:
    """Every container: no setuid escalation, no Linux capabilities (Triton needs none)."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def k8s_manifests(spec: ContainerSpec, name: str, *, secret: str, replicas: int = 1,
                  storage: str = "10Gi", storage_class: str | None = None,
                  resources: dict | None = None,
                  startup_s: int = STARTUP_S) -> dict[str, dict]:
    """The manifests, keyed by file name: Secret, claim, Deployment, Service, and with more
    than one replica a PodDisruptionBudget. ``resources``: the server container's cpu and
    memory requests and limits (``memory_request``); ``startup_s``: how long a replica may
    take to load and warm its models.

    The claim is ReadWriteMany: every replica mounts it (read-only) and the fill pod
    writes the repository into it; ``storage_class`` names a class that offers
    ReadWriteMany (NFS, CephFS, EFS, Filestore...) when the cluster's default does not."""
    claim_spec: dict = {"accessModes": ["ReadWriteMany"],
                        "resources": {"requests": {"storage": storage}}}
    if storage_class:
        claim_spec["storageClassName"] = storage_class
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "tritonkit",
              "tritonkit/gpu": spec.gpu}
    selector = {"app.kubernetes.io/name": name}
    secret_name = secret_object_name(name)
    claim = claim_name(name)
    manifests = {
        "secret.yaml": {
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": secret_name, "labels": labels},
            "type": "Opaque", "stringData": {SECRET_KEY: secret},
        },
        "model-repository-pvc.yaml": {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "labels": labels},
            "spec": claim_spec,
        },
        "deployment.yaml": _deployment(spec, name, labels, selector, secret_name, claim,
                                       replicas, resources or {}, startup_s),
        "service.yaml": {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "labels": labels},
            "spec": {"selector": selector, "type": "ClusterIP",
                     "ports": [{"name": role, "port": port, "targetPort": role, "protocol": "TCP"}
                               for role, port in CONTAINER_PORTS.as_dict().items()]},
        },
    }
    if replicas > 1:
        # A node drain (an upgrade, the autoscaler) evicts one replica at a time; the
        # rollout's maxUnavailable 1 already keeps to the same.
        manifests[PDB_FILE] = {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "labels": labels},
            "spec": {"minAvailable": max(1, replicas - 1), "selector": {"matchLabels": selector}},
        }
    return manifests


def fill_pod(name: str) -> dict:
    """A pod that mounts the claim writable and waits, so the repository can be copied in.

    It runs as the server's user (uid 1000): ``tar -x`` as a user other than root makes
    every file and folder it writes that user's, so the replicas can read them whatever
    owner and mode the files had on the host. Its labels are its own: the Service and the
    Deployment's selector must not match it."""
    labels = {"app.kubernetes.io/name": fill_pod_name(name),
              "app.kubernetes.io/managed-by": "tritonkit"}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": fill_pod_name(name), "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            # A shell as PID 1 ignores SIGTERM: exit on it at once, and wait as long as a
            # large copy takes (the printed steps delete the pod when it is done).
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "securityContext": pod_security_context(),
            "containers": [{"name": "fill", "image": FILL_IMAGE,
                            "command": ["sh", "-c", "trap 'exit 0' TERM; "
                                        "while :; do sleep 1; done"],
                            "resources": FILL_RESOURCES,
                            "securityContext": container_security_context(),
                            "volumeMounts": [{"name": "model-repository",
                                              "mountPath": CONTAINER_REPOSITORY}]}],
            "volumes": [{"name": "model-repository",
                         "persistentVolumeClaim": {"claimName": claim_name(name)}}],
        },
    }


def fill_commands(repository: Path, directory: Path, name: str) -> tuple[str, ...]:
    """The commands that copy ``repository`` into the claim, then start the replicas."""
    pod = fill_pod_name(name)
    q = shlex.quote
    return (
        f"kubectl apply -f {q(str(directory / 'model-repository-pvc.yaml'))} "
        f"-f {q(str(directory / FILL_FILE))}",
        f"kubectl wait --for=condition=Ready pod/{pod} --timeout=10m",
        f"tar -C {q(str(repository))} --exclude=.tritonkit -cf - . | "
        f"kubectl exec -i {pod} -- tar -xf - -C {CONTAINER_REPOSITORY}",
        f"kubectl delete pod {pod}",
        f"kubectl apply -k {q(str(directory))}",
    )


def write_k8s(spec: ContainerSpec, repository: Path, out: Path, *, replicas: int = 1,
              force: bool = False, storage_class: str | None = None,
              cpu: str | None = None, memory: str | None = None,
              startup_timeout: float | None = None) -> K8sFiles:
    """Write ``out/k8s/``: the manifests (the Secret 0600), a kustomization, the fill pod,
    each stamped with the sha256 of its text: a rerun replaces them unless one was edited
    by hand since (then only with ``force``). The Secret keeps the value of the
    ``secret.yaml`` it replaces if that was written for this deployment and is unedited
    (``_kept_secret``); otherwise it gets a new one, and ``out/k8s/.gitignore`` lists
    secret.yaml before it is written (``out`` is often inside the user's own git
    repository). ``cpu``/``memory`` replace the server's CPU request and memory request
    and limit (default ``DEFAULT_CPU``, ``memory_request``); ``startup_timeout`` (seconds,
    default ``STARTUP_S``) is how long the startup probe lets a replica load and warm."""
    if replicas < 1:
        raise UsageError(f"--replicas must be at least 1 (got {replicas})", hint="e.g. --replicas 2")
    check_quantities(cpu, memory)
    check_startup_timeout(startup_timeout)
    if storage_class is not None and not _DNS_SUBDOMAIN.match(storage_class):
        raise UsageError(f"--storage-class '{storage_class}' is not a Kubernetes object name",
                         hint="lower-case letters, digits, '-' and '.', as kubectl get "
                              "storageclass lists them")
    check_folder(out, what="--out")
    directory = Path(out) / K8S_DIRNAME
    # k8s/ is tritonkit's: a link planted there would have the secret written where it leads.
    check_owned_folder(directory, instead="give another --out")
    # pod-disruption-budget.yaml too: with one replica a budget written before is removed.
    paths = [directory / f for f in (*FILES, PDB_FILE, "kustomization.yaml", FILL_FILE)]
    refuse_replacing(paths, force=force, what="Kubernetes manifest",
                     instead="give another --out", written_for=repository)
    name = app_name(repository, spec.gpu)
    memory_rule = "--memory"
    if memory is None:
        memory, memory_rule = memory_request(spec, Path(repository))
    resources = {"requests": {"cpu": cpu or DEFAULT_CPU, "memory": memory},
                 "limits": {"memory": memory}}
    startup_s = STARTUP_PERIOD_S * math.ceil((startup_timeout or STARTUP_S) / STARTUP_PERIOD_S)
    secret_file = directory / "secret.yaml"
    kept, replaced = _kept_secret(secret_file, name, repository)
    secret = kept or secrets.token_urlsafe(24)
    manifests = k8s_manifests(spec, name, secret=secret, replicas=replicas,
                              storage=_storage_request(Path(repository)),
                              storage_class=storage_class, resources=resources,
                              startup_s=startup_s)
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "resources": list(manifests)}
    documents = {**manifests, "kustomization.yaml": kustomization, FILL_FILE: fill_pod(name)}
    Path(out).mkdir(parents=True, exist_ok=True)
    # Written through the folder's descriptor: a link swapped in after the check is not followed.
    with OwnedFolder(Path(out), K8S_DIRNAME, create=True) as folder:
        gitignore, gitignore_made = ensure_ignored(
            directory, ["secret.yaml"], why="tritonkit deploy --target k8s: secret.yaml holds "
                                            "the model-repository API's secret") or (None, False)
        for filename, document in documents.items():
            if folder.readlink(filename) is not None:   # --force replaces a link, not its target
                folder.remove(filename)
            folder.write(filename, stamped(HEADER, to_yaml(document), repository),
                         mode=0o600 if document["kind"] == "Secret" else 0o644)
        pdb_removed = name if PDB_FILE not in manifests and folder.remove(PDB_FILE) else None
    return K8sFiles(directory=directory, files=tuple(directory / f for f in documents),
                    name=name, claim=claim_name(name), secret=secret,
                    fill_commands=fill_commands(Path(repository).resolve(), directory, name),
                    secret_kept=kept is not None, secret_replaced=replaced,
                    resources=resources, memory_rule=memory_rule, startup_s=startup_s,
                    replicas=replicas, pdb=name if PDB_FILE in manifests else None,
                    pdb_removed=pdb_removed, gitignore=gitignore,
                    gitignore_created=gitignore_made, surge=rollout(spec)["maxSurge"] > 0)


def _kept_secret(secret_file: Path, name: str, repository: Path) -> tuple[str | None, str | None]:
    """(the secret in ``secret_file`` if tritonkit wrote it for ``repository``'s deployment
    ``name`` and nobody edited it since, else None; why a file that is there does not keep
    its secret, else None).

    A rewrite keeps it rather than making a new one: pods read the Secret only when they
    start, so a new value would reach the pods restarted later while the ones running, and
    every client given the old value (``warmup --secret-file``), kept the old one. A file
    edited by hand (``--force`` over it), another repository's or another deployment's
    (another ``--gpu``) gets a new one."""
    if not secret_file.exists():
        return None, None
    body = body_as_written(secret_file, repository)
    if body is None:
        return None, edited_by_hand(secret_file, repository)
    try:
        document = yaml.safe_load(body)
    except (yaml.YAMLError, RecursionError):
        document = None
    if not isinstance(document, dict) or document.get("kind") != "Secret":
        return None, "holds no Secret"
    secret_name = (document.get("metadata") or {}).get("name")
    if secret_name != secret_object_name(name):
        return None, f"was written for another deployment ({secret_name})"
    secret = (document.get("stringData") or {}).get(SECRET_KEY)
    if not isinstance(secret, str) or not secret:
        return None, f"holds no {SECRET_KEY}"
    try:
        check_secret(secret, str(secret_file))
    except UsageError:
        return None, f"holds a {SECRET_KEY} that cannot be a header value"
    return secret, None


def post_start_script(spec: ContainerSpec, *, timeout_s: int) -> str:
    """The postStart step: wait until live, then load every model that is not READY."""
    base = f"http://127.0.0.1:{CONTAINER_PORTS.http}"
    header = spec.settings.restricted_api.header
    models = " ".join(shlex.quote(m) for m in spec.models)
    return (
        f"end=$(( $(date +%s) + {timeout_s} )); "
        f"until curl -fsS -o /dev/null {base}/v2/health/live; do "
        f"[ $(date +%s) -lt $end ] || exit 1; sleep 2; done; "
        f"for m in {models}; do "
        f"curl -fsS -o /dev/null {base}/v2/models/$m/ready || "
        f"curl -fsS -o /dev/null -X POST -H \"{header}: ${SECRET_VARIABLE}\" "
        f"{base}/v2/repository/models/$m/load || exit 1; done"
    )


def _deployment(spec: ContainerSpec, name: str, labels: dict, selector: dict,
                secret_name: str, claim: str, replicas: int, resources: dict,
                startup_s: int) -> dict:
    # nvidia.com/gpu: a quantity, which the API types as a string
    gpu = {GPU_RESOURCE: "1"} if spec.uses_gpu else {}
    server_resources = {"requests": dict(resources.get("requests", {})),
                        "limits": {**resources.get("limits", {}), **gpu}}
    # The init containers ask for the server's own cpu and memory: they run one at a time
    # before it, so the pod's request (the larger of any init container's and the
    # containers' sum) grows by nothing, and a trtexec build, which holds the model and
    # the builder's host buffers as the server holds its weights, gets the server's limit
    # rather than none (OOM-killed on a full node) or a namespace quota's refusal.
    copy_resources = {key: dict(value) for key, value in resources.items() if value}
    secret_env = {"name": SECRET_VARIABLE,
                  "valueFrom": {"secretKeyRef": {"name": secret_name, "key": SECRET_KEY}}}
    container = {
        "name": "tritonserver",
        "image": spec.image,
        # Kubernetes expands $(VAR) in args from the container's env: the secret comes
        # from the Secret and never appears in the manifest.
        "command": spec.argv(f"$({SECRET_VARIABLE})")[:1],
        "args": spec.argv(f"$({SECRET_VARIABLE})")[1:],
        "env": [secret_env],
        "ports": [{"name": role, "containerPort": port, "protocol": "TCP"}
                  for role, port in CONTAINER_PORTS.as_dict().items()],
        "resources": server_resources,
        "securityContext": container_security_context(),
        "volumeMounts": [{"name": "model-repository", "mountPath": CONTAINER_REPOSITORY,
                          "readOnly": True},
                         {"name": "dshm", "mountPath": "/dev/shm"},
                         *([{"name": "trt-engine-cache", "mountPath": ORT_TRT_CACHE_ROOT}]
                           if spec.engine_cache else [])],
        # Liveness on live only: a model that is loading must not get the pod killed.
        "livenessProbe": _probe("/v2/health/live", period=10, failures=3),
        "readinessProbe": _probe("/v2/health/ready", period=5, failures=3),
        "startupProbe": _probe("/v2/health/ready", period=STARTUP_PERIOD_S,
                               failures=startup_s // STARTUP_PERIOD_S),
        "lifecycle": {
            "postStart": {"exec": {"command": [
                "/bin/sh", "-c", post_start_script(spec, timeout_s=startup_s)]}},
            # After SIGTERM Triton unloads its models at once (server#6230: "Request for
            # unknown model"), while the Service may route to the pod for a few seconds more.
            "preStop": {"exec": {"command": ["/bin/sh", "-c", f"sleep {PRESTOP_S}"]}},
        },
    }
    volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}}]
    if spec.engine_cache:
        # ONNX Runtime's TensorRT engines: an emptyDir outlives container restarts in the
        # pod, so a restarted server does not build them again.
        volumes.append({"name": "trt-engine-cache", "emptyDir": {}})
    pod_spec: dict = {
        "containers": [container],
        "volumes": volumes,
        # The preStop sleep, then Triton waits exit_timeout_secs for in-flight requests;
        # Kubernetes must wait longer than both (the grace period counts from the preStop).
        "terminationGracePeriodSeconds": PRESTOP_S + spec.settings.exit_timeout_secs + 5,
        "automountServiceAccountToken": False,      # Triton never calls the API server
        "securityContext": pod_security_context(),
    }
    if spec.uses_gpu:
        pod_spec["tolerations"] = [{"key": GPU_RESOURCE, "operator": "Exists",
                                    "effect": "NoSchedule"}]
        pod_spec["nodeSelector"] = node_selector(spec.compute_capability)
    claim_volume = {"name": "model-repository",
                    "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
    if spec.recipes:
        # Plans are built on the pod's own GPU into a pod-local copy of the repository;
        # the server still mounts that copy read-only.
        volumes += [{"name": "model-repository-source", "persistentVolumeClaim":
                     {"claimName": claim, "readOnly": True}},
                    {"name": "model-repository", "emptyDir": {}}]
        copy = {"name": "copy-repository", "image": spec.image,
                "command": ["cp", "-a", "/source/.", f"{CONTAINER_REPOSITORY}/"],
                "resources": copy_resources,
                "securityContext": container_security_context(),
                "volumeMounts": [{"name": "model-repository-source", "mountPath": "/source",
                                  "readOnly": True},
                                 {"name": "model-repository", "mountPath": CONTAINER_REPOSITORY}]}
        builds = [{"name": f"build-plans-{_dns(recipe.model)}"[:63].rstrip("-"),
                   "image": recipe.image, "command": list(recipe.argv),
                   "workingDir": f"{CONTAINER_REPOSITORY}/{recipe.model}",
                   "resources": server_resources,
                   "securityContext": container_security_context(),
                   "volumeMounts": [{"name": "model-repository",
                                     "mountPath": CONTAINER_REPOSITORY}]}
                  for recipe in spec.recipes]
        pod_spec["initContainers"] = [copy, *builds]
    else:
        volumes.append(claim_volume)
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": rollout(spec)},
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def rollout(spec: ContainerSpec) -> dict:
    """How a rollout replaces the replicas. One pod at a time and no surge pod on GPUs: with
    one GPU per node a surge pod could not be scheduled and the rollout would hang. On
    CPUs the new pod starts first, so a rollout keeps every replica serving."""
    if spec.uses_gpu:
        return {"maxSurge": 0, "maxUnavailable": 1}
    return {"maxSurge": 1, "maxUnavailable": 0}


def _probe(path: str, *, period: int, failures: int) -> dict:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period,
            "timeoutSeconds": 5, "failureThreshold": failures}


def _dns(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "model"


def _repository_bytes(repository: Path) -> int:
    """The model files' size on disk (``.tritonkit/``, tritonkit's own state, left out)."""
    return sum(p.stat().st_size for p in repository.rglob("*") if p.is_file()
               and ".tritonkit" not in p.relative_to(repository).parts)


def _storage_request(repository: Path) -> str:
    """Twice the repository's size, in whole GiB (at least 1)."""
    return f"{max(1, -(-2 * _repository_bytes(repository) // 1024**3))}Gi"


