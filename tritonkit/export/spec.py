"""What to export: a model factory named by a SPEC, and its example inputs, normalised.

A SPEC is ``path/to/file.py:factory`` or ``package.module:factory``. The factory takes no
arguments and returns ``(module, example_inputs)`` or ``(module, example_inputs,
dynamic_axes)``:

- ``example_inputs`` is a tensor, a tuple/list of tensors, or a dict of named tensors;
  the first dimension of each is the batch.
- ``dynamic_axes`` (optional) names the axes besides the batch that vary, per input:
  ``{"input_ids": {1: "sequence"}}``, or torch.onnx's list form ``{"input_ids": [1]}``
  (labelled ``input_ids_1``). Axes that share a label share a size.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from tritonkit.errors import UsageError

BATCH_AXIS_NAME = "batch"


def default_input_name(index: int) -> str:
    return f"INPUT__{index}"


def default_output_name(index: int) -> str:
    return f"OUTPUT__{index}"


@dataclass(frozen=True)
class ModelInputs:
    """The example inputs, in forward() order, with their names and dynamic axes.

    ``dynamic_axes[name]`` maps an axis (never 0: the batch is always dynamic) to its label.
    """

    names: tuple[str, ...]
    tensors: tuple[torch.Tensor, ...]
    dynamic_axes: dict[str, dict[int, str]] = field(default_factory=dict)

    def axes_of(self, name: str) -> dict[int, str]:
        """Every dynamic axis of one input, the batch included."""
        return {0: BATCH_AXIS_NAME, **self.dynamic_axes.get(name, {})}

    @property
    def batch_size(self) -> int:
        return int(self.tensors[0].shape[0])


def load_factory(spec: str) -> tuple[torch.nn.Module, Any, dict | None]:
    """Import the factory a SPEC names, call it, and return what it built."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise UsageError(f"model spec '{spec}' is not FILE.py:FACTORY or package.module:FACTORY",
                         hint="e.g. examples/mlp.py:build")
    module = _import_target(target)
    factory = getattr(module, attr, None)
    if factory is None:
        raise UsageError(f"{target} has no factory named '{attr}'",
                         hint=f"define def {attr}(): return model, example_inputs in {target}")
    if not callable(factory):
        raise UsageError(f"{target}:{attr} is a {type(factory).__name__}, not a function",
                         hint="the factory must be a callable returning (model, example_inputs)")
    try:
        built = factory()
    except Exception as exc:  # the user's code: its failure is their input, not our bug
        raise UsageError(f"factory {spec} raised {type(exc).__name__}: {one_line(exc)}",
                         hint="fix the factory; TRITONKIT_DEBUG=1 shows the traceback") from exc
    return _unpack(built, spec)


def _import_target(target: str):
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target)
        if not path.is_file():
            raise UsageError(f"model file {path} does not exist",
                             hint="pass FILE.py:FACTORY with a path to an existing file")
        name = f"_tritonkit_model_{abs(hash(str(path.resolve())))}"
        loader_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(loader_spec)
        # Let the file import its neighbours, as `python path/to/file.py` would, and find
        # itself in sys.modules, as dataclasses and pickling look it up there.
        sys.modules[name] = module
        try:
            with _on_sys_path(path.resolve().parent):
                loader_spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(name, None)
            raise UsageError(f"importing {path} raised {type(exc).__name__}: {one_line(exc)}",
                             hint="fix the file; TRITONKIT_DEBUG=1 shows the traceback") from exc
        return module
    try:
        # A console script (and Python under -P or PYTHONSAFEPATH) leaves the working folder
        # off sys.path, where `python -c "import examples.mlp"` has it: look there first,
        # as uvicorn's and gunicorn's app-dir does.
        with _on_sys_path(Path.cwd()):
            return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name and target.startswith(exc.name):
            raise UsageError(f"no Python module named '{target}'",
                             hint="pass FILE.py:FACTORY, or a module importable from here") from exc
        raise UsageError(f"importing {target} failed: {one_line(exc)}",
                         hint="install what the module needs") from exc
    except Exception as exc:
        raise UsageError(f"importing {target} raised {type(exc).__name__}: {one_line(exc)}",
                         hint="fix the module; TRITONKIT_DEBUG=1 shows the traceback") from exc


@contextmanager
def _on_sys_path(folder: Path) -> Iterator[None]:
    """``folder`` first on sys.path while the block imports; taken off again afterwards."""
    entry = str(folder)
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        sys.path.remove(entry)


def _unpack(built: Any, spec: str) -> tuple[torch.nn.Module, Any, dict | None]:
    if not isinstance(built, (tuple, list)) or len(built) not in (2, 3):
        raise UsageError(f"factory {spec} returned {_describe(built)}, not "
                         "(module, example_inputs[, dynamic_axes])",
                         hint="return the torch.nn.Module and its example inputs as a tuple")
    module, example_inputs, *rest = built
    if not isinstance(module, torch.nn.Module):
        raise UsageError(f"factory {spec} returned {_describe(module)} as the model, "
                         "not a torch.nn.Module", hint="return (module, example_inputs)")
    return module, example_inputs, (rest[0] if rest else None)


def order_like_forward(module: torch.nn.Module, example_inputs: Any) -> Any:
    """A dict of example inputs keyed by forward()'s own parameter names, in forward()'s order.

    The inputs are passed to forward() by position, and Triton clients send them by name:
    ``{"attention_mask": m, "input_ids": i}`` for ``forward(input_ids, attention_mask)``
    would otherwise feed the mask to ``input_ids`` under the name ``attention_mask``. A
    dict whose keys name none of forward()'s parameters keeps its own order; one whose
    keys name only some is refused, since its other inputs would land by position.
    Keyword-only parameters cannot be fed by position: giving one is refused, and so is
    one without a default, whatever the inputs.
    """
    signature = _forward_signature(module)
    if signature is None:
        return example_inputs
    keys = [str(key) for key in example_inputs] if isinstance(example_inputs, Mapping) else []
    _refuse_keyword_only(signature, keys)
    if not isinstance(example_inputs, Mapping):
        return example_inputs
    positional = [p.name for p in signature.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    by_name = {str(key): value for key, value in example_inputs.items()}
    named = [key for key in by_name if key in positional]
    if not named:
        return example_inputs
    strangers = [key for key in by_name if key not in positional]
    if strangers:
        raise UsageError(f"forward({', '.join(positional)}) has no parameter named "
                         f"{', '.join(strangers)}, though the example inputs key "
                         f"{', '.join(named)} by its parameters",
                         hint="key every example input by its forward() parameter, or none "
                              "(keys of their own are fed to forward() in the dict's order)")
    leading = positional[:len(by_name)]
    skipped = [name for name in leading if name not in by_name]
    if skipped:
        raise UsageError(f"the example inputs skip forward()'s parameter(s) {', '.join(skipped)}"
                         f" (forward takes {', '.join(positional)})",
                         hint="give example inputs for forward()'s leading parameters, in any order")
    return {name: by_name[name] for name in leading}


def _forward_signature(module: torch.nn.Module) -> inspect.Signature | None:
    """forward()'s parameters: its Python signature, or a TorchScript module's schema.

    A traced module (and any torch.jit.load'ed one) has no Python signature, but its
    schema keeps forward()'s parameter names, which a dict of example inputs may use in
    another order. None if neither is there.
    """
    try:
        return inspect.signature(module.forward)
    except (TypeError, ValueError):
        pass
    schema = getattr(module.forward, "schema", None)
    if schema is None:
        return None
    parameters = []
    for argument in schema.arguments[1:]:       # after self
        kind = inspect.Parameter.KEYWORD_ONLY if argument.kwarg_only else \
            inspect.Parameter.POSITIONAL_OR_KEYWORD
        default = argument.default_value if argument.has_default_value() else \
            inspect.Parameter.empty
        parameters.append(inspect.Parameter(argument.name, kind, default=default))
    try:
        return inspect.Signature(parameters)
    except ValueError:      # a schema no Python signature could have
        return None


def _refuse_keyword_only(signature: inspect.Signature, keys: Sequence[str]) -> None:
    """Refuse a keyword-only forward() parameter the export would need to feed.

    Both exporters call forward() with the inputs by position (and Triton has no
    keyword arguments either): an input keyed by a keyword-only parameter would land in
    the wrong one, and a keyword-only parameter without a default gets nothing.
    """
    for parameter in signature.parameters.values():
        if parameter.kind != parameter.KEYWORD_ONLY:
            continue
        if parameter.name in keys:
            raise UsageError(f"example input {parameter.name} would feed forward()'s "
                             "keyword-only parameter of that name, and the exporters pass "
                             "inputs by position only",
                             hint=f"make {parameter.name} a positional parameter of forward() "
                                  "(before the *)")
        if parameter.default is parameter.empty:
            raise UsageError(f"forward()'s keyword-only parameter {parameter.name} has no "
                             "default, and the exporters pass inputs by position only",
                             hint=f"make {parameter.name} a positional parameter of forward() "
                                  "(before the *), or give it a default")


def normalize_inputs(example_inputs: Any, *, input_names: Sequence[str] | None = None,
                     dynamic_axes: Mapping[str, Mapping[int, str]] | None = None) -> ModelInputs:
    """Names, tensors and dynamic axes of the example inputs, checked.

    Names come from ``input_names``, else from the dict's keys, else ``INPUT__<i>``.
    """
    if isinstance(example_inputs, torch.Tensor):
        keys, tensors = None, (example_inputs,)
    elif isinstance(example_inputs, Mapping):
        keys, tensors = tuple(str(k) for k in example_inputs), tuple(example_inputs.values())
    elif isinstance(example_inputs, (tuple, list)):
        keys, tensors = None, tuple(example_inputs)
    else:
        raise UsageError(f"example inputs are {_describe(example_inputs)}, not a tensor, "
                         "a tuple of tensors or a dict of named tensors",
                         hint="return e.g. torch.randn(4, 16) as the example inputs")
    if not tensors:
        raise UsageError("the model has no example inputs", hint="return at least one tensor")
    for position, tensor in enumerate(tensors):
        if not isinstance(tensor, torch.Tensor):
            raise UsageError(f"example input {keys[position] if keys else position} is "
                             f"{_describe(tensor)}, not a torch.Tensor",
                             hint="every example input must be a tensor")
        if tensor.dim() == 0:
            raise UsageError(f"example input {keys[position] if keys else position} is a scalar",
                             hint="every input needs a first (batch) dimension")
    batch_sizes = {int(t.shape[0]) for t in tensors}
    if len(batch_sizes) > 1:
        raise UsageError(f"example inputs disagree on the batch size (first dimensions "
                         f"{sorted(batch_sizes)})", hint="give every input the same first dimension")

    if input_names:
        names = tuple(input_names)
        if len(names) != len(tensors):
            raise UsageError(f"{len(names)} input names for {len(tensors)} inputs",
                             hint="give one name per example input")
    else:
        names = keys or tuple(default_input_name(i) for i in range(len(tensors)))
    refuse_empty_names(names, "input", default_input_name)
    if len(set(names)) != len(names):
        raise UsageError(f"input names repeat: {', '.join(names)}", hint="give each input its own name")
    for name, tensor in zip(names, tensors):
        if tensor.numel() == 0:
            # Triton never sends an empty batch, and verification draws its random inputs
            # like the example's values (their spread, their integer range): none to draw from.
            raise UsageError(f"example input {name} is empty (shape {list(tensor.shape)})",
                             hint="give every example input at least one element along each "
                                  "axis, e.g. torch.randn(4, 16)")

    axes = _check_dynamic_axes(dynamic_axes or {}, names, tensors)
    return ModelInputs(names=names, tensors=tensors, dynamic_axes=axes)


def refuse_empty_names(names: Sequence[str], kind: str, default: Callable[[int], str]) -> None:
    """A UsageError for an empty input or output name (the Python API's ``input_names=[""]``,
    a dict keyed ""): ONNX and Triton name every tensor, and the ONNX checker would refuse
    it only once the export had run."""
    for position, name in enumerate(names):
        if not name:
            raise UsageError(f"{kind} {position} has an empty name",
                             hint=f"give it one, e.g. {default(position)} ({kind}_names= or "
                                  f"--{kind}-names, or the dict's keys)")


def axes_by_input(dynamic_axes: Any) -> dict[str, dict[int, str]]:
    """``{input: {axis: label}}`` from what a factory or caller gave, in either of
    torch.onnx's forms: ``{"x": {1: "sequence"}}``, or ``{"x": [1]}`` (labelled ``x_1``,
    as ``--dynamic-axis x:1`` is). Anything else is a UsageError naming it."""
    hint = 'e.g. {"input_ids": {1: "sequence"}} (or {"input_ids": [1]})'
    if not isinstance(dynamic_axes, Mapping):
        raise UsageError(f"the dynamic axes are {_describe(dynamic_axes)}, not a dict of "
                         "input name to axes", hint=hint)
    found: dict[str, dict[int, str]] = {}
    for name, axes in dynamic_axes.items():
        if isinstance(axes, Mapping):
            pairs = list(axes.items())
        elif isinstance(axes, (list, tuple)):
            pairs = [(axis, f"{name}_{axis}") for axis in axes]
        else:
            raise UsageError(f"the dynamic axes of '{name}' are {_describe(axes)}, not "
                             "{axis: label} or a list of axes", hint=hint)
        for axis, label in pairs:
            if isinstance(axis, bool) or not str(axis).strip().isdigit():
                raise UsageError(f"dynamic axis {axis!r} of '{name}' is not an axis number",
                                 hint=hint)
            found.setdefault(str(name), {})[int(axis)] = str(label)
    return found


def _check_dynamic_axes(dynamic_axes: Any, names: Sequence[str],
                        tensors: Sequence[torch.Tensor]) -> dict[str, dict[int, str]]:
    checked: dict[str, dict[int, str]] = {}
    sizes: dict[str, int] = {}
    for name, axes in axes_by_input(dynamic_axes).items():
        if name not in names:
            raise UsageError(f"dynamic axes given for '{name}', which is not an input "
                             f"(inputs: {', '.join(names)})", hint="use the input's name")
        tensor = tensors[names.index(name)]
        for axis, label in axes.items():
            if not 0 < axis < tensor.dim():
                raise UsageError(f"input {name} has no axis {axis} to make dynamic "
                                 f"(shape {tuple(tensor.shape)}; axis 0, the batch, always is)",
                                 hint=f"use an axis from 1 to {tensor.dim() - 1}")
            label = str(label)
            if label == BATCH_AXIS_NAME:
                raise UsageError(f"'{BATCH_AXIS_NAME}' names axis 0; call axis {axis} of {name} "
                                 "something else", hint="e.g. sequence")
            size = int(tensor.shape[axis])
            if sizes.setdefault(label, size) != size:
                raise UsageError(f"dynamic axis '{label}' has sizes {sizes[label]} and {size} "
                                 "in the example inputs", hint="axes that share a label share a size")
            checked.setdefault(name, {})[axis] = label
    return checked


def parse_dynamic_axis(text: str) -> tuple[str, int, str]:
    """``input_ids:1=sequence`` → ("input_ids", 1, "sequence"); the label defaults to ``<name>_<axis>``."""
    name, sep, rest = text.rpartition(":")
    axis_text, _, label = rest.partition("=")
    if not sep or not name or not axis_text.strip().isdigit():
        raise UsageError(f"--dynamic-axis '{text}' is not INPUT:AXIS[=LABEL]",
                         hint="e.g. --dynamic-axis input_ids:1=sequence")
    return name, int(axis_text), label or f"{name}_{axis_text.strip()}"


def _describe(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__module__}.{type(value).__qualname__}".replace("builtins.", "")


def one_line(exc: BaseException) -> str:
    """An exception's first line, at most 300 characters (the rest is under TRITONKIT_DEBUG)."""
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= 300 else line[:297] + "..."
