"""`pip install tritonkit` without torch: the wheel, installed in a fresh virtual
environment with only its base requirements, drives a server's verbs and refuses `export`
with the extra to install.

The base requirements are resolved by pip from the package index once per set of
requirements and kept in a cache folder (``pip install --target``, keyed by the wheel's
requirements and the Python version); each run makes a fresh venv that sees that folder
through a .pth file and installs the wheel into it with ``--no-index``, so the wheel's
requirements must all be met by what pip resolved for them, and nothing else is there.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import tritonkit
from tests import onnx_graphs
from tests.conftest import ROOT

# A wheel built and venvs made, once for the module: its tests on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("light_install")]

HEAVY = ("torch", "onnxruntime", "onnxscript")


def _build_wheel(out: Path) -> Path:
    source = out / "source"           # a clean copy: no build/ of an earlier build
    for part in ("tritonkit", "configs"):
        shutil.copytree(ROOT / part, source / part, ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / part, source / part)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(source)], check=True, capture_output=True)
    [wheel] = out.glob("tritonkit-*.whl")
    return wheel


def _base_requirements(wheel: Path) -> list[str]:
    """Requires-Dist of the wheel that no extra asks for."""
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(name).decode())
    return [req for req in metadata.get_all("Requires-Dist") or [] if "extra ==" not in req]


def _base_layer(requirements: list[str]) -> Path:
    """The packages pip resolves for ``requirements`` (a folder made once, then reused)."""
    key = hashlib.sha256("\n".join([sys.version, *sorted(requirements)]).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tritonkit-tests"
    layer = cache / f"base-{key}"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"base-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)      # another run making the same layer: wait for it
        if not layer.is_dir():
            partial = cache / f"base-{key}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(partial),
                            *requirements], check=True, capture_output=True, timeout=900)
            partial.rename(layer)
    return layer


@pytest.fixture(scope="module")
def wheel_and_layer(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = _build_wheel(tmp)
    return wheel, _base_layer(_base_requirements(wheel))


def _make_venv(where: Path, wheel: Path, layer: Path, *, pip: bool) -> Path:
    """A fresh venv holding the wheel and its base requirements only; returns its bin/."""
    subprocess.run([sys.executable, "-m", "venv", *([] if pip else ["--without-pip"]), str(where)],
                   check=True, capture_output=True)
    python = where / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "tritonkit_base_layer.pth").write_text(f"{layer}\n")
    if pip:     # Python 3.11's venv also seeds an old setuptools, which would shadow the layer's
        subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "setuptools"],
                       check=True, capture_output=True)
    # its own pip where it has one; else this one's, pointed at it
    pip = [str(python), "-m", "pip"] if pip else [sys.executable, "-m", "pip", "--python", str(python)]
    done = subprocess.run([*pip, "install", "-q", "--no-index", str(wheel)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    return where / "bin"


@pytest.fixture(scope="module")
def light(wheel_and_layer, tmp_path_factory):
    """The base install in a fresh venv (no pip in it: nothing is added to it later)."""
    return _make_venv(tmp_path_factory.mktemp("light") / "venv", *wheel_and_layer, pip=False)


def _run(bin_dir: Path, *args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    # The light install's own everything: no server another tritonserver home would name
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "TRITONKIT_CONFIGS", "VIRTUAL_ENV",
                        "TRITONKIT_TRITONSERVER_HOME")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "200"
    return subprocess.run([str(bin_dir / "tritonkit"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_base_requirements_name_no_heavy_package(wheel_and_layer):
    wheel, _layer = wheel_and_layer
    names = {req.split(";")[0].split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip()
             for req in _base_requirements(wheel)}
    assert names and not names & {"torch", "onnxruntime", "onnxruntime-gpu", "onnxscript"}


def test_the_light_install_has_no_torch_and_runs_from_the_wheel(light, tmp_path):
    probe = ("import importlib.util, tritonkit; "
             f"print(tritonkit.__file__, [m for m in {HEAVY!r} if importlib.util.find_spec(m)])")
    out = subprocess.run([str(light / "python"), "-c", probe], cwd=tmp_path, check=True,
                         capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}).stdout
    assert str(ROOT) not in out and "site-packages/tritonkit" in out
    assert out.strip().endswith("[]"), out
    version = _run(light, "--version", cwd=tmp_path)
    assert version.returncode == 0, version.stderr
    assert version.stdout == f"tritonkit {tritonkit.__version__}\n"      # the wheel's metadata


def test_loadtest_help_works_without_torch(light, tmp_path):
    done = _run(light, "loadtest", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "--sla-p99-ms" in done.stdout


def test_config_and_a_compose_deploy_without_torch(light, tmp_path):
    repository = tmp_path / "repo"
    onnx_graphs.mlp(repository / "mlp")
    done = _run(light, "config", "mlp", "--repository", str(repository), "--gpu", "a10", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (repository / "mlp" / "config.pbtxt").is_file()
    assert (repository / "mlp" / "configs" / "p100.pbtxt").is_file()

    done = _run(light, "deploy", "--target", "compose", "--gpu", "a10", "--no-up",
                "--repository", str(repository), "--out", str(tmp_path / "docker"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "docker" / "docker-compose.yml").is_file()


def test_export_without_the_extra_names_it_in_one_line(light, tmp_path):
    done = _run(light, "export", str(ROOT / "examples" / "mlp.py") + ":build", "--name", "mlp",
                "--repository", str(tmp_path / "repo"), cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[0] == ("error: tritonkit export needs the export extra (torch, onnxruntime, "
                        "onnxscript are not installed)"), done.stderr
    assert lines[1].startswith('hint: pip install "tritonkit[export]"')
    assert "Traceback" not in done.stderr and not (tmp_path / "repo").exists()


def test_a_local_deploy_without_the_server_says_how_to_install_it(light, tmp_path):
    repository = tmp_path / "repo"
    onnx_graphs.mlp(repository / "mlp")
    assert _run(light, "config", "mlp", "--repository", str(repository), cwd=tmp_path).returncode == 0
    done = _run(light, "deploy", "--repository", str(repository), "--http-port", "0",
                "--grpc-port", "0", "--metrics-port", "0", cwd=tmp_path)
    assert done.returncode == 2, done
    error, hint = done.stderr.strip().splitlines()
    assert error == ("error: serving ONNX model 'mlp' locally needs the local extra "
                     "(onnxruntime is not installed)")
    assert hint.startswith("hint: tritonkit install-server")

    plan = _run(light, "install-server", "--dry-run", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    lines = plan.stdout.strip().splitlines()
    assert lines[0].endswith("-m pip install --no-deps nvidia-pytriton==0.7.0")
    assert lines[1].endswith("-m pip install 'onnxruntime>=1.22'")
    assert str(light / "python") in lines[0]


def test_every_command_imports_without_torch(light, tmp_path):
    """Each command's --help imports its module: a module-level torch import anywhere but
    export would fail here."""
    script = ("import contextlib, io, typer.main\n"
              "from tritonkit.cli import app, main\n"
              "for name in typer.main.get_command(app).commands:\n"
              "    with contextlib.redirect_stdout(io.StringIO()):\n"
              "        code = main([name, '--help'])\n"
              "    print(name, code)\n")
    out = subprocess.run([str(light / "python"), "-c", script], cwd=tmp_path, check=True,
                         capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}).stdout
    results = dict(line.split() for line in out.splitlines())
    assert {"deploy", "warmup", "loadtest", "down", "monitor", "diagnose", "doctor",
            "config"} <= set(results)
    assert set(results.values()) == {"0"}, results


@pytest.mark.server
def test_a_pip_user_serves_an_onnx_model_after_install_server(wheel_and_layer, tmp_path):
    """The documented path: pip install tritonkit, tritonkit install-server, deploy, load
    test, down; ONNX Runtime's CPU build (not the CUDA one the dev set-up has) serves it."""
    bin_dir = _make_venv(tmp_path / "venv", *wheel_and_layer, pip=True)
    installed = _run(bin_dir, "install-server", cwd=tmp_path, timeout=600)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "installed: the embedded tritonserver at" in installed.stdout
    again = _run(bin_dir, "install-server", cwd=tmp_path)
    assert again.returncode == 0 and "nothing to do" in again.stdout

    repository = tmp_path / "repo"
    onnx_graphs.mlp(repository / "mlp")
    assert _run(bin_dir, "config", "mlp", "--repository", str(repository), cwd=tmp_path).returncode == 0
    try:
        deployed = _run(bin_dir, "deploy", "--repository", str(repository), "--http-port", "0",
                        "--grpc-port", "0", "--metrics-port", "0", "--timeout", "90", cwd=tmp_path)
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        assert "models READY: mlp" in deployed.stdout
        tested = _run(bin_dir, "loadtest", "--repository", str(repository), "--model", "mlp",
                      "--concurrency", "1", "--duration", "1", "--warmup-s", "0.2",
                      "--shape", "INPUT__0:1,16", cwd=tmp_path)   # no export report: no batching
        assert tested.returncode == 0, tested.stdout + tested.stderr
    finally:
        stopped = _run(bin_dir, "down", "--repository", str(repository), cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr
