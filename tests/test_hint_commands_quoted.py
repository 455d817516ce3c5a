"""A command a hint prints for the user to paste names a path or a name as one shell word:
a repository at ``a b;$(touch pwned)`` is quoted, never split or run (the third adversarial
pass found two dozen hints printing ``--repository {repository}`` as it was)."""

from __future__ import annotations

import shlex

import pytest

from tests.conftest import run_cli
from tritonkit.errors import shell_word

ODD = "a b;$(touch pwned)'x"


@pytest.mark.parametrize("argv", [
    ("warmup", "--repository", "{repo}"),
    ("monitor", "--repository", "{repo}", "--duration", "1"),
    ("loadtest", "--repository", "{repo}", "-m", "m", "-c", "1", "--duration", "1"),
])
def test_a_hint_names_an_odd_repository_as_one_shell_word(tmp_path, capsys, argv):
    repo = tmp_path / ODD
    repo.mkdir()
    code = run_cli(*(a.format(repo=repo) for a in argv))
    err = capsys.readouterr().err
    assert code == 2, err
    hint = next(line for line in err.splitlines() if line.startswith("hint:"))
    assert shell_word(repo) in hint, hint
    words = shlex.split(hint[hint.index("tritonkit"):].partition(" (")[0])
    assert words[words.index("--repository") + 1] == str(repo), words


def test_a_corrupt_record_hint_quotes_the_repository(tmp_path, capsys):
    repo = tmp_path / ODD
    (repo / ".tritonkit").mkdir(parents=True)
    (repo / ".tritonkit" / "server.json").write_text("{not json")
    code = run_cli("warmup", "--repository", repo)
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"tritonkit down --repository {shell_word(repo)} stops" in err, err


def test_shell_word_quotes_only_what_needs_it():
    assert shell_word("/srv/models") == "/srv/models"
    assert shlex.split(shell_word(ODD)) == [ODD]


def test_compose_says_its_start_command_with_the_file_as_one_shell_word(example_repository,
                                                                          tmp_path, capsys):
    out = tmp_path / "out [b];$(id)"
    code = run_cli("deploy", "--target", "compose", "--gpu", "cpu", "--no-up",
                   "--repository", example_repository, "--out", out)
    printed = capsys.readouterr().out
    assert code == 0, printed
    line = next(line for line in printed.splitlines() if "docker compose -f" in line)
    words = shlex.split(line[line.index("docker compose"):])
    assert words == ["docker", "compose", "-f", str(out / "docker-compose.yml"), "up", "-d"]
