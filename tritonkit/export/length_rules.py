"""What ``torch.export`` assumed of the dynamic axes' lengths, which the ONNX graph forgets.

Where ``forward()`` branches on a length (``if s % 4: pad``), ``torch.export`` follows the
example's branch and records the condition as a runtime assertion (``Eq(Mod(s, 4), 0)``);
where a size can only be some multiple, it writes the input's size as one (``4*s``). The
dynamo exporter drops both from the ONNX graph, which then serves every other length wrong
or not at all. Verification tries a length near the example's that breaks such a rule
(``verify.verify_against_torch``): PyTorch either refuses it too (the model's own limit)
or answers, and then ONNX Runtime must answer the same.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Iterator

import sympy
import torch
from sympy.printing.str import StrPrinter

from tritonkit.export.spec import BATCH_AXIS_NAME, ModelInputs

# How far from the example's length a rule's break is looked for, each way: a rule with a
# longer period (a multiple of 16) breaks at one of these too, where the size itself is
# written as a multiple.
NEAR = 8


@dataclass
class LengthRules:
    """Each dynamic axis's size as the program wrote it (``sizes``: label → the expressions
    of its inputs' sizes) and the conditions it asserted (``asserts``)."""

    sizes: dict[str, list[sympy.Expr]] = field(default_factory=dict)
    asserts: list[sympy.Expr] = field(default_factory=list)

    def __bool__(self) -> bool:
        """Whether there is anything to break: an assertion, or a size written as a form."""
        return bool(self.asserts) or any(not isinstance(expr, sympy.Symbol)
                                         for exprs in self.sizes.values() for expr in exprs)

    def broken_by(self, lengths: dict[str, int]) -> str | None:
        """The first rule that ``lengths`` (every label's, the batch's too) break, said for
        a person; None if they keep every rule, or if a rule cannot be decided."""
        values: dict[sympy.Symbol, sympy.Integer] = {}
        for label, exprs in self.sizes.items():
            for expr in exprs:
                linear = _linear(expr)
                if linear is None:
                    continue                          # not linear in one symbol: not decided
                symbol, a, b = linear
                if (lengths[label] - b) % a:
                    return f"{label} is a multiple of {a}" if b == 0 else f"{label} is {a}k + {b}"
                values[symbol] = sympy.Integer((lengths[label] - b) // a)
        for condition in self.asserts:
            if not condition.free_symbols <= values.keys():
                continue
            try:
                holds = condition.xreplace(values)
            except (TypeError, ValueError, ZeroDivisionError):
                continue
            if holds == sympy.false:
                return self._said(condition)
        return None

    def _said(self, condition: sympy.Expr) -> str:
        """``condition`` with each size's symbol written through its label
        (``sequence % 4 == 0``; ``height/4`` for a size written ``4*s``)."""
        names = {}
        for label, exprs in self.sizes.items():
            for linear in filter(None, map(_linear, exprs)):
                symbol, a, b = linear
                names.setdefault(symbol, (sympy.Symbol(label) - b) / a)
        try:
            return _Said().doprint(condition.xreplace(names))
        except (TypeError, ValueError):
            return _Said().doprint(condition)


class _Said(StrPrinter):
    """Python's spelling: ``sequence % 4 == 0`` for ``Eq(Mod(sequence, 4), 0)``."""

    def _print_Equality(self, expr) -> str:
        return f"{self._print(expr.lhs)} == {self._print(expr.rhs)}"

    def _print_Unequality(self, expr) -> str:
        return f"{self._print(expr.lhs)} != {self._print(expr.rhs)}"

    def _print_Mod(self, expr) -> str:
        return " % ".join(self.parenthesize(arg, 50) for arg in expr.args)

    _print_PythonMod = _print_Mod


def breaking_lengths(rules: LengthRules | None, inputs: ModelInputs,
                     example_lengths: dict[str, int],
                     batch_limit: int) -> tuple[int, dict[str, int], str] | None:
    """``(batch, lengths, the rule said)``: the nearest sizes to the example's, one axis
    changed within the span verification tries (half as long to half as long again; a batch
    up to ``batch_limit``), that break a rule the example keeps; None if there are none."""
    sizes = {**example_lengths, BATCH_AXIS_NAME: inputs.batch_size}
    if not rules or rules.broken_by(sizes) is not None:
        return None                 # the example itself "breaks" one: a rule not understood
    for label in [*example_lengths, BATCH_AXIS_NAME]:
        if label not in rules.sizes:
            continue
        size = sizes[label]
        low, high = (1, batch_limit) if label == BATCH_AXIS_NAME else \
            (max(1, size // 2), size + max(1, size // 2))
        for step in range(1, NEAR + 1):
            for candidate in (size + step, size - step):
                changed = {**sizes, label: candidate}
                broken = rules.broken_by(changed) if low <= candidate <= high else None
                if broken is not None:
                    return changed.pop(BATCH_AXIS_NAME), changed, broken
    return None


def _linear(expr: sympy.Expr) -> tuple[sympy.Symbol, int, int] | None:
    """``(s, a, b)`` for a size written ``a*s + b`` (a > 0); None for any other form."""
    if len(expr.free_symbols) != 1:
        return None
    symbol = next(iter(expr.free_symbols))
    try:
        poly = sympy.Poly(expr, symbol)
    except sympy.PolynomialError:
        return None
    if poly.degree() != 1:
        return None
    a, b = (int(c) for c in poly.all_coeffs())
    return (symbol, a, b) if a > 0 else None


# -- recording them as the dynamo exporter runs -------------------------------------------

_recording = threading.local()
_INSTALL_LOCK = threading.Lock()


@contextlib.contextmanager
def recorded(inputs: ModelInputs) -> Iterator[LengthRules]:
    """The rules of the program the dynamo exporter captures in this thread, filled in as it
    hands the program on to its decompositions (which drop the assertions). Empty where
    torch has no such step."""
    rules = LengthRules()
    _install()
    _recording.now = (rules, inputs)
    try:
        yield rules
    finally:
        _recording.now = None


def _install() -> None:
    try:
        from torch.onnx._internal.exporter import _core
    except ImportError:
        return
    with _INSTALL_LOCK:
        prepare = getattr(_core, "_prepare_exported_program_for_export", None)
        if prepare is None or getattr(prepare, "_tritonkit_records", False):
            return

        def recording(exported_program, *args, **kwargs):
            now = getattr(_recording, "now", None)
            if now is not None:
                with contextlib.suppress(Exception):    # a rule missed is a check not made
                    _read(exported_program, *now)
            return prepare(exported_program, *args, **kwargs)

        recording._tritonkit_records = True
        _core._prepare_exported_program_for_export = recording


def _read(program, rules: LengthRules, inputs: ModelInputs) -> None:
    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    user_inputs = list(program.graph_signature.user_inputs)
    for name, placeholder in zip(inputs.names, user_inputs):
        shape = getattr(placeholders[placeholder].meta.get("val"), "shape", ())
        for axis, label in inputs.axes_of(name).items():
            size = shape[axis] if axis < len(shape) else None
            if isinstance(size, torch.SymInt):
                rules.sizes.setdefault(label, []).append(size.node.expr)
    for node in program.graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.aten._assert_scalar.default:
            condition = node.args[0]
            value = condition.meta.get("val") if isinstance(condition, torch.fx.Node) else None
            if isinstance(value, torch.SymBool):
                if value.node.expr != sympy.true:
                    rules.asserts.append(value.node.expr)
