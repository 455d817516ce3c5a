"""Messages that say what is actually wrong: a model folder without a version folder, a
server with nothing to warm, a model name against the rule it breaks, a config.pbtxt
that does not parse (named by file and line, its text never echoed)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tritonkit.errors import EXIT_ERROR, EXIT_USAGE

SECRET_WORDS = "hunter2-do-not-print"


def one_error(capsys) -> tuple[str, str]:
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.startswith(("error: ", "hint: "))]
    assert "Traceback" not in err and "internal error" not in err, err
    return lines[0], (lines[1] if len(lines) > 1 else "")


@pytest.fixture(scope="module")
def onnx_repository(tmp_path_factory) -> Path:
    """A repository with one exported ONNX model (mlp)."""
    repository = tmp_path_factory.mktemp("onnx") / "repo"
    assert run_cli("export", ROOT / "examples" / "mlp.py:build", "--name", "mlp",
                   "--repository", repository, "--no-verify") == 0
    return repository


def versionless(source: Path, folder: Path, model: str, leave: str | None = None) -> Path:
    """A copy of ``source`` whose ``model`` has its version folders taken away (``leave``:
    an empty folder of that name in their place)."""
    repository = folder / "versionless"
    shutil.copytree(source, repository, ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    for version in (repository / model).iterdir():
        if version.is_dir() and version.name.isdigit():
            shutil.rmtree(version)
    if leave:
        (repository / model / leave).mkdir()
    return repository


@pytest.mark.parametrize("kind", ["python", "onnx"])
@pytest.mark.parametrize("target", [["--target", "local"],
                                    ["--target", "compose", "--gpu", "a10", "--no-up"]])
def test_a_model_without_a_version_folder_is_told_so(capsys, tmp_path, example_repository,
                                                     onnx_repository, kind, target):
    source, model = (example_repository, "example") if kind == "python" else (onnx_repository, "mlp")
    repository = versionless(source, tmp_path, model)
    extra = ["--out", tmp_path / "out"] if "compose" in target else \
        ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
    code = run_cli("deploy", "--repository", repository, *target, *extra)
    error, hint = one_error(capsys)
    assert code == EXIT_USAGE
    assert error == f"error: model '{model}' has no version folder: Triton serves a model from " \
                    f"{repository / model}/<version>/"
    assert hint == f"hint: put its files in {repository / model}/1/ (tritonkit export writes them there)"
    assert "TensorRT" not in error + hint


def test_a_version_folder_triton_ignores_is_named(capsys, tmp_path, onnx_repository):
    repository = versionless(onnx_repository, tmp_path, "mlp", leave="0")
    assert run_cli("deploy", "--repository", repository, "--http-port", "0",
                   "--grpc-port", "0", "--metrics-port", "0") == EXIT_USAGE
    error, _ = one_error(capsys)
    assert "has no version folder (Triton ignores 0/: a version is 1 or more)" in error


def test_a_version_folder_without_the_model_file_is_told_to_export_again(capsys, tmp_path,
                                                                          onnx_repository):
    repository = versionless(onnx_repository, tmp_path, "mlp", leave="1")
    assert run_cli("deploy", "--repository", repository, "--http-port", "0",
                   "--grpc-port", "0", "--metrics-port", "0") == EXIT_USAGE
    error, hint = one_error(capsys)
    assert "has no model.onnx to serve locally" in error
    assert hint == "hint: export it again: tritonkit export SPEC --name mlp --force"


def test_doctor_says_the_same_of_a_versionless_model(capsys, tmp_path, example_repository):
    repository = versionless(example_repository, tmp_path, "example")
    run_cli("doctor", "--repository", repository, "--json", "-")
    assert "model 'example' has no version folder: Triton serves a model from" in \
        capsys.readouterr().out


@pytest.mark.server
def test_warmup_of_a_server_with_an_empty_repository_is_an_error(capsys, tmp_path,
                                                                  monkeypatch):
    """A real Triton serving an empty folder: nothing to warm is no success."""
    from tritonkit.client import SECRET_ENV
    from tritonkit.server.local import start_local, stop_local
    from tritonkit.server.settings import Ports, load_server_settings

    empty = tmp_path / "empty"
    empty.mkdir()
    deployment = start_local(empty, load_server_settings(), ports=Ports(0, 0, 0), models=[],
                             timeout=60)
    try:
        monkeypatch.setenv(SECRET_ENV, deployment.secret())
        code = run_cli("warmup", "--url", deployment.http_url, "--timeout", "30")
    finally:
        stop_local(deployment, timeout=10)
    error, hint = one_error(capsys)
    assert code == EXIT_ERROR
    assert error == f"error: the server at {deployment.http_url} has no model in its " \
                    "repository: nothing to warm up"
    assert hint.startswith("hint: export a model into the folder it serves")


@pytest.mark.parametrize("name,why", [
    (".hidden", "it starts with '.', as tritonkit's own folders do (.tritonkit, export "
                "staging), which it never serves"),
    ("-x", "it starts with '-', which reads as a flag"),
    ("a b", "it holds ' '"),
    ("a\x1b[31mb", "it holds '\\x1b'"),
    ("x" * 129, "it is 129 characters long"),
])
@pytest.mark.parametrize("verb", ["export", "config"])
def test_a_refused_model_name_is_told_the_rule_it_breaks(capsys, tmp_path, name, why, verb):
    if verb == "export":
        code = run_cli("export", ROOT / "examples" / "mlp.py:build", f"--name={name}",
                       "--repository", tmp_path / "repo")
    else:
        code = run_cli("config", "--repository", tmp_path / "repo", "--", name)
    error, hint = one_error(capsys)
    assert code == EXIT_USAGE
    assert error.endswith(f"is not a plain folder name: {why}")
    assert "\x1b" not in error
    assert hint == ("hint: use ASCII letters, digits, '_', '.' and '-', up to 128, starting with "
                    "a letter, digit or '_', e.g. --name mlp")
    assert not (tmp_path / "repo").exists()


@pytest.fixture
def linked_config(tmp_path, example_repository) -> Path:
    """The example model's config.pbtxt replaced by a link to a file of someone's secrets."""
    secrets = tmp_path / "secrets.txt"
    secrets.write_text(f"token={SECRET_WORDS}\nroot:x:0:0:{SECRET_WORDS}\n")
    config = example_repository / "example" / "config.pbtxt"
    config.unlink()
    config.symlink_to(secrets)
    return config


PARSED = ("example/config.pbtxt (a link to another file) is not a valid Triton model config: "
          "line 1, column 1: a field Triton's ModelConfig does not have")


@pytest.mark.parametrize("verb,says", [
    (["config", "example", "--check"], PARSED),
    # the local mirror refuses a link out of the repository before reading it
    (["deploy", "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"],
     "the local mirror takes only what the repository holds"),
    # so does a container deploy: a container could not follow it
    (["deploy", "--target", "compose", "--gpu", "a10", "--no-up"],
     "elsewhere and cannot follow it"),
    (["doctor"], PARSED),
])
def test_a_config_that_links_elsewhere_is_named_by_path_and_line_never_echoed(
        capsys, tmp_path, example_repository, linked_config, verb, says):
    extra = ["--out", tmp_path / "out"] if "compose" in verb else []
    run_cli(*verb, "--repository", example_repository, *extra)
    captured = capsys.readouterr()
    assert SECRET_WORDS not in captured.out + captured.err
    assert "token" not in captured.out + captured.err       # not even as a field's name
    assert says in captured.out + captured.err


@pytest.mark.parametrize("text,says", [
    (f'name: "example"\nmax_batch_size: {SECRET_WORDS}\n', "line 2, column 17: a value that is "
                                                          "not an integer"),
    (f'name: "example"\ninput {{ name: "x" data_type: TYPE_{SECRET_WORDS.upper()[:6]} }}\n',
     "line 2, column 30: a value Triton's DataType does not have"),
    ('name: "a"\nname: "b"\n', "line 2, column 7: field 'name' of ModelConfig given twice"),
    (f'name: "{SECRET_WORDS}\n', "line 1, column 7: a string without its closing quote"),
    ("\x00\x01", "line 1, column 1: text the model-config format cannot read"),
])
def test_any_unparsable_config_is_named_by_line_and_schema_not_by_its_text(
        capsys, example_repository, text, says):
    (example_repository / "example" / "config.pbtxt").write_text(text)
    assert run_cli("config", "example", "--repository", example_repository, "--check") == EXIT_USAGE
    error, _ = one_error(capsys)
    assert error.endswith(f"config.pbtxt is not a valid Triton model config: {says}"), error
    assert SECRET_WORDS not in error and SECRET_WORDS.upper()[:6] not in error


def test_diagnose_of_a_file_that_is_no_recording_never_echoes_its_lines(capsys, tmp_path):
    secrets = tmp_path / "secrets.txt"
    secrets.write_text(f"token={SECRET_WORDS},another\n1,2\n")
    assert run_cli("diagnose", secrets) == EXIT_USAGE
    error, _ = one_error(capsys)
    assert error == (f"error: {secrets} has no column 'elapsed_s' in its first line: it is no "
                     "recording of tritonkit monitor")


def test_a_recordings_bad_value_is_named_by_line_and_column_not_echoed(capsys, tmp_path):
    from tritonkit.monitor.recording import read_monitor_csv

    recording = tmp_path / "mon.csv"
    recording.write_text(f"elapsed_s,util_pct,mem_used_mib,mem_total_mib\n{SECRET_WORDS},1,2,3\n")
    with pytest.raises(Exception) as caught:
        read_monitor_csv(recording)
    assert str(caught.value) == f"{recording}:2: column 'elapsed_s' is not a number"


def test_input_data_the_model_cannot_take_is_named_not_quoted(capsys, tmp_path, deployed):
    data = tmp_path / "data.json"
    data.write_text(f'{{"INPUT__0": [1, 2, 3, "{SECRET_WORDS}"]}}')
    code = run_cli("loadtest", "--url", deployed.http_url, "--model", "example",
                   "--concurrency", "1", "--duration", "1", "--input-data", data)
    error, _ = one_error(capsys)
    assert code == EXIT_USAGE
    assert error == ("error: input data for INPUT__0 cannot be read as FP32: an item of it is "
                     "not such a number")
