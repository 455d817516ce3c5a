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
