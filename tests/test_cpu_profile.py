"""`--gpu cpu`: Triton on a host without an NVIDIA GPU, through config, compose, k8s and doctor.

The profile is data (``kind = "cpu"`` in configs/gpus/cpu.toml): a copy under another name
behaves the same. Golden files pin the generated compose file and Kubernetes Deployment
(``TRITONKIT_UPDATE_GOLDEN=1`` rewrites them), paths and hashes normalized.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests import onnx_graphs
from tests.conftest import ROOT, run_cli
from tritonkit.errors import ProfileError, UsageError
from tritonkit.model_config import build_config, configure, read_config, read_graph
from tritonkit.profiles import load_profile
from tritonkit.server.compose import compose_dict, engine_problem
from tritonkit.server.compose_repository import served_dir
from tritonkit.server.container import container_spec, repository_tag, to_yaml
from tritonkit.server.k8s import app_name, k8s_manifests, memory_request
from tritonkit.server.settings import load_server_settings

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("TRITONKIT_UPDATE_GOLDEN") == "1"
CPU_TOML = ROOT / "configs" / "gpus" / "cpu.toml"


def matches_golden(text: str, name: str, repository: Path) -> None:
    normalized = text.replace(str(repository.resolve()), "/REPOSITORY") \
        .replace(repository_tag(repository), "HASH")
    golden = GOLDEN / name
    if UPDATE:
        golden.write_text(normalized)
    assert normalized == golden.read_text()


@pytest.fixture
def cpu_repo(tmp_path: Path) -> Path:
    """The example python-backend model and an ONNX MLP, configured for every profile."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "model_repository" / "example", repo / "example",
                    ignore=shutil.ignore_patterns("__pycache__"))
    onnx_graphs.mlp(repo / "mlp")
    (repo / "mlp" / "export-report.json").write_text(
        '{"max_batch_size": 8, "inputs": [{"name": "INPUT__0", "example_shape": [4, 16]}]}')
    configure(repo, "mlp", gpu="cpu")
    return repo


def test_a_profile_of_kind_cpu_serves_on_the_cpu_whatever_its_name(tmp_path, cpu_repo):
    laptop = tmp_path / "laptop.toml"
    laptop.write_text(CPU_TOML.read_text().replace('name = "cpu"', 'name = "laptop"'))
    profile = load_profile(laptop)
    assert profile.name == "laptop" and not profile.has_gpu
    config, _ = build_config("mlp", read_graph(cpu_repo / "mlp" / "1" / "model.onnx"), profile,
                             max_batch_size=8)
    assert [g.kind for g in config.instance_group] == [config.instance_group[0].KIND_CPU]
    assert config.platform == "onnxruntime_onnx"
    assert not config.optimization.HasField("execution_accelerators")    # no TensorRT
    assert profile.server_settings(load_server_settings()).pinned_memory_pool_byte_size == 0


@pytest.mark.parametrize("edit, says", [
    (("[memory]", "compute_capability = 8.6\n\n[memory]"), "'compute_capability' describes a GPU"),
    (('tensorrt_plans = false', 'tensorrt_plans = true'), "TensorRT plans need a GPU"),
    (('accelerator = "cpu"', 'accelerator = "tensorrt"'), "is not one of cpu"),
    (('kind = "cpu"', 'kind = "tpu"'), "'kind' = 'tpu' is not one of gpu, cpu"),
])
def test_a_cpu_profile_that_describes_a_gpu_is_refused_naming_the_field(tmp_path, edit, says):
    path = tmp_path / "odd.toml"
    assert edit[0] in CPU_TOML.read_text()
    path.write_text(CPU_TOML.read_text().replace(edit[0], edit[1], 1))
    with pytest.raises(ProfileError, match=says):
        load_profile(path)


def test_a_gpu_profile_without_its_cards_facts_is_refused(tmp_path):
    path = tmp_path / "card.toml"
    text = (ROOT / "configs" / "gpus" / "a10.toml").read_text()
    path.write_text(text.replace("compute_capability = 8.6\n", ""))
    with pytest.raises(ProfileError, match="missing field 'compute_capability' .a GPU profile"):
        load_profile(path)


def test_config_writes_configs_cpu_pbtxt_beside_the_gpu_ones(cpu_repo):
    assert sorted(p.name for p in (cpu_repo / "mlp" / "configs").iterdir()) == \
        ["a10.pbtxt", "cpu.pbtxt", "p100.pbtxt"]
    assert (cpu_repo / "mlp" / "config.pbtxt").read_text() == \
        (cpu_repo / "mlp" / "configs" / "cpu.pbtxt").read_text()
    assert read_config(cpu_repo / "mlp" / "configs" / "a10.pbtxt").instance_group[0].kind == \
        read_config(cpu_repo / "mlp" / "configs" / "a10.pbtxt").instance_group[0].KIND_GPU


@pytest.mark.parametrize("gpu", ["cpu", "p100", "a10"])
def test_the_compose_files_match_the_golden_files(cpu_repo, gpu):
    spec = container_spec(cpu_repo, gpu)
    matches_golden(to_yaml(compose_dict(spec, cpu_repo)), f"compose_{gpu}.yml", cpu_repo)


def test_the_cpu_compose_file_reserves_no_gpu_sets_no_memlock_and_passes_compose(cpu_repo,
                                                                                tmp_path):
    out = tmp_path / "docker"
    assert run_cli("deploy", "--target", "compose", "--gpu", "cpu", "--repository", cpu_repo,
                   "--out", out, "--no-up") == 0
    text = (out / "docker-compose.yml").read_text()
    server = yaml.safe_load(text)["services"]["tritonserver"]
    assert "deploy" not in server                                  # no GPU reservation
    assert server["ulimits"] == {"stack": 67108864}                # no memlock
    assert "volumes" not in yaml.safe_load(text)                   # no TensorRT engine cache
    assert "--pinned-memory-pool-byte-size=0" in server["command"]
    assert "--allow-gpu-metrics=false" in server["command"]
    if shutil.which("docker-compose"):
        done = subprocess.run(["docker-compose", "-f", str(out / "docker-compose.yml"), "config"],
                              capture_output=True, text=True, cwd=out, timeout=60)
        assert done.returncode == 0, done.stderr


def test_device_ids_are_refused_for_a_profile_without_a_gpu(cpu_repo, tmp_path, capsys):
    out = tmp_path / "docker"
    assert run_cli("deploy", "--target", "compose", "--gpu", "cpu", "--repository", cpu_repo,
                   "--out", out, "--no-up", "--device-ids", "0") == 2
    assert "--device-ids does not apply to the cpu profile" in capsys.readouterr().err
    assert not out.exists()


def test_a_tensorrt_plan_is_refused_for_the_cpu_profile(cpu_repo):
    config = cpu_repo / "mlp" / "configs" / "cpu.pbtxt"
    config.write_text(config.read_text().replace('platform: "onnxruntime_onnx"',
                                                 'platform: "tensorrt_plan"'))
    with pytest.raises(UsageError, match="TensorRT plan, which needs a GPU"):
        container_spec(cpu_repo, "cpu")


def test_export_as_a_tensorrt_plan_is_refused_for_the_cpu_profile(tmp_path, capsys):
    code = run_cli("export", f"{ROOT / 'examples' / 'mlp.py'}:build", "--name", "mlp",
                   "--repository", tmp_path, "--gpu", "cpu", "--format", "tensorrt")
    assert code == 2
    assert "--format tensorrt needs a GPU: the cpu profile has none" in capsys.readouterr().err


def docker_stub(tmp_path: Path, *, compose: bool) -> Path:
    """A docker CLI whose engine answers `info` with runc alone (no NVIDIA runtime) and
    whose `compose` plugin is there or not."""
    bindir = tmp_path / "bin"
    bindir.mkdir(parents=True)
    script = bindir / "docker"
    script.write_text("#!/bin/sh\n"
                      "[ \"$1\" = info ] && echo '{\"runc\":{\"path\":\"runc\"}}' && exit 0\n"
                      f"[ \"$1 $2\" = \"compose version\" ] && exit {0 if compose else 1}\n"
                      "exit 1\n")
    script.chmod(0o755)
    return bindir


def test_the_engine_check_of_a_cpu_profile_asks_for_docker_and_compose_only(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("PATH", str(docker_stub(tmp_path / "with", compose=True)))
    assert "NVIDIA" in engine_problem(gpu=True)
    assert engine_problem(gpu=False) is None
    monkeypatch.setenv("PATH", str(docker_stub(tmp_path / "without", compose=False)))
    assert engine_problem(gpu=False).startswith("no Docker Compose")


def test_the_cpu_deployment_manifest_matches_the_golden_file_and_asks_for_no_gpu(cpu_repo):
    spec = container_spec(cpu_repo, "cpu")
    name = app_name(cpu_repo, "cpu")
    memory, _ = memory_request(spec, cpu_repo)
    manifests = k8s_manifests(spec, name, secret="SECRET",
                              resources={"requests": {"cpu": "2", "memory": memory},
                                         "limits": {"memory": memory}})
    deployment = manifests["deployment.yaml"]
    matches_golden(to_yaml(deployment), "k8s_cpu_deployment.yaml", cpu_repo)
    pod = deployment["spec"]["template"]["spec"]
    [server] = pod["containers"]
    assert "nvidia.com/gpu" not in server["resources"]["limits"]
    assert "nodeSelector" not in pod and "tolerations" not in pod
    assert [v["name"] for v in pod["volumes"]] == ["dshm", "model-repository"]
    # no GPU to wait for: the new pod starts before the old one stops
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


def test_the_a10_deployment_manifest_matches_the_golden_file(cpu_repo):
    spec = container_spec(cpu_repo, "a10")
    memory, _ = memory_request(spec, cpu_repo)
    deployment = k8s_manifests(spec, app_name(cpu_repo, "a10"), secret="SECRET",
                               resources={"requests": {"cpu": "2", "memory": memory},
                                          "limits": {"memory": memory}})["deployment.yaml"]
    matches_golden(to_yaml(deployment), "k8s_a10_deployment.yaml", cpu_repo)


def test_doctor_judges_a_cpu_host_on_its_memory_docker_compose_and_ports():
    from tritonkit.monitor.doctor import DockerFacts, HostFacts, PortFact, check_host

    docker = DockerFacts(cli="/usr/bin/docker", server_version="20.10.24", runtimes=("runc",),
                         compose="docker-compose")
    facts = HostFacts(driver_version=None, driver_error="no NVIDIA driver", docker=docker,
                      ports=(PortFact("http", 8000, True),), memory_total_mib=16 * 1024, cpus=4)
    cpu = load_profile("cpu")
    checks = {c.name: c for c in check_host(facts, cpu)}
    assert list(checks) == ["image", "memory", "docker", "compose", "ports"]   # no driver, GPU
    assert all(c.ok and not c.warning for c in checks.values()), checks
    small = check_host(HostFacts(docker=docker, memory_total_mib=4 * 1024), cpu)
    memory = {c.name: c for c in small}["memory"]
    assert not memory.ok and "size batches for 8 GiB" in memory.detail
    assert "memory.gib" in memory.fix
    bare = {c.name: c for c in check_host(HostFacts(docker=DockerFacts(
        cli="/usr/bin/docker", server_version="20.10.24")), cpu)}
    assert not bare["compose"].ok and "docker-compose" in bare["compose"].fix


def test_diagnose_takes_the_cpu_profile_for_a_server_recording_and_refuses_it_for_gpu_samples():
    from tritonkit.monitor.diagnose import choose_profile
    from tritonkit.monitor.recording import MonitorRow

    server_only = [MonitorRow(elapsed_s=0.0)]
    assert choose_profile(server_only, "cpu") is None
    gpu_sample = [MonitorRow(elapsed_s=0.0, gpu=0, name="NVIDIA A10",
                             util_pct=50.0)]
    with pytest.raises(UsageError, match="the cpu profile has no GPU"):
        choose_profile(gpu_sample, "cpu")


def test_the_served_folder_links_the_models_and_keeps_its_inode(cpu_repo):
    from tritonkit.server.compose_repository import build_served

    served = build_served(cpu_repo, ["example", "mlp"])
    assert {p.name: os.readlink(p) for p in served.iterdir()} == {
        "example": "/repository/example", "mlp": "/repository/mlp"}
    inode = served.stat().st_ino
    # python: the ONNX model becomes the local mirror's adapter, the python one stays a link
    build_served(cpu_repo, ["example", "mlp"], model_config_name="cpu", onnx_backend="python")
    assert os.readlink(served / "example") == "/repository/example"
    assert not (served / "mlp").is_symlink()
    assert read_config(served / "mlp" / "config.pbtxt").backend == "python"
    assert (served / "mlp" / "1" / "model.onnx").stat().st_ino == \
        (cpu_repo / "mlp" / "1" / "model.onnx").stat().st_ino           # a snapshot, no copy
    build_served(cpu_repo, ["example"])                   # a model no longer deployed goes
    assert [p.name for p in served.iterdir()] == ["example"]
    assert served.stat().st_ino == inode == served_dir(cpu_repo).stat().st_ino


@pytest.mark.server
def test_cpu_configs_load_ready_in_the_real_local_triton(cpu_repo):
    import tritonclient.http as httpclient

    from tritonkit.server.state import load_deployment

    assert run_cli("deploy", "--repository", cpu_repo, "--gpu", "cpu", "--http-port", "0",
                   "--grpc-port", "0", "--metrics-port", "0", "--timeout", "90") == 0
    try:
        client = httpclient.InferenceServerClient(load_deployment(cpu_repo).http_url)
        try:
            assert client.is_model_ready("mlp") and client.is_model_ready("example")
        finally:
            client.close()
    finally:
        run_cli("down", "--repository", cpu_repo)
