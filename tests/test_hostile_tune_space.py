"""A tune space (``--space FILE.toml``, a profile's ``[tune]``) holds only values Triton's
config can take: each knob above what its field holds (int32; the queue delay a uint64)
is refused before any trial, naming the file and the field (exit 2). The second
adversarial pass found ``instance_count = [3000000000]`` ending a tune, after its
baselines, in "internal error: ValueError: Value out of range"."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli

TOO_LARGE = {"instance_count": 2**31, "max_batch_size": 2**31, "intra_op_thread_count": 2**31,
             "max_queue_delay_us": 2**64}


@pytest.mark.parametrize("knob", TOO_LARGE)
def test_a_space_value_beyond_the_config_field_is_refused_before_any_trial(tmp_path, capsys, knob):
    space = tmp_path / "space.toml"
    space.write_text(f"{knob} = [2, {TOO_LARGE[knob]}]\n")
    # nothing listens there: the space is refused before any server is asked
    code = run_cli("tune", "mlp", "--url", "127.0.0.1:1", "--sla-p99-ms", "10", "--space", space)
    err = capsys.readouterr().err
    assert code == 2 and "internal error" not in err, err
    first = err.splitlines()[0]
    assert str(space) in first and knob in first and str(TOO_LARGE[knob]) in first, err


def test_the_largest_values_the_fields_hold_pass(tmp_path):
    from tritonkit.tune._space import read_space_file

    space = tmp_path / "space.toml"
    space.write_text("".join(f"{knob} = [{value - 1}]\n" for knob, value in TOO_LARGE.items()))
    assert read_space_file(space).instance_count == (2**31 - 1,)
