"""Reading the layout of a Triton model repository (``DIR/<model>/[config.pbtxt] <version>/...``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tritonkit.errors import UsageError, shell_word

#: What ``tritonkit export`` writes in a model's folder, and what the config generator,
#: the local mirror and the container recipes read back.
ONNX_FILENAME = "model.onnx"
REPORT_FILENAME = "export-report.json"

# A model's name is its folder's, and goes into every request's URL (/v2/models/<name>/...):
# letters, digits, '_', '.' and '-' only, as the hint promises, not starting with a dot.
_MODEL_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def check_model_name(name: str, hint: str = "e.g. --name mlp") -> None:
    """A UsageError unless ``name`` can name a model folder and sit in a request's URL.

    Triton itself serves a folder named ``.x`` or ``-x``; tritonkit does not: its own
    folders in a repository are hidden ones (``.tritonkit``, export staging), which it never
    takes for models, and a leading '-' reads as a flag on every command line the name is on.
    """
    if _MODEL_NAME.fullmatch(name):
        return
    shown = repr(name)[1:-1]            # control characters escaped, never printed as they are
    shown = shown if len(shown) <= 60 else shown[:59] + "…"
    if not name:
        why = "it is empty"
    elif name[0] in ".-":
        why = (f"it starts with '{name[0]}'" + (", as tritonkit's own folders do (.tritonkit, "
                                                "export staging), which it never serves"
                                                if name[0] == "." else ", which reads as a flag"))
    elif len(name) > 128:
        why = f"it is {len(name)} characters long"
    else:
        bad = next(c for c in name if not re.fullmatch(r"[A-Za-z0-9_.-]", c))
        why = f"it holds {bad!r}"
    raise UsageError(f"model name '{shown}' is not a plain folder name: {why}",
                     hint="use ASCII letters, digits, '_', '.' and '-', up to 128, starting with a "
                          f"letter, digit or '_', {hint}")


def is_model_dir(path: Path) -> bool:
    """A model folder: not hidden, and holding a config.pbtxt or a numeric version folder."""
    if not path.is_dir() or path.name.startswith("."):
        return False
    if (path / "config.pbtxt").is_file():
        return True
    return any(child.is_dir() and child.name.isdigit() for child in path.iterdir())


def model_names(repository: Path) -> list[str]:
    """The models in ``repository``, sorted; an error if it is missing or has none."""
    repository = Path(repository)
    if not repository.exists():
        raise UsageError(f"model repository {repository} does not exist",
                         hint="pass --repository with a folder of Triton models "
                              "(tritonkit export writes one)")
    if not repository.is_dir():
        raise UsageError(f"model repository {repository} is not a folder",
                         hint="pass the folder that holds <model>/config.pbtxt")
    names = sorted(p.name for p in repository.iterdir() if is_model_dir(p))
    for name in names:      # a folder's name is a model's: in URLs, and in a shell (below)
        check_model_name(name, hint=f"rename the folder {shell_word(repository / name)}")
    if not names:
        raise UsageError(f"model repository {repository} holds no models",
                         hint="export one first: tritonkit export SPEC --name NAME "
                              f"--repository {shell_word(repository)}")
    return names


# Triton's version folders: numerically named, not starting with "0" (it ignores "0", "01").
_VERSION = re.compile(r"^[1-9][0-9]*$")


def version_folders(model_dir: Path) -> list[Path]:
    """The version folders Triton serves a model from, lowest first."""
    found = [p for p in Path(model_dir).iterdir() if p.is_dir() and _VERSION.fullmatch(p.name)]
    return sorted(found, key=lambda p: int(p.name))


def refuse_versionless(repository: Path, models: list[str]) -> None:
    """A UsageError naming the first model that has no version folder Triton would serve:
    Triton refuses such a model at its load, or at the server's start."""
    for model in models:
        model_dir = Path(repository) / model
        if version_folders(model_dir):
            continue
        ignored = sorted(p.name + "/" for p in model_dir.iterdir()
                         if p.is_dir() and p.name.isdigit())
        said = f" (Triton ignores {', '.join(ignored)}: a version is 1 or more)" if ignored else ""
        raise UsageError(f"model '{model}' has no version folder{said}: Triton serves a model "
                         f"from {model_dir}/<version>/",
                         hint=f"put its files in {model_dir}/1/ (tritonkit export writes them "
                              "there)")


def refuse_links_a_container_cannot_follow(repository: Path, models: list[str]) -> None:
    """A UsageError for the first link in a model's folder (or the folder itself) that a
    container mounting ``repository`` elsewhere cannot follow: one that leads out of the
    repository, or one spelled as an absolute path (it names this host's folders). Links
    spelled relative to where they stand, inside the repository, are served."""
    root = Path(os.path.realpath(repository))

    def check(link: Path) -> None:
        if not link.is_symlink():
            return
        target = os.readlink(link)
        outside = not Path(os.path.realpath(link)).is_relative_to(root)
        if outside or os.path.isabs(target):
            where = "outside the model repository" if outside else \
                "spelled as this host's absolute path"
            raise UsageError(f"{link} is a link to {target}, {where}: a container mounts "
                             f"{repository} elsewhere and cannot follow it",
                             hint="replace the link with a copy of what it points to"
                             + ("" if outside else ", or with a link relative to where it stands"))

    for model in models:
        top = Path(repository) / model
        check(top)
        for folder, dirs, files in os.walk(top):
            for name in dirs + files:
                check(Path(folder) / name)


def refuse_missing_gpu_configs(repository: Path, models: list[str], gpu: str) -> None:
    """A UsageError if a model has per-GPU configs but none for ``gpu``.

    Triton would then serve it with ``config.pbtxt``, made for another card (a TensorRT
    plan for another compute capability, FP16 the card may lack): ``tritonkit config``
    leaves a profile out when the model does not fit that card.
    """
    for model in models:
        configs = Path(repository) / model / "configs"
        if configs.is_dir() and any(configs.glob("*.pbtxt")) and \
                not (configs / f"{gpu}.pbtxt").is_file():
            raise UsageError(
                f"model '{model}' has no configs/{gpu}.pbtxt: Triton would serve it on the {gpu} "
                "with config.pbtxt, made for another GPU",
                hint=f"see why with: tritonkit config {shell_word(model)} --repository {shell_word(repository)} --gpu {shell_word(gpu)} "
                     "--force (a card the model does not fit is left out)")


# Triton's python backend (2.51) starts each model's stub through a shell, with the model's
# path and the stub's unquoted on its command line: a space there splits the path (the
# load then hangs), `$(...)` runs a command. Letters and digits (any script) and these
# punctuation marks are plain words to a shell.
_SHELL_PLAIN = re.compile(r"[\w./+,:=@%-]+")


def is_shell_plain(text: str) -> bool:
    """Whether a shell reads ``text`` as one plain word: nothing split, expanded or run."""
    return bool(_SHELL_PLAIN.fullmatch(text))


def refuse_shell_unsafe_path(path: Path, what: str) -> None:
    """A UsageError naming the first character of ``path`` that a shell would not take as
    part of a plain word (where tritonserver's python backend puts it on a shell's line)."""
    text = str(path)
    if is_shell_plain(text):
        return
    bad = next(c for c in text if not _SHELL_PLAIN.fullmatch(c))
    raise UsageError(f"the {what} {shell_word(path)} holds {bad!r}, which Triton's python "
                     "backend puts on a shell's command line unquoted (a space splits the "
                     "path, $( ) runs a command)",
                     hint="move or rename it: letters, digits and _ . / + , : = @ % - only")
