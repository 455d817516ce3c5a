"""An export report edited by hand, or no report at all, is bad input: `config` names the
file and the field, exit 2, and writes nothing (it said "internal error" for a list, a
string batch limit, a number as the GPU, and blamed --max-batch-size for the file's -3)."""

from __future__ import annotations

import pytest

from tests import onnx_graphs
from tests.conftest import run_cli

BROKEN = [
    ("[1, 2, 3]", "the report is list [1, 2, 3], not an object"),
    ('{"max_batch_size": "abc"}', 'max_batch_size is str "abc", not a whole number'),
    ('{"max_batch_size": true}', "max_batch_size is bool true, not a whole number"),
    ('{"max_batch_size": -3}', "max_batch_size -3 is not a batch limit (0 to 2147483647)"),
    ('{"gpu": 5}', "gpu is int 5, not a string"),
    ('{"plans": []}', "plans is list [], not an object"),
    ('{"inputs": [{"name": "x", "example_shape": ["a"]}]}',
     'inputs[0].example_shape[0] is str "a", not a whole number'),
    ('{"verification": {"cases": [5]}}', "verification.cases[0] is int 5, not an object"),
    ('{"files": {"1/model.onnx": {"sha256": 7}}}', "files.1/model.onnx.sha256 is int 7, not a string"),
    ('{"tensorrt_build": {"shapes": {"x": {"max": "z"}}}}',
     'tensorrt_build.shapes.x.max is str "z", not a list'),
]


@pytest.mark.parametrize("text, says", BROKEN)
def test_config_names_the_report_and_the_field_it_cannot_read(tmp_path, capsys, text, says):
    onnx_graphs.mlp(tmp_path / "mlp")
    report = tmp_path / "mlp" / "export-report.json"
    report.write_text(text)
    before = sorted(p.name for p in (tmp_path / "mlp").iterdir())
    code = run_cli("config", "mlp", "--repository", tmp_path, "--force")
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert err == [f"error: {report}: {says}", "hint: re-export the model with --force"]
    assert sorted(p.name for p in (tmp_path / "mlp").iterdir()) == before


def test_a_recipe_given_as_its_command_line_alone_still_configures(tmp_path, capsys):
    """The control: ``tensorrt_recipe`` may be a trtexec command line (a string)."""
    onnx_graphs.mlp(tmp_path / "mlp")
    (tmp_path / "mlp" / "export-report.json").write_text(
        '{"max_batch_size": 8, "tensorrt_recipe": "trtexec --onnx=model.onnx"}')
    assert run_cli("config", "mlp", "--repository", tmp_path) == 0
    assert "max_batch_size: 8" in (tmp_path / "mlp" / "config.pbtxt").read_text()
