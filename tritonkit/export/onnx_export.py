"""PyTorch → ONNX with either of torch.onnx's exporters, and the graph tidied for Triton.

``dynamo`` (``torch.export`` based, the modern one) is tried first; ``torchscript``
(``torch.jit.trace`` based) is the fallback. Whichever is used, the graph comes out
with the names Triton will see and every dynamic axis a symbolic dim (``dim_param``):
``batch`` first on every input and output, the declared labels elsewhere. An output's
first axis is the batch only where the exporter found it dynamic: one it fixed (an RNN's
state, a sum over the batch) is refused here, and verification checks the rest.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import os
import re
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

import onnx
import torch

from tritonkit.errors import ExportError
from tritonkit.export import length_rules, user_code
from tritonkit.export.forward import ForwardCall
from tritonkit.export.length_rules import LengthRules
from tritonkit.export.spec import BATCH_AXIS_NAME, FORWARD_DUTY, ModelInputs

EXPORTERS = ("dynamo", "torchscript")
# Protobuf cannot hold more than 2 GiB; past this the weights go to an external file.
_EXTERNAL_DATA_BYTES = 1_800_000_000
# What the dynamo exporter says when forward() branches on a tensor's value.
DATA_DEPENDENT = "Could not guard on data-dependent expression"
# The fix for an output whose first axis is not the batch (refused here and in verification).
NOT_BATCH_FIRST_HINT = ("Triton splits every output into one row per sample: return [batch, ...] "
                        "tensors (transpose an RNN's [layers, batch, hidden] state; reduce over "
                        "other axes than the first)")
_UNSUPPORTED_OPERATOR = re.compile(
    r"No ONNX function found for"  # dynamo
    r"|Exporting the operator \S+ to ONNX opset version \d+ is not supported"  # torchscript
    r"|Unsupported: ONNX export of operator")

_UNSUPPORTED_OPSET = re.compile(
    r"Target opset version \d+ is not supported"  # dynamo (onnxscript's version converter)
    r"|Unsupported onnx_opset_version")            # torchscript
_OPSET_HINT = ("choose an --opset the installed exporters take (the dynamo exporter makes 18 "
               "and converts it); the default, --opset 18, suits both")


@dataclass(frozen=True)
class ExportedGraph:
    """The tidied graph, and what the tracer said about the model's own code.

    ``tracer_warnings`` (TorchScript only): each place forward() turned a tensor into a
    Python value the trace then froze (``{"file", "line", "message"}``). A branch on a
    tensor's value keeps the example's path; shape arithmetic is usually harmless.
    """

    model: onnx.ModelProto
    tracer_warnings: tuple[dict, ...] = ()
    # dynamo only: what torch.export assumed of the dynamic lengths (length_rules)
    length_rules: LengthRules | None = None


def export_onnx(module: torch.nn.Module, inputs: ModelInputs, *, exporter: str,
                output_names: tuple[str, ...], opset: int, max_batch_size: int) -> ExportedGraph:
    """Export ``module`` with one exporter and return the tidied graph (not yet checked).

    The exporters trace it as forward.ForwardCall calls it (wrapped in one if it is not),
    a TorchScript module excepted.
    """
    if not isinstance(module, ForwardCall):
        module = ForwardCall(module, inputs.keywords)
    if isinstance(module.model, torch.jit.ScriptModule):
        # The TorchScript exporter cannot trace one inside a Python module; it takes the
        # tensors by position, in forward()'s order (order_like_forward saw to that).
        module = module.model
    args = traceable_inputs(inputs)
    rules = None
    with _quiet(), _tracer_warnings() as tracer_warnings, user_code.running(
            f"the model's forward() (traced by the {exporter} exporter)", FORWARD_DUTY):
        try:
            if exporter == "dynamo":
                with length_rules.recorded(inputs) as rules:
                    model = _export_dynamo(module, args, inputs, output_names, opset,
                                           max_batch_size)
            else:
                model = _export_torchscript(module, args, inputs, output_names, opset)
        except Exception as exc:
            said = summarize_exception(exc)
            raise ExportError(f"{exporter} exporter: {_failure(exc, said, exporter)}",
                              hint=_hint_for(exc, said, exporter)) from exc
    made = opset_of(model)
    if made != opset:
        # The dynamo exporter converts its opset-18 graph to the opset asked for and, when
        # the conversion fails, keeps the graph as it was, saying so only in a log line.
        raise ExportError(f"{exporter} exporter: the graph came out at opset {made}, its "
                          f"conversion to --opset {opset} failed", hint=_OPSET_HINT)
    name_symbolic_dims(model, inputs, output_names)
    return ExportedGraph(model, tuple(tracer_warnings), rules)


def _export_dynamo(module, args, inputs: ModelInputs, output_names, opset, max_batch_size):
    # The traced batch is at least 2 (traceable_inputs), so the bound is too; Triton's
    # max_batch_size, not the graph, keeps batches of a --max-batch-size 1 model at 1.
    dims: dict[str, torch.export.Dim] = {
        BATCH_AXIS_NAME: torch.export.Dim(BATCH_AXIS_NAME, min=1, max=max(2, max_batch_size))}
    shapes = []
    for name in inputs.names:
        shapes.append({axis: dims.setdefault(label, torch.export.Dim(label, min=1))
                       for axis, label in inputs.axes_of(name).items()})
    # One entry: ForwardCall's *tensors, the tuple of every input.
    with _functions_table_kept():
        program = torch.onnx.export(module, args, dynamo=True, dynamic_shapes=(tuple(shapes),),
                                    input_names=list(inputs.names),
                                    output_names=list(output_names), opset_version=opset,
                                    verbose=False, report=False)
    _rename_values_named_like_the_io(program.model.graph)
    return program.model_proto


_TABLES: dict[tuple, object] = {}
_TABLE_LOCK = threading.Lock()
_TABLE_USERS = 0
_TORCHS_METHOD = None           # ONNXRegistry.from_torchlib as torch has it, while replaced


@contextlib.contextmanager
def _functions_table_kept():
    """The dynamo exporter builds its table of ONNX functions for PyTorch's operators
    (``ONNXRegistry.from_torchlib``) anew on every export: 0.35 CPU s, more than half of a
    small model's export. While this holds, the table is built once per process (per
    opset, and again when a library registers operators) and each export gets its own
    copy; torch's own method is back once the last export holding it ends. Where torch has
    no such table, nothing changes."""
    global _TABLE_USERS, _TORCHS_METHOD
    try:
        from torch.onnx._internal.exporter import _registration
        registry = _registration.ONNXRegistry
    except (ImportError, AttributeError):
        registry = None
    if not isinstance(getattr(registry, "__dict__", {}).get("from_torchlib"), classmethod):
        yield
        return
    with _TABLE_LOCK:
        if _TABLE_USERS == 0:
            _TORCHS_METHOD = registry.__dict__["from_torchlib"]
            registry.from_torchlib = classmethod(_kept_table)
        _TABLE_USERS += 1
    try:
        yield
    finally:
        with _TABLE_LOCK:
            _TABLE_USERS -= 1
            if _TABLE_USERS == 0:
                registry.from_torchlib, _TORCHS_METHOD = _TORCHS_METHOD, None


def _kept_table(cls, *args, **kwargs):
    """``from_torchlib`` built once per key (its arguments and how many operators torch has
    registered), a copy of it returned: what an export adds to its table is its own."""
    build = _TORCHS_METHOD.__func__
    key = (cls, args, tuple(sorted(kwargs.items())), len(torch._C._dispatch_get_all_op_names()))
    if key not in _TABLES:
        _TABLES[key] = build(cls, *args, **kwargs)
    table = _TABLES[key]
    if not isinstance(getattr(table, "functions", None), dict):
        return build(cls, *args, **kwargs)
    mine = copy.copy(table)
    mine.functions = {op: list(decompositions) for op, decompositions in table.functions.items()}
    return mine


def _rename_values_named_like_the_io(graph) -> None:
    """Give another name to each value inside the graph that carries an input's or output's.

    The dynamo exporter names the inputs and outputs as asked without looking at the
    graph's other values: an output called ``embedding`` beside an nn.Embedding's result,
    or ``linear`` beside a Linear's, made two values of one name (the ONNX checker refuses
    the graph), and an input called like a weight fed the weight's uses.
    """
    io = [*graph.inputs, *graph.outputs]
    wanted = {value.name for value in io}
    inner = [value for value in (*graph.initializers.values(),
                                 *(out for node in graph.all_nodes() for out in node.outputs))
             if not any(value is own for own in io)]
    taken = wanted | {value.name for value in inner}
    for value in inner:
        if value.name in wanted:
            suffix = 1
            while f"{value.name}_{suffix}" in taken:
                suffix += 1
            value.name = f"{value.name}_{suffix}"
            taken.add(value.name)


def _export_torchscript(module, args, inputs: ModelInputs, output_names, opset):
    # Inputs only: the exporter's shape inference carries the dynamic axes to the outputs.
    # Declaring the outputs' first axis the batch as well would hide one that is not (an
    # RNN's [layers, batch, hidden] state, a sum over the batch) behind the batch's name.
    dynamic_axes = {name: inputs.axes_of(name) for name in inputs.names}
    buffer = io.BytesIO()
    torch.onnx.export(module, args, buffer, dynamo=False, input_names=list(inputs.names),
                      output_names=list(output_names), dynamic_axes=dynamic_axes,
                      opset_version=opset, do_constant_folding=True)
    return onnx.load_model_from_string(buffer.getvalue())


def traceable_inputs(inputs: ModelInputs) -> tuple[torch.Tensor, ...]:
    """Copies of the example inputs with every dynamic axis at least 2 long.

    Both exporters treat a size of 1 as a constant (it broadcasts), so a batch of one
    would be baked into the graph; repeating the example keeps those axes symbolic.
    Copies, since the TorchScript trace runs forward() on them, which may work in place.
    """
    grown = []
    for name, tensor in zip(inputs.names, inputs.tensors):
        tensor = tensor.clone()
        for axis in inputs.axes_of(name):
            if tensor.shape[axis] == 1:
                tensor = torch.cat([tensor, tensor], dim=axis)
        grown.append(tensor)
    return tuple(grown)


def name_symbolic_dims(model: onnx.ModelProto, inputs: ModelInputs,
                       output_names: tuple[str, ...]) -> None:
    """Give every dynamic dim of the graph's inputs and outputs a stable ``dim_param``.

    Inputs get the declared labels. Outputs must be batched (axis 0 dynamic, named
    ``batch``); their other dynamic dims keep a declared label the exporter propagated
    (``sequence``) and are otherwise named ``<output>_dim<axis>``.
    """
    graph_inputs = {value.name: value for value in model.graph.input}
    for name in inputs.names:
        if name not in graph_inputs:
            raise ExportError(f"the exported graph has no input named {name} (it has "
                              f"{', '.join(graph_inputs) or 'none'}); the model ignores it",
                              hint="drop the unused input from the example inputs")
        dims = graph_inputs[name].type.tensor_type.shape.dim
        for axis, label in inputs.axes_of(name).items():
            dims[axis].Clear()
            dims[axis].dim_param = label

    labels = {BATCH_AXIS_NAME, *(label for axes in inputs.dynamic_axes.values()
                                 for label in axes.values())}
    graph_outputs = {value.name: value for value in model.graph.output}
    if tuple(graph_outputs) != tuple(output_names):
        raise ExportError(f"the exported graph's outputs are {', '.join(graph_outputs)}, "
                          f"expected {', '.join(output_names)}",
                          hint="an output that is also an input, or a repeated output, "
                               "cannot be named; return distinct tensors")
    for name, value in graph_outputs.items():
        dims = value.type.tensor_type.shape.dim
        if not dims:
            raise ExportError(f"output {name} is a scalar: Triton needs the batch as its "
                              "first axis", hint=_scalar_hint(name, inputs.names))
        if dims[0].HasField("dim_value"):
            raise ExportError(f"output {name}'s first axis is fixed at {dims[0].dim_value}, "
                              "not the batch", hint=NOT_BATCH_FIRST_HINT)
        for axis, dim in enumerate(dims):
            if axis == 0:
                dim.dim_param = BATCH_AXIS_NAME
            elif not dim.HasField("dim_value") and dim.dim_param not in labels:
                dim.dim_param = f"{name}_dim{axis}"


def save_model(model: onnx.ModelProto, path: Path) -> tuple[list[Path], bytes | None]:
    """Write the graph (and, past protobuf's 2 GiB, its weights beside it).

    Returns the files written and, for a graph written whole, its bytes, which the checker
    reads rather than the file (check_graph). Serialized once: upb's ByteSize() serializes
    the whole model to count it, a second pass over every weight.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        serialized = model.SerializeToString()
    except ValueError:              # past protobuf's 2 GiB
        serialized = None
    if serialized is not None and len(serialized) <= _EXTERNAL_DATA_BYTES:
        path.write_bytes(serialized)
        return [path], serialized
    serialized = None
    data = path.with_name(path.name + ".data")
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data.name)
    return ([path, data] if data.exists() else [path]), None   # small tensors stay inline


def opset_of(model: onnx.ModelProto) -> int:
    return next(op.version for op in model.opset_import if op.domain in ("", "ai.onnx"))


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def summarize_exception(exc: BaseException) -> str:
    """One line for an exporter's (often page-long) exception: its root cause."""
    text = _ANSI.sub("", str(exc))
    # The dynamo exporter puts the root cause first under "## Exception summary".
    summary = text.split("## Exception summary", 1)
    if len(summary) == 2:
        text = summary[1]
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        line = re.sub(r"^<class '[\w.]+'>: ", "", line)
        line = re.sub(r"<OpOverload\(op='([\w.]+)', overload='(\w+)'\)>", r"\1.\2", line)
        line = line.split(". Failure message:", 1)[0]
        return line if len(line) <= 300 else line[:297] + "..."
    return type(exc).__name__


# A training target among the example inputs, by the names Hugging Face models take them
# under: given one, forward() returns a loss (a scalar) beside or instead of predictions.
_TARGET_INPUT = re.compile(r"(?:^|_)labels?$|^label_ids$|^(?:start|end)_positions$")


def _scalar_hint(output: str, input_names) -> str:
    """The fix for a scalar output: a loss, when the example gives a training target."""
    targets = [name for name in input_names if _TARGET_INPUT.search(name)]
    if targets:
        return (f"{output} is a training loss, computed because the example inputs give "
                f"{', '.join(targets)}: leave {'them' if len(targets) > 1 else 'it'} out of the "
                "example (a served model is sent no targets)")
    if "loss" in output.lower():
        return (f"{output} is a training loss: export the model as it serves, without the "
                "targets forward() compares its predictions with")
    return "return one value per sample, shape [batch, ...]"


# PyTorch's C++ code failing with a standard-library error that names nothing of the model
# (``unordered_map::at``, ``vector::_M_range_check: ...``, ``std::bad_alloc``).
_CPP_ERROR = re.compile(r"^(?:std::)?(?:unordered_map|unordered_set|map|set|vector|deque|array|"
                        r"basic_string|bitset)::\w+|^std::\w+$")


def _in_functorch(exc: BaseException) -> bool:
    """Whether ``exc`` was raised under torch.vmap or torch.func (functorch)."""
    trace = exc.__traceback__
    while trace is not None:
        if f"{os.sep}torch{os.sep}_functorch{os.sep}" in trace.tb_frame.f_code.co_filename:
            return True
        trace = trace.tb_next
    return False


def _untraceable(exc: BaseException, said: str, exporter: str) -> bool:
    """Whether the TorchScript exporter failed on what it cannot trace: torch.vmap, or a
    bare C++ error (``said``: the failure's one line)."""
    return exporter == "torchscript" and (_in_functorch(exc) or bool(_CPP_ERROR.match(said)))


def _failure(exc: BaseException, said: str, exporter: str) -> str:
    """An exporter's failure in one line: its root cause (``said``), and where that alone
    names nothing (a C++ error from inside PyTorch), what forward() did that the exporter
    cannot follow."""
    if exporter == "torchscript" and _in_functorch(exc):
        return (f"forward() calls torch.vmap or torch.func (functorch), which the TorchScript "
                f"exporter cannot trace (it failed with '{said}')")
    if _CPP_ERROR.match(said):
        return f"it failed inside PyTorch's C++ code with '{said}', which names nothing of the model"
    return said


def _hint_for(exc: BaseException, said: str, exporter: str = "dynamo") -> str:
    text = _ANSI.sub("", str(exc))
    if _untraceable(exc, said, exporter):
        return ("export it with the dynamo exporter (the default: leave out --exporter "
                "torchscript); TRITONKIT_DEBUG=1 shows the traceback down to forward()'s line")
    if _UNSUPPORTED_OPERATOR.search(text):
        return ("the model uses an operator ONNX cannot express: replace it with supported "
                "ops, or register a custom translation (torch.onnx.export custom_translation_table)")
    if _UNSUPPORTED_OPSET.search(text):
        return _OPSET_HINT
    if DATA_DEPENDENT in text:
        return ("forward() branches on a tensor's value (if/while on a tensor): express the "
                "branch with torch.where or torch.cond")
    return "rerun with TRITONKIT_DEBUG=1 for the exporter's traceback"


def fallback_note(error: str) -> str | None:
    """What a failed dynamo attempt means for the TorchScript graph used instead, if anything."""
    if DATA_DEPENDENT in error:
        return ("forward() branches on a tensor's value, and the TorchScript trace keeps only "
                "the branch the example inputs took (express it with torch.where or torch.cond)")
    return None


@contextlib.contextmanager
def _tracer_warnings():
    """Collect the TorchScript tracer's warnings about the model's code; drop all others.

    Each is a Python value the trace computed from a tensor and then froze: a branch on a
    tensor's value that would be taken the same way for every input. Torch's own shape
    code is left out by the file that warned, under torch's own folder (not torch/jit), as
    torch means to; not by module name as ``TracerWarning.ignore_lib_warnings`` does, whose
    pattern also drops torchvision's and any user module named torch-something.
    The list is filled when the block ends; repeats (a loop) are kept once.
    """
    found: list[dict] = []
    torch_dir = str(Path(torch.__file__).resolve().parent) + os.sep
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("ignore")
        warnings.filterwarnings("always", category=torch.jit.TracerWarning)
        try:
            yield found
        finally:
            seen = set()
            for record in caught:
                message = str(record.message).split(". ", 1)[0].strip().rstrip(".") + "."
                key = (record.filename, record.lineno, message)
                filename = str(Path(record.filename).resolve())
                torchs_own = (filename.startswith(torch_dir)
                              and not filename.startswith(torch_dir + "jit" + os.sep))
                if issubclass(record.category, torch.jit.TracerWarning) and not torchs_own \
                        and key not in seen:
                    seen.add(key)
                    found.append({"file": record.filename, "line": record.lineno,
                                  "message": message})


@contextlib.contextmanager
def _quiet():
    """Silence the exporters' progress lines, warnings and log records; keep them for hints.

    The TorchScript exporter also prints from C++ (the graph at an exception), past
    ``sys.stdout``: file descriptors 1 and 2 are pointed at a scratch file meanwhile.
    """
    captured = io.StringIO()
    onnx_logger = logging.getLogger("torch.onnx")
    level = onnx_logger.level
    onnx_logger.setLevel(logging.ERROR)
    try:
        with _native_output_to(captured), warnings.catch_warnings(), \
                contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            warnings.simplefilter("ignore")
            yield captured
    finally:
        onnx_logger.setLevel(level)


@contextlib.contextmanager
def _native_output_to(captured: io.StringIO):
    """Send what native code writes to fds 1 and 2 into ``captured`` for the duration."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        saved = [os.dup(1), os.dup(2)]
    except OSError:  # no such descriptors (a daemon): nothing to silence
        yield
        return
    with tempfile.TemporaryFile() as sink:
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sink.seek(0)
            captured.write(sink.read().decode(errors="replace"))
