"""The folder Triton serves in a compose container (``/models``): the models, and nothing else.

Not the repository itself, which holds tritonkit's state folder (``.tritonkit/``): Triton
lists every folder of its repository in its index, so that one showed up as a model
named ``.tritonkit`` (and a warm-up of every model in the index tried to load it). The
container mounts the repository read-only at ``SOURCE`` (its state folder masked by an
empty tmpfs) and serves ``DIR/.tritonkit/compose/models/``, kept by ``build_served``:

- ``onnx_backend="onnxruntime"`` (Triton's own image): one link per model,
  ``NAME -> /repository/NAME``. A link by name follows ``tritonkit export --force``, which
  renames a new model folder into place, so a reload serves the new export. The links
  point into the container; on this host they lead nowhere.
- ``onnx_backend="python"`` (an image without Triton's onnxruntime backend, as the
  stand-in of ``docker/standin/``): the local target's CPU mirror (``local_repository``),
  each ONNX model a snapshot served by the python-backend adapter, the other models linked
  file by file into ``SOURCE``.

A model added to the repository after the deploy is served from the next deploy, as on
the local target. The folder is updated in place, never replaced: a running container has
it mounted, and would keep serving a replaced folder's old copy.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Sequence

from tritonkit.errors import UsageError
from tritonkit.server.local_repository import build_local_repository
from tritonkit.server.state import state_dir

#: Where the compose containers mount the repository (read-only, its state folder masked).
SOURCE = "/repository"
ONNX_BACKENDS = ("onnxruntime", "python")


def served_dir(repository: Path) -> Path:
    """The folder a compose deployment of ``repository`` serves as ``/models``."""
    return state_dir(Path(repository)) / "compose" / "models"


def build_served(repository: Path, models: Sequence[str], *,
                 model_config_name: str | None = None,
                 onnx_backend: str = "onnxruntime") -> Path:
    """Bring ``served_dir(repository)`` to ``models`` (see the module's docstring) and
    return it; entries of models no longer deployed are removed."""
    if onnx_backend not in ONNX_BACKENDS:
        raise UsageError(f"--onnx-backend '{onnx_backend}' is not one of "
                         f"{', '.join(ONNX_BACKENDS)}",
                         hint="onnxruntime (Triton's image), or python (an image whose Python "
                              "has numpy and onnxruntime, without that backend)")
    repository = Path(repository).resolve()
    served = served_dir(repository)
    served.mkdir(parents=True, exist_ok=True)
    if onnx_backend == "python":
        staged = served.with_name("models.new")
        shutil.rmtree(staged, ignore_errors=True)
        build_local_repository(repository, staged, models, model_config_name=model_config_name,
                               links_to=Path(SOURCE))
        for name in models:
            _put(served / name, staged / name)
        shutil.rmtree(staged)
    else:
        for name in models:
            target = f"{SOURCE}/{name}"
            entry = served / name
            if entry.is_symlink() and os.readlink(entry) == target:
                continue
            link = served / f".{name}.link"
            link.unlink(missing_ok=True)
            link.symlink_to(target)
            _put(entry, link)
    for entry in served.iterdir():
        if entry.name not in models:
            _remove(entry)
    return served


def _put(entry: Path, new: Path) -> None:
    """``new`` renamed to ``entry``, whatever ``entry`` was (a link is replaced in one step)."""
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    os.replace(new, entry)


def _remove(entry: Path) -> None:
    """A link or file unlinked (never followed), a folder removed."""
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink()
