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
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from tritonkit.errors import UsageError
from tritonkit.export import user_code
from tritonkit.fileio import check_regular

BATCH_AXIS_NAME = "batch"
FACTORY_DUTY = "a factory returns (module, example_inputs[, dynamic_axes])"
FORWARD_DUTY = "forward() returns the model's outputs"


def default_input_name(index: int) -> str:
    return f"INPUT__{index}"


def default_output_name(index: int) -> str:
    return f"OUTPUT__{index}"


@dataclass(frozen=True)
class ModelInputs:
    """The example inputs, in forward() order, with their names and dynamic axes.

    ``dynamic_axes[name]`` maps an axis (never 0: the batch is always dynamic) to its label.
    ``keywords`` are the forward() parameters the tensors are passed as (a dict's keys);
    empty, they are passed by position.
    """

    names: tuple[str, ...]
    tensors: tuple[torch.Tensor, ...]
    dynamic_axes: dict[str, dict[int, str]] = field(default_factory=dict)
    keywords: tuple[str, ...] = ()

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
    with user_code.running(f"the factory {spec}", FACTORY_DUTY):
        try:
            built = factory()
        except Exception as exc:  # the user's code: its failure is their input, not our bug
            raise UsageError(f"factory {spec} raised {type(exc).__name__}: {one_line(exc)}",
                             hint="fix the factory; TRITONKIT_DEBUG=1 shows the traceback") from exc
    return _unpack(built, spec)


def names_a_file(target: str) -> bool:
    """Whether a SPEC's part before the colon is a file (else a module name)."""
    return target.endswith(".py") or "/" in target or "\\" in target


def _import_target(target: str):
    if names_a_file(target):
        path = Path(target)
        check_regular(path, what="model file",
                      hint="pass FILE.py:FACTORY with a path to an existing file")
        name = f"_tritonkit_model_{abs(hash(str(path.resolve())))}"
        loader_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(loader_spec)
        # Let the file import its neighbours, as `python path/to/file.py` would, and find
        # itself in sys.modules, as dataclasses and pickling look it up there.
        sys.modules[name] = module
        try:
            with _importing(path), _on_sys_path(path.resolve().parent):
                try:
                    loader_spec.loader.exec_module(module)
                except Exception as exc:
                    raise UsageError(f"importing {path} raised {type(exc).__name__}: "
                                     f"{one_line(exc)}", hint="fix the file; TRITONKIT_DEBUG=1 "
                                     "shows the traceback") from exc
        except BaseException:
            sys.modules.pop(name, None)
            raise
        return module
    with _importing(target):
        try:
            # A console script (and Python under -P or PYTHONSAFEPATH) leaves the working
            # folder off sys.path, where `python -c "import examples.mlp"` has it: look
            # there first, as uvicorn's and gunicorn's app-dir does.
            with _on_sys_path(Path.cwd()):
                return importlib.import_module(target)
        except ModuleNotFoundError as exc:
            if exc.name and target.startswith(exc.name):
                raise UsageError(f"no Python module named '{target}'",
                                 hint="pass FILE.py:FACTORY, or a module importable from "
                                      "here") from exc
            raise UsageError(f"importing {target} failed: {one_line(exc)}",
                             hint="install what the module needs") from exc
        except Exception as exc:
            raise UsageError(f"importing {target} raised {type(exc).__name__}: {one_line(exc)}",
                             hint="fix the module; TRITONKIT_DEBUG=1 shows the traceback") from exc


def _importing(what: str | Path):
    """The boundary around a SPEC's file or module while it is imported."""
    return user_code.running(f"importing {what}", "importing the file only defines the "
                             "factory (a script's own run goes under if __name__ == "
                             "\"__main__\":)")


@contextmanager
def _on_sys_path(folder: Path, last: bool = False) -> Iterator[None]:
    """``folder`` on sys.path (first, or ``last``) while the block runs; taken off again."""
    entry = str(folder)
    if last:
        sys.path.append(entry)
    else:
        sys.path.insert(0, entry)
    try:
        yield
    finally:
        with suppress(ValueError):  # the user's code may have taken it off itself
            at = len(sys.path) - 1 - sys.path[::-1].index(entry) if last else sys.path.index(entry)
            del sys.path[at]


@contextmanager
def beside_the_file(spec: str) -> Iterator[None]:
    """A FILE.py:FACTORY's folder on sys.path while its factory and the model's forward()
    run, which may import the file's neighbours then, as under ``python FILE.py``. Last
    on it: past the file's own import (which has it first), a neighbour named like a
    package tritonkit imports later (onnx.py, say) must not take its place."""
    target, sep, _ = spec.rpartition(":")
    if not (sep and names_a_file(target)):
        yield
        return
    with _on_sys_path(Path(target).resolve().parent, last=True):
        yield


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
    """The example inputs checked against forward()'s parameters; a dict in forward()'s order.

    A dict keyed by forward()'s parameter names is passed as keyword arguments (as Hugging
    Face models and ``torch.onnx.export(kwargs=...)`` take them): in any order, optional
    parameters left out. A key that names no parameter beside ones that do (and forward()
    takes no ``**kwargs``) is refused, and so is a parameter without a default that no key
    gives. The dict comes back with forward()'s parameters first, in forward()'s order,
    then any ``**kwargs`` keys as given. A dict none of whose keys names a parameter only
    names the inputs: it is passed by position, in its own order (passes_by_keyword), as a
    tensor or tuple is; a keyword-only parameter without a default is refused for those.
    """
    signature = _forward_signature(module)
    if signature is None:
        return example_inputs
    if not passes_by_keyword(module, example_inputs):
        _refuse_unfed(signature, None)
        return example_inputs
    parameters = signature.parameters.values()
    by_name = {str(key): value for key, value in example_inputs.items()}
    named = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    positional_only = [p.name for p in parameters if p.kind == p.POSITIONAL_ONLY]
    takes_any = any(p.kind == p.VAR_KEYWORD for p in parameters)
    for key in by_name:
        if key in positional_only:
            raise UsageError(f"example input {key} names forward()'s positional-only parameter, "
                             "which cannot be given by name",
                             hint="give the example inputs as a tuple, in forward()'s order")
    strangers = [key for key in by_name if key not in named]
    if strangers and not takes_any:
        raise UsageError(f"forward({_parameter_list(signature)}) has no parameter named "
                         f"{', '.join(strangers)}",
                         hint="key the example inputs by forward()'s parameter names (they are "
                              "passed as keyword arguments; --input-names renames them for "
                              "Triton), or give a tuple, passed by position")
    _refuse_unfed(signature, list(by_name))
    if isinstance(module, torch.jit.ScriptModule):
        _refuse_gaps(signature, list(by_name))
    return {**{name: by_name[name] for name in named if name in by_name},
            **{key: value for key, value in by_name.items() if key not in named}}


def passes_by_keyword(module: torch.nn.Module, example_inputs: Any) -> bool:
    """Whether the example inputs go to forward() as keyword arguments: a dict, unless none
    of its keys names a parameter of forward() (nor does forward() take ``**kwargs``)."""
    if not isinstance(example_inputs, Mapping):
        return False
    signature = _forward_signature(module)
    if signature is None:
        return True
    parameters = signature.parameters.values()
    return any(p.kind == p.VAR_KEYWORD for p in parameters) or \
        any(str(key) == p.name for key in example_inputs for p in parameters
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY, p.POSITIONAL_ONLY))


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


def _refuse_unfed(signature: inspect.Signature, given: Sequence[str] | None) -> None:
    """Refuse a forward() parameter without a default that the example inputs leave out:
    ``given`` names a dict's keys; None means a tuple, passed by position, which cannot
    reach a keyword-only parameter."""
    for parameter in signature.parameters.values():
        if parameter.default is not parameter.empty or \
                parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if given is not None and parameter.name not in given:
            raise UsageError(f"forward()'s parameter {parameter.name} has no default, and the "
                             f"example inputs do not give it (they give {', '.join(given)})",
                             hint=f"add {parameter.name} to the example inputs' dict")
        if given is None and parameter.kind == parameter.KEYWORD_ONLY:
            raise UsageError(f"forward()'s keyword-only parameter {parameter.name} has no "
                             "default, and example inputs given as a tuple are passed by position",
                             hint=f"give the example inputs as a dict keyed by forward()'s "
                                  f"parameter names, {parameter.name} among them")


def _refuse_gaps(signature: inspect.Signature, given: Sequence[str]) -> None:
    """A TorchScript module is exported with its inputs by position: they must be its
    leading parameters, in any order."""
    leading = list(signature.parameters)[:len(given)]
    skipped = [name for name in leading if name not in given]
    if skipped:
        raise UsageError(f"the example inputs skip the TorchScript module's parameter(s) "
                         f"{', '.join(skipped)} (forward takes {_parameter_list(signature)}), "
                         "and its export passes them by position",
                         hint="give example inputs for forward()'s leading parameters")


def _parameter_list(signature: inspect.Signature) -> str:
    return ", ".join(p.name for p in signature.parameters.values()
                     if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))


def normalize_inputs(example_inputs: Any, *, input_names: Sequence[str] | None = None,
                     dynamic_axes: Mapping[str, Mapping[int, str]] | None = None,
                     by_keyword: bool = True) -> ModelInputs:
    """Names, tensors and dynamic axes of the example inputs, checked.

    Names come from ``input_names``, else from the dict's keys, else ``INPUT__<i>``. A
    dict's tensors are passed to forward() by its keys, unless ``by_keyword`` is false
    (passes_by_keyword).
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
    return ModelInputs(names=names, tensors=tensors, dynamic_axes=axes, keywords=keys if keys and by_keyword else ())


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
