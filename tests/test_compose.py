"""`tritonkit deploy --target compose`: the compose file a real Compose accepts, and `up`/`down`.

Validation is Debian's docker-compose (``docker-compose config`` needs no engine);
.ci/run installs it. There is no Docker engine on CI, so `up` is tested for what it
must do there: write the files, say what is missing, exit non-zero.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import EXAMPLE_REPOSITORY, ROOT, run_cli
from tritonkit.errors import DeployInterrupted, ServerError, UsageError
from tritonkit.model_config import ORT_TRT_CACHE_ROOT
from tritonkit.server.compose import compose_dict, engine_problem, project_name
from tritonkit.server.container import container_spec
from tritonkit.server.state import Deployment, load_deployment, read_secret, save_deployment

needs_compose = pytest.mark.skipif(shutil.which("docker-compose") is None,
                                   reason="Debian's docker-compose is not installed (.ci/run installs it)")


def write(repo: Path, out: Path, *args: str) -> int:
    return run_cli("deploy", "--target", "compose", "--repository", repo, "--out", out,
                   "--no-up", *args)


def compose_config(out: Path) -> dict:
    """The file as docker-compose resolves it (the .env beside it interpolated)."""
    result = subprocess.run(["docker-compose", "-f", str(out / "docker-compose.yml"), "config"],
                            capture_output=True, text=True, cwd=out, timeout=60)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def plan_config(repo: Path, path: Path) -> None:
    """Make a model's config (at ``path``) serve a TensorRT plan."""
    text = (repo / "example" / "config.pbtxt").read_text().replace('backend: "python"',
                                                                   'platform: "tensorrt_plan"')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.slow
@needs_compose
@pytest.mark.parametrize("gpu,image,cc", [("p100", "nvcr.io/nvidia/tritonserver:24.10-py3", "6.0"),
                                          ("a10", "nvcr.io/nvidia/tritonserver:25.12-py3", "8.6")])
def test_the_compose_file_passes_docker_compose_config_with_nvidias_container_settings(
        example_repository, tmp_path, gpu, image, cc):
    out = tmp_path / "docker"
    assert write(example_repository, out, "--gpu", gpu) == 0
    server = compose_config(out)["services"]["tritonserver"]
    assert server["image"] == image
    devices = server["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "device_ids": ["0"], "capabilities": ["gpu"]}]
    assert server["ulimits"] == {"memlock": -1, "stack": 67108864}
    assert server["shm_size"]
    [mount] = [v for v in server["volumes"] if v["target"] == "/repository"]
    assert mount["source"] == str(example_repository.resolve())
    assert mount["read_only"] is True
    [served] = [v for v in server["volumes"] if v["target"] == "/models"]
    assert served["source"] == str(example_repository.resolve() / ".tritonkit" / "compose" / "models")
    assert served["read_only"] is True
    assert server["restart"] == "unless-stopped"
    assert sorted(p.removesuffix("/tcp") for p in server["ports"]) == [
        "127.0.0.1:8000:8000", "127.0.0.1:8001:8001", "127.0.0.1:8002:8002"]
    command = server["command"]
    assert command[:2] == ["sh", "-c"] and command[4] == "tritonserver"
    assert "--model-repository=/models" in command
    assert "--model-control-mode=explicit" in command and "--load-model=example" in command
    assert "--strict-readiness=true" in command and "--http-address=0.0.0.0" in command
    assert f"--min-supported-compute-capability={cc}" in command


def test_the_secret_lives_only_in_the_0600_env_file_and_is_never_printed(
        example_repository, tmp_path, capsys):
    out = tmp_path / "docker"
    assert write(example_repository, out, "--gpu", "p100") == 0
    secret = read_secret(example_repository)
    env = out / ".env"
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    assert f"TRITONKIT_REPOSITORY_KEY={secret}\n" in env.read_text()
    compose_text = (out / "docker-compose.yml").read_text()
    assert secret not in compose_text
    # The restricted model-repository API is in the file (its value comes from .env).
    restricted = "model-repository,shared-memory,logging,trace:tritonkit-repository-key="
    assert f"TRITONKIT_RESTRICTED_API: {restricted}\n" in compose_text
    assert "TRITONKIT_REPOSITORY_KEY: ${TRITONKIT_REPOSITORY_KEY:?" in compose_text
    assert ('"--http-restricted-api=$${TRITONKIT_RESTRICTED_API}$${TRITONKIT_REPOSITORY_KEY}"'
            in compose_text)
    assert ('"--grpc-restricted-protocol=$${TRITONKIT_RESTRICTED_API}$${TRITONKIT_REPOSITORY_KEY}"'
            in compose_text)
    printed = capsys.readouterr()
    assert secret not in printed.out + printed.err and secret[:4] in printed.out


@pytest.mark.slow
@needs_compose
def test_the_compose_file_puts_the_secret_from_the_env_file_in_the_environment_not_the_command(
        example_repository, tmp_path):
    """The command Compose gives the container (docker inspect's Cmd, docker ps) holds no
    secret: the container's shell reads it from its environment as it starts."""
    out = tmp_path / "docker"
    assert write(example_repository, out, "--gpu", "a10") == 0
    assert (out / ".env").read_text().startswith("# ")      # comments Compose skips
    server = compose_config(out)["services"]["tritonserver"]
    secret = read_secret(example_repository)
    assert server["environment"]["TRITONKIT_REPOSITORY_KEY"] == secret
    assert not any(secret in arg for arg in server["command"])


@pytest.mark.slow
@needs_compose
def test_onnx_runtimes_tensorrt_engines_are_cached_in_a_named_volume_across_restarts(
        example_repository, tmp_path):
    out = tmp_path / "docker"
    assert write(example_repository, out, "--gpu", "a10") == 0
    config = compose_config(out)
    [cache] = [v for v in config["services"]["tritonserver"]["volumes"]
               if v["target"] == ORT_TRT_CACHE_ROOT]
    # A named volume outlives the container: a restart does not build the engines again.
    assert cache["type"] == "volume" and cache["source"] in config["volumes"]
    assert not cache.get("read_only")
    # Another serving image gets another volume: engines another TensorRT built do not load.
    other = tmp_path / "other"
    assert write(example_repository, other, "--gpu", "a10",
                 "--image", "nvcr.io/nvidia/tritonserver:26.01-py3") == 0
    [cache_26] = [v for v in compose_config(other)["services"]["tritonserver"]["volumes"]
                  if v["target"] == ORT_TRT_CACHE_ROOT]
    assert cache_26["source"] != cache["source"] and "26.01" in cache_26["source"]


def healthcheck_probe(server: dict, http_url: str) -> list[str]:
    """The healthcheck's command as it would run beside ``http_url``'s Triton."""
    command = server["healthcheck"]["test"]
    assert command[0] == "CMD" and command[-1].startswith("http://127.0.0.1:8000/")
    return [*command[1:-1], command[-1].replace("127.0.0.1:8000", http_url)]


@pytest.mark.server
def test_the_healthcheck_fails_while_a_model_triton_was_asked_to_load_is_not_ready(deployed):
    """Whatever gates on service_healthy routes to Triton only once its models serve: a
    model that failed to load leaves Triton live, and must leave the container unhealthy."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    from tests.conftest import add_broken_model
    from tritonkit.server.local import mirror_dir

    repository = Path(deployed.repository)
    server = compose_dict(container_spec(repository, "a10"), repository)["services"]["tritonserver"]
    probe = healthcheck_probe(server, deployed.http_url)
    assert subprocess.run(probe, capture_output=True, timeout=30).returncode == 0

    add_broken_model(mirror_dir(repository))        # the folder the local Triton reads
    client = httpclient.InferenceServerClient(deployed.http_url)
    try:
        with pytest.raises(InferenceServerException):
            client.load_model("broken", headers=deployed.repository_headers())
        assert client.is_server_live()
    finally:
        client.close()
    assert subprocess.run(probe, capture_output=True, timeout=30).returncode != 0


@pytest.mark.slow
@needs_compose
def test_the_state_folder_with_the_secret_is_masked_inside_every_container(
        example_repository, tmp_path):
    """The repository is mounted whole (a model replaced by export --force is served as it
    is now); its .tritonkit/ (the 0600 secret, server logs, the local mirror) is hidden
    under an empty read-only tmpfs in Triton's container (the repository at /repository,
    Triton serving the links to its models at /models) and in the plan builders' (the
    repository at /models, writable), whose mountpoint exists once the files are written."""
    plan_config(example_repository, example_repository / "example" / "configs" / "a10.pbtxt")
    (example_repository / "example" / "export-report.json").write_text(json.dumps(
        {"tensorrt_recipe": "trtexec --onnx=1/model.onnx --saveEngine=1/model_a10.plan"}))
    out = tmp_path / "docker"
    assert write(example_repository, out, "--gpu", "a10") == 0
    config = compose_config(out)
    assert set(config["services"]) == {"tritonserver", "build-plans-example"}
    for name, at in (("tritonserver", "/repository"), ("build-plans-example", "/models")):
        volumes = config["services"][name]["volumes"]
        [repository] = [v for v in volumes if v["target"] == at]
        assert repository["source"] == str(example_repository.resolve()), name
        [mask] = [v for v in volumes if v["target"] == f"{at}/.tritonkit"]
        assert mask["type"] == "tmpfs" and mask["read_only"] is True, name
    assert (example_repository / ".tritonkit").is_dir()


def test_the_env_file_is_git_ignored_where_it_is_written_the_users_lines_kept(
        example_repository, tmp_path):
    from tritonkit.server.compose import write_compose

    out = tmp_path / "project" / "deploy"
    out.mkdir(parents=True)
    (out / ".gitignore").write_text("*.log")        # the user's, no newline at its end
    spec = container_spec(example_repository, "a10")
    files = write_compose(spec, example_repository, out, starting=False)
    assert files.gitignore == out / ".gitignore" and not files.gitignore_created
    lines = (out / ".gitignore").read_text().splitlines()
    assert lines[0] == "*.log" and ".env" in lines
    git = shutil.which("git")
    if git:
        subprocess.run([git, "init", "-q", str(tmp_path / "project")], check=True)
        ignored = subprocess.run([git, "-C", str(tmp_path / "project"), "check-ignore", "-q",
                                  "deploy/.env"])
        assert ignored.returncode == 0
    # once there, a rewrite leaves the .gitignore alone; a fresh folder gets one
    again = write_compose(spec, example_repository, out, starting=False)
    assert again.gitignore is None and (out / ".gitignore").read_text().count(".env") == 1
    fresh = write_compose(spec, example_repository, tmp_path / "fresh", starting=False)
    assert fresh.gitignore == tmp_path / "fresh" / ".gitignore" and fresh.gitignore_created
    assert ".env" in fresh.gitignore.read_text().splitlines()


def test_a_linked_gitignore_is_added_to_where_it_lives_and_keeps_its_mode(
        example_repository, tmp_path):
    """A .gitignore shared between folders by a symbolic link gets the line in the file it
    links to, and keeps its mode. A rename onto the link put a new 0644 file in its place:
    the shared file never learned of .env, and the user's link was gone."""
    from tritonkit.server.compose import write_compose

    shared, out = tmp_path / "shared", tmp_path / "deploy"
    shared.mkdir(), out.mkdir()
    (shared / ".gitignore").write_text("node_modules\n")
    (shared / ".gitignore").chmod(0o664)
    (out / ".gitignore").symlink_to("../shared/.gitignore")
    write_compose(container_spec(example_repository, "a10"), example_repository, out,
                  starting=False)
    assert (out / ".gitignore").is_symlink()
    assert (shared / ".gitignore").read_text().splitlines()[0] == "node_modules"
    assert ".env" in (shared / ".gitignore").read_text().splitlines()
    assert stat.S_IMODE((shared / ".gitignore").stat().st_mode) == 0o664


def test_the_deploy_says_where_it_git_ignored_the_env_file(example_repository, tmp_path, capsys):
    out = tmp_path / "deploy"
    assert write(example_repository, out, "--gpu", "a10") == 0
    said = " ".join(capsys.readouterr().out.split())
    assert f"wrote {out / '.gitignore'}: git leaves the secret out" in said
    assert write(example_repository, out, "--gpu", "a10") == 0      # already there: unsaid
    assert "git leaves the secret out" not in capsys.readouterr().out


@needs_compose
def test_the_healthcheck_and_deploy_allow_for_loading_and_warming_every_model_first(
        example_repository, tmp_path, monkeypatch):
    """Triton answers live only once every --load-model model has loaded and warmed up (on a
    GPU, engines are built first): the container must not be unhealthy for that."""
    from tritonkit import deploy as deploy_lib
    from tritonkit.server.compose import STARTUP_S

    out = tmp_path / "docker"
    assert write(example_repository, out, "--gpu", "a10") == 0
    check = compose_config(out)["services"]["tritonserver"]["healthcheck"]
    assert check["start_period"] in (f"{STARTUP_S}s", "10m")     # as written, as compose says it
    assert STARTUP_S >= 600

    waited: dict[str, float] = {}

    def deploy_compose(repository, **kwargs):
        waited["compose"] = kwargs["timeout"]
        raise UsageError("stop here", hint="-")

    def deploy_local(repository, **kwargs):
        waited["local"] = kwargs["timeout"]
        raise UsageError("stop here", hint="-")

    monkeypatch.setattr(deploy_lib, "deploy_compose", deploy_compose)
    monkeypatch.setattr(deploy_lib, "deploy_local", deploy_local)
    run_cli("deploy", "--target", "compose", "--gpu", "a10", "--repository", example_repository)
    run_cli("deploy", "--repository", example_repository)
    assert waited == {"compose": STARTUP_S, "local": 120}


def test_two_repositories_of_one_name_get_compose_projects_of_their_own(tmp_path, monkeypatch):
    """Compose knows a deployment's containers by project and service: two repositories both
    named model_repository on one host must not share a project, or the second's `up`
    replaces the first's Triton (and `down` of either stops the other's)."""
    repos = [tmp_path / team / "model_repository" for team in ("a", "b")]
    projects = []
    for repo in repos:
        shutil.copytree(EXAMPLE_REPOSITORY, repo,
                        ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
        out = repo.parent / "docker"
        assert write(repo, out, "--gpu", "a10") == 0
        [project] = [line.split("=", 1)[1] for line in (out / ".env").read_text().splitlines()
                     if line.startswith("COMPOSE_PROJECT_NAME=")]
        projects.append(project)
    assert projects[0] != projects[1]
    assert all(p.startswith("tritonkit-model_repository-") for p in projects)
    monkeypatch.chdir(tmp_path / "a")          # one repository, however its path is spelled
    assert project_name(Path("model_repository")) == projects[0]


def test_public_publishes_the_ports_on_every_interface(example_repository, tmp_path):
    spec = container_spec(example_repository, "a10")
    ports = compose_dict(spec, example_repository, public=True)["services"]["tritonserver"]["ports"]
    assert ports == ["0.0.0.0:8000:8000", "0.0.0.0:8001:8001", "0.0.0.0:8002:8002"]


def test_public_is_said_when_the_files_are_written_and_loopback_is_not_flagged(
        example_repository, tmp_path, capsys):
    assert write(example_repository, tmp_path / "public", "--gpu", "p100", "--public") == 0
    assert "published on every interface" in " ".join(capsys.readouterr().out.split())
    assert write(example_repository, tmp_path / "loopback", "--gpu", "p100", "--force") == 0
    assert "every interface" not in capsys.readouterr().out


def test_a_p100_refuses_an_image_that_needs_compute_capability_7_5(example_repository, tmp_path, capsys):
    out = tmp_path / "docker"
    code = write(example_repository, out, "--gpu", "p100",
                 "--image", "nvcr.io/nvidia/tritonserver:25.01-py3")
    assert code == 2
    err = capsys.readouterr().err
    assert "needs compute capability 7.5" in err and "24.10" in err
    assert not (out / "docker-compose.yml").exists()


def test_an_a10_accepts_another_image(example_repository, tmp_path):
    out = tmp_path / "docker"
    image = "nvcr.io/nvidia/tritonserver:25.08-py3"
    assert write(example_repository, out, "--gpu", "a10", "--image", image) == 0
    assert yaml.safe_load((out / "docker-compose.yml").read_text())[
        "services"]["tritonserver"]["image"] == image


def test_a_rerun_with_other_flags_replaces_the_files_tritonkit_wrote_without_force(
        example_repository, tmp_path):
    out = tmp_path / "docker"
    assert write(example_repository, out, "--gpu", "p100") == 0
    assert write(example_repository, out, "--gpu", "a10", "--http-port", "18000") == 0
    text = (out / "docker-compose.yml").read_text()
    assert "25.12" in text and "127.0.0.1:18000:8000" in text


def test_another_repositorys_files_in_the_same_out_are_not_replaced_without_force(
        example_repository, tmp_path, capsys):
    """A rerun replaces its own files; a second repository deployed into the same --out
    would take the first's compose file away from the deployment that runs from it."""
    import shutil

    other = tmp_path / "other"
    shutil.copytree(example_repository, other)
    out = tmp_path / "docker"
    assert write(example_repository, out, "--gpu", "p100") == 0
    before = (out / "docker-compose.yml").read_text()
    capsys.readouterr()
    assert write(other, out, "--gpu", "p100") == 2
    err = capsys.readouterr().err
    assert f"was written for another model repository ({example_repository.resolve()})" in err
    assert "give another --out" in err
    assert (out / "docker-compose.yml").read_text() == before
    assert write(other, out, "--gpu", "p100", "--force") == 0


@pytest.mark.parametrize("edited", [["docker-compose.yml"], [".env"],
                                    ["docker-compose.yml", ".env"]])
def test_a_file_edited_by_hand_is_kept_and_named_unless_force(example_repository, tmp_path,
                                                              capsys, edited):
    out = tmp_path / "docker"
    assert write(example_repository, out, "--gpu", "p100") == 0
    for name in edited:                       # a comment alone is an edit too
        (out / name).write_text((out / name).read_text() + "# mine\n")
    before = {name: (out / name).read_text() for name in ("docker-compose.yml", ".env")}
    capsys.readouterr()
    assert write(example_repository, out, "--gpu", "a10") == 2
    err = capsys.readouterr().err.splitlines()
    named = [str(out / name) for name in edited]
    if len(edited) == 1:
        assert err[0] == (f"error: compose output {named[0]} already exists and was edited "
                          "since tritonkit wrote it")
        assert err[1] == "hint: pass --force to replace it, or give another --out"
    else:
        assert err[0] == ("error: compose output files already exist and are not as tritonkit "
                          "wrote them: " + ", ".join(f"{n} (was edited since tritonkit wrote it)"
                                                     for n in named))
        assert err[1] == "hint: pass --force to replace them, or give another --out"
    assert {name: (out / name).read_text() for name in before} == before
    assert write(example_repository, out, "--gpu", "a10", "--force") == 0
    assert "25.12" in (out / "docker-compose.yml").read_text()


def test_a_compose_file_tritonkit_did_not_write_is_kept_unless_force(example_repository,
                                                                     tmp_path, capsys):
    out = tmp_path / "docker"
    out.mkdir()
    (out / "docker-compose.yml").write_text("services: {}\n")
    assert write(example_repository, out, "--gpu", "p100") == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"error: compose output {out / 'docker-compose.yml'} already exists and was not "
        "written by tritonkit")
    assert (out / "docker-compose.yml").read_text() == "services: {}\n"
    assert not (out / ".env").exists()


def test_both_files_carry_the_sha256_of_their_text_below_a_generated_header(example_repository,
                                                                           tmp_path):
    import hashlib

    out = tmp_path / "docker"
    assert write(example_repository, out, "--gpu", "p100") == 0
    for name in ("docker-compose.yml", ".env"):
        lines = (out / name).read_text().splitlines(keepends=True)
        assert lines[0].startswith("# Generated by tritonkit deploy --target compose")
        at = next(i for i, line in enumerate(lines) if line.startswith("# sha256 of"))
        assert lines[at - 1] == ("# written for the model repository: "
                                 f"{example_repository.resolve()}\n")
        label, digest = lines[at].rstrip("\n").rsplit(" ", 1)
        assert label == "# sha256 of the text below, to tell an edit by hand:"
        assert digest == hashlib.sha256("".join(lines[at + 1:]).encode()).hexdigest()[:16]
        assert not lines[at + 1].startswith("#")


def test_a_rewrite_keeps_the_secret_of_an_env_file_nobody_edited(example_repository, tmp_path):
    """A container started from the first files still runs with their secret: the rerun's
    files, and the secret deploy's clients read, must be the same one."""
    out = tmp_path / "docker"
    assert write(example_repository, out, "--gpu", "p100") == 0
    secret = read_secret(example_repository)
    assert write(example_repository, out, "--gpu", "a10") == 0
    assert write(example_repository, out, "--gpu", "a10", "--force") == 0
    assert read_secret(example_repository) == secret
    assert f"TRITONKIT_REPOSITORY_KEY={secret}\n" in (out / ".env").read_text()


def test_an_env_file_edited_by_hand_gets_a_new_secret_with_force(example_repository, tmp_path):
    out = tmp_path / "docker"
    assert write(example_repository, out, "--gpu", "p100") == 0
    secret = read_secret(example_repository)
    (out / ".env").write_text((out / ".env").read_text() + "EXTRA=1\n")
    assert write(example_repository, out, "--gpu", "p100", "--force") == 0
    assert read_secret(example_repository) != secret
    assert f"TRITONKIT_REPOSITORY_KEY={read_secret(example_repository)}\n" in \
        (out / ".env").read_text()


def test_no_up_under_a_recorded_compose_deployment_rewrites_files_that_keep_its_secret(
        example_repository, tmp_path, capsys):
    """The rewritten .env keeps the secret the containers run with, so nobody is locked
    out; what else changed reaches the containers only when they are redeployed."""
    out = tmp_path / "docker"
    assert write(example_repository, out, "--gpu", "p100") == 0
    secret = read_secret(example_repository)
    record_compose(example_repository, out / "docker-compose.yml", out / ".env")
    capsys.readouterr()
    assert write(example_repository, out, "--gpu", "a10", "--http-port", "18000") == 0
    assert read_secret(example_repository) == secret
    assert f"TRITONKIT_REPOSITORY_KEY={secret}\n" in (out / ".env").read_text()
    assert "127.0.0.1:18000:8000" in (out / "docker-compose.yml").read_text()
    printed = " ".join(capsys.readouterr().out.split())
    assert (f"the compose deployment recorded for {example_repository} keeps running with its "
            "old settings until redeployed: tritonkit deploy --target compose --gpu a10 "
            f"--repository {example_repository} --out {out} (with this run's other flags, "
            "without --no-up)") in printed
    assert "start it on a GPU host" not in printed
    assert load_deployment(example_repository).target == "compose"


@pytest.mark.parametrize("where", ["edited", "another --out"])
def test_no_up_under_a_recorded_compose_deployment_refuses_files_that_would_change_its_secret(
        example_repository, tmp_path, capsys, where):
    out = tmp_path / "docker"
    assert write(example_repository, out, "--gpu", "p100") == 0
    secret = read_secret(example_repository)
    record_compose(example_repository, out / "docker-compose.yml", out / ".env")
    if where == "edited":
        (out / ".env").write_text((out / ".env").read_text() + "EXTRA=1\n")
    else:
        out = tmp_path / "elsewhere"
    before = {p: p.read_text() for p in out.glob("*")} if out.exists() else {}
    capsys.readouterr()
    assert write(example_repository, out, "--gpu", "p100", "--force") == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: a compose deployment is recorded for {example_repository.resolve()}; new "
        "files would change the secret it runs with",
        "hint: redeploy with --up, or stop it first: tritonkit down --repository "
        f"{example_repository.resolve()}"]
    assert read_secret(example_repository) == secret
    assert ({p: p.read_text() for p in out.glob("*")} if out.exists() else {}) == before


def test_compose_needs_a_gpu_profile(example_repository, tmp_path, capsys):
    assert write(example_repository, tmp_path / "docker") == 2
    assert "needs --gpu" in capsys.readouterr().err


@needs_compose
def test_a_recorded_tensorrt_recipe_builds_the_plan_in_a_one_shot_service_before_triton(
        example_repository, tmp_path):
    plan_config(example_repository, example_repository / "example" / "configs" / "a10.pbtxt")
    recipe = "trtexec --onnx=1/model.onnx --saveEngine=1/model_a10.plan --fp16"
    (example_repository / "example" / "export-report.json").write_text(
        json.dumps({"tensorrt_recipe": recipe}))
    out = tmp_path / "docker"
    assert write(example_repository, out, "--gpu", "a10") == 0
    services = compose_config(out)["services"]
    build = services["build-plans-example"]
    assert build["command"] == recipe.split()
    assert build["image"] == "nvcr.io/nvidia/tensorrt:25.12-py3"
    assert build["working_dir"] == "/models/example"
    assert not build["volumes"][0].get("read_only")   # it writes the plan
    assert build["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    server = services["tritonserver"]
    assert server["depends_on"] == {"build-plans-example": {"condition": "service_completed_successfully"}}
    assert "--model-config-name=a10" in server["command"]


@needs_compose
def test_the_plan_builder_writes_into_the_repository_as_its_owner_not_as_root(
        example_repository, tmp_path):
    """The NGC tensorrt image runs as root: the plan it built into the bind-mounted
    repository was root's, and its owner could not rebuild or delete it. It runs as the
    owner of the model's folder (under sudo too), given as numbers that Compose v1 and v2
    both take as they are."""
    plan_config(example_repository, example_repository / "example" / "configs" / "a10.pbtxt")
    (example_repository / "example" / "export-report.json").write_text(
        json.dumps({"tensorrt_recipe": "trtexec --onnx=1/model.onnx --saveEngine=1/model.plan"}))
    if os.getuid() == 0:        # root (a sudo deploy) writes as the folder's owner
        # 1000:50 is also a base-60 integer to YAML 1.1 (v1's parser): it must stay a string.
        os.chown(example_repository / "example", 1000, 50)
    owner = (example_repository / "example").stat()
    out = tmp_path / "docker"
    assert write(example_repository, out, "--gpu", "a10") == 0
    services = compose_config(out)["services"]
    build = services["build-plans-example"]
    assert build["user"] == f"{owner.st_uid}:{owner.st_gid}"
    assert build["environment"]["HOME"] == "/tmp"   # that user has no home in the image
    assert "user" not in services["tritonserver"]   # reads the repository only


def test_a_p100_serving_plans_gets_the_tensorrt_8_6_image_and_refuses_tensorrt_10(
        example_repository, tmp_path, capsys):
    plan_config(example_repository, example_repository / "example" / "config.pbtxt")
    assert container_spec(example_repository, "p100").image == "nvcr.io/nvidia/tritonserver:24.04-py3"
    code = write(example_repository, tmp_path / "docker", "--gpu", "p100",
                 "--image", "nvcr.io/nvidia/tritonserver:24.10-py3")
    assert code == 2 and "TensorRT 10" in capsys.readouterr().err


@pytest.mark.skipif(engine_problem() is None, reason="this machine has a GPU Docker engine")
def test_up_without_a_docker_engine_writes_the_files_says_what_is_missing_and_fails(
        example_repository, tmp_path, capsys):
    out = tmp_path / "docker"
    code = run_cli("deploy", "--target", "compose", "--gpu", "p100",
                   "--repository", example_repository, "--out", out)
    assert code != 0
    [line] = [l for l in capsys.readouterr().err.splitlines() if l.startswith("error:")]
    assert "no Docker" in line or "NVIDIA" in line
    assert "wrote" in line and str(out / "docker-compose.yml") in line
    assert (out / "docker-compose.yml").is_file() and (out / ".env").is_file()
    with pytest.raises(Exception):
        load_deployment(example_repository)   # nothing runs, so nothing is recorded


def fake_docker(tmp_path: Path, info: str) -> Path:
    """A docker CLI whose engine answers `info` with ``info`` (for the runtime check only)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "docker"
    script.write_text(f"#!/bin/sh\n[ \"$1\" = info ] && echo '{info}' && exit 0\nexit 1\n")
    script.chmod(0o755)
    return bindir


def test_an_engine_without_the_nvidia_runtime_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(fake_docker(tmp_path, '{"runc":{"path":"runc"}}')))
    assert "NVIDIA container runtime" in engine_problem()


def test_a_machine_without_docker_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert engine_problem() == "no Docker CLI on this machine"


# Shell: until this script's parent waits on it (its main thread in waitpid), 3 s at most.
# Absolute paths: the fake docker runs with PATH its own folder alone (without them the wait
# was no wait: `seq: not found`, and the signal could come before the deploy waited).
PARENT_WAITS = ('for _ in $(/usr/bin/seq 60); do [ "$(/bin/cat /proc/$PPID/wchan)" = do_wait ] '
                '&& break; /bin/sleep 0.05; done')


def gpu_docker(tmp_path: Path, up: str) -> tuple[Path, Path]:
    """A docker CLI whose engine has the NVIDIA runtime and whose `compose ... up -d` runs the
    shell line ``up``; every compose call is logged. Returns (its folder, the log)."""
    bindir, calls = tmp_path / "bin", tmp_path / "calls"
    bindir.mkdir()
    script = bindir / "docker"
    script.write_text(f"""#!/bin/sh
[ "$1" = info ] && echo '{{"nvidia":{{"path":"nvidia-container-runtime"}}}}' && exit 0
[ "$1 $2" = "compose version" ] && exit 0
echo "$@" >> {calls}
case "$*" in *" up -d") {up};; esac
exit 0
""")
    script.chmod(0o755)
    return bindir, calls


@pytest.mark.parametrize("up,code", [
    ("echo 'Error response from daemon: port is already allocated' >&2; exit 1", 1),
    ("kill -INT $PPID; exec /bin/sleep 5", 130),     # Ctrl-C while Compose makes containers
])
def test_an_up_that_fails_or_is_interrupted_half_way_is_recorded_so_down_removes_what_it_made(
        example_repository, tmp_path, monkeypatch, capsys, default_sigint, up, code):
    """Compose may have made containers (one that could not start holds its GPU
    reservation and network) before it failed or was stopped: `tritonkit down` must know
    them, not say there is nothing to stop."""
    bindir, calls = gpu_docker(tmp_path, up)
    monkeypatch.setenv("PATH", str(bindir))          # only the stub: never a real engine
    assert run_cli("deploy", "--target", "compose", "--gpu", "a10", "--repository",
                   example_repository, "--out", tmp_path / "docker") == code
    err = capsys.readouterr().err
    assert f"tritonkit down --repository {example_repository.resolve()}" in err
    if code == 130:     # not a bare "interrupted": what may run, and how to remove it
        assert err.splitlines()[-2:] == [
            "error: interrupted during docker compose up; containers it made may be running",
            f"hint: remove them: tritonkit down --repository {example_repository.resolve()}"]
    recorded = load_deployment(example_repository)
    assert recorded.target == "compose"
    assert run_cli("down", "--repository", example_repository) == 0
    assert calls.read_text().splitlines()[-1].endswith("down --timeout 40")
    with pytest.raises(UsageError):
        load_deployment(example_repository)


def test_the_redeploy_hint_of_a_compose_deployment_writes_the_same_files_again(
        example_repository, tmp_path, monkeypatch, capsys):
    """The hint loadtest, warmup and export give ("redeploy: tritonkit down … && tritonkit
    deploy …") names how the deployment was made: its files' folder, image, GPUs, public
    ports and settings file. Without them it wrote new files into ./docker, published on
    loopback only and went back to the profile's image and settings."""
    from tritonkit.server.state import redeploy_command

    bindir, _ = gpu_docker(tmp_path, "exit 1")        # recorded, then `up` fails: no wait
    monkeypatch.setenv("PATH", str(bindir))
    settings = tmp_path / "server.toml"
    settings.write_text((ROOT / "configs" / "server.toml").read_text()
                        .replace("log_verbose = 0", "log_verbose = 1"))
    out = tmp_path / "deploy-files"
    made = ("--image", "registry.example/triton:24.09-custom", "--device-ids", "0,1",
            "--public", "--server-config", str(settings))
    assert deploy_up(example_repository, out, *made) == 1
    before = (out / "docker-compose.yml").read_text()
    hint = redeploy_command(example_repository)
    down, deploy = (shlex.split(part) for part in hint.split(" && "))
    for flag in ("--out", str(out), *made):
        assert flag in deploy, (flag, hint)
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)
    assert run_cli(*down[1:]) == 0
    assert run_cli(*deploy[1:], "--no-up") == 0
    assert (out / "docker-compose.yml").read_text() == before
    assert not (tmp_path / "docker").exists()


def deploy_up(repository: Path, out: Path, *args: str) -> int:
    """`tritonkit deploy --target compose` with the up, on ports nobody listens on."""
    from tests.conftest import unused_ports

    ports = [a for role, port in zip(("http", "grpc", "metrics"), unused_ports(3))
             for a in (f"--{role}-port", port)]
    return run_cli("deploy", "--target", "compose", "--gpu", "a10", "--repository", repository,
                   "--out", out, *ports, *args)


@pytest.mark.slow
def test_ctrl_c_while_deploy_waits_for_triton_says_the_containers_keep_running(
        example_repository, tmp_path, monkeypatch, capsys, default_sigint):
    """Once `up -d` has started the containers, Ctrl-C ends only the deploy's wait: Triton
    keeps running (Docker restarts it). The error says so and how to stop it, and the
    exit code is an interrupt's."""
    bindir, calls = gpu_docker(tmp_path, "(/bin/sleep 1; kill -INT $PPID) &")
    monkeypatch.setenv("PATH", str(bindir))
    assert deploy_up(example_repository, tmp_path / "docker", "--timeout", "30") == 130
    err = capsys.readouterr().err.splitlines()
    assert err[-2:] == [
        "error: interrupted; the compose containers keep running",
        f"hint: stop them: tritonkit down --repository {example_repository.resolve()}"]
    assert load_deployment(example_repository).target == "compose"
    assert not [c for c in calls.read_text().splitlines() if " down" in c]


@pytest.mark.slow
def test_tritonkit_down_while_deploy_waits_for_triton_ends_the_deploy(
        example_repository, tmp_path, monkeypatch, capsys):
    """`tritonkit down` from another terminal stops the containers and removes the record
    while the deploy still waits for Triton: the deploy ends within a poll or two saying
    so, instead of polling a stopped server until its timeout (600 s by default)."""
    down = f"{sys.executable} -m tritonkit down --repository {example_repository}"
    bindir, calls = gpu_docker(tmp_path, f"(/bin/sleep 1; {down} >/dev/null 2>&1) &")
    monkeypatch.setenv("PATH", str(bindir))
    started = time.monotonic()
    assert deploy_up(example_repository, tmp_path / "docker", "--timeout", "30") == 1
    assert time.monotonic() - started < 15
    [line] = [l for l in capsys.readouterr().err.splitlines() if l.startswith(("error:", "hint:"))]
    assert line == (f"error: the deployment of {example_repository.resolve()} was taken down "
                    "(tritonkit down) while deploy waited for it")
    assert calls.read_text().splitlines()[-1].endswith("down --timeout 40")


def test_an_interrupted_compose_deploy_is_an_error_of_its_own_with_the_signals_exit_code(tmp_path):
    from tritonkit.server.compose import interrupted

    for signum, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        error = interrupted(signum, tmp_path)
        assert isinstance(error, DeployInterrupted) and not isinstance(error, ServerError)
        assert error.exit_code == code and type(error).__name__ == "DeployInterrupted"
    assert DeployInterrupted("x").exit_code == 130


def test_sigterm_during_compose_up_is_passed_on_to_compose_not_a_kill(
        example_repository, tmp_path, monkeypatch, capsys):
    """A kill leaves Compose half-way with no say; the same signal lets it stop what it
    was doing. The deploy then says what may run and exits 128 + the signal."""
    stopped = tmp_path / "compose-stopped"
    # The signal once the deploy waits on Compose ("during compose up"): sent at once, it
    # could reach the deploy still inside Popen, before there is a Compose to pass it to.
    up = (f"trap 'echo $? > {stopped}; exit 143' TERM; {PARENT_WAITS}; kill -TERM $PPID; "
          "/bin/sleep 5 & wait")
    bindir, _ = gpu_docker(tmp_path, up)
    monkeypatch.setenv("PATH", str(bindir))
    started = time.monotonic()
    assert deploy_up(example_repository, tmp_path / "docker") == 143
    assert time.monotonic() - started < 5
    assert stopped.is_file()                  # Compose heard the signal and stopped itself
    err = capsys.readouterr().err.splitlines()
    assert err[-2] == ("error: stopped by SIGTERM during docker compose up; containers it "
                       "made may be running")
    assert load_deployment(example_repository).target == "compose"


def _live_then_taken_down(monkeypatch, repository: Path, *, delay: float | None) -> None:
    """Triton answers live at once; ``delay`` s later (None: never) a `tritonkit down` has
    stopped it (nothing answers on its ports meanwhile: Compose is stopping the container)."""
    import threading

    from tritonkit import deploy as deploy_lib
    from tritonkit.server import compose

    real_wait_live = compose.wait_live
    calls = []

    def wait_live(deployment, deadline, progress=None):
        if calls:
            return real_wait_live(deployment, deadline, progress)
        calls.append(deployment)
        if delay is not None:
            threading.Timer(delay, deploy_lib.down, args=(repository,)).start()

    monkeypatch.setattr(compose, "wait_live", wait_live)


@pytest.mark.slow
def test_tritonkit_down_while_deploy_loads_the_models_without_warmup_ends_the_deploy(
        example_repository, tmp_path, monkeypatch, capsys):
    """With --no-warmup deploy loads each model itself: a `tritonkit down` landing then
    (the load finds no server, the record goes a moment later) ends the deploy with what
    happened, not with a connection error."""
    bindir, calls = gpu_docker(tmp_path, "true")
    monkeypatch.setenv("PATH", str(bindir))
    _live_then_taken_down(monkeypatch, example_repository, delay=1.0)
    started = time.monotonic()
    assert deploy_up(example_repository, tmp_path / "docker", "--no-warmup",
                     "--timeout", "30") == 1
    assert time.monotonic() - started < 15
    [line] = [l for l in capsys.readouterr().err.splitlines() if l.startswith(("error:", "hint:"))]
    assert line == (f"error: the deployment of {example_repository.resolve()} was taken down "
                    "(tritonkit down) while deploy waited for it")


def test_tritonkit_down_just_after_the_warm_up_is_not_undone_by_deploy_recording_it(
        example_repository, tmp_path, monkeypatch, capsys):
    """The warm-up's figures are recorded after it ends: a `tritonkit down` that landed
    just before must not be undone by that write (deploy then polled a stopped server
    it had recorded as its own until the timeout)."""
    from tritonkit import deploy as deploy_lib

    bindir, calls = gpu_docker(tmp_path, "true")
    monkeypatch.setenv("PATH", str(bindir))
    _live_then_taken_down(monkeypatch, example_repository, delay=None)

    def load_and_warm(endpoint, models, **kwargs):
        deploy_lib.down(example_repository)
        return []

    monkeypatch.setattr(deploy_lib, "load_and_warm", load_and_warm)
    started = time.monotonic()
    assert deploy_up(example_repository, tmp_path / "docker", "--timeout", "8") == 1
    assert time.monotonic() - started < 5
    assert "was taken down (tritonkit down)" in capsys.readouterr().err
    with pytest.raises(UsageError):
        load_deployment(example_repository)


def compose_stub(tmp_path: Path, compose: str) -> tuple[Path, Path, Path]:
    """A Compose CLI (``docker compose`` or ``docker-compose``) that logs its arguments and
    keeps what it read on stdin. Returns (its folder, the log, the stdin it read)."""
    bindir, calls, stdin = tmp_path / "bin", tmp_path / "calls", tmp_path / "stdin"
    bindir.mkdir()
    stub = bindir / compose.split()[0]
    version = '[ "$1 $2" = "compose version" ] && exit 0\n' if compose == "docker compose" else ""
    stub.write_text(f"#!/bin/sh\n{version}echo \"$@\" >> {calls}\n"
                    f"case \"$*\" in *\"-f - \"*) /bin/cat > {stdin};; esac\n")
    stub.chmod(0o755)
    return bindir, calls, stdin


def record_compose(repository: Path, compose_file: Path, env_file: Path) -> None:
    save_deployment(Deployment(
        target="compose", repository=str(repository.resolve()), host="127.0.0.1",
        http_port=8000, grpc_port=8001, metrics_port=8002,
        secret_header="tritonkit-repository-key", models=["example"], started_at=0.0,
        extra={"compose": ["docker-compose"], "project": "tritonkit-repo",
               "compose_file": str(compose_file), "env_file": str(env_file),
               "image": "nvcr.io/nvidia/tritonserver:25.12-py3"}))


def test_down_stops_a_recorded_compose_deployment_with_docker_compose_down(
        example_repository, tmp_path, monkeypatch):
    bindir, calls, _ = compose_stub(tmp_path, "docker-compose")
    monkeypatch.setenv("PATH", str(bindir))  # only the stub: never a real Compose
    compose_file = tmp_path / "docker" / "docker-compose.yml"
    compose_file.parent.mkdir()
    compose_file.write_text("services: {}\n")
    record_compose(example_repository, compose_file, tmp_path / "none")
    assert run_cli("down", "--repository", example_repository) == 0
    assert calls.read_text().split() == ["-p", "tritonkit-repo", "-f", str(compose_file),
                                         "down", "--timeout", "40"]
    with pytest.raises(Exception):
        load_deployment(example_repository)


def test_down_stops_a_compose_v2_project_by_its_name_once_its_compose_file_is_deleted(
        example_repository, tmp_path, monkeypatch):
    """`docker compose -p NAME down` finds the containers by their project label: a
    deleted docker/ folder must not leave a deployment that `tritonkit down` cannot stop."""
    bindir, calls, _ = compose_stub(tmp_path, "docker compose")
    monkeypatch.setenv("PATH", str(bindir))
    record_compose(example_repository, tmp_path / "gone" / "docker-compose.yml",
                   tmp_path / "gone" / ".env")
    assert run_cli("down", "--repository", example_repository) == 0
    assert calls.read_text().splitlines()[-1].split() == ["compose", "-p", "tritonkit-repo",
                                                          "down", "--timeout", "40"]
    with pytest.raises(UsageError):
        load_deployment(example_repository)


@pytest.mark.slow
@needs_compose
def test_down_stops_a_deployment_whose_env_file_is_deleted_but_its_compose_file_kept(
        example_repository, tmp_path, monkeypatch):
    """The compose file requires the secret's variable and Compose interpolates it even to
    stop the project: with .env gone (git clean -X removes it, the compose file stays)
    `down` failed. The real v1 reads the file as `down` gives it (`config` for `down`: no
    engine here)."""
    v1 = shutil.which("docker-compose")
    out = tmp_path / "docker"
    assert write(example_repository, out, "--gpu", "a10") == 0
    (out / ".env").unlink()
    bindir, calls = tmp_path / "bin", tmp_path / "calls"
    bindir.mkdir()
    stub = bindir / "docker-compose"
    stub.write_text(f"""#!/bin/sh
echo "$@" >> {calls}
args=""
for a in "$@"; do [ "$a" = down ] && break; args="$args $a"; done
exec {v1} $args config -q
""")
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    record_compose(example_repository, out / "docker-compose.yml", out / ".env")
    assert run_cli("down", "--repository", example_repository) == 0
    assert calls.read_text().split()[-3:] == ["down", "--timeout", "40"]
    with pytest.raises(UsageError):
        load_deployment(example_repository)


@pytest.mark.slow
@needs_compose
def test_down_stops_a_docker_compose_v1_project_once_its_compose_file_is_deleted(
        example_repository, tmp_path, monkeypatch):
    """docker-compose v1 reads a compose file even to stop a project (without one it looks
    in the working folder): it is given one on stdin that names the server's service, and
    removes the exited plan builders as orphans. The real v1 accepts that file."""
    v1 = shutil.which("docker-compose")
    bindir, calls, stdin = compose_stub(tmp_path, "docker-compose")
    monkeypatch.setenv("PATH", str(bindir))
    record_compose(example_repository, tmp_path / "gone" / "docker-compose.yml",
                   tmp_path / "gone" / ".env")
    assert run_cli("down", "--repository", example_repository) == 0
    assert calls.read_text().split() == ["-p", "tritonkit-repo", "-f", "-", "down",
                                         "--timeout", "40", "--remove-orphans"]
    config = subprocess.run([v1, "-p", "tritonkit-repo", "-f", "-", "config"], input=stdin.read_text(),
                            capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert config.returncode == 0, config.stderr
    assert list(yaml.safe_load(config.stdout)["services"]) == ["tritonserver"]
    with pytest.raises(UsageError):
        load_deployment(example_repository)


@pytest.mark.server
def test_after_up_a_model_that_is_not_ready_is_loaded_with_the_secret_header(deployed):
    """compose_up's steps after `docker compose up -d`, against the real (local) Triton."""
    import tritonclient.http as httpclient

    from tritonkit.server.compose import _wait_for, load_models
    from tritonkit.server.local import Deadline

    client = httpclient.InferenceServerClient(deployed.http_url)
    try:
        client.unload_model("example", headers=deployed.repository_headers())
        deadline = Deadline(30)
        while client.is_model_ready("example") and not deadline.expired():
            time.sleep(0.05)
        assert not client.is_model_ready("example")
        load_models(deployed, Deadline(30))
        _wait_for("ready", deployed, Deadline(30), logs="(local)")
        assert client.is_model_ready("example")
    finally:
        client.close()


@pytest.mark.server
def test_the_wait_for_triton_in_compose_says_what_it_waits_for(example_server):
    from tritonkit.server.compose import _wait_for
    from tritonkit.server.local import Deadline

    said: list[str] = []
    _wait_for("ready", example_server, Deadline(30), logs="(local)", progress=said.append)
    assert said and all("waiting for Triton in compose to be ready" in line for line in said)


def test_a_gpu_the_model_has_no_config_for_is_refused_not_served_with_another_cards(tmp_path):
    from tests import onnx_graphs
    from tritonkit.model_config import configure

    onnx_graphs.mlp(tmp_path / "repo" / "mlp")
    configure(tmp_path / "repo", "mlp", gpu="a10")
    (tmp_path / "repo" / "mlp" / "configs" / "p100.pbtxt").unlink()   # left out: did not fit
    assert container_spec(tmp_path / "repo", "a10").model_config_name == "a10"
    with pytest.raises(UsageError) as caught:
        container_spec(tmp_path / "repo", "p100")
    assert caught.value.message == ("model 'mlp' has no configs/p100.pbtxt: Triton would serve it "
                                    "on the p100 with config.pbtxt, made for another GPU")
    assert f"tritonkit config mlp --repository {tmp_path / 'repo'} --gpu p100" in caught.value.hint


def test_a_wait_for_triton_in_compose_that_times_out_says_the_last_answer(tmp_path):
    from tritonkit.errors import ServerError
    from tritonkit.server.compose import _wait_for
    from tritonkit.server.local import Deadline
    from tests.conftest import unused_ports
    from tritonkit.server.state import Deployment

    http, grpc, metrics = unused_ports(3)
    nobody = Deployment(target="compose", repository=str(tmp_path), host="127.0.0.1",
                        http_port=http, grpc_port=grpc, metrics_port=metrics,
                        secret_header="x", models=[], started_at=0.0, argv=[])
    save_deployment(nobody)
    with pytest.raises(ServerError) as caught:
        _wait_for("live", nobody, Deadline(0.6), logs="docker compose logs triton")
    assert "did not become live within 0.6 s (last: Connection refused)" in str(caught.value)
    assert "docker compose logs triton" in caught.value.hint


@pytest.mark.parametrize("args,says", [
    (("--http-port", "8000", "--grpc-port", "8000"), "--http-port and --grpc-port are both 8000"),
    (("--device-ids", ""), "no GPU given"),
    (("--device-ids", "0,0"), "a GPU is listed twice"),
    (("--device-ids", "0,x"), "'x' is not a GPU index or UUID"),
])
def test_settings_that_would_fail_on_the_gpu_host_are_refused_here(example_repository, tmp_path,
                                                                   capsys, args, says):
    out = tmp_path / "docker"
    assert write(example_repository, out, "--gpu", "a10", *args) == 2
    assert says in capsys.readouterr().err
    assert not out.exists()


def test_a_device_given_by_uuid_is_reserved_as_given(example_repository, tmp_path):
    out = tmp_path / "docker"
    uuid = "GPU-5a3c8f1e-1b2c-4d5e-8f90-123456789abc"
    assert write(example_repository, out, "--gpu", "a10", "--device-ids", f"0,{uuid}") == 0
    assert uuid in (out / "docker-compose.yml").read_text()


@pytest.mark.parametrize("target", ["compose", "k8s"])
def test_an_out_folder_that_is_a_file_is_refused_and_the_file_kept(example_repository, tmp_path,
                                                                   capsys, target):
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    args = ("--no-up",) if target == "compose" else ()
    assert run_cli("deploy", "--target", target, "--gpu", "a10", "--repository",
                   example_repository, "--out", afile, *args) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert afile.read_text() == "mine\n"
