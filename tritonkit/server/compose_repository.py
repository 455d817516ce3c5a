"""The folder Triton serves in a compose container (``/models``): the models, and nothing else.

Not the repository itself, which holds tritonkit's state folder (``.tritonkit/``): Triton
lists every folder of its repository in its index, so that one showed up as a model
named ``.tritonkit`` (and a warm-up of every model in the index tried to load it). The
container mounts the repository read-only at ``SOURCE`` (its state folder masked by an
empty tmpfs) and serves ``DIR/.tritonkit/compose/models/``, kept by ``build_served``:

- one link per model, ``NAME -> /repository/NAME``. A link by name follows ``tritonkit
  export --force``, which renames a new model folder into place, so a reload serves the
  new export. The links point into the container; on this host they lead nowhere.
- with ``onnx_backend="python"`` (an image without Triton's onnxruntime backend, as the
  stand-in of ``docker/standin/``), each ONNX model is instead the local target's CPU
  mirror of it (``local_repository``): a snapshot served by the python-backend adapter.

A model added to the repository after the deploy is served from the next deploy, as on
the local target. The folder is updated in place, never replaced: a running container has
it mounted, and would keep serving a replaced folder's old copy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from tritonkit.errors import UsageError
from tritonkit.fileio import OwnedFolder
from tritonkit.server.local_repository import adapter_serves, build_local_repository
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
    adapted = [name for name in models if onnx_backend == "python"
               and adapter_serves(repository / name, model_config_name)]
    # Through descriptors, as all of the state folder: a link planted there is refused.
    with OwnedFolder(repository, served.parent.relative_to(repository), create=True) as parent, \
            parent.child(served.name, create=True) as folder:
        if adapted:
            staged = served.with_name("models.new")
            parent.discard(staged.name)
            build_local_repository(repository, staged, adapted,
                                   model_config_name=model_config_name)
            with parent.child(staged.name) as new:
                for name in adapted:
                    folder.rename_into(name, new, name)
            parent.discard(staged.name)
        for name in models:
            target = f"{SOURCE}/{name}"
            if name in adapted or folder.readlink(name) == target:
                continue
            folder.symlink(f".{name}.link", target)
            folder.rename_into(name, folder, f".{name}.link")
        for entry in folder.names():
            if entry not in models:
                folder.discard(entry)
    return served
