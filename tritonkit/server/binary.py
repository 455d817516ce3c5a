"""Locating the embedded tritonserver and preparing the environment it needs.

The binary comes from the ``nvidia-pytriton==0.7.0`` wheel (tritonserver 2.51.0 with
the python backend), installed with ``--no-deps`` because the wheel pins numpy<2 and
the server itself does not care. We locate the package without importing it (its
Python side imports dependencies we do not install).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from tritonkit.errors import ServerError
from tritonkit.extras import onnxruntime_telemetry_off
from tritonkit.fileio import OwnedFolder

BINARY_ENV = "TRITONKIT_TRITONSERVER_HOME"
PYTRITON_PIN = "nvidia-pytriton==0.7.0"
INSTALL_HINT = f"run: tritonkit install-server  (it runs pip install --no-deps {PYTRITON_PIN})"
# ONNX Runtime for the local target's adapter, as the `local` extra pins it.
ONNXRUNTIME_REQUIREMENT = "onnxruntime>=1.22"


@dataclass(frozen=True)
class TritonInstall:
    """Where the embedded server's pieces lie."""

    home: Path       # .../pytriton/tritonserver
    libs: Path       # .../nvidia_pytriton.libs (bundled shared libraries)

    @property
    def binary(self) -> Path:
        return self.home / "bin" / "tritonserver"

    @property
    def python_backend(self) -> Path:
        return self.home / "backends" / "python"

    def python_stub(self, version: str | None = None) -> Path:
        version = version or f"{sys.version_info.major}.{sys.version_info.minor}"
        return self.home / "python_backend_stubs" / version / "triton_python_backend_stub"


def find_install() -> TritonInstall:
    """Find the tritonserver that the nvidia-pytriton wheel carries."""
    override = os.environ.get(BINARY_ENV)
    if override:
        home = Path(override)
        libs = home.parent.parent / "nvidia_pytriton.libs"
    else:
        spec = importlib.util.find_spec("pytriton")
        if spec is None or not spec.submodule_search_locations:
            raise ServerError("the embedded tritonserver is not installed", hint=INSTALL_HINT)
        package = Path(next(iter(spec.submodule_search_locations)))
        home = package / "tritonserver"
        libs = package.parent / "nvidia_pytriton.libs"
    install = TritonInstall(home=home, libs=libs)
    if not install.binary.is_file():
        raise ServerError(f"no tritonserver binary at {install.binary}", hint=INSTALL_HINT)
    return install


def install_commands(python: str = sys.executable) -> list[list[str]]:
    """The pip commands that give ``python`` what the local target runs, each only when
    it is missing: the embedded server, with ``--no-deps`` (the wheel pins numpy<2 and
    Python packages the server binary does not need), and ONNX Runtime for the adapter
    that serves ONNX models (any build: the CUDA one imports as onnxruntime too)."""
    commands = []
    try:
        find_install()
    except ServerError:
        commands.append([python, "-m", "pip", "install", "--no-deps", PYTRITON_PIN])
    if importlib.util.find_spec("onnxruntime") is None:
        commands.append([python, "-m", "pip", "install", ONNXRUNTIME_REQUIREMENT])
    return commands


def prepare_backends(install: TritonInstall, backends: OwnedFolder) -> Path:
    """Lay out a backend directory (``backends``; its path is returned) whose python
    backend has this interpreter's stub.

    The wheel keeps one stub per Python version beside the backend; Triton looks for
    ``triton_python_backend_stub`` inside the backend's own folder. Symlinks keep the
    installed package untouched; they are made through the folder's descriptor, which
    follows no link planted there.
    """
    stub = install.python_stub()
    if not stub.is_file():
        raise ServerError(
            f"the embedded tritonserver has no python backend stub for Python "
            f"{sys.version_info.major}.{sys.version_info.minor} ({stub})",
            hint="use Python 3.10-3.13 for the local target")
    with backends.child("python", create=True) as python_dir:
        for item in install.python_backend.iterdir():
            if item.name != "__pycache__":
                python_dir.symlink(item.name, item)
        python_dir.symlink(stub.name, stub)
    return backends.path


def server_environment(install: TritonInstall) -> dict[str, str]:
    """The environment the python backend stub needs.

    The stub embeds libpython: LD_LIBRARY_PATH must hold the base interpreter's
    LIBDIR (and the wheel's bundled libraries, which the stub links against), and
    this interpreter's ``bin/`` must come first on PATH so the stub finds the
    virtual environment's site-packages through pyvenv.cfg.
    """
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    soname = f"libpython{sys.version_info.major}.{sys.version_info.minor}.so.1.0"
    if not (Path(libdir) / soname).exists():
        raise ServerError(
            f"the python backend needs {soname} in {libdir or 'LIBDIR'}, and it is not there",
            hint=f"on Debian/Ubuntu `apt install libpython{sys.version_info.major}.{sys.version_info.minor}`; "
                 "with pyenv reinstall with PYTHON_CONFIGURE_OPTS=--enable-shared; "
                 "or use another Python built with --enable-shared")
    env = dict(os.environ)
    env.pop("PYTHONHOME", None)
    env.pop("PYTHONPATH", None)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bindir, env.get("PATH", "")])
    ld = [libdir, str(install.libs)]
    if env.get("LD_LIBRARY_PATH"):
        ld.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(ld)
    return onnxruntime_telemetry_off(env)       # the ONNX adapter's sessions, in the stubs
