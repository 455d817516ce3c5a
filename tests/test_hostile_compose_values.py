"""Compose fills ``$VAR`` and ``${VAR}`` in every value of a compose file: what tritonkit
writes there is taken as written. The second adversarial pass found a repository at
``…/d$HOME`` mounted as ``…/d/root`` (another folder), and a plan recipe from a model's
export report could name ``${TRITONKIT_REPOSITORY_KEY}`` and get the secret written into
the plan builder's command (``docker inspect`` shows it). Only the secret's own variable
is filled in by Compose."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli

pytestmark = pytest.mark.skipif(shutil.which("docker-compose") is None,
                                reason="Debian's docker-compose is not installed")


def resolved(out: Path) -> dict:
    """The compose file as docker-compose resolves it. Compose v1 prints a ``$`` it took
    as written as ``$$`` again (so the output can be read back): undone here."""
    done = subprocess.run(["docker-compose", "-f", str(out / "docker-compose.yml"), "config"],
                          capture_output=True, text=True, cwd=out, timeout=60)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout.replace("$$", "$"))


@pytest.mark.slow
def test_a_repository_path_with_a_dollar_is_mounted_as_it_is(example_repository, tmp_path):
    repository = Path(shutil.copytree(example_repository, tmp_path / "models$HOME${USER:-x}"))
    out = tmp_path / "docker"
    assert run_cli("deploy", "--target", "compose", "--repository", repository, "--out", out,
                   "--no-up", "--gpu", "cpu") == 0
    server = resolved(out)["services"]["tritonserver"]
    sources = [v["source"] for v in server["volumes"] if v["type"] == "bind"]
    assert sources and all(s.startswith(str(repository.resolve())) for s in sources), sources
    assert server["labels"]["tritonkit.repository"] == str(repository.resolve())


@pytest.mark.slow
def test_a_plan_recipe_cannot_get_the_secret_written_into_a_command(example_repository, tmp_path):
    text = (example_repository / "example" / "config.pbtxt").read_text()
    plan = example_repository / "example" / "configs" / "a10.pbtxt"
    plan.parent.mkdir(parents=True, exist_ok=True)
    plan.write_text(text.replace('backend: "python"', 'platform: "tensorrt_plan"'))
    (example_repository / "example" / "export-report.json").write_text(json.dumps(
        {"tensorrt_recipe": "trtexec --onnx=1/model.onnx --saveEngine=${TRITONKIT_REPOSITORY_KEY}"}))
    out = tmp_path / "docker"
    assert run_cli("deploy", "--target", "compose", "--repository", example_repository,
                   "--out", out, "--no-up", "--gpu", "a10") == 0
    secret = (example_repository / ".tritonkit" / "secret").read_text().strip()
    config = resolved(out)
    builder = config["services"]["build-plans-example"]
    assert builder["command"][-1] == "--saveEngine=${TRITONKIT_REPOSITORY_KEY}"
    assert secret not in json.dumps(builder)
    # the server's own secret still comes from the env file, as the one value filled in
    assert config["services"]["tritonserver"]["environment"]["TRITONKIT_REPOSITORY_KEY"] == secret
