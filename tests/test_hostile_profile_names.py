"""A GPU profile's `name` names the config file every `config` writes for it (and the one it
removes when a model has no config for it) and a Kubernetes label: a name that is a path, or
one in the profiles folder that is not its file's, is refused before anything is written
or removed (the fourth adversarial pass wrote and deleted files outside the repository
through `name = "../../../victim/other"`, and a copied a10.toml replaced the A10's configs)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import onnx_graphs
from tests.conftest import error_lines, run_cli
from tritonkit.datafiles import shipped_configs_dir
from tritonkit.errors import EXIT_USAGE


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """A repository with an ONNX model, a configs folder of our own, a victim's files."""
    repo = tmp_path / "repo"
    onnx_graphs.mlp(repo / "mlp")
    configs = Path(shutil.copytree(shipped_configs_dir(), tmp_path / "cfg"))
    monkeypatch.setenv("TRITONKIT_CONFIGS", str(configs))
    victim = tmp_path / "victim"
    victim.mkdir()
    for name in ("other", "precious"):
        (victim / f"{name}.pbtxt").write_text("the user's\n")
    return repo, configs, victim


def _profile(configs: Path, name: str, *, opset: int | None = None) -> str:
    text = (configs / "gpus" / "cpu.toml").read_text().replace('name = "cpu"', f"name = {name}")
    if opset is not None:      # too low for the model: config removes its stale file
        text = text.replace("onnx_max_opset = 21", f"onnx_max_opset = {opset}")
    return text


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", ['"../../../victim/other"', '"a/b"', '"a\\nb"', '""', '".x"',
                                  '"' + "x" * 64 + '"', '"Bad Name;$(id)"'])
@pytest.mark.parametrize("opset", [None, 7], ids=["written", "removed"])
def test_a_profile_whose_name_is_not_a_plain_name_is_refused_before_any_file_is_touched(
        setup, capsys, name, opset):
    repo, configs, victim = setup
    (configs / "gpus" / "odd.toml").write_text(_profile(configs, name, opset=opset))
    before = _files(repo)
    code = run_cli("config", "mlp", "--repository", repo, "--gpu", "cpu", "--force")
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    error, hint = error_lines(err)
    assert "odd.toml: field 'name' = " in error and "is not a plain name" in error
    assert hint == 'hint: e.g. name = "odd"'
    assert _files(victim) == {"other.pbtxt": b"the user's\n", "precious.pbtxt": b"the user's\n"}
    assert _files(repo) == before


def test_the_same_name_given_as_a_profile_file_is_refused(setup, tmp_path, capsys):
    repo, configs, victim = setup
    given = tmp_path / "mine.toml"
    given.write_text(_profile(configs, '"../../victim/other"'))
    code = run_cli("config", "mlp", "--repository", repo, "--gpu", given)
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert "mine.toml: field 'name' = '../../victim/other' is not a plain name" in err
    assert not (repo / "mlp" / "config.pbtxt").exists()
    assert (victim / "other.pbtxt").read_text() == "the user's\n"


def test_a_copied_profile_that_keeps_its_originals_name_is_refused_naming_both(setup, capsys):
    """configs/gpus/l4.toml copied from a10.toml, its name left "a10": it would have written
    its figures into every model's configs/a10.pbtxt."""
    repo, configs, _ = setup
    assert run_cli("config", "mlp", "--repository", repo, "--gpu", "cpu") == 0
    a10 = (repo / "mlp" / "configs" / "a10.pbtxt").read_text()
    (configs / "gpus" / "l4.toml").write_text(
        (configs / "gpus" / "a10.toml").read_text().replace("gib = 24", "gib = 48"))
    capsys.readouterr()
    for gpu in ("cpu", "l4"):
        code = run_cli("config", "mlp", "--repository", repo, "--gpu", gpu, "--force")
        err = capsys.readouterr().err
        assert code == EXIT_USAGE, err
        assert error_lines(err) == [
            f"error: {configs / 'gpus' / 'l4.toml'}: field 'name' = 'a10' is not the file's "
            "name 'l4'", 'hint: set name = "l4", or name the file a10.toml']
    assert (repo / "mlp" / "configs" / "a10.pbtxt").read_text() == a10
    assert not (repo / "mlp" / "configs" / "l4.pbtxt").exists()


def test_a_profile_added_under_its_own_name_still_serves(setup):
    repo, configs, _ = setup
    (configs / "gpus" / "l4.toml").write_text(
        (configs / "gpus" / "a10.toml").read_text().replace('name = "a10"', 'name = "l4"'))
    assert run_cli("config", "mlp", "--repository", repo, "--gpu", "l4") == 0
    assert "profile 'l4'" in (repo / "mlp" / "config.pbtxt").read_text()
