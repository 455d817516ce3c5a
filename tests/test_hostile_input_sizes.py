"""A config whose inputs no request could carry (dims of 10^11, a batch limit of 2^31-1):
the warm-up and the load test refused it with "internal error: MemoryError" (or took the
host's memory); now one line names the model, the input and the size, exit 2."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from tests.conftest import EXAMPLE_REPOSITORY, error_lines, run_cli
from tritonkit.client import EXAMPLE_INPUT_MAX_BYTES, example_input
from tritonkit.errors import UsageError


@pytest.mark.parametrize("datatype, shape", [
    ("FP32", [1, 99_999_999_999]), ("INT64", [2_147_483_647, 1024]), ("BYTES", [1 << 30, 1 << 10]),
    ("FP16", [1024, 1024, 1024, 1024])])
def test_an_input_larger_than_a_request_carries_is_refused_before_it_is_made(datatype, shape):
    with pytest.raises(UsageError, match=rf"input x of shape \[.*\] \({datatype}\) would be "
                                         r"[\d,]+ GiB in one request, more than the 1 GiB"):
        example_input(datatype, shape, np.random.default_rng(0), name="input x")


def test_an_input_within_the_bound_is_made():
    assert EXAMPLE_INPUT_MAX_BYTES == 1 << 30
    assert example_input("FP32", [8, 1 << 16], np.random.default_rng(0)).nbytes == 2 << 20
    assert example_input("BYTES", [2, 3], np.random.default_rng(0)).shape == (2, 3)


@pytest.mark.server
def test_deploy_of_a_config_with_an_input_no_request_carries_is_one_line(tmp_path, capsys):
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE_REPOSITORY, repo, ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    config = repo / "example" / "config.pbtxt"
    config.write_text(config.read_text().replace("dims: 4", "dims: 99999999999", 1))
    code = run_cli("deploy", "--repository", repo, "--http-port", "0", "--grpc-port", "0",
                   "--metrics-port", "0", "--timeout", "30")
    error = error_lines(capsys.readouterr().err)[0]
    assert code == 2
    assert error == ("error: 'example': input INPUT__0 of shape [1, 99999999999] (FP32) would be "
                     "373 GiB in one request, more than the 1 GiB tritonkit sends")
    assert run_cli("down", "--repository", repo) == 0
