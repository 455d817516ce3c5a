"""The request a load test sends, built from the model's metadata and config (or a data file)."""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tritonkit.client import Endpoint, example_input, triton_message
from tritonkit.errors import ServerError, UsageError


@dataclass(frozen=True)
class RequestTemplate:
    """One inference request, fixed for the whole run (picklable: it travels to the workers)."""

    model: str
    inputs: tuple[tuple[str, str, np.ndarray], ...]   # (name, Triton datatype, data)
    outputs: tuple[str, ...]
    batch_size: int

    def describe(self) -> str:
        return ", ".join(f"{name} {dtype}{list(data.shape)}" for name, dtype, data in self.inputs)


def request_template(endpoint: Endpoint, model: str, batch_size: int = 1,
                     input_data: Path | None = None, seed: int = 0) -> RequestTemplate:
    """The request for ``model``: shapes and datatypes from the server, data random or from a file."""
    client = endpoint.http()
    try:
        metadata = client.get_model_metadata(model)
        config = client.get_model_config(model)
    except Exception as exc:  # tritonclient raises transport and server errors alike
        message = triton_message(exc)
        if "unknown model" in message.lower() or "not found" in message.lower():
            raise UsageError(f"model '{model}' is not loaded on the server ({message})",
                             hint="check the name, or load it: tritonkit warmup --model NAME") from None
        raise ServerError(f"could not read model '{model}' from {endpoint.http_url} ({message})",
                          hint="is the server up? tritonkit deploy --repository DIR") from None
    finally:
        client.close()      # an open connection holds a stopping Triton for its exit timeout
    max_batch = int(config.get("max_batch_size", 0))
    if batch_size < 1:
        raise UsageError("--batch-size must be >= 1")
    if max_batch == 0 and batch_size > 1:
        raise UsageError(f"model '{model}' does not batch (max_batch_size 0)", hint="use --batch-size 1")
    if max_batch and batch_size > max_batch:
        raise UsageError(f"--batch-size {batch_size} exceeds model '{model}' max_batch_size {max_batch}",
                         hint=f"use --batch-size {max_batch} or less")
    given = _read_input_data(input_data) if input_data else {}
    rng = np.random.default_rng(seed)
    inputs = []
    for spec in metadata["inputs"]:
        name, datatype = spec["name"], spec["datatype"]
        dims = [int(d) for d in spec["shape"]]
        if max_batch:
            dims = dims[1:]
        shape = ([batch_size] if max_batch else []) + [d if d > 0 else 1 for d in dims]
        if name in given:
            data = _fit(given.pop(name), name, datatype, dims, bool(max_batch), batch_size)
        else:
            data = example_input(datatype, shape, rng)
        inputs.append((name, datatype, data))
    if given:
        raise UsageError(f"--input-data names inputs the model does not have: {', '.join(sorted(given))}",
                         hint="its inputs are " + ", ".join(s["name"] for s in metadata["inputs"]))
    outputs = tuple(o["name"] for o in metadata.get("outputs", []))
    return RequestTemplate(model=model, inputs=tuple(inputs), outputs=outputs, batch_size=batch_size)


def _read_input_data(path: Path) -> dict[str, np.ndarray]:
    """Real input data: ``.npz`` (one array per input) or ``.json`` ``{"NAME": [[...]], ...}``.

    Whatever is wrong with the file's content is the user's to fix: it is said in one line
    that names the file or the input, never raised as our own error.
    """
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"input data file {path} is a folder",
                         hint="give the .npz or .json file inside it")
    if not path.is_file():
        raise UsageError(f"input data file {path} does not exist")
    if path.suffix == ".npz":
        return _read_npz(path)
    if path.suffix == ".json":
        return _read_json(path)
    raise UsageError(f"input data file {path} must be .npz or .json")


_NPZ_HINT = "write it with numpy.savez(FILE, NAME=array, ...): numbers or strings, no Python objects"


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        archive = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise UsageError(f"input data file {path} is not a readable .npz archive ({exc})",
                         hint=_NPZ_HINT) from None
    if not isinstance(archive, np.lib.npyio.NpzFile):      # a lone .npy array named .npz
        raise UsageError(f"input data file {path} holds one unnamed array, not an .npz archive",
                         hint=_NPZ_HINT)
    with archive:
        arrays = {}
        for name in archive.files:
            try:
                arrays[name] = archive[name]
            except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
                raise UsageError(f"input data for {name} in {path} cannot be read ({exc})",
                                 hint=_NPZ_HINT) from None
    return arrays


def _read_json(path: Path) -> dict[str, np.ndarray]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise UsageError(f"input data file {path} is not UTF-8 text (byte {exc.start})",
                         hint="save it as UTF-8 JSON") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"input data file {path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"input data file {path} must hold an object: input name -> array")
    arrays = {}
    for name, value in data.items():
        try:
            arrays[name] = np.asarray(value)
        except ValueError:
            raise UsageError(f"input data for {name} in {path} is ragged: its rows are not all "
                             "the same length",
                             hint=f"give {name} as one sample or a batch of equal-length rows") from None
    return arrays


def _fit(array: np.ndarray, name: str, datatype: str, dims: list[int], batches: bool,
         batch_size: int) -> np.ndarray:
    """The given data as the request's tensor: ``dims`` are the model's per-sample dims
    (-1: any size); a lone sample is repeated to the batch. Data the model would refuse is
    a usage error now, not a failed first request (a run error) later."""
    from tritonclient.utils import triton_to_np_dtype

    if datatype == "BYTES":
        array = np.asarray(array, dtype=object)
    else:
        try:
            array = np.asarray(array).astype(triton_to_np_dtype(datatype))
        except (ValueError, TypeError) as exc:
            raise UsageError(f"input data for {name} cannot be read as {datatype} ({exc})",
                             hint=f"the model takes {datatype} for {name}: give numbers") from None
    wanted = ([batch_size] if batches else []) + dims
    given = list(array.shape)
    if batches and array.ndim == len(dims):       # one sample: repeat it to the batch
        array = np.repeat(array[None, ...], batch_size, axis=0)
    if batches and array.ndim == len(wanted) and array.shape[0] != batch_size:
        raise UsageError(f"input data for {name} has batch {array.shape[0]}, not --batch-size {batch_size}")
    fits = array.ndim == len(wanted) and all(w < 0 or w == got for w, got in zip(wanted, array.shape))
    if not fits:
        spelled = "x".join("N" if d < 0 else str(d) for d in dims) or "a scalar"
        raise UsageError(f"input data for {name} has shape {given}; the model takes {spelled}"
                         + (f" per sample (one sample, or {batch_size} of them: --batch-size)"
                            if batches else ""),
                         hint=f"give {name} a shape the model takes (N: any size)")
    return array
