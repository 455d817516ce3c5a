"""The CPU-only mirror of a model repository that the embedded local Triton serves.

The embedded server has only the python backend. ``build_local_repository`` mirrors
the production repository into ``DIR/.tritonkit/local/``: ONNX models (and TensorRT
models that still carry their ONNX source) are served by ``onnx_adapter.py`` running
ONNX Runtime on the CPU, with the production config's inputs, outputs, batching and
warm-up and one KIND_CPU instance; python-backend and ensemble models are linked file by
file as they are at the deploy (a GPU's ``configs/<gpu>.pbtxt`` as their config.pbtxt).
The production repository is never changed.

An ONNX model is a snapshot of the deploy: its files are hard links (copies across
filesystems), not links by path. ``tritonkit export --force`` renames a new model folder
into place; a link by path would follow it, and a reload would pair the new graph with the
config written at the deploy. The server serves the model as deployed until the next deploy,
which rebuilds the mirror from scratch. A snapshot against replacement, not against writes:
a file overwritten in place (``cp new.onnx repo/m/1/model.onnx``) is the same inode, and
the hard link sees the new bytes as a link by path would.

The mirror takes only what the repository holds: regular files and folders, and links
that lead to one inside the repository (taken as what they lead to). A link out of the
repository (a model file linked to ``/etc/passwd``, a model folder linked to another
tree), a FIFO, a device or a socket is refused, naming it. A deploy that fails removes the
mirror again (``discard_mirror``), so no link of it outlives the deploy.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Sequence

from tritonclient.grpc import model_config_pb2 as mc

from tritonkit.errors import UsageError, shell_word
from tritonkit.extras import LOCAL_MODULES, require
from tritonkit.fileio import OwnedFolder, file_kind
from tritonkit.model_config import config_to_text, read_config
from tritonkit.repository import ONNX_FILENAME, is_shell_plain
from tritonkit.server.state import STATE_DIRNAME

ADAPTER = Path(__file__).with_name("onnx_adapter.py")
ONNX_PLATFORMS = {"onnxruntime_onnx"}
ONNX_BACKENDS = {"onnxruntime"}


def model_config_path(model_dir: Path, model_config_name: str | None) -> Path:
    """Triton's rule: ``configs/<name>.pbtxt`` when named and present, else ``config.pbtxt``."""
    if model_config_name:
        custom = model_dir / "configs" / f"{model_config_name}.pbtxt"
        if custom.exists():
            return custom
    return model_dir / "config.pbtxt"


def build_local_repository(repository: Path, dest: Path, models: Sequence[str], *,
                           model_config_name: str | None = None) -> Path:
    """Mirror ``models`` of ``repository`` into ``dest`` (a folder inside ``repository``,
    ``DIR/.tritonkit/local``) for the CPU-only embedded server.

    The mirror takes regular files and folders from inside the repository: a link is
    resolved and taken only if it leads to one inside it; one that leads outside, or a
    FIFO, device or socket, is refused (a UsageError naming it and where it points). The
    mirror is written through descriptors: nothing planted in ``.tritonkit/`` is followed.
    """
    repository = Path(repository).resolve()
    dest = Path(dest)
    parent, name = dest.parent.relative_to(repository), dest.name
    with OwnedFolder(repository, parent, create=True) as holder:
        holder.remove_tree(name)
        with holder.child(name, create=True) as mirror:
            for model in models:
                _mirror_model(repository, model, mirror, model_config_name)
    return dest


def _mirror_model(repository: Path, name: str, mirror: OwnedFolder,
                  model_config_name: str | None) -> None:
    source, _ = _taken(repository / name, repository)
    config_path = model_config_path(source, model_config_name)
    config_found = _taken(config_path, repository, missing_ok=True)
    if config_found is None:
        # No config: Triton auto-completes python-backend models from model.py.
        with mirror.child(name, create=True) as target:
            _link_tree(source, target, repository)
        return
    config = read_config(config_found[0])
    if _adapter_serves(config):
        with mirror.child(name, create=True) as target:
            _mirror_onnx_model(source, target, config, repository)
    elif config.backend == "python" or config.platform == "ensemble":
        if config.backend == "python":
            refuse_python_shell_fields(name, config, source, config_found[0])
        with mirror.child(name, create=True) as target:
            _link_tree(source, target, repository)
            if config_path.parent != source:      # configs/<gpu>.pbtxt, as config.pbtxt
                target.symlink("config.pbtxt", config_found[0])
    else:
        kind = config.platform or config.backend or "unknown"
        raise UsageError(f"model '{name}' uses {kind}, which the embedded local Triton "
                         "cannot serve (it has only the python backend)",
                         hint="export it to ONNX (tritonkit export), or deploy with "
                              "--target compose on a GPU host")


def _taken(path: Path, repository: Path, *,
           missing_ok: bool = False) -> tuple[Path, os.stat_result] | None:
    """What the mirror takes for ``path``: its real path (links resolved) and status, a
    regular file or a folder inside ``repository``. None for something missing (a link
    that leads nowhere, a config there is none of) if ``missing_ok``. A UsageError for a
    link that leads out of the repository, and for anything that is neither a file nor a
    folder (a FIFO, a device, a socket)."""
    real = Path(os.path.realpath(path))
    if not real.is_relative_to(repository):
        raise UsageError(f"{path} is a link to {real}, outside the model repository "
                         f"{repository}: the local mirror takes only what the repository holds",
                         hint="replace the link with a copy of what it points to")
    if real.is_relative_to(repository / STATE_DIRNAME):
        raise UsageError(f"{path} is a link to {real}, in tritonkit's own state folder",
                         hint="replace the link with the model's own file")
    try:
        info = os.stat(real)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise UsageError(f"{path} does not exist", hint="check the model's folder") from None
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        raise UsageError(f"{path} is a {file_kind(info.st_mode)}, not a file or folder the "
                         "local mirror can take", hint=f"remove it from the repository: rm {path}")
    return real, info


def _entries(folder: Path, repository: Path):
    """The files and folders of ``folder`` the mirror takes: (name, real path, status) of
    each, links resolved as ``_taken`` rules; a link that leads nowhere is left out."""
    for item in sorted(folder.iterdir()):
        if item.name == "__pycache__":
            continue
        found = _taken(item, repository, missing_ok=True)
        if found is not None:
            yield item.name, *found


def _link_tree(source: Path, target: OwnedFolder, repository: Path) -> None:
    """``source``'s folders made anew in ``target``, each file a link to its original (its
    real path, inside the repository).

    Not one link to the whole folder: the python backend's stub (an isolated interpreter,
    deaf to PYTHONDONTWRITEBYTECODE) writes ``__pycache__`` beside the model.py it imports,
    which must land in the mirror, not in the production repository."""
    for name, real, info in _entries(source, repository):
        if stat.S_ISDIR(info.st_mode):
            with target.child(name, create=True) as sub:
                _link_tree(real, sub, repository)
        else:
            target.symlink(name, real)


def adapter_serves(model_dir: Path, model_config_name: str | None = None) -> bool:
    """Whether the mirror serves the model through the ONNX Runtime adapter (an ONNX model,
    or a TensorRT one that carries its ONNX source), not from its own files."""
    config_path = model_config_path(model_dir, model_config_name)
    return config_path.is_file() and _adapter_serves(read_config(config_path))


def _adapter_serves(config: mc.ModelConfig) -> bool:
    return is_onnx(config) or config.platform == "tensorrt_plan"


def is_onnx(config: mc.ModelConfig) -> bool:
    """Whether Triton's ONNX Runtime backend serves the model ``config`` describes."""
    return config.platform in ONNX_PLATFORMS or config.backend in ONNX_BACKENDS


# Triton's python backend reads a stub's model file name and EXECUTION_ENV_PATH onto a
# shell's command line unquoted (2.51), and runs the environment's bin/activate.
ENV_PARAMETER = "EXECUTION_ENV_PATH"
_MODEL_DIRECTORY = "$$TRITON_MODEL_DIRECTORY"


def refuse_python_shell_fields(name: str, config: mc.ModelConfig, source: Path,
                               config_path: Path) -> None:
    """A python model's fields that reach the stub's shell must be plain words, and the
    model must hold its code (a folder of data alone must not run anything): a UsageError
    naming the field and the config."""
    filename = config.default_model_filename or "model.py"
    if not (filename.endswith(".py") and "/" not in filename and is_shell_plain(filename)):
        raise UsageError(f"{config_path}: default_model_filename {shell_word(filename)} of "
                         f"python model '{name}' is not a plain .py file name (Triton's python "
                         "backend puts it on a shell's command line)",
                         hint="name the model file with letters, digits, '_', '.' and '-'")
    if not any((version / filename).is_file() for version in source.iterdir()
               if version.name.isdigit()):
        raise UsageError(f"python model '{name}' has no {filename} in any version folder of "
                         f"{source}: nothing to serve", hint=f"put its code in {source}/1/{filename}")
    if ENV_PARAMETER in config.parameters:
        value = config.parameters[ENV_PARAMETER].string_value
        if not is_shell_plain(value.removeprefix(_MODEL_DIRECTORY)):
            raise UsageError(f"{config_path}: {ENV_PARAMETER} {shell_word(value)} of '{name}' "
                             "is not a plain path (Triton's python backend puts it on a "
                             "shell's command line)",
                             hint="use letters, digits and _ . / + , : = @ % - (after "
                                  f"{_MODEL_DIRECTORY}, if it starts so)")


# What the adapter reads of the production config's parameters (onnx_adapter.py). Any
# other would reach the python backend that runs it, EXECUTION_ENV_PATH among them: an
# ONNX model is data, and its config must not make the server run anything.
ADAPTER_PARAMETERS = ("intra_op_thread_count",)


def local_config(config: mc.ModelConfig) -> mc.ModelConfig:
    """The production config, made servable by the python-backend adapter on the CPU."""
    local = mc.ModelConfig()
    local.CopyFrom(config)
    local.ClearField("parameters")
    for key in ADAPTER_PARAMETERS:
        if key in config.parameters:
            local.parameters[key].CopyFrom(config.parameters[key])
    local.platform = ""
    local.backend = "python"
    local.default_model_filename = ""
    local.cc_model_filenames.clear()
    local.ClearField("optimization")          # GPU accelerators mean nothing here
    # One CPU instance: ONNX Runtime already spreads a run over every core, and a second
    # instance process only takes turns with the first, each finding its caches cold.
    # Measured here (MLP, tuned a10 config): 2 instances served a lone client at 0.78x the
    # default config's throughput, 1 instance at parity, and as fast under load (c=16).
    # GPU instance counts keep their meaning in the production config.
    del local.instance_group[:]
    local.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
    local.parameters["onnx_model"].string_value = ONNX_FILENAME
    return local


def _mirror_onnx_model(source: Path, target: OwnedFolder, config: mc.ModelConfig,
                       repository: Path) -> None:
    entries = list(_entries(source, repository))
    versions = [(name, real) for name, real, info in entries
                if stat.S_ISDIR(info.st_mode) and name.isdigit()]
    servable = [(name, real) for name, real in versions
                if _taken(real / ONNX_FILENAME, repository, missing_ok=True) is not None]
    if not servable:
        plans = any((real / "model.plan").is_file() for _, real in versions)
        raise UsageError(f"model '{source.name}' has no {ONNX_FILENAME} to serve locally "
                         f"(looked in {', '.join(str(source / v) for v, _ in versions) or source})",
                         hint="a TensorRT-only model needs a GPU host: deploy --target compose"
                         if plans else f"export it again: tritonkit export SPEC --name "
                                       f"{shell_word(source.name)} --force")
    # The adapter runs ONNX Runtime in the server's python backend, on this interpreter's
    # packages: said now, not as a load failure inside Triton.
    require("local", LOCAL_MODULES, needed_by=f"serving ONNX model '{source.name}' locally")
    # What else the model's folder holds is read beside the config: an output's label
    # file (label_filename) is opened from there when the model loads.
    for name, real, info in entries:
        if name not in ("config.pbtxt", "configs") and not (
                stat.S_ISDIR(info.st_mode) and name.isdigit()):
            _snapshot(name, real, info, target, repository)
    for version, real in servable:
        with target.child(version, create=True) as out:
            for name, item, info in _entries(real, repository):  # the model, external data
                _snapshot(name, item, info, out, repository)
            out.write("model.py", ADAPTER.read_bytes())
    target.write("config.pbtxt", config_to_text(local_config(config)))


def _snapshot(name: str, source: Path, info: os.stat_result, target: OwnedFolder,
              repository: Path) -> None:
    """``source`` (a file or a folder of them) as it is now, as ``name`` in ``target``: hard
    links, which cost no disk and keep the old file when a re-export replaces it; a copy
    where the mirror is on another filesystem (or the filesystem has no hard links)."""
    if stat.S_ISDIR(info.st_mode):
        with target.child(name, create=True) as sub:
            for child, real, child_info in _entries(source, repository):
                _snapshot(child, real, child_info, sub, repository)
    else:
        target.link_file(name, source, info)
