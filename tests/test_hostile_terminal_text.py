"""What a user typed or a repository holds reaches the terminal as text: a control
character in a flag, a path, a settings value or a model folder's name is written as its
escape (``\\x1b``), and an error stays one line and its hint another. The second
adversarial pass found `--gpu $'p1\\x1b[31m00'` and a model folder named with an escape
sequence sent to the terminal as they were (colours, a cleared screen, a retitled
window), and a header value holding CR LF splitting the error over two lines."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import ROOT, run_cli

HOSTILE = "p1\x1b[2J\x1b]0;owned\x07\r\nerror: fake\x9b31m"


def _said_as_text(text: str) -> None:
    assert not any(c in text for c in "\x1b\x07\r\x9b"), repr(text)


@pytest.mark.parametrize("args", [
    ("doctor", "--gpu", HOSTILE),
    ("deploy", "--repository", HOSTILE),
    ("deploy", "--target", HOSTILE),
    ("diagnose", HOSTILE),
    ("loadtest", "-m", HOSTILE, "-c", "1", "--url", HOSTILE),
])
def test_a_control_character_in_a_flag_is_said_as_its_escape(tmp_path, capsys, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    assert run_cli(*args) == 2
    err = capsys.readouterr().err
    _said_as_text(err)
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: "), err
    assert "\\x1b[2J" in err


def test_a_header_with_cr_lf_in_the_server_settings_is_one_error_line(tmp_path, capsys,
                                                                     example_repository):
    settings = tmp_path / "server.toml"
    settings.write_text((ROOT / "configs" / "server.toml").read_text().replace(
        'header = "tritonkit-repository-key"', 'header = "x-key\\r\\nevil: 1"'))
    assert run_cli("deploy", "--repository", example_repository, "--server-config", settings) == 2
    err = capsys.readouterr().err
    _said_as_text(err)
    assert len(err.splitlines()) == 2 and "'x-key\\r\\nevil: 1'" in err, err


def test_doctor_says_a_model_folder_named_with_an_escape_sequence_as_text(
        tmp_path, capsys, example_repository):
    shutil.move(example_repository / "example", example_repository / "ex\x1b[31mample")
    run_cli("doctor", "--gpu", "p100", "--repository", example_repository)
    out, err = capsys.readouterr()
    _said_as_text(out + err)
    assert "ex\\x1b[31mample" in out


def test_down_says_a_repository_path_with_a_newline_or_markup_on_one_line(tmp_path, capsys):
    """`down` printed the path raw: a newline in a folder's name made its line two, and
    rich read `[bold]` in it as markup and dropped it."""
    repo = tmp_path / "we ird\n[bold]repo"
    repo.mkdir()
    assert run_cli("down", "--repository", repo) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [f"nothing to stop for {tmp_path}/we ird\\n[bold]repo: no "
                                "deployment recorded"]
