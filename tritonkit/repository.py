"""Reading the layout of a Triton model repository (``DIR/<model>/[config.pbtxt] <version>/...``)."""

from __future__ import annotations

import re
from pathlib import Path

from tritonkit.errors import UsageError

#: What ``tritonkit export`` writes in a model's folder, and what the config generator,
#: the local mirror and the container recipes read back.
ONNX_FILENAME = "model.onnx"
REPORT_FILENAME = "export-report.json"

# A model's name is its folder's, and goes into every request's URL (/v2/models/<name>/...):
# letters, digits, '_', '.' and '-' only, as the hint promises, not starting with a dot.
_MODEL_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def check_model_name(name: str) -> None:
    """A UsageError unless ``name`` can name a model folder and sit in a request's URL."""
    if not _MODEL_NAME.fullmatch(name):
        raise UsageError(f"model name '{name}' is not a plain folder name",
                         hint="use letters, digits, '_', '.' or '-' (up to 128), e.g. --name mlp")


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
    if not names:
        raise UsageError(f"model repository {repository} holds no models",
                         hint="export one first: tritonkit export SPEC --name NAME "
                              f"--repository {repository}")
    return names


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
                hint=f"see why with: tritonkit config {model} --repository {repository} --gpu {gpu} "
                     "--force (a card the model does not fit is left out)")
