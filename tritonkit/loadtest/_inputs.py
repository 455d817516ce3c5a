"""The request a load test sends, built from the model's metadata and config (or a data file)."""

from __future__ import annotations

import io
import json
import re
import warnings
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tritonkit.client import Endpoint, example_input, triton_message
from tritonkit.errors import NotTriton, ServerError, UsageError, shell_word
from tritonkit.fileio import check_regular, read_user_file
from tritonkit.loadtest._deployment import server_hint, unknown_model
from tritonkit.loadtest._sequences import Sequencing, sequencing


@dataclass(frozen=True)
class Flags:
    """The flags of the command that runs a load test, as its errors' hints name them:
    loadtest's by default. Another command (tune) gives its own: a hint never names a flag
    the command it came from does not have."""

    request: tuple[str, ...] = ("--shape", "--input-data", "--batch-size")   # what is sent
    load: str = "--concurrency (or --max-in-flight)"                        # connections
    grpc: str = "pass --grpc-url HOST:PORT with --url"                      # the gRPC address

    @property
    def _sizing(self) -> list[str]:
        """Those of them that size a dynamic dimension."""
        return [f for f in self.request if f in ("--shape", "--input-data")]

    def sizes(self) -> str:
        """The flags that size a dynamic dimension, said as not giving one."""
        given = self._sizing
        return f"neither {' nor '.join(given)} gives" if len(given) > 1 else f"{given[0]} does not give"

    def inputs_check(self) -> str:
        """What to check of a request the model refused."""
        return (f"check {' and '.join(self._sizing)} (inputs that share a dynamic axis take the "
                "same size)" + (" and --batch-size" if "--batch-size" in self.request else ""))


@dataclass(frozen=True)
class RequestTemplate:
    """One inference request, fixed for the whole run (picklable: it travels to the workers)."""

    model: str
    inputs: tuple[tuple[str, str, np.ndarray], ...]   # (name, Triton datatype, data)
    outputs: tuple[str, ...]
    batch_size: int
    sequencing: Sequencing | None = None    # a stateful model's (sequence_batching); None: stateless
    # The version the requests reach (they name none: Triton serves the highest READY one).
    model_version: str | None = None
    # Sizes of dynamic dimensions the model's model_warmup never sent (see ``unwarmed_sizes``).
    unwarmed: tuple[UnwarmedSize, ...] = ()
    # What the model's model_warmup sends at its dynamic dimensions (a tritonkit export's:
    # the sizes it verified): the --shape flags of the largest, and the other sizes, short
    # ("6, 12"); None: no dynamic input, or no warm-up for them.
    warmed: tuple[str, str] | None = None
    flags: Flags = Flags()

    def describe(self) -> str:
        return ", ".join(f"{name} {dtype}{list(data.shape)}" for name, dtype, data in self.inputs)

    def refusal_hint(self) -> str:
        """What to send instead, for a request the model refused: the sizes it was
        exported and warmed for where its config says, else the flags to check."""
        check = self.flags.inputs_check()
        if self.warmed is None:
            return f"send what the model takes: {check}"
        spelled, others = self.warmed
        return (f"its model_warmup warms it at {spelled}" + (f", also at {others}" if others else "")
                + f" (a tritonkit export's: the sizes it verified); {check}")


@dataclass(frozen=True)
class UnwarmedSize:
    """A dynamic dimension of an input sent at a size none of the model's ``model_warmup``
    entries sends: the first requests of that size are cold (a TensorRT accelerator, ONNX
    Runtime's included, builds an engine for it mid-traffic)."""

    input: str
    # the axis of the tensor sent, the batch axis counted (dim 0) when the model batches: a
    # --shape's dims leave the batch axis out, so "dim 0" of them read as the batch axis
    axis: int
    size: int
    warmed: tuple[int, ...]         # the sizes model_warmup sends at that axis
    # the shape of the tensor sent (the batch axis first when the model batches)
    shape: tuple[int, ...] = field(default=(), compare=False)

    def as_dict(self) -> dict:
        return {"input": self.input, "axis": self.axis, "size": self.size, "warmed": list(self.warmed),
                "shape": list(self.shape)}


def unwarmed_warning(model: str, unwarmed: Sequence[UnwarmedSize]) -> str:
    """One line for all of ``unwarmed``: what was never warmed and what to do about it. A
    dim is counted in the tensor sent, whose shape is said with it (the batch axis is dim 0)."""
    said = "; ".join(f"input {u.input}, sent as {list(u.shape)}: dim {u.axis} at {u.size} (warmed: "
                     f"{', '.join(map(str, u.warmed))})" for u in unwarmed)
    return (f"model '{model}' was never warmed at the size sent: {said}; its first requests at it "
            "are cold. Export it with an example at the serving size (so it is verified and "
            "warmed), or add model_warmup entries at that size")


#: ``--shape`` values: (input name, its dims without the batch axis), one pair per input.
Shapes = tuple[tuple[str, tuple[int, ...]], ...]


def parse_shapes(texts: Iterable[str]) -> Shapes:
    """``--shape NAME:D1,D2,...`` (repeatable), as perf_analyzer's: an input's dims without
    the batch axis. The name ends at the last colon (a TensorFlow name holds one: ``x:0``)."""
    shapes: dict[str, tuple[int, ...]] = {}
    typed: dict[str, str] = {}
    for text in texts:
        name, colon, spelled = text.rpartition(":")
        try:
            dims = tuple(int(d) for d in spelled.split(",")) if spelled.strip() else ()
        except ValueError:
            dims = None
        if not colon or not name or dims is None:
            raise UsageError(f"--shape {text} is not NAME:D1,D2,...",
                             hint="give an input's dims without the batch axis, e.g. "
                                  "--shape input_ids:128")
        if name in shapes:
            raise UsageError(f"--shape gives input {name} twice", hint="give each input one --shape")
        shapes[name], typed[name] = dims, text
    return check_shapes(tuple(shapes.items()), typed)


def check_shapes(shapes: Shapes, typed: Mapping[str, str] | None = None) -> Shapes:
    """``shapes`` as they are if every dim is a size (>= 1), else a UsageError naming the
    input, with the --shape value as ``typed`` holds it (by input), else as its numbers."""
    for name, dims in shapes:
        if any(d < 1 for d in dims):
            spelled = (typed or {}).get(name) or f"{name}:{','.join(map(str, dims))}"
            raise UsageError(f"--shape {spelled}: every dim of input {name} must "
                             "be a size >= 1",
                             hint=f"give each dim of {name} the size its requests should have")
    return shapes


def request_template(endpoint: Endpoint, model: str, batch_size: int = 1,
                     input_data: Path | None = None, seed: int = 0,
                     shapes: Mapping[str, Sequence[int]] | None = None,
                     repository: Path | None = None, flags: Flags = Flags()) -> RequestTemplate:
    """The request for ``model``: shapes and datatypes from the server, data random or from a file.

    A dynamic dimension (-1, besides the batch axis) takes its size from ``shapes`` (an
    input's dims without the batch axis, as ``--shape``) or from the input's data; one
    that neither gives is refused, as perf_analyzer does: sending it at size 1 would judge
    an encoder's SLA at sequence length 1. ``repository``: the deployment's folder the
    server was found through (None: ``--url``), which errors name in what to run; ``flags``:
    the running command's, which its hints name.
    """
    # Metadata and config: milliseconds from a Triton; tritonclient's 60 s is a minute of a
    # silent or trickling peer before the run can say so
    client = endpoint.http(connection_timeout=5.0, network_timeout=30.0)
    try:
        client.get_server_metadata()        # Triton 2, or NotTriton
        metadata = client.get_model_metadata(model)
        config = client.get_model_config(model)
    except NotTriton:
        raise
    except Exception as exc:  # tritonclient raises transport and server errors alike
        message = triton_message(exc)
        if "unknown model" in message.lower() or "not found" in message.lower():
            raise unknown_model(client, endpoint, model, message, repository) from None
        raise ServerError(f"could not read model '{model}' from {endpoint.http_url} ({message})",
                          hint=server_hint(endpoint, repository)) from None
    finally:
        client.close()      # an open connection holds a stopping Triton for its exit timeout
    max_batch = int(config.get("max_batch_size", 0))
    if batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1 (got {batch_size})", hint="e.g. --batch-size 1")
    stateful = sequencing(config)
    if stateful and batch_size > 1:
        raise UsageError(f"model '{model}' is stateful (sequence_batching): Triton's sequence batcher "
                         f"takes requests of batch 1 only, not --batch-size {batch_size}",
                         hint="drop --batch-size: the batcher batches concurrent sequences "
                              "(--concurrency, --num-of-sequences)")
    if max_batch == 0 and batch_size > 1:
        raise UsageError(f"model '{model}' does not batch (max_batch_size 0)", hint="use --batch-size 1")
    if max_batch and batch_size > max_batch:
        raise UsageError(f"--batch-size {batch_size} exceeds model '{model}' max_batch_size {max_batch}",
                         hint=f"use --batch-size {max_batch} or less")
    given = _read_input_data(input_data) if input_data else {}
    sized = {name: [int(d) for d in dims] for name, dims in (shapes or {}).items()}
    their_inputs = "its inputs are " + ", ".join(s["name"] for s in metadata["inputs"])
    rng = np.random.default_rng(seed)
    inputs, unsized = [], {}
    for spec in metadata["inputs"]:
        name, datatype = spec["name"], spec["datatype"]
        dims = [int(d) for d in spec["shape"]]
        if max_batch:
            dims = dims[1:]
        if name in sized:
            dims = _sized(name, dims, sized.pop(name))
        elif -1 in dims and name not in given:
            unsized[name] = dims
            continue
        if name in given:
            data = _fit(_unflatten(given.pop(name), name, dims), name, datatype, dims, bool(max_batch),
                        batch_size)
        else:
            data = example_input(datatype, ([batch_size] if max_batch else []) + dims, rng,
                                 name=f"input {name}")
        inputs.append((name, datatype, data))
    if sized:
        raise UsageError(f"--shape names inputs the model does not have: {', '.join(sorted(sized))}",
                         hint=their_inputs)
    if given:
        raise UsageError(f"--input-data names inputs the model does not have: {', '.join(sorted(given))}",
                         hint=their_inputs)
    if unsized:
        raise UsageError(f"model '{model}' has inputs of dynamic size that {flags.sizes()}: "
                         + ", ".join(f"{name} {dims}" for name, dims in unsized.items())
                         + " without the batch axis",
                         hint=_shape_hint(unsized, config.get("model_warmup", [])))
    outputs = tuple(o["name"] for o in metadata.get("outputs", []))
    dynamic = {s["name"]: [int(d) for d in s["shape"]][1 if max_batch else 0:] for s in metadata["inputs"]}
    sent = {name: list(data.shape)[1 if max_batch else 0:] for name, _, data in inputs}
    return RequestTemplate(model=model, inputs=tuple(inputs), outputs=outputs, batch_size=batch_size,
                           sequencing=stateful, model_version=_served_version(metadata),
                           unwarmed=unwarmed_sizes(dynamic, sent, config.get("model_warmup", []),
                                                   batch_size if max_batch else None),
                           warmed=_warmed_flags({name: dims for name, dims in dynamic.items() if -1 in dims},
                                                config.get("model_warmup", [])),
                           flags=flags)


def unwarmed_sizes(dims: Mapping[str, Sequence[int]], sent: Mapping[str, Sequence[int]],
                   warmup: list[dict], batch_size: int | None = None) -> tuple[UnwarmedSize, ...]:
    """Each dynamic dimension (-1 in ``dims``, the model's, without the batch axis) that
    ``sent`` (the request's dims, without it too) gives a size no ``model_warmup`` entry (the
    config as the server reports it) sends for that input. A model with no model_warmup, or
    none for an input, says nothing: there is nothing warmed to compare with. Each is named
    by its axis in the tensor sent: with ``batch_size`` (a model that batches) the batch
    axis is its dim 0; None, the model does not batch and ``sent`` is the whole tensor."""
    lead = () if batch_size is None else (batch_size,)
    unwarmed = []
    for name, model_dims in dims.items():
        size = sent.get(name)
        if size is None or len(size) != len(model_dims):
            continue
        warmed = [[int(d) for d in entry.get("inputs", {}).get(name, {}).get("dims", [])]
                  for entry in warmup]
        warmed = [w for w in warmed if len(w) == len(model_dims)]
        for axis, wanted in enumerate(model_dims):
            sizes = tuple(sorted({w[axis] for w in warmed}))
            if wanted == -1 and sizes and size[axis] not in sizes:
                unwarmed.append(UnwarmedSize(name, axis + len(lead), int(size[axis]), sizes,
                                             (*lead, *map(int, size))))
    return tuple(unwarmed)


# ONNX Runtime's errors as its Python API raises them, in the message of a python-backend
# model that runs it (the local target's ONNX adapter): Triton answers HTTP 500 / INTERNAL.
_ORT_ERROR = re.compile(r"\[ONNXRuntimeError\] : (\d+) : (\w+) : (.*)")
_ORT_INVALID_ARGUMENT = 2
# Shape errors ONNX Runtime's kernels raise as a plain FAIL (their ORT_ENFORCE checks): the
# inputs' sizes do not fit the graph (a sequence past a position table, two inputs that
# should share an axis given two sizes).
_ORT_SHAPE_FAILURES = ("Attempting to broadcast an axis", "cannot be reshaped", "dimension mismatch",
                       "Incompatible dimensions", "Invalid input shape", "Got invalid dimensions")
# Where ORT_ENFORCE failed, before its message: "/path/file.h:583 void f(args) cond was false. "
_ORT_CHECK = re.compile(r"^\S+:\d+ [^(]*\([^)]*\)\s*(?:.*? was false\.\s*)?")


def input_refusal(said: str) -> str | None:
    """ONNX Runtime's refusal of a request's inputs in a server's error answer, short: its
    reason, the node that gave it, without the source location (``ONNX Runtime FAIL in Add
    node 'n': Attempting to broadcast ... 128 by 300``). None: the error is not one (ONNX
    Runtime out of memory, a model that raised an error of its own, no ONNX Runtime)."""
    found = _ORT_ERROR.search(said.strip().partition("\n")[0])
    if found is None:
        return None
    code, status, text = int(found[1]), found[2], found[3].strip()
    if code != _ORT_INVALID_ARGUMENT and not any(words in text for words in _ORT_SHAPE_FAILURES):
        return None
    node = re.search(r"running (\w+) node\. Name:'([^']*)'", text)
    text = _ORT_CHECK.sub("", text.partition("Status Message: ")[2].strip() or text)
    return f"ONNX Runtime {status}" + (f" in {node[1]} node '{node[2]}'" if node else "") + f": {text}"


def _served_version(metadata: dict) -> str | None:
    """The version a request that names none reaches: the highest of those the model's
    metadata lists (its READY ones)."""
    versions = [str(v) for v in metadata.get("versions", []) if str(v).isdigit()]
    return max(versions, key=int) if versions else None


def _sized(name: str, dims: list[int], given: list[int]) -> list[int]:
    """``--shape``'s dims for input ``name``, checked against the model's (-1: any size)."""
    flag = _spell_flag(name, given)
    hint = f"pass --shape {_spell_flag(name, dims)}" + (", N a size of your choice" if -1 in dims else "")
    if len(given) != len(dims):
        raise UsageError(f"--shape {flag} gives {len(given)} dims; input {name} has {len(dims)} "
                         f"without the batch axis ({dims})", hint=hint)
    for axis, (wanted, got) in enumerate(zip(dims, given)):
        if wanted != -1 and wanted != got:
            raise UsageError(f"--shape {flag} sets dim {axis} of input {name} to {got}; the model "
                             f"fixes it at {wanted} ({dims} without the batch axis)", hint=hint)
    return given


def _spell_flag(name: str, dims: Sequence[int]) -> str:
    """``NAME:D1,D2`` as --shape takes it, a dynamic dim as N."""
    return f"{name}:" + ",".join("N" if d == -1 else str(d) for d in dims)


def _shape_hint(unsized: dict[str, list[int]], warmup: list[dict]) -> str:
    """The --shape flags to pass for ``unsized`` inputs: the sizes of the model's
    ``model_warmup`` entries — for a tritonkit export the lengths it verified — the largest
    spelled out, else a placeholder."""
    warmed = _warmed_flags(unsized, warmup)
    if warmed is None:
        return ("pass " + " ".join(f"--shape {_spell_flag(name, dims)}" for name, dims in unsized.items())
                + ", N the size your clients send")
    flags, others = warmed
    return (f"pass {flags} (the largest size the model's model_warmup holds; a tritonkit "
            "export's are sizes it verified" + (f"; it also warms {others}: a run each shows what "
                                                "size costs" if others else "") + ")")


def _warmed_flags(dynamic: dict[str, list[int]], warmup: list[dict]) -> tuple[str, str] | None:
    """The sizes the ``model_warmup`` entries send for the ``dynamic`` inputs (dims without
    the batch axis, -1 the dynamic ones): the --shape flags of the largest entry, and the
    others' sizes, short ("6, 12"; "" if none). None: no entry sizes all of them."""
    choices = []
    for entry in warmup if dynamic else []:
        listed = entry.get("inputs", {})
        choice = {}
        for name, dims in dynamic.items():
            got = [int(d) for d in listed.get(name, {}).get("dims", [])]
            if len(got) == len(dims) and all(d in (-1, g) for d, g in zip(dims, got)):
                choice[name] = got
        if len(choice) == len(dynamic) and choice not in choices:
            choices.append(choice)
    if not choices:
        return None
    choices.sort(key=lambda c: sum(int(np.prod(dims)) for dims in c.values()))
    flags = " ".join(f"--shape {_spell_flag(name, dims)}" for name, dims in choices[-1].items())
    return flags, ", ".join(_sizes(choice, dynamic) for choice in choices[:-1])


def _sizes(choice: dict[str, list[int]], unsized: dict[str, list[int]]) -> str:
    """A model_warmup entry's dynamic sizes, short: ``12`` when they agree, else its flags."""
    values = {g for name, dims in unsized.items() for d, g in zip(dims, choice[name]) if d == -1}
    if len(values) == 1:
        return str(values.pop())
    return " ".join(_spell_flag(name, dims) for name, dims in choice.items())


def _read_input_data(path: Path) -> dict[str, np.ndarray]:
    """Real input data: ``.npz`` (one array per input) or ``.json`` ``{"NAME": [[...]], ...}``.

    Whatever is wrong with the file's content is the user's to fix: it is said in one line
    that names the file or the input, never raised as our own error.
    """
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"input data file {path} is a folder",
                         hint="give the .npz or .json file inside it")
    check_regular(path, what="input data file",
                  hint="check the path: an .npz or .json file with an array per input")
    if path.suffix in (".npz", ".json"):
        data = read_user_file(path, what="input data file", limit=INPUT_DATA_MAX_BYTES,
                              hint="give an .npz or .json file with an array per input")
        arrays = (_read_npz if path.suffix == ".npz" else _read_json)(path, data)
        if not arrays:          # else every input would be sent random data, unsaid
            raise UsageError(f"input data file {path} gives no input's data",
                             hint=(_NPZ_HINT if path.suffix == ".npz" else
                                   f"write an object, input name -> array: {_JSON_SHAPE}"))
        return arrays
    raise UsageError(f"input data file {path} must be .npz or .json",
                     hint=f"write it with numpy.savez(FILE.npz, NAME=array, ...), or as {_JSON_SHAPE} "
                          "in FILE.json")


_NPZ_HINT = "write it with numpy.savez(FILE, NAME=array, ...): numbers or strings, no Python objects"
_JSON_SHAPE = '{"NAME": [[...], ...], ...}'


#: The largest input data file read (it is held in memory, whole, for the run).
INPUT_DATA_MAX_BYTES = 2 << 30


def _read_npz(path: Path, data: bytes) -> dict[str, np.ndarray]:
    try:
        archive = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise UsageError(f"input data file {path} is not a readable .npz archive ({exc})",
                         hint=_NPZ_HINT) from None
    if not isinstance(archive, np.lib.npyio.NpzFile):      # a lone .npy array named .npz
        raise UsageError(f"input data file {path} holds one unnamed array, not an .npz archive",
                         hint=_NPZ_HINT)
    with archive:
        # The file's size bounds nothing once its arrays are inflated: their declared sizes
        # do (zipfile reads no more than a member declares).
        inflated = sum(info.file_size for info in archive.zip.infolist())
        if inflated > INPUT_DATA_MAX_BYTES:
            raise UsageError(f"input data file {path} holds {inflated / (1 << 30):.3g} GiB of "
                             f"arrays once decompressed, more than the "
                             f"{INPUT_DATA_MAX_BYTES / (1 << 30):.3g} GiB a load test holds",
                             hint="give fewer or smaller samples")
        arrays = {}
        for name in archive.files:
            try:
                arrays[name] = archive[name]
            except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
                raise UsageError(f"input data for {name} in {path} cannot be read ({exc})",
                                 hint=_NPZ_HINT) from None
    return arrays


def _read_json(path: Path, raw: bytes) -> dict[str, np.ndarray]:
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UsageError(f"input data file {path} is not UTF-8 text (byte {exc.start})",
                         hint="save it as UTF-8 JSON") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"input data file {path} is not valid JSON ({exc})",
                         hint=f"write an object, input name -> array: {_JSON_SHAPE}") from None
    except RecursionError:      # arrays nested thousands deep
        raise UsageError(f"input data file {path} nests its arrays deeper than a JSON parser "
                         "follows", hint=f"write an object, input name -> array: {_JSON_SHAPE}") \
            from None
    if not isinstance(data, dict):
        raise UsageError(f"input data file {path} must hold an object: input name -> array",
                         hint=f"e.g. {_JSON_SHAPE}")
    if _perf_analyzer_format(data):
        data = _perf_analyzer_entry(data["data"], path)
    arrays = {}
    for name, value in data.items():
        if isinstance(value, _Flat):
            arrays[name] = value
            continue
        try:
            arrays[name] = np.asarray(value)
        except ValueError:
            raise UsageError(f"input data for {name} in {path} is ragged: its rows are not all "
                             "the same length",
                             hint=f"give {name} as one sample or a batch of equal-length rows") from None
    return arrays


@dataclass(frozen=True)
class _Flat:
    """One sample of an input as perf_analyzer's --input-data gives it: its values in
    row-major order, and the shape they take (None: the model's, with --shape's sizes)."""

    values: list
    shape: tuple[int, ...] | None = None


def _perf_analyzer_format(data: dict) -> bool:
    """``{"data": [{NAME: ...}, ...]}``: perf_analyzer's real-data file (a list of requests,
    or of sequences: lists of them), never an input named "data" (a tensor is no list of objects)."""
    entries = data.get("data")
    return (len(data) <= 2 and set(data) <= {"data", "validation_data"} and isinstance(entries, list)
            and all(isinstance(e, (dict, list)) for e in entries))


def _perf_analyzer_entry(entries: list, path: Path) -> dict[str, object]:
    """The one request of a perf_analyzer data file: each input's values (``[...]`` or
    ``{"content": [...], "shape": [...]}``), flat until the model's shape is known."""
    if any(isinstance(e, list) for e in entries):
        raise UsageError(f"input data file {path} holds perf_analyzer sequences (lists of requests)",
                         hint="tritonkit loadtest sends one request's data at every step of its sequences "
                              f"(--sequence-length): keep one: jq '{{data: [.data[0][0]]}}' {shell_word(path)} > one.json")
    if not entries:
        raise UsageError(f"input data file {path} holds no perf_analyzer request",
                         hint='give one: {"data": [{"NAME": [values...]}]}')
    if len(entries) > 1:
        raise UsageError(f"input data file {path} holds {len(entries)} perf_analyzer requests; tritonkit "
                         "loadtest sends one request again and again",
                         hint=f"keep the one to send: jq '{{data: [.data[0]]}}' {path} > one.json")
    inputs = {}
    for name, value in entries[0].items():
        shape = None
        if isinstance(value, dict):
            if "content" not in value or not isinstance(value["content"], list):
                raise UsageError(f"input data for {name} in {path} is not a list of values "
                                 f"(perf_analyzer's b64 form is not read)",
                                 hint=f'give {name} as [values...] or {{"content": [values...], '
                                      '"shape": [dims]}}, row-major')
            shape, value = value.get("shape"), value["content"]
            if shape is not None and not (isinstance(shape, list)
                                          and all(isinstance(d, int) and d >= 1 for d in shape)):
                raise UsageError(f'input data for {name} in {path} has a "shape" that is not a list of '
                                 f"sizes ({shape})", hint=f'give {name} "shape": [dims] without the batch axis')
        if not isinstance(value, list):
            raise UsageError(f"input data for {name} in {path} is not a list of values",
                             hint=f"give {name} as [values...], row-major")
        inputs[name] = _Flat(value, None if shape is None else tuple(shape))
    return inputs


def _unflatten(given: object, name: str, dims: list[int]) -> np.ndarray:
    """``given`` as an array: a perf_analyzer sample's flat values in its own shape or the
    model's (``dims``, --shape's sizes in); any other data as it came."""
    if not isinstance(given, _Flat):
        return given
    try:
        values = np.asarray(given.values)
    except ValueError:
        values = None
    shape = list(given.shape) if given.shape is not None else dims
    if values is None or values.dtype == object:
        raise UsageError(f"input data for {name} is ragged: perf_analyzer's form lists a sample's values "
                         "flat, row-major", hint=f"give {name} as one flat list of values")
    if -1 in shape:
        raise UsageError(f"input data for {name} lists its values flat and input {name} has a dynamic "
                         f"size ({_spell_flag(name, shape)} without the batch axis)",
                         hint=f'pass --shape {_spell_flag(name, shape)}, or give {name} '
                              '{"content": [...], "shape": [dims]}')
    wanted = int(np.prod(shape))
    if values.size != wanted:
        raise UsageError(f"input data for {name} holds {values.size} values; a sample of "
                         f"{'x'.join(map(str, shape)) or 'a scalar'} takes {wanted}",
                         hint=f"give {name} one sample's {wanted} values, row-major (perf_analyzer's "
                              "form: one request of batch 1, repeated to --batch-size)")
    return values.reshape(shape)


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
            array = _converted(np.asarray(array), name, datatype, triton_to_np_dtype(datatype))
        except (ValueError, TypeError, OverflowError):
            # Not numpy's words: they quote the item, and the file may be a link to any file.
            raise UsageError(f"input data for {name} cannot be read as {datatype}: an item of "
                             "it is not such a number",
                             hint=f"the model takes {datatype} for {name}: give numbers") from None
    wanted = ([batch_size] if batches else []) + dims
    given = list(array.shape)
    if batches and array.ndim == len(dims):       # one sample: repeat it to the batch
        array = np.repeat(array[None, ...], batch_size, axis=0)
    if batches and array.ndim == len(wanted) and array.shape[0] != batch_size:
        raise UsageError(f"input data for {name} has batch {array.shape[0]}, not --batch-size {batch_size}",
                         hint=f"give {name} {batch_size} rows, or one sample without the batch axis "
                              f"(it is repeated to the batch), or pass --batch-size {array.shape[0]}")
    fits = array.ndim == len(wanted) and all(w < 0 or w == got for w, got in zip(wanted, array.shape))
    if not fits:
        raise _misfit(name, given, dims, batches, batch_size)
    return array


def _converted(array: np.ndarray, name: str, datatype: str, target: type) -> np.ndarray:
    """``array`` as ``target``, where that keeps every value: a UsageError naming the input
    where it would not (5.7 or 1e30 sent as INT64, 300 as UINT8, 2 as BOOL, 1e300 as FP16).
    Floats narrowed to a smaller float are rounded, as the model's own inputs are."""
    with warnings.catch_warnings():       # numpy's "invalid value encountered in cast"
        warnings.simplefilter("ignore", RuntimeWarning)
        converted = array.astype(target)
        if array.dtype.kind not in "biufc" or array.dtype == converted.dtype:
            return converted
        if array.dtype.kind == "f" and converted.dtype.kind == "f":
            kept = np.isfinite(converted) | ~np.isfinite(array)
        else:   # both ways: an unsigned int that wraps compares equal on the way back
            kept = (converted == array) & (converted.astype(array.dtype) == array)
    if kept.all():
        return converted
    changed = array[~kept].ravel()[:3].tolist()
    more = ", …" if (~kept).sum() > len(changed) else ""
    raise UsageError(f"input data for {name}: {array.dtype.name} values "
                     f"{', '.join(map(repr, changed))}{more} cannot be sent as {datatype} without "
                     "changing them",
                     hint=f"the model takes {datatype} for {name}: give values {datatype} holds "
                          f"exactly (an array of {np.dtype(target).name})")


def _misfit(name: str, given: list[int], dims: list[int], batches: bool, batch_size: int) -> UsageError:
    """Data of a shape the model does not take, said with the shapes it does take."""
    any_size = ", where n may be any size" if -1 in dims else ""
    sample = _spell_shape(dims)
    if not batches:
        return UsageError(f"input data for {name} has shape {given}; the model takes {name} of shape "
                          f"{sample}{any_size} (it does not batch: no batch axis)",
                          hint=f"give {name} an array of shape {sample}")
    batch = _spell_shape([batch_size, *dims])
    if batch_size == 1:
        ways = f"one sample of shape {sample}, or a batch of one: shape {batch}"
    else:
        ways = (f"one sample of shape {sample} (repeated to each request's batch of {batch_size}, "
                f"--batch-size {batch_size}), or a batch of {batch_size} samples: shape {batch}")
    return UsageError(f"input data for {name} has shape {given}; one sample of {name} has shape "
                      f"{sample}{any_size}", hint=f"give {name} {ways}")


def _spell_shape(dims: Sequence[int]) -> str:
    """A shape as a list, a dynamic dim as n: ``[n, 4]``."""
    return "[" + ", ".join("n" if d < 0 else str(d) for d in dims) + "]"
