"""`tritonkit loadtest --input-data`: real data sent as given (perf_analyzer's format too),
and data the model cannot take refused with what to give."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from tests.loadtest.conftest import _loadtest
from tritonkit.client import Endpoint
from tritonkit.errors import EXIT_USAGE, UsageError


@pytest.mark.server
def test_real_input_data_is_sent_and_a_wrong_input_name_is_refused(served, tmp_path, capsys):
    from tritonkit.loadtest import request_template

    data = tmp_path / "inputs.json"
    data.write_text(json.dumps({"INPUT__0": [1.0, 2.0, 3.0, 4.0]}))      # one sample
    template = request_template(Endpoint.from_deployment(served), "example", batch_size=3, input_data=data)
    (name, datatype, array), = template.inputs
    assert (name, datatype, array.shape) == ("INPUT__0", "FP32", (3, 4))   # repeated to the batch
    assert array[2].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert _loadtest(served, "--concurrency", "1", "--duration", "0.5", "--batch-size", "3",
                     "--input-data", data) == 0

    data.write_text(json.dumps({"pixels": [1.0]}))
    assert _loadtest(served, "--concurrency", "1", "--duration", "0.5", "--input-data", data) == EXIT_USAGE
    assert "names inputs the model does not have: pixels" in capsys.readouterr().err


@pytest.mark.server
def test_a_perf_analyzer_input_data_file_is_read_as_perf_analyzer_reads_it(served, tmp_path, capsys):
    """perf_analyzer's --input-data JSON, {"data": [{NAME: values}]}: one sample's values
    flat in row-major order (or {"content", "shape"}), taken in the model's shape — not
    refused as an input named "data" the model does not have. It lists requests to send
    in turn; we send one again and again, so a file of several is refused with the fix."""
    from tritonkit.loadtest import request_template

    endpoint = Endpoint.from_deployment(served)
    data = tmp_path / "pa.json"
    for value in ([1.0, 2.0, 3.0, 4.0], {"content": [1, 2, 3, 4], "shape": [4]}):
        data.write_text(json.dumps({"data": [{"INPUT__0": value}]}))
        template = request_template(endpoint, "example", batch_size=3, input_data=data)
        (name, datatype, array), = template.inputs
        assert (name, datatype, array.shape) == ("INPUT__0", "FP32", (3, 4))
        assert array[2].tolist() == [1.0, 2.0, 3.0, 4.0]

    data.write_text(json.dumps({"data": [{"INPUT__0": [1, 2, 3]}]}))
    with pytest.raises(UsageError, match="INPUT__0 holds 3 values; a sample of 4 takes 4"):
        request_template(endpoint, "example", input_data=data)
    data.write_text(json.dumps({"data": [{"INPUT__0": [1, 2, 3, 4]}, {"INPUT__0": [4, 3, 2, 1]}]}))
    assert _loadtest(served, "--concurrency", "1", "--duration", "0.5", "--input-data", data) == EXIT_USAGE
    first, hint = capsys.readouterr().err.splitlines()[:2]
    assert "holds 2 perf_analyzer requests" in first and "jq '{data: [.data[0]]}'" in hint


def _object_array_npz(path: Path) -> None:
    np.savez(path, INPUT__0=np.array([{"pixels": 1}], dtype=object))


def _huge_npz(path: Path) -> None:
    np.savez(path, INPUT__0=np.array([1e300, 0, 0, 0]))


@pytest.mark.server
@pytest.mark.parametrize("name, content, says", [
    ("ragged.json", b'{"INPUT__0": [[1, 2, 3, 4], [1, 2]]}', "input data for INPUT__0 in .* is ragged"),
    ("words.json", b'{"INPUT__0": ["a", "b", "c", "d"]}', "input data for INPUT__0 cannot be read as FP32"),
    ("latin1.json", b'{"INPUT__0": [1, 2, 3, 4], "caf\xe9": 1}', "is not UTF-8 text"),
    ("corrupt.npz", b"PK\x03\x04 not really a zip archive", "is not a readable .npz archive"),
    ("objects.npz", _object_array_npz, "input data for INPUT__0 in .* cannot be read"),
    ("short.json", b'{"INPUT__0": [1, 2]}', r"INPUT__0 has shape \[2\]; one sample of INPUT__0 has shape \[4\]$"),
    ("folder", None, "input data file .* is a folder"),
    ("inputs.txt", b"1 2 3 4", "input data file .* must be .npz or .json"),
    ("broken.json", b'{"INPUT__0": [1, 2', "input data file .* is not valid JSON"),
    ("list.json", b"[[1, 2, 3, 4]]", "input data file .* must hold an object"),
    ("huge.npz", _huge_npz, r"input data for INPUT__0: float64 values 1e\+300 cannot be sent as "
     "FP32 without changing them$"),
    ("huge.json", b'{"INPUT__0": [1e300, 0, 0, 0]}', r"INPUT__0: float64 values 1e\+300 cannot be "
     "sent as FP32"),
    ("empty.json", b"{}", r"input data file .* gives no input's data$"),
    ("empty-request.json", b'{"data": [{}]}', r"input data file .* gives no input's data$"),
    ("no-request.json", b'{"data": []}', r"input data file .* holds no perf_analyzer request$"),
    ("empty.npz", lambda path: np.savez(path), r"input data file .* gives no input's data$"),
], ids=["ragged rows", "strings for a number", "not UTF-8", "corrupt npz", "object array npz",
        "wrong sample shape", "a folder", "neither npz nor json", "broken json", "not an object",
        "npz values FP32 cannot hold", "json values FP32 cannot hold", "an empty object",
        "a perf_analyzer request without inputs", "perf_analyzer's form without a request",
        "an npz without arrays"])
def test_input_data_the_model_cannot_take_is_a_usage_error_that_names_it(served, tmp_path, capsys,
                                                                         name, content, says):
    path = tmp_path / name
    if content is None:
        path.mkdir()
    else:
        content(path) if callable(content) else path.write_bytes(content)
    code = _loadtest(served, "--concurrency", "1", "--duration", "0.5", "--input-data", path)
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    first, hint = err.splitlines()[:2]
    assert re.search(f"^error: .*{says}", first), err
    assert hint.startswith("hint: ") and "internal error" not in err and "Traceback" not in err


@pytest.mark.server
def test_input_data_of_another_batch_or_not_there_is_refused_with_what_to_give(served, tmp_path, capsys):
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps({"INPUT__0": [[1, 2, 3, 4]] * 3}))
    assert _loadtest(served, "--concurrency", "1", "--duration", "0.5", "--batch-size", "2",
                     "--input-data", rows) == EXIT_USAGE
    assert capsys.readouterr().err.splitlines() == [
        "error: input data for INPUT__0 has batch 3, not --batch-size 2",
        "hint: give INPUT__0 2 rows, or one sample without the batch axis (it is repeated to the "
        "batch), or pass --batch-size 3"]
    assert _loadtest(served, "--concurrency", "1", "--duration", "0.5", "--input-data",
                     tmp_path / "missing.npz") == EXIT_USAGE
    assert capsys.readouterr().err.splitlines()[1] == \
        "hint: check the path: an .npz or .json file with an array per input"
    from tritonkit.loadtest import request_template

    with pytest.raises(UsageError, match=r"--batch-size must be >= 1 \(got 0\)") as refused:
        request_template(Endpoint.from_deployment(served), "example", batch_size=0)
    assert refused.value.hint == "e.g. --batch-size 1"


@pytest.mark.parametrize("dims, batches, batch_size, error, hint", [
    ([4], True, 3, "input data for x has shape [2]; one sample of x has shape [4]",
     "give x one sample of shape [4] (repeated to each request's batch of 3, --batch-size 3), or a "
     "batch of 3 samples: shape [3, 4]"),
    ([4], True, 1, "input data for x has shape [2]; one sample of x has shape [4]",
     "give x one sample of shape [4], or a batch of one: shape [1, 4]"),
    ([-1, 4], True, 2, "input data for x has shape [2]; one sample of x has shape [n, 4], where n may "
     "be any size", "give x one sample of shape [n, 4] (repeated to each request's batch of 2, "
     "--batch-size 2), or a batch of 2 samples: shape [2, n, 4]"),
    ([4], False, 1, "input data for x has shape [2]; the model takes x of shape [4] (it does not "
     "batch: no batch axis)", "give x an array of shape [4]"),
], ids=["batch of 3", "batch of 1", "a dynamic dim", "no batching"])
def test_input_data_of_the_wrong_shape_is_told_the_shapes_it_may_have(dims, batches, batch_size, error,
                                                                      hint):
    from tritonkit.loadtest._inputs import _fit

    with pytest.raises(UsageError) as refused:
        _fit(np.zeros(2), "x", "FP32", dims, batches, batch_size)
    assert (str(refused.value), refused.value.hint) == (error, hint)


@pytest.mark.parametrize("given, datatype, says", [
    (np.array([5.7, 0.9, 1, 2]), "INT64", "float64 values 5.7, 0.9"),
    (np.array([1e30, 0, 0, 0]), "INT64", "float64 values 1e+30"),
    (np.array([np.nan, 0, 0, 0]), "INT32", "float64 values nan"),
    (np.array([300, -1, 2, 0]), "UINT8", "int64 values 300, -1"),
    (np.array([2**64 - 1, 0, 0, 0], np.uint64), "INT64", "uint64 values 18446744073709551615"),
    (np.array([5, 6, 7, 2**40]), "INT32", "int64 values 1099511627776"),
    (np.array([2, 0, 1, 1]), "BOOL", "int64 values 2"),
    (np.array([2**24 + 1, 0, 0, 0]), "FP32", "int64 values 16777217"),
    (np.array([1e300, 0, 0, 0]), "FP16", "float64 values 1e+300"),
], ids=["fractions as ints", "overflowing an int", "nan as an int", "outside uint8",
        "uint64 past int64", "int64 past int32", "2 as a bool", "an int fp32 rounds", "past fp16"])
def test_input_data_is_never_changed_to_fit_the_models_datatype(given, datatype, says):
    from tritonkit.loadtest._inputs import _fit

    with warnings.catch_warnings():
        warnings.simplefilter("error")      # numpy's cast warning would reach the terminal
        with pytest.raises(UsageError) as refused:
            _fit(given, "x", datatype, [4], True, 1)
    assert str(refused.value) == f"input data for x: {says} cannot be sent as {datatype} " \
        "without changing them"
    assert refused.value.hint.startswith(f"the model takes {datatype} for x: give values")


@pytest.mark.parametrize("given, datatype", [
    (np.array([0.1, -2.5, np.inf, np.nan]), "FP32"),      # float64 rounded to FP32: the usual case
    (np.array([1.0, 2.0, -3.0, 0.0]), "INT64"),
    (np.array([1, 2, 3, 2**31 - 1]), "INT32"),
    (np.array([True, False, True, True]), "INT64"),
    (np.array([1, 0, 1, 1]), "BOOL"),
    (np.array([1, 2, 3, 255]), "FP16"),
], ids=["float64 as fp32", "whole floats as ints", "int64 as int32", "bools as ints",
        "0 and 1 as bools", "small ints as fp16"])
def test_input_data_the_models_datatype_holds_is_sent_as_it(given, datatype):
    from tritonclient.utils import triton_to_np_dtype

    from tritonkit.loadtest._inputs import _fit

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sent = _fit(given, "x", datatype, [4], True, 1)
    assert sent.dtype == triton_to_np_dtype(datatype)
    assert np.allclose(sent[0].astype(np.float64), given.astype(np.float64), equal_nan=True)
