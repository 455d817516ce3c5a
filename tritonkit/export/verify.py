"""Does the exported graph compute what the PyTorch module computes?

First the ONNX checker (with shape inference); then ONNX Runtime against PyTorch eager
on random inputs at several batch sizes (1 and a small one always; a middle one and the
maximum within a CPU budget, or always if asked) and, for dynamic axes besides the batch,
other lengths than the example's. Each output is compared with
``|onnx - torch| <= atol + rtol * |torch|``; the report keeps the largest absolute and
relative error per output. ``atol`` is meant for an output of unit scale: one whose
largest finite magnitude is below 1 has it scaled down by that magnitude, or an output of
1e-6 would pass whatever ONNX Runtime returned. A NaN or infinity matches only the same in
the other runtime, and an output with no finite value left to compare is refused, not
passed. Integer and boolean outputs match exactly. Triton splits every output along its
first axis to answer each request of a batch, so each output's first axis must be the
batch, and each sample's output must not depend on the other samples its batch holds.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import torch

from tritonkit.errors import ExportError, UsageError, VerificationError
from tritonkit.export import user_code
from tritonkit.export.length_rules import LengthRules, breaking_lengths
from tritonkit.export.onnx_export import NOT_BATCH_FIRST_HINT
from tritonkit.export.spec import BATCH_AXIS_NAME, FORWARD_DUTY, ModelInputs, one_line

# Defaults by precision: fp32 kernels differ in summation order between frameworks.
DEFAULT_TOLERANCES = {
    "float64": (1e-7, 1e-6),
    "float32": (1e-4, 1e-3),
    "float16": (1e-2, 1e-2),
    "bfloat16": (5e-2, 2e-2),
}
EXACT = (0.0, 0.0)  # integer and boolean outputs must match exactly
_REL_FLOOR = 1e-6   # relative error is measured against max(|expected|, this)
_SLICE = 1 << 16    # elements compared at a time (_compare_floats)
PROVIDER = "CPUExecutionProvider"
# Samples of the largest batch checked against the same samples run alone: enough to find
# a model that mixes samples (every row but the first usually differs), cheap at any batch.
INDEPENDENCE_ROWS = 8
# The most a verification case's inputs and outputs may take together. Triton takes any
# --max-batch-size up to int32; a batch that large of even a tiny model would be gigabytes
# of random inputs and outputs, held by PyTorch and ONNX Runtime at once (the kernel killed
# the export): past this, the largest batch verified is the largest that fits.
CASE_IO_BYTES = 256 * 2**20
# What the verified batches' runs may cost by default, in process CPU seconds, as a share
# of the exporter's own: the middle and largest batches are verified only within it (a
# large CNN's runs at every batch cost twice its export), batch 1 and a small batch always.
# Below 1, so that the export's other steps (saving, the checker, ONNX Runtime's session)
# fit beside it in twice a bare export's time: BERT-base's and GPT-2's runs at every batch
# take 0.4-0.5 of it, ResNet-50's 0.8 at batch 16 alone (docs/benchmarks.md).
BUDGET_SHARE = 0.6
# ...and never less than this: a small model's exporter takes milliseconds (TorchScript),
# and cutting a verification that cheap would only make its batches depend on the noise.
BUDGET_FLOOR_S = 2.0
VERIFY_BATCHES = ("budget", "all")


def budget_for(exporter_cpu_s: float) -> float:
    """The CPU seconds the default (budgeted) verification may take after an exporter took
    ``exporter_cpu_s``."""
    return max(BUDGET_SHARE * exporter_cpu_s, BUDGET_FLOOR_S)


EXAMPLE_LABEL = "example inputs"


@dataclass(frozen=True)
class Case:
    """One verification run: a batch size, a length per dynamic label, and the inputs.

    ``optional``: verified only while the budget allows (the middle and largest batches)."""

    label: str
    batch: int
    lengths: dict[str, int]
    tensors: tuple[torch.Tensor, ...]
    optional: bool = False


def check_graph(path: Path, serialized: bytes | None = None) -> None:
    """The ONNX checker with full shape inference; an ExportError if the graph is invalid.

    ``serialized``: the graph at ``path`` as written, where it holds its weights; checked
    from memory, since onnx 1.22 reads a file a byte at a time (a second for 440 MB). A
    graph with its weights beside it is checked from ``path``, which finds them.
    """
    try:
        onnx.checker.check_model(serialized or str(path), full_check=True)
    except Exception as exc:
        hint = "rerun with TRITONKIT_DEBUG=1; try another --opset"
        if "bfloat16" in str(exc):      # Conv, LSTM, ConstantOfShape… take none before opset 22
            hint = BFLOAT16_HINT.removesuffix("; or pass --no-verify")
        raise ExportError(f"the exported graph fails the ONNX checker: {one_line(exc)}",
                          hint=hint) from exc


def verification_cases(inputs: ModelInputs, max_batch_size: int, *, seed: int = 0) -> list[Case]:
    """The example itself, then random inputs at batch 1, a small batch, a middle batch and
    the maximum; the last two ``optional`` (verify_against_torch's budget).

    The small batch is 2, or 3 when the example's is 2: a graph that holds only at the
    example's batch, or only at 1 (the dynamo exporter specialises a size of 1), fails at
    one of them. Dynamic lengths: longer at the small batch, shorter at the others, so a
    graph that baked in any size fails without the optional cases, which stay cheap.
    """
    example_lengths = _example_lengths(inputs)
    longer = {label: size + max(1, size // 2) for label, size in example_lengths.items()}
    shorter = {label: size // 2 if size > 1 else 2 for label, size in example_lengths.items()}
    small = min(max_batch_size, 3 if inputs.batch_size == 2 else 2)
    middle = (max_batch_size + 1) // 2
    plan = [(1, shorter, False), (small, longer, False), (middle, shorter, True),
            (max_batch_size, shorter, True)]
    generator = torch.Generator().manual_seed(seed)
    cases = [Case(EXAMPLE_LABEL, inputs.batch_size, example_lengths, inputs.tensors)]
    planned: set[int] = set()
    for batch, lengths, optional in plan:
        if batch in planned:
            continue
        planned.add(batch)
        cases.append(Case(f"batch {batch}", batch, dict(lengths),
                          _random_inputs(inputs, batch, lengths, generator), optional))
    return cases


def _elements(case: Case) -> int:
    return sum(tensor.numel() for tensor in case.tensors)


def _example_lengths(inputs: ModelInputs) -> dict[str, int]:
    return {label: int(inputs.tensors[inputs.names.index(name)].shape[axis])
            for name, axes in inputs.dynamic_axes.items() for axis, label in axes.items()}


def _shape(inputs: ModelInputs, name: str, tensor: torch.Tensor, batch: int,
           lengths: dict[str, int]) -> tuple[int, ...]:
    shape = list(tensor.shape)
    for axis, label in inputs.axes_of(name).items():
        shape[axis] = batch if label == BATCH_AXIS_NAME else lengths[label]
    return tuple(shape)


def _random_inputs(inputs: ModelInputs, batch: int, lengths: dict[str, int],
                   generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Random inputs like the example's (_random_like) at ``batch`` and ``lengths``."""
    return tuple(_random_like(tensor, _shape(inputs, name, tensor, batch, lengths),
                              generator).to(tensor.device)
                 for name, tensor in zip(inputs.names, inputs.tensors))


def _random_like(example: torch.Tensor, shape: tuple[int, ...], generator: torch.Generator):
    """Random values in the example's range: same mean and spread, or the same integer span.

    The spread comes from the example's finite values only: one NaN or infinity in it
    would make every random input NaN, and NaN matches NaN, so nothing would be checked.
    """
    if example.dtype == torch.bool:
        return _keep_rows_unmasked(example, torch.randint(0, 2, shape, generator=generator).bool())
    if example.is_floating_point():
        sample = example.detach().double()       # a factory's example may require grad
        sample = sample[torch.isfinite(sample)]
        mean = float(sample.mean()) if sample.numel() else 0.0
        std = float(sample.std()) if sample.numel() > 1 else 1.0
        std = std if np.isfinite(std) and std > 0 else 1.0
        # Drawn in the example's precision (float32 at least): a batch of images is
        # millions of values, and float64 draws cost five times as much.
        drawn = torch.promote_types(example.dtype, torch.float32)
        values = torch.randn(shape, generator=generator, dtype=drawn).mul_(std).add_(mean)
        return values.to(example.dtype)
    low, high = int(example.min()), int(example.max())
    if high == torch.iinfo(torch.int64).max:
        # randint's bound is exclusive, and one past int64's largest value overflows it
        # (hashed ids span the whole range): that one value is left to the example to check.
        if low == high:
            return torch.full(shape, high, dtype=example.dtype)
        high -= 1
    values = torch.randint(low, high + 1, shape, generator=generator, dtype=example.dtype)
    return _keep_rows_unmasked(example, values)


def _keep_rows_unmasked(example: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """A 0/1 example whose rows all begin alike is a mask (attention, padding), in either
    convention: 1 = keep (Hugging Face's attention_mask) or True = padded (PyTorch's
    key_padding_mask), the first place being a kept token either way. No real row is all
    padding, and one that is makes attention divide by zero — NaN in the graph where
    PyTorch's plain path may not be — a false failure: random rows begin as the example's."""
    if example.dim() < 2 or not example.numel() or not values.numel():
        return values
    binary = bool(((example == 0) | (example == 1)).all())
    first = example[..., 0]
    if binary and bool((first == first.flatten()[0]).all()):
        values = values.clone()
        values[..., 0] = first.flatten()[0]
    return values


def tolerance_for(dtype: str, atol: float | None, rtol: float | None) -> tuple[float, float]:
    """(atol, rtol) for an output of numpy dtype name ``dtype``.

    Given values win for floating outputs; integer and boolean outputs (class indices,
    masks) always match exactly, whatever --atol/--rtol say.
    """
    if dtype not in DEFAULT_TOLERANCES:
        return EXACT
    default_atol, default_rtol = DEFAULT_TOLERANCES[dtype]
    return (default_atol if atol is None else atol, default_rtol if rtol is None else rtol)


@contextlib.contextmanager
def reference_mode():
    """PyTorch eager as the exporters trace it: no gradients, and no attention fast path.

    In eval mode without gradients, nn.MultiheadAttention and nn.TransformerEncoder take
    a fused fast path; given a padding mask it computes on nested tensors and returns
    zeros at the padded positions, where the plain path, the one both exporters trace,
    computes values. The reference would differ from every correct graph there. The
    fast path's multi-line prototype warning about nested tensors goes with it.

    And in full FP32 on a CUDA model: PyTorch lets cuDNN convolutions (and, if a user
    asked, matrix products) round their inputs to TF32 on Ampere and newer cards, 10
    mantissa bits, so a correct FP32 graph would differ from the reference by ~1e-3 and
    fail FP32 tolerances. The user's settings are put back after.

    A user who set PyTorch's per-backend ``fp32_precision`` settings (2.9 and later) has
    them set instead: after those, the older switches raise ("a mix of the legacy and new
    APIs"). They reach oneDNN on the CPU as well, where ``bf16`` would round a CPU
    reference too.
    """
    enabled = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with _full_fp32(), torch.no_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")
            yield
    finally:
        torch.backends.mha.set_fastpath_enabled(enabled)


# The kernels' own FP32 precision settings in PyTorch 2.9 and later: "ieee" is full FP32,
# "none" takes the backend's (and then the global) setting.
_PRECISION_SETTINGS = ("cuda.matmul", "cudnn.conv", "cudnn.rnn",
                       "mkldnn.matmul", "mkldnn.conv", "mkldnn.rnn")


@contextlib.contextmanager
def _full_fp32():
    """Every FP32 kernel of the reference in full FP32, the user's settings put back after.

    The legacy switches where they still answer: PyTorch 2.9's own reading of them raises
    while a new-style setting is in force, inside the model's forward() as well.
    """
    try:
        cudnn_tf32 = torch.backends.cudnn.allow_tf32
        matmul_precision = torch.get_float32_matmul_precision()
    except RuntimeError:                 # the user set the new per-backend settings
        settings = [found for found in map(_precision_setting, _PRECISION_SETTINGS) if found]
        before = [setting.fp32_precision for setting in settings]
        try:
            for setting in settings:
                setting.fp32_precision = "ieee"
            yield
        finally:
            for setting, value in zip(settings, before):
                setting.fp32_precision = value
        return
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = cudnn_tf32
        torch.set_float32_matmul_precision(matmul_precision)


def _precision_setting(name: str):
    """``torch.backends.<name>`` if it has the ``fp32_precision`` setting, else None."""
    found = torch.backends
    for part in name.split("."):
        found = getattr(found, part, None)
    return found if found is not None and hasattr(found, "fp32_precision") else None


def torch_outputs(module: torch.nn.Module, tensors: tuple[torch.Tensor, ...]) -> list[np.ndarray]:
    """PyTorch eager's outputs, flattened in the order the exporters flatten them.

    forward() gets copies: one that works on its input in place (``x.div_(255)``) would
    otherwise change the inputs ONNX Runtime is then fed, and the example the next
    cases' random inputs are drawn from.
    """
    with reference_mode():
        result = module(*(tensor.clone() for tensor in tensors))
    leaves, _ = torch.utils._pytree.tree_flatten(result)
    return [to_numpy(leaf) for leaf in leaves]


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A tensor on any device as a numpy array (NumPy has no bfloat16: as float32)."""
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.numpy()


def open_session(path: Path):
    """An ONNX Runtime session on the graph at ``path`` (CPU provider); a VerificationError
    if it cannot load it. It lets go of the GIL while it loads: export runs it in a thread
    beside the ONNX checker, which does not."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    # Fatal only: a run or load that fails raises, and the export's one line says it; ORT
    # would log the same error to stderr first, in red.
    options.log_severity_level = 4
    # Its threads sleep between runs rather than spin: PyTorch computes in between.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(str(path), options, providers=[PROVIDER])
    except Exception as exc:
        raise VerificationError(f"ONNX Runtime cannot load the exported graph: {one_line(exc)}",
                                hint="try another --opset, or the other exporter") from exc


def verify_against_torch(path: Path, module: torch.nn.Module, inputs: ModelInputs, *,
                         output_names: tuple[str, ...], max_batch_size: int,
                         atol: float | None = None, rtol: float | None = None,
                         example_outputs: list[torch.Tensor] | None = None,
                         loaded: onnx.ModelProto | None = None,
                         session: Future | None = None,
                         budget_cpu_s: float | None = None,
                         length_rules: LengthRules | None = None) -> dict:
    """Run the graph in ONNX Runtime and PyTorch on every case; a VerificationError if they differ.

    ``module`` takes the tensors by position and returns a flat tuple (forward.ForwardCall);
    ``example_outputs``, its outputs on the example inputs, ``loaded``, the model at
    ``path``, and ``session``, open_session(path) under way, where the caller has them
    already. ``budget_cpu_s``: the process CPU seconds the cases' runs (PyTorch, ONNX
    Runtime, the comparison) may take, None for no limit: an optional case
    (verification_cases) runs only if the cases run so far and its estimate (_Checked)
    stay within it. ``length_rules``: what the exporter assumed of the dynamic lengths; a
    length near the example's that breaks one is verified too (_check_length_rules).
    Returns the verification section of the export report.
    """
    import onnxruntime as ort

    _refuse_bfloat16(path, loaded)
    example = Case(EXAMPLE_LABEL, inputs.batch_size, _example_lengths(inputs), inputs.tensors)
    example_outputs = [to_numpy(tensor) for tensor in example_outputs] \
        if example_outputs is not None else _reference(module, example)
    batch_limit = verifiable_batch(inputs, example_outputs, max_batch_size)
    planned = verification_cases(inputs, batch_limit)

    def reference(case: Case) -> list[np.ndarray]:
        return example_outputs if case.tensors is inputs.tensors else \
            _reference(module, case, example.lengths, inputs)

    session = session.result() if session is not None else open_session(path)
    checked = _Checked(path, module, session, inputs.names, output_names, atol, rtol)
    left_out = []
    for case in planned:
        if case.optional and budget_cpu_s is not None and \
                checked.cpu_seconds + checked.estimate(case) > budget_cpu_s:
            left_out.append(case.batch)
            continue
        checked.run(case, reference)
    rule = _check_length_rules(length_rules, inputs, example.lengths, batch_limit, checked)
    tolerances = checked.tolerances
    verified = {
        "passed": True,
        "runtime": f"onnxruntime {ort.__version__}",
        "provider": PROVIDER,
        "tolerances": {name: {"atol": a, "rtol": r} for name, (a, r) in tolerances.items()},
        "max_errors": {name: {**found, "rtol": tolerances[name][1], "passed": True}
                       for name, found in checked.worst.items()},
        "cases": checked.cases,
        "independent_samples": _check_independent_samples(
            path, session, inputs.names, output_names, *checked.largest, tolerances, atol, rtol),
        "batches": sorted({case["batch"] for case in checked.cases}),
        "plan": "all" if budget_cpu_s is None else "budget",
    }
    if rule is not None:
        verified["length_rule"] = rule
    if budget_cpu_s is not None:
        verified["budget"] = {"cpu_seconds": round(budget_cpu_s, 3),
                              "spent_cpu_seconds": round(checked.cpu_seconds, 3)}
    if left_out:
        verified["left_out"] = left_out
        verified["left_out_note"] = (
            f"batch {', '.join(map(str, left_out))} not verified, over the verification budget "
            f"({budget_cpu_s:.1f} CPU s): --verify-batches all verifies them")
    if batch_limit < max_batch_size:
        verified["largest_batch"] = (
            f"verified up to batch {batch_limit}, not --max-batch-size {max_batch_size}: a "
            f"batch of {max_batch_size}'s inputs and outputs alone would take "
            f"{max_batch_size * _io_bytes_per_sample(inputs, example_outputs) / 2**30:.3g} GiB here")
    return verified


def _check_length_rules(rules: LengthRules | None, inputs: ModelInputs,
                        example_lengths: dict[str, int], batch_limit: int,
                        checked: _Checked) -> dict | None:
    """Verify at the nearest sizes that break a rule the exporter assumed (length_rules):
    where PyTorch answers there, ONNX Runtime must answer the same, or the graph serves such
    lengths wrong; where PyTorch refuses them too, the rule is the model's own. Returns the
    report's record of it, None if no rule breaks near the example."""
    found = breaking_lengths(rules, inputs, example_lengths, batch_limit)
    if found is None:
        return None
    batch, lengths, rule = found
    tensors = _random_inputs(inputs, batch, lengths, torch.Generator().manual_seed(1))
    case = Case(f"batch {batch}", batch, lengths, tensors)
    record = {"rule": rule, "batch": batch, "lengths": lengths}
    with user_code.running(f"the model's forward() at {_where(case)}", FORWARD_DUTY):
        try:
            expected = torch_outputs(checked.module, tensors)
        except Exception as exc:        # the model refuses such lengths itself
            return {**record, "model_refuses": True,
                    "outcome": f"the model's own limit: forward() raised {type(exc).__name__} "
                               f"at {_where(case)} too"}
    try:
        checked.run(case, lambda _: expected)
    except VerificationError as exc:
        raise VerificationError(
            f"the graph holds only where {rule}, as torch.export assumed from the example "
            f"(forward() branches on a length; ONNX does not check it): {exc.message}",
            hint="make forward() compute every length the same way (pad by (-n) % k rather "
                 "than under an if), or export that axis static") from exc
    return {**record, "model_refuses": False,
            "outcome": f"ONNX Runtime answers as PyTorch at {_where(case)}"}


class _Checked:
    """The cases run so far: each output's tolerances and worst errors, each case's record
    and CPU cost, and the largest case with ONNX Runtime's outputs (for the independence
    check)."""

    def __init__(self, path: Path, module: torch.nn.Module, session, input_names: tuple[str, ...],
                 output_names: tuple[str, ...], atol: float | None, rtol: float | None):
        self.path, self.module, self.session = path, module, session
        self.input_names, self.output_names = input_names, output_names
        self.atol, self.rtol = atol, rtol
        self.declared = {value.name: value.shape for value in session.get_outputs()}
        self.tolerances: dict[str, tuple[float, float]] = {}
        self.worst: dict[str, dict] = {name: {} for name in output_names}
        self.cases: list[dict] = []
        self.largest: tuple[Case, list[np.ndarray]] | None = None
        # (input elements, CPU seconds) of each random case run, and batch 1's seconds
        self.costs: list[tuple[int, float]] = []
        self.single = 0.0

    @property
    def cpu_seconds(self) -> float:
        return sum(cost for _, cost in self.costs)

    def estimate(self, case: Case) -> float:
        """The CPU seconds ``case`` would take, by its input elements (samples times their
        lengths): on the line through the two largest cases run, and never below the
        largest's cost per element (a CNN's cost per image grows with the batch, past the
        caches); plus the samples the independence check would run alone on top of those
        it runs now, each at batch 1's cost."""
        (low, low_cost), (high, cost) = sorted(self.costs)[-2:]
        size = _elements(case)
        line = cost + (cost - low_cost) / (high - low) * (size - high) if high > low else 0.0
        more_rows = len(_rows_to_check(case.batch)) - len(_rows_to_check(self.largest[0].batch))
        return max(line, cost / high * size) + max(0, more_rows) * self.single

    def run(self, case: Case, reference: Callable[[Case], list[np.ndarray]]) -> None:
        """ONNX Runtime on ``case`` against PyTorch's outputs (``reference``), timed; a
        VerificationError if an output differs, or is not batch-first, or is shaped unlike
        the graph says."""
        started = time.process_time()
        self._check(case, reference(case))
        cost = time.process_time() - started
        if case.label != EXAMPLE_LABEL:     # the example's reference was computed before
            self.costs.append((max(_elements(case), 1), cost))
            self.single = cost if case.batch == 1 else self.single
        self.cases[-1]["cpu_seconds"] = round(cost, 4)

    def _check(self, case: Case, expected: list[np.ndarray]) -> None:
        output_names, tolerances, atol, rtol = self.output_names, self.tolerances, self.atol, self.rtol
        feed = {name: to_numpy(tensor) for name, tensor in zip(self.input_names, case.tensors)}
        try:
            actual = self.session.run(list(output_names), feed)
        except Exception as exc:
            raise VerificationError(f"ONNX Runtime failed at {_where(case)}: {one_line(exc)}",
                                    hint="the graph baked in a size; check the dynamic axes") from exc
        errors = {}
        for name, want, got in zip(output_names, expected, actual):
            _refuse_unbatched(name, want, case)
            if want.shape != got.shape:
                raise VerificationError(
                    f"output {name} has shape {list(got.shape)} in ONNX Runtime but "
                    f"{list(want.shape)} in PyTorch at {_where(case)}",
                    hint="the graph baked in a size; declare the axis dynamic")
            if not _fits(self.declared[name], got.shape):
                raise VerificationError(
                    f"output {name} is declared {_spell(self.declared[name])} in the graph but is "
                    f"{list(got.shape)} at {_where(case)}",
                    hint="the exporter fixed a dynamic size in the graph's output shape")
            tolerances.setdefault(name, tolerance_for(_dtype_name(want, got), atol, rtol))
            found = compare(want, got, *tolerances[name])
            abs_error, rel_error = found.max_abs_error, found.max_rel_error
            errors[name] = {"max_abs_error": abs_error, "max_rel_error": rel_error,
                            "shape": list(got.shape), "tolerance_share": found.tolerance_share}
            if found.atol < tolerances[name][0]:
                errors[name]["atol_scaled"] = found.atol    # an output smaller than 1
            _keep_worst(self.worst[name], found)
            if not found.within:
                _refuse_nondeterministic(self.module, case, output_names, expected, atol, rtol)
                _refuse_integer_near_tie(self.path, feed, name, want, got,
                                         f"differs from PyTorch at {_where(case)}", atol, rtol)
                raise VerificationError(
                    f"output {name} differs from PyTorch at {_where(case)}: max abs error "
                    f"{abs_error:.3g}, max rel error {rel_error:.3g} "
                    f"({_tolerances_said(want, *tolerances[name])})",
                    hint="if the difference is expected (reduced precision) widen --atol/--rtol; "
                         "otherwise forward() depends on something tracing cannot capture "
                         "(Python state, data-dependent branches)")
            if not _compared_anything(want, got):
                raise UsageError(
                    f"output {name} is NaN or infinite everywhere at {_where(case)}, in PyTorch "
                    "and ONNX Runtime alike, so verification compared none of it",
                    hint="give example inputs the model computes finite outputs for: the random "
                         "inputs are drawn like them (their mean and spread, or their integer "
                         "range); or pass --no-verify")
        self.cases.append({"case": case.label, "batch": case.batch, "lengths": case.lengths,
                           "outputs": errors})
        if self.largest is None or case.batch >= self.largest[0].batch:
            self.largest = (case, actual)


def _keep_worst(worst: dict, found: Comparison) -> None:
    """Fold one case's comparison of an output into its worst so far: the largest errors
    and tolerance share, and the smallest atol applied (scaled where the output is below 1)."""
    worst["max_abs_error"] = max(worst.get("max_abs_error", 0.0), found.max_abs_error)
    worst["max_rel_error"] = max(worst.get("max_rel_error", 0.0), found.max_rel_error)
    worst["tolerance_share"] = max(worst.get("tolerance_share", 0.0), found.tolerance_share)
    worst["atol"] = min(worst.get("atol", found.atol), found.atol)


def _reference(module: torch.nn.Module, case: Case,
               example_lengths: dict[str, int] | None = None,
               inputs: ModelInputs | None = None) -> list[np.ndarray]:
    with user_code.running(f"the model's forward() at {_where(case)}", FORWARD_DUTY):
        return _reference_outputs(module, case, example_lengths, inputs)


def _reference_outputs(module: torch.nn.Module, case: Case, example_lengths: dict[str, int] | None,
                       inputs: ModelInputs | None) -> list[np.ndarray]:
    try:
        return torch_outputs(module, case.tensors)
    except Exception as exc:  # the model itself, whichever exporter: the user's to fix
        hint = "Triton sends any batch from 1 to --max-batch-size: forward() must work for each"
        other = [label for label, size in case.lengths.items()
                 if size != (example_lengths or case.lengths).get(label)]
        alike = _undeclared_alike(inputs, example_lengths or {}, other) if inputs else []
        if alike:
            # attention_mask left fixed beside a dynamic input_ids of the same length: the
            # lengths verification varies reach one and not the other
            hint = ("; ".join(f"{name}'s axis {axis} is as long as the {label} axis ({size}) "
                              f"but not dynamic" for name, axis, label, size in alike)
                    + ": declare it too, e.g. " + " ".join(
                        f"--dynamic-axis {name}:{axis}={label}" for name, axis, label, _ in alike))
        elif other:
            # A position table ends somewhere, a U-Net halves and doubles: the lengths
            # tried are the example's plus half and half of it.
            hint = (f"a dynamic axis takes any length: forward() must work at other "
                    f"{', '.join(other)} lengths than the example's; verification tries half "
                    "as long again and half as long, so give an example the model takes at "
                    "both (at most two thirds of a longest length; a multiple of 64 for a "
                    "network that halves it five times)")
        raise UsageError(f"the model's forward() raised {type(exc).__name__} at "
                         f"{_where(case)}: {one_line(exc)}", hint=hint) from exc


def _undeclared_alike(inputs: ModelInputs, example_lengths: dict[str, int],
                      labels: list[str]) -> list[tuple[str, int, str, int]]:
    """(input, axis, label, size) for each fixed non-batch axis of an input as long, in the
    example, as a dynamic axis whose ``labels`` verification varied."""
    found = []
    for name, tensor in zip(inputs.names, inputs.tensors):
        declared = inputs.dynamic_axes.get(name, {})
        for axis in range(1, tensor.dim()):
            if axis in declared:
                continue
            label = next((label for label in labels
                          if example_lengths.get(label) == tensor.shape[axis]), None)
            if label is not None:
                found.append((name, axis, label, int(tensor.shape[axis])))
    return found


def _refuse_nondeterministic(module: torch.nn.Module, case: Case, output_names: tuple[str, ...],
                             expected: list[np.ndarray], atol: float | None,
                             rtol: float | None) -> None:
    """A UsageError if PyTorch itself answers ``case`` differently a second time.

    A random forward() (torch.rand, a dropout forced on, a sampled output) or one that keeps
    state between calls matches no graph, not even its own export: without this the
    difference reads as a precision or tracing problem, and the hint to widen the
    tolerances would only hide it.
    """
    again = _reference(module, case)
    for name, first, second in zip(output_names, expected, again):
        abs_error, _, within = _compare(first, second,
                                        *tolerance_for(first.dtype.name, atol, rtol))
        if not within:
            raise UsageError(
                f"forward() is not deterministic: two PyTorch runs on the same inputs differ "
                f"in output {name} by up to {abs_error:.3g} at {_where(case)}, so no exported "
                "graph can match it", hint="take randomness and Python state out of forward() "
                "(torch.rand*, F.dropout(training=True), sampling, a counter on self; a module "
                "torch.jit.trace'd in train() mode keeps its dropout: trace it after "
                "model.eval()), or pass --no-verify if it is meant to be served")


def verifiable_batch(inputs: ModelInputs, example_outputs: list[np.ndarray],
                     max_batch_size: int) -> int:
    """The largest batch to verify: ``max_batch_size``, or fewer where a batch that large
    of inputs and outputs would take more than CASE_IO_BYTES (dynamic axes counted at about
    the longest lengths the cases use, half as long again as the example's)."""
    per_sample = _io_bytes_per_sample(inputs, example_outputs) * (1.5 if inputs.dynamic_axes else 1)
    return max(1, min(max_batch_size, int(CASE_IO_BYTES // max(per_sample, 1))))


def _io_bytes_per_sample(inputs: ModelInputs, outputs: list[np.ndarray]) -> float:
    total = sum(t.numel() * t.element_size() for t in inputs.tensors) + sum(o.nbytes for o in outputs)
    return total / max(inputs.batch_size, 1)


def _refuse_unbatched(name: str, output: np.ndarray, case: Case) -> None:
    """A VerificationError unless PyTorch's output has one row per sample of the case.

    Triton hands row i of every output to the request that sent sample i. An output
    whose first axis is something else (an RNN's state [layers, batch, hidden], a sum
    over the batch, a flattened batch) cannot be split so, even where ONNX Runtime
    agrees with PyTorch on it.
    """
    first = output.shape[0] if output.ndim else None
    if first == case.batch:
        return
    shape = f"shape {list(output.shape)}" if output.ndim else "a scalar"
    raise VerificationError(
        f"output {name} has {shape} at {_where(case)}: its first axis is not the batch "
        f"({case.batch})",
        hint=NOT_BATCH_FIRST_HINT)


def _check_independent_samples(path: Path, session, input_names: tuple[str, ...],
                              output_names: tuple[str, ...], case: Case,
                              batched: list[np.ndarray],
                              tolerances: dict[str, tuple[float, float]],
                              atol: float | None = None, rtol: float | None = None) -> dict:
    """Compare rows of a batched run of the graph with the same samples run alone.

    Triton's dynamic batching runs requests from unrelated clients as one batch. A graph
    whose sample i depends on the other samples (statistics over the batch, an RNN
    reading the first axis as time) answers each client according to who else was in
    the batch, though it matches PyTorch, which does the same. A VerificationError if
    any checked row differs beyond the output's tolerances; else the report's record.
    """
    if case.batch < 2:   # --max-batch-size 1: Triton never puts two requests in one batch
        return {"batch": case.batch, "rows": []}
    rows = _rows_to_check(case.batch)
    for row in rows:
        feed = {name: to_numpy(tensor[row:row + 1])
                for name, tensor in zip(input_names, case.tensors)}
        alone = session.run(list(output_names), feed)
        for name, together, single in zip(output_names, batched, alone):
            abs_error, _, within = _compare(single, together[row:row + 1], *tolerances[name])
            if not within:
                _refuse_integer_near_tie(path, feed, name, single, together[row:row + 1],
                                         f"of sample {row} of {_where(case)} differs from "
                                         "that sample run alone", atol, rtol)
                raise VerificationError(
                    f"output {name} of one sample depends on the other samples in its batch: "
                    f"sample {row} of {_where(case)} differs from that sample run alone by up "
                    f"to {abs_error:.3g} ({_tolerances_said(single, *tolerances[name])})",
                    hint="Triton batches requests from unrelated clients together: make each "
                         "sample's output depend on that sample alone (no statistics across "
                         "the first axis; RNNs with batch_first=True); tritonkit serves "
                         "every model batched (no --max-batch-size 0)")
    return {"batch": case.batch, "rows": rows}


def _rows_to_check(batch: int) -> list[int]:
    """Up to INDEPENDENCE_ROWS rows spread over a batch of 2 or more, first and last included."""
    count = min(batch, INDEPENDENCE_ROWS)
    return sorted({round(i * (batch - 1) / (count - 1)) for i in range(count)})


def _refuse_bfloat16(path: Path, loaded: onnx.ModelProto | None) -> None:
    graph = (loaded or onnx.load(str(path), load_external_data=False)).graph
    bf16 = [v.name for v in (*graph.input, *graph.output)
            if v.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16]
    if bf16:
        raise UsageError(f"{', '.join(bf16)} {'is' if len(bf16) == 1 else 'are'} bfloat16, which "
                         "ONNX Runtime's CPU provider cannot verify (no NumPy type, few kernels)",
                         hint=BFLOAT16_HINT)


BFLOAT16_HINT = ("export the model in float32 (module.float()): the A10 profile serves it in "
                 "FP16 through TensorRT; or pass --no-verify")


def scaled_atol(want: np.ndarray, atol: float) -> float:
    """The absolute tolerance for float output ``want``: ``atol`` times its largest finite
    magnitude where that is below 1 (never below _REL_FLOOR of it).

    ``atol`` is set for outputs of unit scale (logits, activations). Against an output whose
    values are all far below it (1e-6 and less: a probability of a rare class, a scaled
    residual) it would pass any answer, zeros included: such an output is compared as if
    scaled up to 1, so a tolerance is the same share of every output it applies to.
    """
    return atol * min(1.0, max(_largest_finite(want), _REL_FLOOR))


def _largest_finite(values: np.ndarray) -> float:
    """The largest finite magnitude in ``values`` (0 when none is finite)."""
    flat = values.reshape(-1)
    largest = 0.0
    for start in range(0, flat.size, _SLICE):        # see _compare_floats
        part = np.abs(flat[start:start + _SLICE])
        top = float(part.max(initial=0.0))
        if not np.isfinite(top):
            top = float(part[np.isfinite(part)].max(initial=0.0))
        largest = max(largest, top)
    return largest


def _tolerances_said(want: np.ndarray, atol: float, rtol: float) -> str:
    """The tolerances a comparison of ``want`` used, as an error message says them."""
    scaled = scaled_atol(want, atol) if want.dtype.kind == "f" else atol
    if scaled < atol:
        return (f"atol {atol:g} scaled by the output's largest magnitude "
                f"{_largest_finite(want):.3g} to "
                f"{scaled:.3g}, rtol {rtol:g}")
    return f"atol {atol:g}, rtol {rtol:g}"


def _is_float(want: np.ndarray, got: np.ndarray) -> bool:
    return "f" in {want.dtype.kind, got.dtype.kind}


def _compared_anything(want: np.ndarray, got: np.ndarray) -> bool:
    """Whether a float output holds a value finite in both runtimes (an empty one counts as
    compared): where both are NaN, or the same infinity, they match but say nothing."""
    if want.size == 0 or not _is_float(want, got):
        return True
    return bool((np.isfinite(want) & np.isfinite(got)).any())


def _refuse_integer_near_tie(path: Path, feed: dict[str, np.ndarray], name: str,
                             want: np.ndarray, got: np.ndarray, differs: str,
                             atol: float | None, rtol: float | None) -> None:
    """A VerificationError naming the cause when a differing integer or boolean output is
    computed from float values (an ArgMax, a comparison, a Round then Cast).

    Two float values within rounding of each other (a near-tie) can be ordered one way by
    PyTorch and the other by ONNX Runtime (or by one runtime at two batch sizes): the class
    index flips though every float agrees within tolerance. Integer outputs are still
    compared exactly (a wrong class is wrong, and no tolerance on an index means anything),
    but the message must say so, not send the user after a tracing bug or to --atol. For
    an ArgMax or ArgMin output the near-tie is checked (``feed`` is the run's inputs): the
    two candidates' scores in ONNX Runtime must agree within the float tolerances.
    """
    if _is_float(want, got) or want.dtype.kind not in "biu":
        return
    source = _float_source(path, name)
    if source is None:
        return
    differ = int(np.count_nonzero(want != got)) if want.shape == got.shape else want.size
    said = f"output {name} ({want.dtype.name}) {differs} in {differ} of {want.size} elements"
    way_out = ("serve the float values instead (they are verified within tolerance) and "
               "compute this output from them in the client, or pass --no-verify")
    gap = _argmax_gap(path, feed, name, want, got, atol, rtol) if source in ("ArgMax", "ArgMin") \
        else None
    if gap is None:
        raise VerificationError(
            f"{said}: it is computed from float values ({source}), and where two of them are "
            "within rounding of each other (a near-tie) either runtime can come out either "
            "way; integer and boolean outputs must match exactly",
            hint=f"a few differing elements are near-ties, which --atol/--rtol cannot relax "
                 f"(they apply to float outputs): {way_out}; many are not: forward() depends "
                 "on something tracing cannot capture")
    largest, within = gap
    if within:
        raise VerificationError(
            f"{said}, each a near-tie: the two {source} candidates' scores differ by at most "
            f"{largest:.3g}, within their tolerances, so rounding picks either; integer "
            "outputs must match exactly",
            hint=f"--atol/--rtol apply to float outputs only: {way_out}")
    # Not a near-tie: the scores themselves differ, which the generic message says.


def _argmax_gap(path: Path, feed: dict[str, np.ndarray], name: str, want: np.ndarray,
                got: np.ndarray, atol: float | None,
                rtol: float | None) -> tuple[float, bool] | None:
    """For an output an ArgMax or ArgMin node writes: the largest difference, in ONNX
    Runtime's own scores, between the index PyTorch chose and the one ONNX Runtime chose,
    and whether every such difference is within the scores' tolerances. None if the
    output is not the node's own or its scores cannot be read."""
    import onnxruntime as ort

    model = onnx.load(str(path), load_external_data=False)
    node = next((n for n in model.graph.node if name in n.output), None)
    if node is None or node.op_type not in ("ArgMax", "ArgMin") or want.shape != got.shape:
        return None
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    scores_name = node.input[0]
    model.graph.output.append(onnx.ValueInfoProto(name=scores_name))
    # Beside the graph, so that weights stored beside it are found.
    probe = path.with_name(f".{path.stem}.near-tie.onnx")
    try:
        onnx.save_model(model, probe)
        options = ort.SessionOptions()
        options.log_severity_level = 3
        session = ort.InferenceSession(str(probe), options, providers=[PROVIDER])
        (scores,) = session.run([scores_name], feed)
    except Exception:   # ONNX Runtime will not expose them: the generic message it is
        return None
    finally:
        probe.unlink(missing_ok=True)
    axis = attributes.get("axis", 0) % scores.ndim
    keep = attributes.get("keepdims", 1)
    picked = [np.take_along_axis(scores.astype(np.float64),
                                 (index if keep else np.expand_dims(index, axis)).astype(np.int64),
                                 axis) for index in (want, got)]
    if picked[0].shape != picked[1].shape:
        return None
    score_atol, score_rtol = tolerance_for(scores.dtype.name, atol, rtol)
    gap = np.abs(picked[0] - picked[1])
    within = bool(np.all(gap <= scaled_atol(scores, score_atol) + score_rtol * np.abs(picked[1])))
    return float(gap.max()), within


def _float_source(path: Path, name: str) -> str | None:
    """The operator that computes integer output ``name`` from float values in the graph
    at ``path`` (ArgMax, Greater, Cast...), or None if it is integer arithmetic throughout."""
    model = onnx.load(str(path), load_external_data=False)
    with contextlib.suppress(Exception):    # without inferred types, the declared ones
        model = onnx.shape_inference.infer_shapes(model)
    graph = model.graph
    types = {value.name: value.type.tensor_type.elem_type
             for value in (*graph.input, *graph.output, *graph.value_info)}
    types.update({tensor.name: tensor.data_type for tensor in graph.initializer})
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
              onnx.TensorProto.BFLOAT16}
    producers = {output: node for node in graph.node for output in node.output}
    pending, seen = [name], set()
    while pending:
        node = producers.get(pending.pop())
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if any(types.get(value) in floats for value in node.input):
            return node.op_type
        pending.extend(value for value in node.input if value)
    return None


@dataclass(frozen=True)
class Comparison:
    """One output's comparison: its largest absolute and relative errors, whether every
    element is within ``atol + rtol·|want|``, the largest share of that any element's error
    took (at most 1 passes: it says why an output passed where max abs and max rel errors,
    often of different elements, cannot), and the atol applied (scaled_atol)."""

    max_abs_error: float
    max_rel_error: float
    within: bool
    tolerance_share: float
    atol: float


def compare(want: np.ndarray, got: np.ndarray, atol: float, rtol: float) -> Comparison:
    """``got`` against ``want`` within ``atol + rtol·|want|`` per element.

    Integers and booleans are compared exactly, as integers (a float64 detour would equate
    2**53 and 2**53 + 1). Floats: NaN matches NaN, an infinity matches only the same
    infinity, and a mismatch against either counts as an infinite error; ``atol`` is
    scaled down for an output smaller than 1 (scaled_atol).
    """
    if want.size == 0:
        return Comparison(0.0, 0.0, True, 0.0, atol)
    kinds = {want.dtype.kind, got.dtype.kind}
    if kinds & set("OSUV"):              # strings and the like: equal or not
        return _exact(bool(np.all(want == got)), np.inf, np.inf, atol)
    if "c" in kinds:
        diff = np.abs(want.astype(np.complex128) - got.astype(np.complex128))
        scale = np.abs(want.astype(np.complex128))
        allowed = atol + rtol * scale
        within = bool(np.all(diff <= allowed))
        return Comparison(float(diff.max()), float((diff / np.maximum(scale, _REL_FLOOR)).max()),
                          within, _share(diff, allowed), atol)
    if not kinds & {"f"}:                # integers and booleans, as Python integers
        same = want.dtype == got.dtype
        differ = want != got if same else want.astype(object) != got.astype(object)
        if not differ.any():
            return _exact(True, 0.0, 0.0, atol)
        pairs = list(zip(want[differ].tolist(), got[differ].tolist()))
        diff = max(abs(int(w) - int(g)) for w, g in pairs)
        scale = max(max(abs(int(w)) for w, _ in pairs), 1)
        return _exact(False, float(diff), float(diff) / scale, atol)
    return _compare_floats(want.reshape(-1), got.reshape(-1), atol, rtol)


def _compare_floats(want: np.ndarray, got: np.ndarray, atol: float, rtol: float) -> Comparison:
    """compare for flat float arrays, a slice at a time: a language model's logits are
    tens of millions of values, and each full-size temporary cost fresh memory (seconds of
    page faults per verified batch) where a slice's stay in the cache."""
    slices = [slice(start, start + _SLICE) for start in range(0, want.size, _SLICE)]
    applied = scaled_atol(want, atol)
    max_abs = max_rel = share = 0.0
    within = True
    for part in slices:
        diff, scale = _float_errors(want[part], got[part])
        allowed = scale * rtol
        allowed += applied
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            within = within and bool(np.all(diff <= allowed))
            max_rel = max(max_rel, float((diff / np.maximum(scale, _REL_FLOOR)).max()))
        max_abs = max(max_abs, float(diff.max()))
        share = max(share, _share(diff, allowed))
    return Comparison(max_abs, max_rel, within, share, applied)


def _compare(want: np.ndarray, got: np.ndarray, atol: float, rtol: float):
    """(max abs error, max rel error, every element within atol + rtol·|want|): compare's."""
    found = compare(want, got, atol, rtol)
    return found.max_abs_error, found.max_rel_error, found.within


def _exact(equal: bool, abs_error: float, rel_error: float, atol: float) -> Comparison:
    return Comparison(0.0 if equal else abs_error, 0.0 if equal else rel_error, equal,
                      0.0 if equal else np.inf, atol)


def _share(diff: np.ndarray, allowed: np.ndarray) -> float:
    """The largest diff / allowed (0 where both are 0, infinite past a zero allowance)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        share = diff / allowed
    share[diff == 0] = 0.0
    return float(share.max())


def _float_errors(want: np.ndarray, got: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each element's absolute error (0 where both are NaN or the same infinity, infinite
    where only one is) and the magnitude it is relative to (|want|, 0 where not finite).

    In float32 for float32 (and narrower) outputs, float64 otherwise: a model's logits are
    tens of millions of values, compared at every verified batch.
    """
    dtype = np.result_type(want.dtype, got.dtype, np.float32)
    want_, got_ = want.astype(dtype, copy=False), got.astype(dtype, copy=False)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.subtract(want_, got_)
        np.abs(diff, out=diff)
        scale = np.abs(want_)
        if not (np.isfinite(diff).all() and np.isfinite(scale).all()):
            matched = (np.isnan(want_) & np.isnan(got_)) | (np.isinf(want_) & (want_ == got_))
            diff[matched] = 0.0
            diff[~matched & ~(np.isfinite(want_) & np.isfinite(got_))] = np.inf
            scale[~np.isfinite(scale)] = 0.0
    return diff, scale


def tolerance_share(want: np.ndarray, got: np.ndarray, atol: float, rtol: float) -> float:
    """The largest share of its own tolerance any element's error takes (compare's)."""
    return compare(want, got, atol, rtol).tolerance_share


def _dtype_name(want: np.ndarray, got: np.ndarray) -> str:
    """The output's precision: ONNX Runtime's (bfloat16 reaches NumPy as float32 from torch)."""
    return got.dtype.name if got.dtype.name in DEFAULT_TOLERANCES else want.dtype.name


def _fits(declared, shape) -> bool:
    """Whether an actual shape matches the graph's declared one (ints fixed, names free)."""
    return len(declared) == len(shape) and all(
        not isinstance(want, int) or want == got for want, got in zip(declared, shape))


def _spell(declared) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) else (d or "?") for d in declared) + "]"


def _where(case: Case) -> str:
    lengths = "".join(f", {label} {size}" for label, size in case.lengths.items())
    return f"{case.label}{lengths}" if case.label.startswith("batch") else \
        f"the {case.label} (batch {case.batch}{lengths})"
