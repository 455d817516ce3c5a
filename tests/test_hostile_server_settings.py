"""A server setting beyond what tritonserver parses its flag as (int32; the pinned pool's
size int64) is refused before any server starts, naming the file and the field (exit 2).
The second adversarial pass found `pinned_memory_pool_byte_size = 99999999999999999999999`
starting tritonserver, which failed with its usage text (exit 1)."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT, error_lines, run_cli

TOO_LARGE = {"exit_timeout_secs": 2**31, "pinned_memory_pool_byte_size": 2**63,
             "log_verbose": 2**31}


@pytest.mark.parametrize("field", TOO_LARGE)
def test_a_setting_beyond_its_flag_is_refused_before_the_start(tmp_path, capsys,
                                                              example_repository, field):
    settings = tmp_path / "server.toml"
    text = (ROOT / "configs" / "server.toml").read_text()
    settings.write_text(re.sub(rf"(?m)^{field} = .*$", f"{field} = {TOO_LARGE[field]}", text))
    code = run_cli("deploy", "--repository", example_repository, "--server-config", settings,
                   "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")
    err = capsys.readouterr().err
    assert code == 2, err
    first = error_lines(err)[0]
    assert str(settings) in first and field in first and "more than tritonserver takes" in first
    assert not (example_repository / ".tritonkit" / "server.log").exists()


@pytest.mark.parametrize("field, value", [
    ("min_supported_compute_capability", "nan"), ("min_supported_compute_capability", "inf"),
])
def test_a_float_setting_that_is_no_number_is_refused_before_it_reaches_tritonserver(
        tmp_path, capsys, example_repository, field, value):
    """nan and inf compare false with 0: they passed the check that refuses -1 and went to
    tritonserver's command line (here: into the k8s manifests, which start nothing)."""
    settings = tmp_path / "server.toml"
    text = (ROOT / "configs" / "server.toml").read_text()
    settings.write_text(re.sub(rf"(?m)^{field} = .*$", f"{field} = {value}", text))
    code = run_cli("deploy", "--target", "k8s", "--gpu", "a10", "--repository",
                   example_repository, "--server-config", settings, "--out", tmp_path / "out")
    err = capsys.readouterr().err
    assert code == 2, err
    first = error_lines(err)[0]
    assert str(settings) in first and f"field '{field}'" in first and "finite" in first, err
    assert not (tmp_path / "out" / "k8s").exists()
