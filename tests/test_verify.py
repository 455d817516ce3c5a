"""Verification against PyTorch: what counts as a match, per dtype, and which models it takes."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

import tritonkit
from tests.conftest import run_cli
from tritonkit.errors import EXIT_USAGE, UsageError, VerificationError
from tritonkit.export import onnx_export
from tritonkit.export.spec import normalize_inputs
from tritonkit.export.verify import _compare, verification_cases


def strict_json(text: str) -> dict:
    """JSON as other languages read it: no NaN or Infinity."""
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


class ArgmaxAndScores(torch.nn.Module):
    def forward(self, x):
        return x.argmax(dim=1), x > 0, x * 2


@pytest.mark.slow
def test_integer_and_boolean_outputs_match_exactly_whatever_atol_says(tmp_path):
    result = tritonkit.export(ArgmaxAndScores(), torch.randn(2, 5), name="argmax",
                              repository=tmp_path, atol=5, rtol=0.5)
    tolerances = result.report["verification"]["tolerances"]
    assert tolerances["OUTPUT__0"] == {"atol": 0.0, "rtol": 0.0}     # class index
    assert tolerances["OUTPUT__1"] == {"atol": 0.0, "rtol": 0.0}     # mask
    assert tolerances["OUTPUT__2"] == {"atol": 5, "rtol": 0.5}       # the scores: as asked
    # wrong class indices fail, even ones a float64 detour would call equal
    assert _compare(np.array([3, 1]), np.array([3, 2]), 5, 0.5)[2] is False
    big = np.array([2**53 + 1], np.int64)
    assert _compare(big, big - 1, 0, 0) == (1.0, pytest.approx(1 / 2**53), False)
    assert _compare(np.array([True, False]), np.array([True, True]), 0, 0)[2] is False
    # unsigned and mixed integers keep their magnitude; strings and complex numbers too
    top = np.array([2**64 - 1], np.uint64)
    assert _compare(top, np.array([0], np.uint64), 0, 0)[0] == float(2**64 - 1)
    assert _compare(np.array([2**53 + 1], np.uint64), np.array([2**53], np.int64), 0, 0)[2] is False
    assert _compare(np.array([1 + 2j]), np.array([1 + 3j]), 1e-4, 1e-3)[:1] == (1.0,)
    assert _compare(np.array(["a", "b"], object), np.array(["a", "c"], object), 0, 0)[2] is False
    assert _compare(np.array([b"a"]), np.array([b"a"]), 0, 0)[2] is True


def test_an_infinity_matches_only_the_same_infinity():
    inf = np.inf
    assert _compare(np.array([inf]), np.array([1.0]), 1e-4, 1e-3) == (inf, inf, False)
    assert _compare(np.array([-inf]), np.array([inf]), 1e-4, 1e-3)[2] is False
    assert _compare(np.array([1.0]), np.array([inf]), 1e-4, 1e-3)[2] is False
    assert _compare(np.array([-inf, 2.0]), np.array([-inf, 2.0 + 1e-5]), 1e-4, 1e-3)[2] is True
    assert _compare(np.array([np.nan]), np.array([np.nan]), 0, 0) == (0.0, 0.0, True)
    assert _compare(np.array([np.nan]), np.array([0.0]), 1e-4, 1e-3)[2] is False


class LogOfRelu(torch.nn.Module):
    def forward(self, x):
        return torch.log(torch.relu(x))      # -inf wherever x <= 0


@pytest.mark.slow
def test_matching_infinities_pass_and_the_report_stays_valid_json(tmp_path, capsys):
    example = torch.tensor([[1.0, -1.0, 2.0], [-3.0, 0.5, 4.0]])
    result = tritonkit.export(LogOfRelu(), example, name="log", repository=tmp_path)
    assert result.report["verification"]["passed"] is True
    strict_json((result.path / "export-report.json").read_text())
    assert "RuntimeWarning" not in capsys.readouterr().err


def test_a_model_file_using_dataclasses_and_postponed_annotations_imports(tmp_path, capsys):
    source = tmp_path / "dc_model.py"
    source.write_text(
        "from __future__ import annotations\n"
        "from dataclasses import dataclass\n"
        "import torch\n\n"
        "@dataclass\nclass Settings:\n    width: int = 4\n\n"
        "def build():\n"
        "    s = Settings()\n"
        "    return torch.nn.Linear(s.width, 2), torch.randn(2, s.width)\n")
    code = run_cli("export", f"{source}:build", "--name", "dc", "--repository", tmp_path / "repo",
                   "--exporter", "torchscript")
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "repo" / "dc" / "1" / "model.onnx").is_file()


class HalfPrecisionHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.linear(x).to(torch.bfloat16)


@pytest.mark.slow
def test_bfloat16_is_refused_with_the_float32_way_out_and_nothing_written(tmp_path):
    with pytest.raises(UsageError) as caught:
        tritonkit.export(HalfPrecisionHead(), torch.randn(2, 4), name="bf16", repository=tmp_path)
    assert caught.value.message.startswith("OUTPUT__0 is bfloat16, which ONNX Runtime's CPU "
                                           "provider cannot verify")
    assert "module.float()" in caught.value.hint and "--no-verify" in caught.value.hint
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_bfloat16_exported_unverified_is_typed_bf16_in_the_config(tmp_path, capsys):
    result = tritonkit.export(HalfPrecisionHead(), torch.randn(2, 4), name="bf16",
                              repository=tmp_path, verify=False)
    assert "data_type: TYPE_BF16" in (result.path / "config.pbtxt").read_text()


@pytest.mark.slow
def test_max_batch_size_1_exports_with_the_modern_exporter(tmp_path):
    result = tritonkit.export(torch.nn.Linear(4, 3), torch.randn(1, 4), name="single",
                              repository=tmp_path, max_batch_size=1, exporters=("dynamo",))
    assert result.report["exporter"] == "dynamo"
    assert "max_batch_size: 1" in (result.path / "config.pbtxt").read_text()


@pytest.mark.slow
def test_a_batch_limit_too_large_to_hold_here_is_verified_up_to_what_fits_and_said_so(
        tmp_path, monkeypatch):
    from tritonkit.export import verify

    # As --max-batch-size 100000000 of a small model against 256 MiB: the random inputs and
    # outputs of a batch that large (GiBs, in PyTorch and ONNX Runtime at once) got the
    # export killed by the kernel, leaving its staging folder behind.
    monkeypatch.setattr(verify, "CASE_IO_BYTES", 64 * 2**10)
    result = tritonkit.export(torch.nn.Linear(64, 64), torch.randn(2, 64), name="wide",
                              repository=tmp_path, max_batch_size=4096)
    verification = result.report["verification"]
    # 512 bytes a sample (64 floats in, 64 out): 128 samples fit 64 KiB
    assert max(case["batch"] for case in verification["cases"]) == 128
    assert verification["independent_samples"]["batch"] == 128
    said = "verified up to batch 128, not --max-batch-size 4096"
    assert verification["largest_batch"].startswith(said) and "0.00195 GiB" in verification["largest_batch"]
    assert any(note.startswith(said) for note in result.notes)
    assert "max_batch_size: 4096" in (result.path / "config.pbtxt").read_text()   # served as asked


@pytest.mark.slow
def test_weights_stored_beside_the_graph_are_hashed_and_served(tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_export, "_EXTERNAL_DATA_BYTES", 0)   # as past protobuf's 2 GiB
    result = tritonkit.export(torch.nn.Linear(64, 64), torch.randn(2, 64), name="external",
                              repository=tmp_path)
    data = result.path / "1" / "model.onnx.data"
    assert data.is_file()
    assert result.report["files"]["1/model.onnx.data"]["bytes"] == data.stat().st_size
    assert result.report["verification"]["passed"] is True


@pytest.mark.slow
def test_bfloat16_refusal_is_one_line_from_the_cli(tmp_path, capsys):
    source = tmp_path / "bf16_model.py"
    source.write_text("import torch\n"
                      "def build():\n"
                      "    return torch.nn.Linear(4, 3).to(torch.bfloat16), "
                      "torch.randn(2, 4, dtype=torch.bfloat16)\n")
    code = run_cli("export", f"{source}:build", "--name", "bf", "--repository", tmp_path / "repo")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_USAGE
    assert err[0].startswith("error: INPUT__0, OUTPUT__0 are bfloat16")
    assert "Traceback" not in "\n".join(err)


@pytest.mark.slow
def test_a_bfloat16_convolution_the_onnx_checker_refuses_is_told_the_float32_way_out(
        tmp_path, capsys):
    """A bf16 CNN's graph fails the ONNX checker before any verification (Conv takes no
    bfloat16 before opset 22), with or without --no-verify: the hint is the float32 way out,
    not "try another --opset", and the repository is untouched."""
    source = tmp_path / "bf16_cnn.py"
    source.write_text("import torch\n"
                      "def build():\n"
                      "    return (torch.nn.Conv2d(3, 4, 3).to(torch.bfloat16),\n"
                      "            torch.randn(2, 3, 8, 8, dtype=torch.bfloat16))\n")
    for verify in ((), ("--no-verify",)):
        code = run_cli("export", f"{source}:build", "--name", "bf", "--repository",
                       tmp_path / "repo", *verify)
        err = capsys.readouterr().err.strip().splitlines()
        assert code != 0 and "fails the ONNX checker" in err[0] and "bfloat16" in err[0]
        assert err[-1].startswith("hint: export the model in float32 (module.float()): the A10 "
                                  "profile serves it in FP16 through TensorRT")
        assert "--opset" not in err[-1]
        assert not (tmp_path / "repo" / "bf").exists()


class PaddedEncoder(torch.nn.Module):
    """A stock nn.TransformerEncoder (nested tensors on, the default) fed a padding mask,
    as users write it."""

    def __init__(self):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2)

    def forward(self, x, mask):
        return self.encoder(x, src_key_padding_mask=mask == 0)


@pytest.mark.slow
def test_a_transformer_encoder_with_padding_verifies_against_pytorchs_plain_path(tmp_path):
    # PyTorch's attention fast path (eval, no grad) returns zeros at padded positions,
    # where the path the exporters trace computes values: the reference must be that path.
    torch.manual_seed(0)
    mask = torch.ones(2, 6, dtype=torch.int64)
    mask[1, 3:] = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = tritonkit.export(PaddedEncoder(), {"x": torch.randn(2, 6, 16), "mask": mask},
                                  name="encoder", repository=tmp_path, max_batch_size=4,
                                  dynamic_axes={"x": {1: "sequence"}, "mask": {1: "sequence"}},
                                  exporters=("dynamo",))
    assert result.report["verification"]["passed"] is True
    assert not [w for w in caught if "nested tensors" in str(w.message)]
    assert torch.backends.mha.get_fastpath_enabled() is True, "the fast path is restored"


def test_the_pytorch_reference_runs_in_full_fp32_and_the_users_tf32_settings_come_back():
    """On an Ampere or newer card PyTorch lets cuDNN round FP32 convolutions to TF32 (and
    matmuls where a user asked): the reference would miss a correct FP32 graph by ~1e-3.
    Recorded from inside forward(), where the flags are read as the reference runs."""
    from tritonkit.export.verify import torch_outputs

    seen = []

    class Probe(torch.nn.Module):
        def forward(self, x):
            seen.append((torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision()))
            return x + 1

    before = (torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision())
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")          # a user who asked for TF32 matmuls
    try:
        torch_outputs(Probe(), (torch.zeros(2, 3),))
        assert seen == [(False, "highest")]
        assert (torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision()) == \
            (True, "high")
    finally:
        torch.backends.cudnn.allow_tf32 = before[0]
        torch.set_float32_matmul_precision(before[1])


def test_a_user_of_pytorchs_per_backend_precision_settings_gets_a_full_fp32_reference_too():
    """A user who set TF32 matmuls and bf16 oneDNN matmuls through PyTorch's newer settings
    (``torch.backends.cuda.matmul.fp32_precision``): the legacy calls raise then, and the
    export failed, blaming forward(). The reference runs with every kernel at "ieee" and
    the user's settings come back."""
    from tritonkit.export.verify import torch_outputs

    matmul, onednn = torch.backends.cuda.matmul, torch.backends.mkldnn.matmul
    seen = []

    class Probe(torch.nn.Module):
        def forward(self, x):
            seen.append((matmul.fp32_precision, onednn.fp32_precision))
            return x @ x.T

    before = (matmul.fp32_precision, onednn.fp32_precision)
    matmul.fp32_precision, onednn.fp32_precision = "tf32", "bf16"
    try:
        with pytest.raises(RuntimeError, match="legacy and new"):
            torch.get_float32_matmul_precision()          # what the export used to call
        x = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))  # whatever ran before
        [out] = torch_outputs(Probe(), (x,))
        assert seen == [("ieee", "ieee")]
        np.testing.assert_allclose(out, (x.double() @ x.double().T).numpy(), rtol=1e-6)
        assert (matmul.fp32_precision, onednn.fp32_precision) == ("tf32", "bf16")
    finally:
        matmul.fp32_precision, onednn.fp32_precision = before


def test_random_inputs_stay_finite_when_the_example_holds_a_nan():
    # NaN matches NaN: inputs made all-NaN by one NaN in the example would check nothing.
    example = torch.tensor([[1.0, float("nan"), 3.0], [2.0, float("inf"), 4.0]])
    for case in verification_cases(normalize_inputs(example), 8)[1:]:
        (tensor,) = case.tensors
        assert torch.isfinite(tensor).all(), case.label
        assert 0 < float(tensor.mean()) < 5, "spread like the example's finite values"


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_random_integer_inputs_span_the_examples_range_up_to_the_dtypes_largest_value(dtype):
    """Hashed ids fill int64 to its largest value; drawing up to one past it overflowed
    (an internal error, not an export)."""
    info = torch.iinfo(dtype)
    example = torch.tensor([[info.min, 0], [3, info.max]], dtype=dtype)
    drawn = [case.tensors[0] for case in verification_cases(normalize_inputs(example), 64)[1:]]
    assert all(tensor.dtype == dtype for tensor in drawn)
    assert torch.cat([t.flatten() for t in drawn]).unique().numel() > 100, "still random"
    constant = torch.full((2, 3), info.max, dtype=dtype)
    for case in verification_cases(normalize_inputs(constant), 4)[1:]:
        assert (case.tensors[0] == info.max).all(), "a constant example: constant inputs"


@pytest.mark.parametrize("mask,kept", [
    (torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]]), 1),                  # 1 = keep (attention_mask)
    (torch.tensor([[False, False, True], [False, False, False]]), False),  # True = padded
], ids=["attention mask", "key padding mask"])
def test_random_masks_never_hide_a_whole_row_when_the_examples_never_do(mask, kept):
    """A row that is all padding makes attention divide by zero (NaN in the graph, not
    always in PyTorch): no real input has one, so no random one may, in either convention."""
    for case in verification_cases(normalize_inputs(mask), 64)[1:]:
        (tensor,) = case.tensors
        assert (tensor == kept).any(dim=-1).all(), case.label
        assert (tensor != kept).any(), "still random: padding is checked too"


class PyTorchPaddedEncoder(PaddedEncoder):
    def forward(self, x, padded):
        return self.encoder(x, src_key_padding_mask=padded)


@pytest.mark.slow
def test_a_transformer_encoder_fed_pytorchs_own_padding_mask_verifies(tmp_path):
    torch.manual_seed(0)
    padded = torch.zeros(2, 6, dtype=torch.bool)
    padded[0, -1:] = True
    padded[1, -2:] = True
    result = tritonkit.export(PyTorchPaddedEncoder(), {"x": torch.randn(2, 6, 16), "padded": padded},
                              name="encoder", repository=tmp_path, max_batch_size=4,
                              dynamic_axes={"x": {1: "sequence"}, "padded": {1: "sequence"}},
                              exporters=("dynamo",))
    assert result.report["verification"]["passed"] is True


class NormalizesInPlace(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x):
        x.div_(255.0)                  # pixels to [0, 1], on the caller's tensor
        return self.linear(x)


@pytest.mark.slow
@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_a_forward_that_works_on_its_input_in_place_is_verified_on_the_inputs_it_was_given(
        tmp_path, exporter):
    """PyTorch runs on copies: had it divided the inputs ONNX Runtime is then fed (and the
    example the random inputs are drawn from), a correct graph reads as a forward() that is
    not deterministic, and shrunken random inputs let any graph through."""
    torch.manual_seed(0)
    model = NormalizesInPlace().eval()
    example = torch.rand(2, 4) * 255
    before = example.clone()
    result = tritonkit.export(model, example, name="pixels", repository=tmp_path,
                              exporters=[exporter])
    assert result.report["exporter"] == exporter
    assert torch.equal(example, before), "the caller's example is left as it was"

    import onnxruntime as ort
    session = ort.InferenceSession(str(tmp_path / "pixels" / "1" / "model.onnx"))
    pixels = np.full((1, 4), 200.0, np.float32)
    served = session.run(None, {"INPUT__0": pixels})[0]
    with torch.no_grad():
        expected = model(torch.from_numpy(pixels.copy())).numpy()
    np.testing.assert_allclose(served, expected, rtol=1e-4, atol=1e-5)


def test_an_example_that_requires_grad_is_drawn_from_without_autograd_warnings():
    # A factory's torch.randn(..., requires_grad=True): PyTorch's warning about turning it
    # into a Python number would land in the middle of the export's output.
    example = torch.randn(4, 8, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cases = verification_cases(normalize_inputs(example), 8)
    assert [case.batch for case in cases] == [4, 1, 2, 4, 8]


class OutOfDomain(torch.nn.Module):
    def forward(self, x):
        return torch.sqrt(x - 10)          # NaN for every input near the example's


@pytest.mark.slow
def test_an_output_nan_in_both_runtimes_everywhere_is_refused_not_passed(tmp_path):
    # NaN matches NaN: such an output had passed every case without one value compared.
    with pytest.raises(UsageError) as caught:
        tritonkit.export(OutOfDomain(), torch.randn(2, 4), name="nan", repository=tmp_path)
    assert caught.value.message == (
        "output OUTPUT__0 is NaN or infinite everywhere at the example inputs (batch 2), in "
        "PyTorch and ONNX Runtime alike, so verification compared none of it")
    assert caught.value.hint.startswith("give example inputs the model computes finite "
                                        "outputs for")
    assert list(tmp_path.iterdir()) == []
    # Where only some values are NaN, in both at the same places, the rest are compared;
    # a NaN or infinity against a finite value is a mismatch.
    nan = np.nan
    assert _compare(np.array([nan, 1.0]), np.array([nan, 1.0]), 1e-4, 1e-3)[2] is True
    assert _compare(np.array([nan, 1.0]), np.array([nan, 2.0]), 1e-4, 1e-3)[2] is False
    assert _compare(np.array([1.0, 1.0]), np.array([nan, 1.0]), 1e-4, 1e-3)[2] is False


class TinyFrozenBatch(torch.nn.Module):
    """A millionth of the input times the batch size, which the TorchScript trace freezes at
    the example's: a graph off by the batch's ratio, at a scale far below atol."""

    def forward(self, x):
        return x * 1e-6 * int(x.shape[0])


class TinyHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.linear(x) * 1e-6


@pytest.mark.slow
def test_an_output_far_below_atol_is_compared_relative_to_its_own_scale(tmp_path):
    # atol 1e-4 against values of 1e-6 had passed any answer: this graph is off by half.
    with pytest.raises(VerificationError) as caught:
        tritonkit.export(TinyFrozenBatch(), torch.randn(2, 4), name="tiny", repository=tmp_path,
                         exporters=("torchscript",))
    assert caught.value.message.startswith(
        "torchscript exporter: output OUTPUT__0 differs from PyTorch at batch 1")
    assert "(atol 0.0001 scaled by the output's largest magnitude " in caught.value.message
    # A correct graph of such an output passes, its scaled atol in the report.
    torch.manual_seed(0)
    result = tritonkit.export(TinyHead(), torch.randn(2, 4), name="head", repository=tmp_path)
    case = result.report["verification"]["cases"][1]["outputs"]["OUTPUT__0"]
    assert 0 < case["atol_scaled"] < 1e-9
    # atol is scaled by the output's largest magnitude below 1, and means what it says above.
    assert _compare(np.array([1e-6, 0.0]), np.array([0.0, 0.0]), 1e-4, 1e-3)[2] is False
    assert _compare(np.array([1e-6, 0.0]), np.array([1e-6, 1e-12]), 1e-4, 1e-3)[2] is True
    assert _compare(np.array([0.5, 0.0]), np.array([0.5, 4e-5]), 1e-4, 1e-3)[2] is True
    assert _compare(np.array([0.5, 0.0]), np.array([0.5, 6e-5]), 1e-4, 1e-3)[2] is False
    assert _compare(np.array([3.0, 0.0]), np.array([3.0, 9e-5]), 1e-4, 1e-3)[2] is True


class NearTie(torch.nn.Module):
    """Each class score and a copy a millionth apart, their order frozen by the TorchScript
    trace at the example's batch size: every float within tolerance, every argmax a tie."""

    def forward(self, x):
        nudge = 1e-6 * (int(x.shape[0]) - 10)
        return torch.stack([x, x + nudge], dim=1).argmax(dim=1)


@pytest.mark.parametrize("atol", [None, 1.0], ids=["default", "--atol 1"])
def test_an_integer_output_flipped_by_a_near_tie_fails_saying_so(tmp_path, atol):
    # It had read as a tracing problem, with the hint to widen --atol, which cannot help.
    with pytest.raises(VerificationError) as caught:
        tritonkit.export(NearTie(), torch.randn(2, 4), name="tie", repository=tmp_path,
                         exporters=("torchscript",), atol=atol)
    message = caught.value.message
    assert message.startswith("torchscript exporter: output OUTPUT__0 (int64) differs from "
                              "PyTorch at batch 16 in 64 of 64 elements, each a near-tie: the "
                              "two ArgMax candidates' scores differ by at most ")
    assert message.endswith("within their tolerances, so rounding picks either; integer "
                            "outputs must match exactly")
    assert caught.value.hint.startswith("--atol/--rtol apply to float outputs only")
    assert "--no-verify" in caught.value.hint
    assert list(tmp_path.iterdir()) == []
