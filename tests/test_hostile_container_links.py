"""A compose or Kubernetes deploy mounts (or copies) the repository into a container at
another path: a link in it that leads out of the repository, or names this host's absolute
path, leads nowhere there. Such a link is refused before anything is written (the fourth
adversarial pass found `ln -s /other/mlp repo/ext` deployed with exit 0, a model Triton
could not load); a link relative to where it stands, inside the repository, is served."""

from __future__ import annotations

import os
import shutil

import pytest

from tests import onnx_graphs
from tests.conftest import error_lines, run_cli
from tritonkit.errors import EXIT_USAGE

TARGETS = {"compose": ("--target", "compose", "--no-up"), "k8s": ("--target", "k8s")}


@pytest.fixture
def repo(tmp_path):
    repository = tmp_path / "repo"
    onnx_graphs.mlp(repository / "mlp")
    assert run_cli("config", "mlp", "--repository", repository, "--gpu", "cpu") == 0
    return repository


def _deploy(repository, out, target):
    return run_cli("deploy", *TARGETS[target], "--gpu", "cpu", "--repository", repository,
                   "--out", out)


def _outside(tmp_path, repo):
    other = tmp_path / "elsewhere" / "mlp2"
    shutil.copytree(repo / "mlp", other)
    return other


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", ["model folder out", "file out", "absolute inside"])
def test_a_link_a_container_cannot_follow_is_refused_before_anything_is_written(
        repo, tmp_path, capsys, target, case):
    if case == "model folder out":
        link, points = repo / "ext", _outside(tmp_path, repo)
    elif case == "file out":
        onnx = repo / "mlp" / "1" / "model.onnx"
        moved = tmp_path / "model.onnx"
        onnx.rename(moved)
        link, points = onnx, moved
    else:
        link, points = repo / "twin", repo / "mlp"       # absolute, though inside
    link.symlink_to(points)
    code = _deploy(repo, tmp_path / "out", target)
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    error, hint = error_lines(err)
    assert error.startswith(f"error: {link} is a link to {points}, ") and \
        error.endswith(f"a container mounts {repo} elsewhere and cannot follow it"), error
    assert hint.startswith("hint: replace the link with a copy of what it points to")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("target", TARGETS)
def test_a_relative_link_inside_the_repository_is_served(repo, tmp_path, target):
    os.symlink("mlp", repo / "twin")
    assert _deploy(repo, tmp_path / "out", target) == 0
