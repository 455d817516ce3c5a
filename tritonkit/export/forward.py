"""forward() as the export calls it: the inputs by keyword or position, the outputs by name.

A dict of example inputs is passed as keyword arguments, a tuple by position. What
forward() returns is flattened into named tensors, since a Triton model has a flat list
of named outputs:

- a dict, a dataclass or a named tuple (a Hugging Face ``ModelOutput`` is all of these)
  names each tensor by its key or field; None values are left out;
- a container inside one adds its index or key after a dot (``hidden_states.0``);
- a key/value cache (an object with ``to_legacy_cache()``, as Hugging Face's caches have)
  is its layers' tensors: ``past_key_values.0.key``, ``past_key_values.0.value``, and
  ``.cross_key``/``.cross_value`` for an encoder-decoder's. A model served without past
  inputs gains nothing from them: build it with ``use_cache=False`` to leave them out;
- a tensor, or a tuple or list at the top, is unnamed: ``OUTPUT__<i>`` by default.

Both exporters and the verification call ForwardCall, so the graph's outputs come out
flat, in the order named here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from tritonkit.errors import UsageError

# A layer's tensors in a legacy key/value cache: self-attention's, then cross-attention's.
_CACHE_FIELDS = ("key", "value", "cross_key", "cross_value")


class ForwardCall(torch.nn.Module):
    """``model`` called as the export calls it: ``forward(*tensors)`` passes them by keyword
    (``keywords``, a dict's keys) or, with none, by position, and returns the outputs as one
    flat tuple of tensors, in named_outputs' order."""

    def __init__(self, model: torch.nn.Module, keywords: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.model = model
        self.keywords = keywords
        self.train(model.training)

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        result = call(self.model, tensors, self.keywords)
        return tuple(tensor for _, tensor in named_outputs(result))


def call(model: torch.nn.Module, tensors: tuple[torch.Tensor, ...], keywords: tuple[str, ...]):
    """``model(**dict(zip(keywords, tensors)))``, or ``model(*tensors)`` without keywords."""
    return model(**dict(zip(keywords, tensors))) if keywords else model(*tensors)


def named_outputs(result: Any) -> list[tuple[str | None, torch.Tensor]]:
    """Each tensor in ``result`` with its dotted name (None for one a tuple or list at the
    top holds, or a lone tensor), in order; a UsageError naming anything else found."""
    found: list[tuple[tuple[str, ...], torch.Tensor]] = []
    _walk(result, (), found)
    unnamed = isinstance(result, (torch.Tensor, list)) or \
        (isinstance(result, tuple) and not hasattr(result, "_fields"))
    return [(None if unnamed else ".".join(path), tensor) for path, tensor in found]


def _walk(value: Any, path: tuple[str, ...], found: list) -> None:
    if isinstance(value, torch.Tensor):
        found.append((path, value))
    elif value is None:
        return
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _walk(item, (*path, str(key)), found)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            _walk(getattr(value, field.name), (*path, field.name), found)
    elif isinstance(value, tuple) and hasattr(value, "_fields"):      # a named tuple
        for field, item in zip(value._fields, value):
            _walk(item, (*path, field), found)
    elif isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            _walk(item, (*path, str(index)), found)
    elif callable(getattr(value, "to_legacy_cache", None)):
        for layer, tensors in enumerate(value.to_legacy_cache()):
            fields = _CACHE_FIELDS if len(tensors) <= len(_CACHE_FIELDS) else \
                [str(i) for i in range(len(tensors))]
            for field, tensor in zip(fields, tensors):
                _walk(tensor, (*path, str(layer), field), found)
    else:
        where = f" as {'.'.join(path)}" if path else ""
        raise UsageError(f"the model's forward() returns {_type_name(value)}{where}, not a tensor",
                         hint="return tensors (alone, or in a tuple, a dict or a dataclass)")


def _type_name(value: Any) -> str:
    kind = type(value)
    module = "" if kind.__module__ == "builtins" else f"{kind.__module__}."
    return f"a {module}{kind.__qualname__}"
