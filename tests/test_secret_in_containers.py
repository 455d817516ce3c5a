"""Where a compose deployment's secret can be seen, on a real Docker engine: not in the
container's command (docker inspect's Cmd, docker ps), which starts a shell that reads it
from the container's environment; in that environment (whoever may use the engine may read
it), and in tritonserver's own command line, as Triton 2.51 takes it nowhere else."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.docker_engine import PREFIX
from tests.test_compose_engine import cli, cpu_repository, deploy_argv, inspect
from tritonkit.server.compose import project_name
from tritonkit.server.state import load_deployment, read_secret

pytestmark = pytest.mark.engine


def test_the_secret_is_in_no_container_command_only_in_its_environment(engine, tmp_path):
    repo = cpu_repository(tmp_path / f"{PREFIX}secret", onnx=False)
    project = project_name(repo)
    engine.add_project(project)
    try:
        code, out, err = cli(*deploy_argv(engine, repo, tmp_path / "docker", "--no-warmup"))
        assert code == 0, err
        secret = read_secret(repo)
        container = subprocess.run(
            ["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={project}"],
            capture_output=True, text=True, timeout=60).stdout.split()[0]
        assert not any(secret in arg for arg in inspect(container, ".Config.Cmd"))
        listed = subprocess.run(["docker", "ps", "--no-trunc", "--filter", f"id={container}"],
                                capture_output=True, text=True, timeout=60).stdout
        assert container[:12] in listed and secret not in listed
        assert f"TRITONKIT_REPOSITORY_KEY={secret}" in inspect(container, ".Config.Env")
        # What the host's ps shows: the shell exec'd tritonserver, the secret on its argv.
        pid = inspect(container, ".State.Pid")
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert argv[0].endswith(b"tritonserver") and any(secret.encode() in a for a in argv)
        assert secret not in out + err and load_deployment(repo).target == "compose"
    finally:
        cli("down", "--repository", repo)
        engine.remove_project(project)
