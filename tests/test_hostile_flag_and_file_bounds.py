"""Values a flag or a settings file cannot hold are refused up front in words a user
reads: --replicas beyond Kubernetes' int32, a --rate that offers no request to measure, a
SPEC path that is a folder, FIFO or device, a TOML field of the wrong type (the third
adversarial pass found these taken, or said as "does not exist" / "is not a int")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tritonkit.errors import EXIT_USAGE


def test_replicas_beyond_what_kubernetes_takes_is_refused(example_repository, tmp_path, capsys):
    code = run_cli("deploy", "--target", "k8s", "--gpu", "cpu", "--repository",
                   example_repository, "--out", tmp_path / "out", "--replicas", str(2**31))
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert "--replicas" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("rate, duration", [("0.001", "10"), ("0.5", "1")])
def test_a_rate_offering_less_than_one_request_to_measure_is_refused(capsys, rate, duration):
    code = run_cli("loadtest", "--url", "127.0.0.1:1", "-m", "m", "--rate", rate,
                   "--duration", duration)
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert f"--rate {float(rate):g}" in err and "less than one request" in err, err


def test_a_tune_ceiling_no_load_generator_holds_is_refused_before_the_server_is_asked(capsys):
    # nothing listens at port 1: refused before any request (it ended in loadtest's
    # "--concurrency ... is more than one load generator holds", naming a flag tune has not)
    code = run_cli("tune", "mlp", "--url", "127.0.0.1:1", "--sla-p99-ms", "10",
                   "--max-concurrency", "4097")
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert err.splitlines()[0] == ("error: --max-concurrency must be 1 to 4096, what one load "
                                   "generator holds in flight (got 4097)"), err


@pytest.mark.parametrize("kind", ["folder", "fifo", "device"])
def test_a_spec_path_that_is_no_file_is_said_as_what_it_is(tmp_path, capsys, kind):
    if kind == "folder":
        path = tmp_path / "model.py"
        path.mkdir()
        said = "is a folder"
    elif kind == "fifo":
        path = tmp_path / "model.py"
        os.mkfifo(path)
        said = "FIFO"
    else:
        path, said = "/dev/null", "device"
    code = run_cli("export", f"{path}:build", "--name", "m", "--repository", tmp_path / "repo")
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert said in err and "does not exist" not in err, err


@pytest.mark.parametrize("line, said", [
    (("exit_timeout_secs = 30", 'exit_timeout_secs = "soon"'),
     "'exit_timeout_secs' = 'soon' must be an integer"),
    (('categories = ["model-repository", "shared-memory", "logging", "trace"]',
      "categories = 3"),
     "'restricted_api.categories' = 3 must be a list of strings"),
])
def test_a_toml_field_of_the_wrong_type_says_the_type_in_words(tmp_path, line, said):
    from tritonkit.errors import TritonkitError
    from tritonkit.server.settings import load_server_settings

    settings = tmp_path / "server.toml"
    default = (Path(__file__).parents[1] / "configs" / "server.toml").read_text()
    assert line[0] in default
    settings.write_text(default.replace(*line, 1))
    with pytest.raises(TritonkitError) as refused:
        load_server_settings(settings)
    assert said in str(refused.value) and "is not a" not in str(refused.value)
