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
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Sequence

from tritonclient.grpc import model_config_pb2 as mc

from tritonkit.errors import UsageError
from tritonkit.extras import LOCAL_MODULES, require
from tritonkit.fileio import atomic_write
from tritonkit.model_config import config_to_text, read_config
from tritonkit.repository import ONNX_FILENAME

ADAPTER = Path(__file__).with_name("onnx_adapter.py")
ONNX_PLATFORMS = {"onnxruntime_onnx"}
ONNX_BACKENDS = {"onnxruntime"}


def model_config_path(model_dir: Path, model_config_name: str | None) -> Path:
    """Triton's rule: ``configs/<name>.pbtxt`` when named and present, else ``config.pbtxt``."""
    if model_config_name:
        custom = model_dir / "configs" / f"{model_config_name}.pbtxt"
        if custom.is_file():
            return custom
    return model_dir / "config.pbtxt"


def build_local_repository(repository: Path, dest: Path, models: Sequence[str], *,
                           model_config_name: str | None = None) -> Path:
    """Mirror ``models`` of ``repository`` into ``dest`` for the CPU-only embedded server."""
    repository = Path(repository).resolve()
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in models:
        source = repository / name
        config_path = model_config_path(source, model_config_name)
        if not config_path.is_file():
            # No config: Triton auto-completes python-backend models from model.py.
            _link_tree(source, dest / name)
            continue
        config = read_config(config_path)
        if _adapter_serves(config):
            _mirror_onnx_model(source, dest / name, config)
        elif config.backend == "python" or config.platform == "ensemble":
            _link_tree(source, dest / name)
            if config_path.parent != source:      # configs/<gpu>.pbtxt, as config.pbtxt
                (dest / name / "config.pbtxt").unlink(missing_ok=True)
                (dest / name / "config.pbtxt").symlink_to(config_path.resolve())
        else:
            kind = config.platform or config.backend or "unknown"
            raise UsageError(f"model '{name}' uses {kind}, which the embedded local Triton "
                             "cannot serve (it has only the python backend)",
                             hint="export it to ONNX (tritonkit export), or deploy with "
                                  "--target compose on a GPU host")
    return dest


def _link_tree(source: Path, target: Path) -> None:
    """``source``'s folders made anew under ``target``, each file a link to its original.

    Not one link to the whole folder: the python backend's stub (an isolated interpreter,
    deaf to PYTHONDONTWRITEBYTECODE) writes ``__pycache__`` beside the model.py it imports,
    which must land in the mirror, not in the production repository."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"),
                    copy_function=lambda src, dst: os.symlink(os.path.abspath(src), dst),
                    ignore_dangling_symlinks=True)


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


def local_config(config: mc.ModelConfig) -> mc.ModelConfig:
    """The production config, made servable by the python-backend adapter on the CPU."""
    local = mc.ModelConfig()
    local.CopyFrom(config)
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


def _mirror_onnx_model(source: Path, target: Path, config: mc.ModelConfig) -> None:
    versions = [p for p in source.iterdir() if p.is_dir() and p.name.isdigit()]
    servable = [v for v in versions if (v / ONNX_FILENAME).is_file()]
    if not servable:
        raise UsageError(f"model '{source.name}' has no {ONNX_FILENAME} to serve locally "
                         f"(looked in {', '.join(str(v) for v in versions) or source})",
                         hint="a TensorRT-only model needs a GPU host: deploy --target compose")
    # The adapter runs ONNX Runtime in the server's python backend, on this interpreter's
    # packages: said now, not as a load failure inside Triton.
    require("local", LOCAL_MODULES, needed_by=f"serving ONNX model '{source.name}' locally")
    target.mkdir(parents=True)
    # What else the model's folder holds is read beside the config: an output's label
    # file (label_filename) is opened from there when the model loads.
    for item in source.iterdir():
        if item.name not in ("config.pbtxt", "configs") and item not in versions:
            _snapshot(item, target / item.name)
    for version in servable:
        out = target / version.name
        out.mkdir()
        for item in version.iterdir():        # the model and any external-data files
            _snapshot(item, out / item.name)
        shutil.copyfile(ADAPTER, out / "model.py")
    atomic_write(target / "config.pbtxt", config_to_text(local_config(config)))


def _snapshot(source: Path, target: Path) -> None:
    """``source`` (a file or a folder of them) as it is now: hard links, which cost no disk
    and keep the old file when a re-export replaces it; a copy where the mirror is on
    another filesystem (or the filesystem has no hard links)."""
    if source.is_dir():
        shutil.copytree(source, target, copy_function=_link_or_copy,
                        ignore_dangling_symlinks=True)
    elif source.exists():                     # a dangling link the model never reads
        _link_or_copy(source, target)


def _link_or_copy(source: str | Path, target: str | Path) -> None:
    try:
        os.link(os.path.realpath(source), target)
    except OSError:
        shutil.copy2(source, target)
