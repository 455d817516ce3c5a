"""Values a flag or a settings file cannot hold are refused up front in words a user
reads: --replicas beyond Kubernetes' int32, a --rate that offers no request to measure, a
SPEC path that is a folder, FIFO or device, a TOML field of the wrong type (the third
adversarial pass found these taken, or said as "does not exist" / "is not a int")."""

from __future__ import annotations

import math
import os
import re
import shutil
from pathlib import Path

import pytest

from tests import onnx_graphs
from tests.conftest import error_lines, run_cli
from tritonkit.datafiles import shipped_configs_dir
from tritonkit.errors import EXIT_USAGE, UsageError


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


# --- numbers no field or flag can be: nan, inf, past what the thing they become holds ---

@pytest.mark.parametrize("args", [
    ("--timeout", "inf"), ("--timeout", "1e300"),          # the startup probe's int32 count
    ("--cpu", "99999999999999"), ("--cpu", "8193000m"),    # more cores than any node has
    ("--memory", "99999999999999999999999Gi"), ("--memory", "1025Ti"),    # past 1Pi, as 1Ei
])
def test_a_k8s_flag_past_any_node_or_probe_is_refused_before_a_manifest_is_written(
        example_repository, tmp_path, capsys, args):
    out = tmp_path / "out"
    code = run_cli("deploy", "--target", "k8s", "--gpu", "a10", "--repository",
                   example_repository, "--out", out, *args)
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert args[0] in error_lines(err)[0] and "internal error" not in err, err
    assert not (out / "k8s").exists()


@pytest.mark.parametrize("seconds", [math.inf, math.nan, 1e300, 0.0])
def test_write_k8s_refuses_a_startup_time_its_probe_cannot_count(seconds):
    from tritonkit.server.k8s import check_startup_timeout

    with pytest.raises(UsageError, match="--timeout"):
        check_startup_timeout(seconds)


def test_a_deadline_flag_of_inf_is_refused_as_a_time_of_at_most_a_day(tmp_path, capsys):
    # down --timeout inf was taken (and waited for ever on a server that did not stop)
    code = run_cli("down", "--repository", tmp_path, "--timeout", "inf")
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert "'--timeout'" in error_lines(err)[0] and "86400" in error_lines(err)[0], err


@pytest.mark.parametrize("args, flag, most", [
    (("--budget-s", "inf"), "--budget-s", "86400"), (("--budget-s", "1e300"), "--budget-s", "86400"),
    (("--probe-s", "inf"), "--probe-s", "3600"), (("--probe-s", "3601"), "--probe-s", "3600"),
])
def test_a_tune_time_that_is_no_bounded_time_is_refused_naming_its_own_flag_without_a_server(
        tmp_path, capsys, args, flag, most):
    # no deployment in tmp_path: refused before one is looked for (--probe-s inf was said
    # as loadtest's "--duration inf", a flag tune has not)
    code = run_cli("tune", "mlp", "--repository", tmp_path, "--sla-p99-ms", "5", *args)
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    first = error_lines(err)[0]
    assert first.startswith(f"error: {flag} ") and f"at most {most} s" in first, err
    assert "--duration" not in err


@pytest.mark.parametrize("table, key, value", [
    ("memory", "gib", "nan"), ("memory", "gib", "inf"), ("memory", "gib", "1e308"),
    ("serving", "instance_count", "99999999999"),            # int32 in the config
    ("serving", "max_queue_delay_us", str(2**64)),           # uint64 in the config
    ("", "compute_capability", "nan"), ("", "compute_capability", "1e300"),
    ("compute", "fp16_tflops", "inf"), ("bus", "power_w", "nan"), ("bus", "pcie_lanes", "-16"),
    ("stack", "onnx_max_opset", "-1"),
])
def test_a_gpu_profile_number_that_is_no_figure_is_a_field_error(tmp_path, capsys, table, key,
                                                                value):
    """Every number of a profile: finite, and within what the config field it becomes
    holds (nan gib, 1e308 gib and 99999999999 instances were internal errors)."""
    text = (Path(__file__).parents[1] / "configs" / "gpus" / "a10.toml").read_text()
    section = re.search(rf"(?ms)^\[{table}\]\n.*?(?=^\[|\Z)", text) if table else \
        re.search(r"(?s)\A.*?(?=^\[)", text, re.M)
    assert section and re.search(rf"(?m)^{key} = ", section.group())
    changed = re.sub(rf"(?m)^{key} = .*$", f"{key} = {value}", section.group(), count=1)
    profile = tmp_path / "a10.toml"
    profile.write_text(text.replace(section.group(), changed, 1))
    onnx_graphs.mlp(tmp_path / "repo" / "mlp")
    code = run_cli("config", "mlp", "--repository", tmp_path / "repo", "--gpu", profile)
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    dotted = f"{table}.{key}" if table else key
    first = error_lines(err)[0]
    assert str(profile) in first and f"field '{dotted}'" in first, err
    assert "internal error" not in err


def test_a_configs_folder_that_is_not_there_is_named_by_its_variable(tmp_path, monkeypatch, capsys):
    """It said "no GPU profile named 'a10' (known: none)", naming neither the variable nor
    the folder."""
    onnx_graphs.mlp(tmp_path / "repo" / "mlp")
    monkeypatch.setenv("TRITONKIT_CONFIGS", str(tmp_path / "nowhere"))
    code = run_cli("config", "mlp", "--repository", tmp_path / "repo", "--gpu", "a10")
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert err.splitlines()[0] == f"error: TRITONKIT_CONFIGS={tmp_path / 'nowhere'} is not a folder"


def test_a_profile_that_is_a_fifo_is_named_as_one_not_as_missing(tmp_path, monkeypatch, capsys):
    """It said "no GPU profile named 'a10' (known: a10)"."""
    configs = Path(shutil.copytree(shipped_configs_dir(), tmp_path / "cfg"))
    (configs / "gpus" / "a10.toml").unlink()
    os.mkfifo(configs / "gpus" / "a10.toml")
    onnx_graphs.mlp(tmp_path / "repo" / "mlp")
    monkeypatch.setenv("TRITONKIT_CONFIGS", str(configs))
    code = run_cli("config", "mlp", "--repository", tmp_path / "repo", "--gpu", "a10")
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert err.splitlines()[0] == (f"error: configuration file {configs / 'gpus' / 'a10.toml'} is "
                                   "a named pipe (FIFO), not a regular file")


@pytest.mark.parametrize("target", ["compose", "k8s"])
@pytest.mark.parametrize("below", ["", "sub"])
def test_an_out_through_a_link_to_nowhere_is_said_as_that(tmp_path, capsys, target, below):
    """It said "cannot use dang: File exists"."""
    repository = tmp_path / "repo"
    onnx_graphs.mlp(repository / "mlp")
    assert run_cli("config", "mlp", "--repository", repository, "--gpu", "cpu") == 0
    (tmp_path / "dang").symlink_to(tmp_path / "nowhere")
    out = tmp_path / "dang" / below if below else tmp_path / "dang"
    code = run_cli("deploy", "--target", target, *(["--no-up"] if target == "compose" else []),
                   "--gpu", "cpu", "--repository", repository, "--out", out)
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert error_lines(err) == [
        f"error: cannot write --out {out}: {tmp_path / 'dang'} is a link to "
        f"{tmp_path / 'nowhere'}, which does not exist",
        "hint: remove the link, or make the folder it points to"]
    assert not (tmp_path / "nowhere").exists()
