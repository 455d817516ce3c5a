"""`tritonkit deploy --target k8s`: manifests the official Kubernetes client's models accept.

Each manifest is deserialized into its ``kubernetes.client`` model and serialized back;
a field the model does not know would be dropped, so the two must have the same keys.
"""

from __future__ import annotations

import json
import re
import shutil
import stat
from inspect import signature
from pathlib import Path

import pytest
import yaml
from kubernetes.client import ApiClient

from tests.conftest import EXAMPLE_REPOSITORY, run_cli
from tritonkit.model_config import ORT_TRT_CACHE_ROOT

MODELS = {"Secret": "V1Secret", "PersistentVolumeClaim": "V1PersistentVolumeClaim",
          "Deployment": "V1Deployment", "Service": "V1Service", "Pod": "V1Pod",
          "PodDisruptionBudget": "V1PodDisruptionBudget"}


class _Response:
    def __init__(self, data: dict) -> None:
        self.data = json.dumps(data)


def key_paths(value, prefix=()):
    if isinstance(value, dict):
        for key, item in value.items():
            yield prefix + (key,)
            yield from key_paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from key_paths(item, prefix + (index,))


def parse(path: Path):
    """A manifest as the client's model, checked to lose no field on the way."""
    manifest = yaml.safe_load(path.read_text())
    api = ApiClient()
    if "content_type" in signature(api.deserialize).parameters:   # kubernetes >= 35
        model = api.deserialize(json.dumps(manifest), MODELS[manifest["kind"]], "application/json")
    else:
        model = api.deserialize(_Response(manifest), MODELS[manifest["kind"]])
    assert set(key_paths(api.sanitize_for_serialization(model))) == set(key_paths(manifest)), path
    return model


@pytest.fixture
def manifests(example_repository, tmp_path):
    def write(gpu: str, *args: str) -> Path:
        out = tmp_path / "docker"
        assert run_cli("deploy", "--target", "k8s", "--gpu", gpu, "--repository",
                       example_repository, "--out", out, *args) == 0
        return out / "k8s"
    return write


@pytest.mark.parametrize("gpu,image", [("p100", "nvcr.io/nvidia/tritonserver:24.10-py3"),
                                       ("a10", "nvcr.io/nvidia/tritonserver:25.12-py3")])
def test_the_deployment_asks_for_a_gpu_probes_live_and_ready_and_reads_the_secret_from_a_secret(
        manifests, gpu, image):
    directory = manifests(gpu, "--replicas", "3")
    deployment = parse(directory / "deployment.yaml")
    assert deployment.spec.replicas == 3
    pod = deployment.spec.template.spec
    [server] = pod.containers
    assert server.image == image
    assert server.resources.limits["nvidia.com/gpu"] == "1"
    assert server.liveness_probe.http_get.path == "/v2/health/live"
    assert server.readiness_probe.http_get.path == "/v2/health/ready"
    assert server.startup_probe.http_get.path == "/v2/health/ready"
    assert server.startup_probe.failure_threshold * server.startup_probe.period_seconds >= 300
    [env] = server.env
    secret = parse(directory / "secret.yaml")
    assert env.value_from.secret_key_ref.name == secret.metadata.name
    assert env.value_from.secret_key_ref.key in secret.string_data
    restricted = f"model-repository,shared-memory,logging,trace:tritonkit-repository-key=$({env.name})"
    assert f"--http-restricted-api={restricted}" in server.args
    assert f"--grpc-restricted-protocol={restricted}" in server.args
    assert server.command == ["tritonserver"] and "--model-control-mode=explicit" in server.args
    assert "--load-model=example" in server.args
    [mount] = [m for m in server.volume_mounts if m.mount_path == "/models"]
    assert mount.read_only
    # The postStart step loads every model that is not READY, with the secret header.
    hook = " ".join(server.lifecycle.post_start._exec.command)
    assert "/v2/health/live" in hook and "/v2/repository/models/$m/load" in hook
    assert f"tritonkit-repository-key: ${env.name}" in hook
    assert pod.termination_grace_period_seconds > 30


def test_pods_go_only_to_nodes_whose_gpu_the_configs_were_made_for(example_repository, tmp_path):
    """By GPU Feature Discovery's compute-capability labels: an A10 config on a P100 node
    would not load. The two fleets of one repository have names of their own."""
    names = {}
    for gpu, major, minor in (("p100", "6", "0"), ("a10", "8", "6")):
        out = tmp_path / gpu
        assert run_cli("deploy", "--target", "k8s", "--gpu", gpu, "--repository",
                       example_repository, "--out", out) == 0
        deployment = parse(out / "k8s" / "deployment.yaml")
        assert deployment.spec.template.spec.node_selector == {
            "nvidia.com/gpu.compute.major": major, "nvidia.com/gpu.compute.minor": minor}
        names[gpu] = {parse(out / "k8s" / f).metadata.name
                      for f in ("deployment.yaml", "service.yaml", "secret.yaml",
                                "model-repository-pvc.yaml")}
    assert not names["p100"] & names["a10"]


DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@pytest.mark.parametrize("folder", ["model_repository", "Models For The Ranking Team " * 4])
def test_two_repositories_of_one_folder_name_get_kubernetes_objects_of_their_own(
        tmp_path, capsys, folder):
    """Objects in a namespace are known by kind and name, replicas by the app label the
    Service and the Deployment select: two repositories both named model_repository must
    share neither, or applying the second replaces the first's Triton. Each name is a
    DNS-1123 label (63 characters) however long the folder's name."""
    names = []
    for team in ("a", "b"):
        repo = tmp_path / team / folder
        shutil.copytree(EXAMPLE_REPOSITORY, repo,
                        ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
        directory = tmp_path / team / "docker" / "k8s"
        assert run_cli("deploy", "--target", "k8s", "--gpu", "a10", "--repository", repo,
                       "--out", directory.parent) == 0
        printed = capsys.readouterr().out
        manifests = [parse(directory / f) for f in (
            "deployment.yaml", "service.yaml", "secret.yaml", "model-repository-pvc.yaml",
            "fill-repository-pod.yaml")]
        deployment, service, secret, _, fill = manifests
        labels = {m.metadata.labels["app.kubernetes.io/name"] for m in manifests}
        assert service.spec.selector == deployment.spec.selector.match_labels
        assert service.spec.selector["app.kubernetes.io/name"] == deployment.metadata.name
        for name in [m.metadata.name for m in manifests if m is not secret] + list(labels):
            assert DNS_LABEL.match(name) and len(name) <= 63, name
        assert deployment.metadata.name.startswith("tritonkit-")
        assert deployment.metadata.name.endswith("-a10")
        assert f"deployment {deployment.metadata.name};" in printed
        assert f"pod/{fill.metadata.name} " in printed
        names.append({m.metadata.name for m in manifests} | labels)
    assert not names[0] & names[1]


def test_the_service_exposes_http_grpc_and_metrics_of_the_deployments_pods(manifests):
    directory = manifests("a10")
    service = parse(directory / "service.yaml")
    deployment = parse(directory / "deployment.yaml")
    assert service.spec.selector == deployment.spec.selector.match_labels
    assert {p.name: p.port for p in service.spec.ports} == {"http": 8000, "grpc": 8001, "metrics": 8002}
    claim = parse(directory / "model-repository-pvc.yaml")
    [volume] = [v for v in deployment.spec.template.spec.volumes if v.name == "model-repository"]
    assert volume.persistent_volume_claim.claim_name == claim.metadata.name


def test_the_secret_is_only_in_the_0600_secret_manifest(manifests, capsys):
    directory = manifests("p100")
    secret_file = directory / "secret.yaml"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    [value] = parse(secret_file).string_data.values()
    others = [p for p in directory.iterdir() if p != secret_file]
    assert all(value not in p.read_text() for p in others)
    printed = capsys.readouterr()
    assert value not in printed.out + printed.err


def test_the_kustomization_applies_every_manifest_but_the_one_off_fill_pod(manifests):
    directory = manifests("a10")
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(
        p.name for p in directory.iterdir()
        if p.name not in ("kustomization.yaml", "fill-repository-pod.yaml", ".gitignore"))


def test_the_repository_claim_is_read_write_many_so_it_can_be_filled(manifests):
    claim = parse(manifests("a10") / "model-repository-pvc.yaml")
    # ReadOnlyMany is refused by most provisioners, and a fresh ROX volume is empty for good.
    assert claim.spec.access_modes == ["ReadWriteMany"]
    assert claim.spec.storage_class_name is None          # the cluster's default class


def test_a_storage_class_that_offers_read_write_many_can_be_named(manifests):
    claim = parse(manifests("a10", "--storage-class", "nfs-client") / "model-repository-pvc.yaml")
    assert claim.spec.storage_class_name == "nfs-client"


def test_the_printed_steps_fill_the_claim_through_a_pod_that_mounts_it_writable(
        example_repository, manifests, capsys):
    directory = manifests("a10")
    out = capsys.readouterr().out
    claim = parse(directory / "model-repository-pvc.yaml")
    pod = parse(directory / "fill-repository-pod.yaml")
    [volume] = pod.spec.volumes
    assert volume.persistent_volume_claim.claim_name == claim.metadata.name
    assert not volume.persistent_volume_claim.read_only
    [container] = pod.spec.containers
    [mount] = container.volume_mounts
    assert mount.mount_path == "/models" and not mount.read_only
    # The fill pod is no replica: neither the Service nor the Deployment may select it.
    deployment = parse(directory / "deployment.yaml")
    selector = deployment.spec.selector.match_labels
    assert not selector.items() <= pod.metadata.labels.items()
    steps = [line.strip() for line in out.splitlines() if line.startswith("    ")]
    name = pod.metadata.name
    assert steps == [
        f"kubectl apply -f {directory / 'model-repository-pvc.yaml'} "
        f"-f {directory / 'fill-repository-pod.yaml'}",
        f"kubectl wait --for=condition=Ready pod/{name} --timeout=10m",
        f"tar -C {example_repository.resolve()} --exclude=.tritonkit -cf - . | "
        f"kubectl exec -i {name} -- tar -xf - -C /models",
        f"kubectl delete pod {name}",
        f"kubectl apply -k {directory}"]


def test_a_rollout_needs_no_spare_gpu(manifests):
    deployment = parse(manifests("a10", "--replicas", "2") / "deployment.yaml")
    strategy = deployment.spec.strategy
    # With one GPU per node a surge pod cannot be scheduled: replace one pod at a time.
    assert strategy.type == "RollingUpdate"
    assert strategy.rolling_update.max_surge == 0 and strategy.rolling_update.max_unavailable == 1


def test_onnx_runtimes_tensorrt_engines_are_cached_in_a_volume_that_outlives_a_restart(manifests):
    pod = parse(manifests("a10") / "deployment.yaml").spec.template.spec
    [server] = pod.containers
    [mount] = [m for m in server.volume_mounts if m.mount_path == ORT_TRT_CACHE_ROOT]
    [volume] = [v for v in pod.volumes if v.name == mount.name]
    assert volume.empty_dir is not None and volume.empty_dir.medium is None   # on disk, per pod


def record_tensorrt_recipe(repository: Path) -> None:
    """The example model served as an A10 TensorRT plan that a recorded recipe builds."""
    model = repository / "example"
    (model / "configs").mkdir()
    (model / "configs" / "a10.pbtxt").write_text(
        (model / "config.pbtxt").read_text().replace('backend: "python"', 'platform: "tensorrt_plan"'))
    (model / "export-report.json").write_text(json.dumps(
        {"tensorrt_recipe": ["trtexec", "--onnx=1/model.onnx", "--saveEngine=1/model_a10.plan"]}))


def test_a_recorded_tensorrt_recipe_builds_the_plan_on_the_pods_gpu_before_triton(
        example_repository, manifests):
    record_tensorrt_recipe(example_repository)
    deployment = parse(manifests("a10") / "deployment.yaml")
    pod = deployment.spec.template.spec
    copy, build = pod.init_containers
    assert copy.command[0] == "cp"
    assert build.command[0] == "trtexec" and build.working_dir == "/models/example"
    assert build.image == "nvcr.io/nvidia/tensorrt:25.12-py3"
    assert build.resources.limits["nvidia.com/gpu"] == "1"
    [server] = pod.containers
    assert "--model-config-name=a10" in server.args
    [volume] = [v for v in pod.volumes if v.name == "model-repository"]
    assert volume.empty_dir is not None     # the pod's own copy, with the plan for its GPU


def test_a_rerun_with_other_flags_replaces_the_manifests_tritonkit_wrote_without_force(
        manifests):
    directory = manifests("p100")
    assert manifests("a10", "--replicas", "2") == directory
    deployment = parse(directory / "deployment.yaml")
    assert deployment.spec.replicas == 2
    assert "25.12" in deployment.spec.template.spec.containers[0].image


def test_another_repositorys_manifests_in_the_same_out_are_not_replaced_without_force(
        example_repository, manifests, tmp_path, capsys):
    import shutil

    directory = manifests("a10")
    other = tmp_path / "other"
    shutil.copytree(example_repository, other)
    before = {path: path.read_text() for path in directory.iterdir()}
    capsys.readouterr()
    assert run_cli("deploy", "--target", "k8s", "--gpu", "a10", "--repository", other,
                   "--out", tmp_path / "docker") == 2
    assert "was written for another model repository" in capsys.readouterr().err
    assert {path: path.read_text() for path in directory.iterdir()} == before


def test_manifests_edited_by_hand_are_kept_and_each_named_unless_force(
        example_repository, manifests, tmp_path, capsys):
    directory = manifests("a10")
    edited = [directory / "deployment.yaml", directory / "kustomization.yaml"]
    for path in edited:
        path.write_text(path.read_text().replace("replicas: 1", "replicas: 3") + "# mine\n")
    before = {path: path.read_text() for path in directory.iterdir()}
    capsys.readouterr()
    assert run_cli("deploy", "--target", "k8s", "--gpu", "p100", "--repository",
                   example_repository, "--out", tmp_path / "docker") == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: Kubernetes manifest files already exist and are not as tritonkit wrote them: "
        + ", ".join(f"{path} (was edited since tritonkit wrote it)" for path in edited),
        "hint: pass --force to replace them, or give another --out"]
    assert {path: path.read_text() for path in directory.iterdir()} == before
    manifests("p100", "--force")
    assert "replicas: 3" not in (directory / "deployment.yaml").read_text()


def secret_value(directory: Path) -> str:
    [value] = parse(directory / "secret.yaml").string_data.values()
    return value


def test_a_rerun_keeps_the_secret_of_a_secret_manifest_nobody_edited(manifests, capsys):
    """Pods read the Secret only when they start: a new value would reach the pods
    restarted later, while the running ones and every client given the old value
    (warmup --secret-file) kept it."""
    directory = manifests("a10")
    secret = secret_value(directory)
    assert "a new secret (no secret.yaml there before)" in capsys.readouterr().out
    for args in (("--replicas", "2"), ("--force",)):
        assert manifests("a10", *args) == directory
        assert secret_value(directory) == secret
        out = capsys.readouterr().out
        assert f"secret {secret[:4]}… in secret.yaml" in out
        assert "the secret of the secret.yaml written before, kept" in out


def test_a_secret_manifest_edited_by_hand_is_kept_then_replaced_with_a_new_secret_by_force(
        example_repository, manifests, tmp_path, capsys):
    directory = manifests("a10")
    name = parse(directory / "deployment.yaml").metadata.name
    secret_file = directory / "secret.yaml"
    secret_file.write_text(secret_file.read_text() + "# mine\n")
    edited = secret_file.read_text()
    capsys.readouterr()
    assert run_cli("deploy", "--target", "k8s", "--gpu", "a10", "--repository",
                   example_repository, "--out", tmp_path / "docker") == 2
    assert secret_file.read_text() == edited
    manifests("a10", "--force")
    secret = secret_value(directory)
    assert secret not in edited
    out = capsys.readouterr().out
    assert f"secret {secret[:4]}… in secret.yaml" in out
    assert ("a new secret (the secret.yaml there was edited since tritonkit wrote it): replicas "
            f"running with the old one need kubectl rollout restart deployment/{name} after "
            "kubectl apply -k") in " ".join(out.split())


def test_another_repositorys_or_gpus_secret_manifest_never_gives_its_secret_to_a_rewrite(
        example_repository, manifests, tmp_path, capsys):
    """Another repository's files are replaced only with --force (provenance), another
    --gpu's without it; neither is this deployment's Secret, so neither keeps its value."""
    directory = manifests("p100")
    p100 = secret_value(directory)
    capsys.readouterr()
    manifests("a10")
    a10 = secret_value(directory)
    assert a10 != p100
    out = " ".join(capsys.readouterr().out.split())
    assert "a new secret (the secret.yaml there was written for another deployment (" in out

    other = tmp_path / "other"
    shutil.copytree(example_repository, other)
    deploy = ("deploy", "--target", "k8s", "--gpu", "a10", "--repository", other,
              "--out", tmp_path / "docker")
    assert run_cli(*deploy) == 2
    assert "was written for another model repository" in capsys.readouterr().err
    assert secret_value(directory) == a10
    assert run_cli(*deploy, "--force") == 0
    assert secret_value(directory) not in (a10, p100)
    out = " ".join(capsys.readouterr().out.split())
    assert ("a new secret (the secret.yaml there was written for another model repository "
            f"({example_repository.resolve()}))") in out


def test_every_manifest_carries_the_sha256_of_its_text_below_a_generated_header(
        manifests, example_repository):
    import hashlib

    directory = manifests("a10", "--replicas", "2")
    for path in directory.glob("*.yaml"):
        lines = path.read_text().splitlines(keepends=True)
        assert lines[0].startswith("# Generated by tritonkit deploy --target k8s"), path
        at = next(i for i, line in enumerate(lines) if line.startswith("# sha256 of"))
        assert lines[at - 1] == ("# written for the model repository: "
                                 f"{example_repository.resolve()}\n")
        label, digest = lines[at].rstrip("\n").rsplit(" ", 1)
        assert label == "# sha256 of the text below, to tell an edit by hand:"
        assert digest == hashlib.sha256("".join(lines[at + 1:]).encode()).hexdigest()[:16], path
        assert yaml.safe_load(path.read_text())["apiVersion"]     # still one YAML document


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl on this machine")
@pytest.mark.parametrize("replicas,budget", [("1", []), ("2", ["PodDisruptionBudget"])])
def test_kubectl_builds_the_stamped_kustomization_without_a_cluster(manifests, replicas, budget):
    import subprocess

    built = subprocess.run(["kubectl", "kustomize", str(manifests("a10", "--replicas", replicas))],
                           capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    kinds = sorted(doc["kind"] for doc in yaml.safe_load_all(built.stdout))
    assert kinds == sorted(["Deployment", "PersistentVolumeClaim", "Secret", "Service", *budget])


@pytest.mark.parametrize("args,says", [
    (("--image", ""), "is not an image reference"),
    (("--image", "bad image name"), "is not an image reference"),
    (("--storage-class", "Bad Name!"), "is not a Kubernetes object name"),
    (("--cpu", "two"), "is not a CPU quantity Kubernetes takes"),
    (("--cpu", "0"), "is not a CPU quantity Kubernetes takes"),
    (("--memory", "8GB"), "is not a memory quantity Kubernetes takes"),
    (("--memory", "0Gi"), "is not a memory quantity Kubernetes takes"),
])
def test_values_kubernetes_would_refuse_are_refused_before_a_manifest_is_written(
        example_repository, tmp_path, capsys, args, says):
    out = tmp_path / "docker"
    assert run_cli("deploy", "--target", "k8s", "--gpu", "a10", "--repository",
                   example_repository, "--out", out, *args) == 2
    assert says in capsys.readouterr().err
    assert not (out / "k8s").exists()


def _pod_qos(pod) -> str:
    """The pod's QoS class, as Kubernetes assigns it from cpu and memory only ("Pod Quality
    of Service Classes": an extended resource such as nvidia.com/gpu does not count)."""
    sets = [{k for k in ((c.resources.requests or {}) | (c.resources.limits or {}))
             if k in ("cpu", "memory")} if c.resources else set()
            for c in [*pod.containers, *(pod.init_containers or [])]]
    return "BestEffort" if not any(sets) else "Burstable or Guaranteed"


def test_the_server_asks_for_cpu_and_memory_sized_from_what_it_holds_so_it_is_not_best_effort(
        example_repository, manifests, capsys):
    """A BestEffort pod is evicted first under node pressure. Memory is the /dev/shm
    emptyDir's sizeLimit + the pinned memory pool + the model files on disk + 2 GiB for
    tritonserver, rounded up to whole GiB, as request and limit; cpu is requested only (a
    CPU limit throttles Triton's threads into latency spikes)."""
    pod = parse(manifests("a10") / "deployment.yaml").spec.template.spec
    [server] = pod.containers
    assert _pod_qos(pod) != "BestEffort"
    assert server.resources.requests == {"cpu": "2", "memory": "4Gi"}   # 1Gi + 256Mi + ~0 + 2Gi
    assert server.resources.limits == {"memory": "4Gi", "nvidia.com/gpu": "1"}
    [shm] = [v for v in pod.volumes if v.name == "dshm"]
    assert shm.empty_dir.medium == "Memory" and shm.empty_dir.size_limit == "1Gi"
    assert "--pinned-memory-pool-byte-size=268435456" in server.args
    out = " ".join(capsys.readouterr().out.split())
    assert "memory 4Gi requested and limit" in out
    assert "memory 4Gi = /dev/shm 1Gi + pinned pool 256Mi" in out

    # 3 GiB of weights (a sparse file: its size is what counts) need 3 GiB more.
    with open(example_repository / "example" / "1" / "weights.bin", "wb") as weights:
        weights.truncate(3 * 1024**3)
    [server] = parse(manifests("a10") / "deployment.yaml").spec.template.spec.containers
    assert server.resources.requests["memory"] == server.resources.limits["memory"] == "7Gi"


def test_cpu_and_memory_flags_replace_the_servers_request_and_limit(manifests, capsys):
    [server] = parse(manifests("a10", "--cpu", "1500m", "--memory", "12Gi")
                     / "deployment.yaml").spec.template.spec.containers
    assert server.resources.requests == {"cpu": "1500m", "memory": "12Gi"}
    assert server.resources.limits == {"memory": "12Gi", "nvidia.com/gpu": "1"}
    assert "memory 12Gi requested and limit (--memory)" in " ".join(capsys.readouterr().out.split())


def test_every_pod_runs_as_the_images_non_root_user_without_privileges_or_an_api_token(
        example_repository, manifests):
    """The NGC tritonserver images ship user triton-server, uid 1000. fsGroup 1000 makes
    the claim, the TensorRT cache and the pod-local copy the group's; the fill pod writes
    the repository as uid 1000 too (tar -x as another user than root owns what it
    writes), so the replicas can read every file. Init containers included."""
    record_tensorrt_recipe(example_repository)
    directory = manifests("a10")
    server_pod = parse(directory / "deployment.yaml").spec.template.spec
    fill_pod = parse(directory / "fill-repository-pod.yaml").spec
    for pod in (server_pod, fill_pod):
        assert pod.automount_service_account_token is False
        context = pod.security_context
        assert context.run_as_non_root is True
        assert (context.run_as_user, context.run_as_group, context.fs_group) == (1000, 1000, 1000)
        assert context.seccomp_profile.type == "RuntimeDefault"
        for container in [*pod.containers, *(pod.init_containers or [])]:
            assert container.security_context.allow_privilege_escalation is False, container.name
            assert container.security_context.capabilities.drop == ["ALL"], container.name
            assert container.security_context.run_as_user in (None, 1000)
            assert container.security_context.privileged in (None, False)
    assert len(server_pod.init_containers) == 2


def test_a_terminating_replica_keeps_serving_through_a_pre_stop_sleep_then_drains(
        example_repository, manifests, tmp_path):
    """After SIGTERM Triton unloads its models at once, while the Service may still route
    to the pod (server#6230, "Request for unknown model"): preStop sleeps 10 s first, and
    the grace period covers that, Triton's exit timeout and 5 s more."""
    settings = tmp_path / "server.toml"
    settings.write_text((EXAMPLE_REPOSITORY.parent / "configs" / "server.toml").read_text()
                        .replace("exit_timeout_secs = 30", "exit_timeout_secs = 60"))
    pod = parse(manifests("a10", "--server-config", str(settings))
                / "deployment.yaml").spec.template.spec
    [server] = pod.containers
    assert server.lifecycle.pre_stop._exec.command == ["/bin/sh", "-c", "sleep 10"]
    assert "--exit-timeout-secs=60" in server.args
    assert pod.termination_grace_period_seconds == 10 + 60 + 5
    assert "/v2/health/live" in " ".join(server.lifecycle.post_start._exec.command)


@pytest.mark.parametrize("args,budget", [((), 600), (("--timeout", "1800"), 1800),
                                         (("--timeout", "95"), 100)])
def test_timeout_sets_how_long_the_startup_probe_lets_a_replica_load_and_warm(
        manifests, capsys, args, budget):
    """A big model on a network claim, its warm-up and TensorRT builds can take longer than
    10 minutes; past the startup probe's budget the kubelet kills the pod for good
    (CrashLoopBackOff). The postStart step waits as long."""
    [server] = parse(manifests("a10", *args) / "deployment.yaml").spec.template.spec.containers
    probe = server.startup_probe
    assert probe.period_seconds == 10
    assert probe.failure_threshold * probe.period_seconds == budget
    assert f"+ {budget} ))" in " ".join(server.lifecycle.post_start._exec.command)
    assert f"{budget} s to load and warm its models" in " ".join(capsys.readouterr().out.split())


def test_more_than_one_replica_get_a_disruption_budget_one_replica_is_told_it_has_outages(
        manifests, capsys):
    """A node drain must not evict every replica at once; with one replica there is
    nothing to keep (maxSurge 0: no spare GPU), and deploy says so."""
    directory = manifests("a10", "--replicas", "3")
    budget = parse(directory / "pod-disruption-budget.yaml")
    deployment = parse(directory / "deployment.yaml")
    assert budget.spec.min_available == 2
    assert budget.spec.selector.match_labels == deployment.spec.selector.match_labels
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert "pod-disruption-budget.yaml" in kustomization["resources"]
    out = " ".join(capsys.readouterr().out.split())
    assert "an outage" not in out
    assert f"PodDisruptionBudget {budget.metadata.name}" in out

    manifests("a10", "--replicas", "2")
    assert parse(directory / "pod-disruption-budget.yaml").spec.min_available == 1
    capsys.readouterr()

    # Back to one replica: the file goes, and the budget already applied must go by hand.
    manifests("a10")
    assert not (directory / "pod-disruption-budget.yaml").exists()
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert "pod-disruption-budget.yaml" not in kustomization["resources"]
    out = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]
    assert [line for line in out if "outage" in line] == [
        "one replica: each rollout or node drain is an outage (maxSurge 0: no spare GPU); "
        "--replicas 2 or more avoids it"]
    assert any(f"kubectl delete pdb {budget.metadata.name}" in line for line in out)


def test_git_ignores_the_secret_manifest_in_the_users_own_repository(
        example_repository, tmp_path, capsys):
    """--out is often inside the user's own git repository: a `git add -A` must not
    commit the secret. A .gitignore of the user's there is extended, not replaced."""
    import subprocess

    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    deploy = ("deploy", "--target", "k8s", "--gpu", "a10", "--repository", example_repository,
              "--out", project / "deploy")
    assert run_cli(*deploy) == 0
    directory = project / "deploy" / "k8s"
    assert f"wrote {directory / '.gitignore'}" in " ".join(capsys.readouterr().out.split())
    status = subprocess.run(["git", "-C", str(project), "status", "--porcelain",
                             "--untracked-files=all"], capture_output=True, text=True,
                            check=True).stdout
    assert "deploy/k8s/deployment.yaml" in status and "secret.yaml" not in status

    (directory / ".gitignore").write_text("*.bak\n")
    assert run_cli(*deploy) == 0
    assert f"added secret.yaml to {directory / '.gitignore'}" in " ".join(
        capsys.readouterr().out.split())
    assert (directory / ".gitignore").read_text().splitlines()[0] == "*.bak"
    assert "secret.yaml" in (directory / ".gitignore").read_text().splitlines()
    assert run_cli(*deploy) == 0
    assert ".gitignore" not in capsys.readouterr().out      # nothing to add: nothing said


@pytest.mark.parametrize("force", [(), ("--force",)])
def test_a_link_in_place_of_the_k8s_folder_is_refused_and_never_written_through(
        example_repository, tmp_path, capsys, force):
    """k8s/ under --out is tritonkit's own folder: a link planted there would have the
    deploy write the secret, a .gitignore and every manifest where it leads, replacing the
    files of that folder. Refused in one line that names the link and its target."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "deployment.yaml").write_text("the user's own manifest\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "k8s").symlink_to(victim)
    assert run_cli("deploy", "--target", "k8s", "--gpu", "a10", "--repository",
                   example_repository, "--out", out, *force) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {out / 'k8s'} is a symbolic link to {victim}, not a folder tritonkit made: "
        "it is not followed, read or written",
        f"hint: remove it (rm {out / 'k8s'}) and run the command again, or give another "
        "--out; tritonkit keeps only its own files there"]
    assert [p.name for p in victim.iterdir()] == ["deployment.yaml"]
    assert (victim / "deployment.yaml").read_text() == "the user's own manifest\n"


def test_a_k8s_folder_swapped_for_a_link_after_the_check_is_not_written_through(
        example_repository, tmp_path, monkeypatch):
    """The manifests are written through the k8s/ folder's own descriptor, opened without
    following a link: a link put in its place after the check is refused, not followed."""
    from tritonkit.errors import UsageError
    from tritonkit.server import k8s
    from tritonkit.server.container import container_spec

    victim, out = tmp_path / "victim", tmp_path / "out"
    victim.mkdir()
    refuse_replacing = k8s.refuse_replacing

    def check_then_swap(*args, **kwargs):       # after k8s/ was found to be no link
        refuse_replacing(*args, **kwargs)
        out.mkdir()
        (out / "k8s").symlink_to(victim)

    monkeypatch.setattr(k8s, "refuse_replacing", check_then_swap)
    spec = container_spec(example_repository, "a10")
    with pytest.raises(UsageError, match="k8s is a symbolic link to"):
        k8s.write_k8s(spec, example_repository, out)
    assert list(victim.iterdir()) == []


def test_the_fill_pod_and_the_plan_building_init_containers_ask_for_cpu_and_memory(
        example_repository, manifests):
    """A namespace whose ResourceQuota covers cpu and memory refuses a pod that does not
    ask for them, and a trtexec build with no memory of its own is the first OOM kill on a
    full node. The init containers ask for the server's figures: they run before it, one at
    a time, so the pod asks for no more than the server alone."""
    record_tensorrt_recipe(example_repository)
    directory = manifests("a10")
    fill = parse(directory / "fill-repository-pod.yaml").spec
    [tar] = fill.containers
    assert tar.resources.requests == {"cpu": "100m", "memory": "256Mi"}
    assert tar.resources.limits == {"memory": "256Mi"}
    pod = parse(directory / "deployment.yaml").spec.template.spec
    [server] = pod.containers
    copy, build = pod.init_containers
    assert build.resources.requests == server.resources.requests == {"cpu": "2", "memory": "4Gi"}
    assert build.resources.limits == server.resources.limits == {"memory": "4Gi",
                                                                 "nvidia.com/gpu": "1"}
    assert copy.resources.requests == server.resources.requests
    assert copy.resources.limits == {"memory": "4Gi"}     # cp needs no GPU

    # --memory sizes them as it sizes the server
    pod = parse(manifests("a10", "--memory", "12Gi")
                / "deployment.yaml").spec.template.spec
    assert pod.init_containers[1].resources.limits == {"memory": "12Gi", "nvidia.com/gpu": "1"}
