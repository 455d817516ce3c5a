"""Kubernetes manifests for a fleet of Triton replicas, one GPU each.

``k8s_manifests`` builds, as dicts, a Deployment (``nvidia.com/gpu`` limits, liveness
on ``/v2/health/live``, readiness and startup probes on ``/v2/health/ready``), a
Service, the secret header's value as a Secret and a ReadWriteMany claim for the model
repository; ``write_k8s`` serializes them as YAML beside a kustomization, so
``kubectl apply -k DIR`` applies them all, and writes a one-off pod that mounts the
claim writable so the repository can be copied in (``K8sFiles.fill_commands``).

A replica loads every model at start-up (``--load-model``: the same argv as every
target); each model's ``model_warmup`` (written by ``tritonkit config``) runs on that
load, and readiness stays false until it has — so traffic reaches a replica only once
it is loaded and warm. A postStart step waits until the server is live and loads, with
the secret header, any model that is not READY (a safety net: normally none). Plans
that must be built on the target GPU are built by init containers into a pod-local
copy of the repository. A rollout replaces one pod at a time without a surge pod (one
GPU per node leaves none for it), and ONNX Runtime's TensorRT engines are cached in a
pod volume that outlives container restarts.
"""

from __future__ import annotations

import re
import secrets
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from tritonkit.errors import UsageError
from tritonkit.fileio import atomic_write, check_folder, refuse_overwrite
from tritonkit.model_config import ORT_TRT_CACHE_ROOT
from tritonkit.server.container import (
    CONTAINER_PORTS,
    CONTAINER_REPOSITORY,
    SECRET_VARIABLE,
    ContainerSpec,
    repository_tag,
    to_yaml,
)

K8S_DIRNAME = "k8s"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_LABELS = "nvidia.com/gpu"        # GPU Feature Discovery's node labels: <prefix>.compute.major ...
SECRET_KEY = "repository-key"
SHM_SIZE = "1Gi"
# How long a replica may take to load (and warm) its models before Kubernetes gives up:
# startup probe period x failure threshold.
STARTUP_PERIOD_S = 10
STARTUP_FAILURES = 60
FILES = ("secret.yaml", "model-repository-pvc.yaml", "deployment.yaml", "service.yaml")
# Not in the kustomization: run once to copy the repository into the claim.
FILL_FILE = "fill-repository-pod.yaml"
FILL_IMAGE = "busybox:1.36"       # has tar, for `kubectl exec ... tar -x`
# The longest name app_name gives: the claim and the fill pod add "-models" and "-fill" to
# it, and both the name and the fill pod's are label values too (63 characters at most).
NAME_LIMIT = 53


@dataclass(frozen=True)
class K8sFiles:
    """What ``write_k8s`` wrote."""

    directory: Path
    files: tuple[Path, ...]
    name: str
    claim: str                     # the PersistentVolumeClaim to fill with the repository
    secret: str = field(repr=False)
    fill_commands: tuple[str, ...] = ()   # copy the repository into the claim, then apply


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


def k8s_manifests(spec: ContainerSpec, name: str, *, secret: str, replicas: int = 1,
                  storage: str = "10Gi", storage_class: str | None = None) -> dict[str, dict]:
    """The manifests, keyed by file name: Secret, claim, Deployment, Service.

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
    secret_name = f"{name}-repository-key"
    claim = claim_name(name)
    return {
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
        "deployment.yaml": _deployment(spec, name, labels, selector, secret_name, claim, replicas),
        "service.yaml": {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "labels": labels},
            "spec": {"selector": selector, "type": "ClusterIP",
                     "ports": [{"name": role, "port": port, "targetPort": role, "protocol": "TCP"}
                               for role, port in CONTAINER_PORTS.as_dict().items()]},
        },
    }


def fill_pod(name: str) -> dict:
    """A pod that mounts the claim writable and waits, so the repository can be copied in.

    Its labels are its own: the Service and the Deployment's selector must not match it."""
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
            "containers": [{"name": "fill", "image": FILL_IMAGE,
                            "command": ["sh", "-c", "trap 'exit 0' TERM; "
                                        "while :; do sleep 1; done"],
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
              force: bool = False, storage_class: str | None = None) -> K8sFiles:
    """Write ``out/k8s/``: the manifests (the Secret 0600), a kustomization, the fill pod."""
    if replicas < 1:
        raise UsageError(f"--replicas must be at least 1 (got {replicas})", hint="e.g. --replicas 2")
    if storage_class is not None and not _DNS_SUBDOMAIN.match(storage_class):
        raise UsageError(f"--storage-class '{storage_class}' is not a Kubernetes object name",
                         hint="lower-case letters, digits, '-' and '.', as kubectl get "
                              "storageclass lists them")
    check_folder(out, what="--out")
    directory = Path(out) / K8S_DIRNAME
    paths = [directory / f for f in (*FILES, "kustomization.yaml", FILL_FILE)]
    for path in paths:
        refuse_overwrite(path, force=force, what="Kubernetes manifest")
    name = app_name(repository, spec.gpu)
    secret = secrets.token_urlsafe(24)
    manifests = k8s_manifests(spec, name, secret=secret, replicas=replicas,
                              storage=_storage_request(Path(repository)),
                              storage_class=storage_class)
    for filename, manifest in manifests.items():
        atomic_write(directory / filename, to_yaml(manifest),
                     mode=0o600 if manifest["kind"] == "Secret" else 0o644)
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "resources": list(FILES)}
    atomic_write(directory / "kustomization.yaml", to_yaml(kustomization))
    atomic_write(directory / FILL_FILE, to_yaml(fill_pod(name)))
    return K8sFiles(directory=directory, files=tuple(paths), name=name,
                    claim=claim_name(name), secret=secret,
                    fill_commands=fill_commands(Path(repository).resolve(), directory, name))


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
                secret_name: str, claim: str, replicas: int) -> dict:
    gpu_limits = {"limits": {GPU_RESOURCE: "1"}}     # a quantity: the API types it as a string
    secret_env = {"name": SECRET_VARIABLE,
                  "valueFrom": {"secretKeyRef": {"name": secret_name, "key": SECRET_KEY}}}
    startup_s = STARTUP_PERIOD_S * STARTUP_FAILURES
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
        "resources": gpu_limits,
        "volumeMounts": [{"name": "model-repository", "mountPath": CONTAINER_REPOSITORY,
                          "readOnly": True},
                         {"name": "dshm", "mountPath": "/dev/shm"},
                         {"name": "trt-engine-cache", "mountPath": ORT_TRT_CACHE_ROOT}],
        # Liveness on live only: a model that is loading must not get the pod killed.
        "livenessProbe": _probe("/v2/health/live", period=10, failures=3),
        "readinessProbe": _probe("/v2/health/ready", period=5, failures=3),
        "startupProbe": _probe("/v2/health/ready", period=STARTUP_PERIOD_S,
                               failures=STARTUP_FAILURES),
        "lifecycle": {"postStart": {"exec": {"command": [
            "/bin/sh", "-c", post_start_script(spec, timeout_s=startup_s)]}}},
    }
    volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}},
               # ONNX Runtime's TensorRT engines: an emptyDir outlives container restarts
               # in the pod, so a restarted server does not build them again.
               {"name": "trt-engine-cache", "emptyDir": {}}]
    pod_spec: dict = {
        "containers": [container],
        "volumes": volumes,
        # Triton waits exit_timeout_secs for in-flight requests; Kubernetes must wait longer.
        "terminationGracePeriodSeconds": spec.settings.exit_timeout_secs + 5,
        "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": node_selector(spec.compute_capability),
    }
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
                "volumeMounts": [{"name": "model-repository-source", "mountPath": "/source",
                                  "readOnly": True},
                                 {"name": "model-repository", "mountPath": CONTAINER_REPOSITORY}]}
        builds = [{"name": f"build-plans-{_dns(recipe.model)}"[:63].rstrip("-"),
                   "image": recipe.image, "command": list(recipe.argv),
                   "workingDir": f"{CONTAINER_REPOSITORY}/{recipe.model}",
                   "resources": gpu_limits,
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
            # One pod at a time and no surge pod: with one GPU per node a surge pod
            # could not be scheduled and the rollout would hang.
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def _probe(path: str, *, period: int, failures: int) -> dict:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period,
            "timeoutSeconds": 5, "failureThreshold": failures}


def _dns(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "model"


def _storage_request(repository: Path) -> str:
    """Twice the repository's size, in whole GiB (at least 1)."""
    size = sum(p.stat().st_size for p in repository.rglob("*") if p.is_file()
               and ".tritonkit" not in p.parts)
    return f"{max(1, -(-2 * size // 1024**3))}Gi"


