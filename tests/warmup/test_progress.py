"""`tritonkit warmup` progress: told model by model, and a piped deploy or warm-up says what a
slow phase waits for."""

from __future__ import annotations

import time

import pytest

from tests.conftest import BUSY_HOST_STEADY, run_cli
from tests.warmup.conftest import ECHO_CONFIG, _deploy, _python_model, _slow_to_load
from tritonkit.client import Endpoint
from tritonkit.server.state import load_deployment
from tritonkit.warmup import load_and_warm


@pytest.mark.server
def test_warmup_tells_its_progress_model_by_model(warm_server):
    said: list[str] = []
    load_and_warm(Endpoint.from_deployment(warm_server), ["example", "pipeline"],
                  progress=said.append)
    assert any(line.startswith("waiting for the server") for line in said)
    for model in ("example", "pipeline"):
        assert any(line.startswith(f"warming {model}: shape 1/") for line in said), said


def _piped(*args: str):
    """A tritonkit command with its output to pipes, as in a CI log."""
    import subprocess
    import sys

    from tests.conftest import ROOT, default_signals

    return subprocess.run([sys.executable, "-m", "tritonkit", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          preexec_fn=default_signals)


def _said_nothing_if_quick(stderr: str, took: float, every: float | None = None) -> None:
    """A run that ended before its phase could be told (``every``: PHASE_LINES_EVERY_S)
    says nothing on stderr. ``took`` is the whole command's time, its interpreter's start
    included, so a run shorter than that had no phase that long. A busy host (a 2-core CI
    runner) can make even a quick deploy pass the mark: then a line at most every 5 s."""
    from tritonkit.cli.options import PHASE_LINES_EVERY_S

    every = every or PHASE_LINES_EVERY_S
    if took < every:
        assert stderr == ""
    else:
        assert len(stderr.splitlines()) <= took / every, stderr


@pytest.mark.server
def test_a_piped_deploy_says_what_a_slow_phase_waits_for_and_a_quick_one_says_nothing(
        example_repository, tmp_path):
    """Off a terminal there is no spinner: a phase still under way after a few seconds
    (a model whose initialize takes 7 s) gets one plain line on stderr — not a line per
    poll, though the deploy polls ten times a second — and a quick deploy prints none."""
    import re

    marker = tmp_path / "initialize_sleeps"
    _python_model(example_repository, "slow", ECHO_CONFIG, _slow_to_load(marker))
    ports = ("--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")
    try:
        started = time.monotonic()
        quick = _piped("deploy", "--repository", example_repository, "--no-warmup", *ports)
        assert quick.returncode == 0, quick.stderr
        _said_nothing_if_quick(quick.stderr, time.monotonic() - started)
        assert run_cli("down", "--repository", example_repository) == 0
        marker.write_text("7")
        started = time.monotonic()
        slow = _piped("deploy", "--repository", example_repository, "--no-warmup", *ports)
        took = time.monotonic() - started
        assert slow.returncode == 0, slow.stderr
        pid = load_deployment(example_repository).pid
    finally:
        run_cli("down", "--repository", example_repository)
    # Each model as the server's log tells it: 'example' READY (or still loading, on a slow
    # host), 'slow' loading, idle while its initialize sleeps. One line for the wait; a host
    # slow enough to make it last past a second mark may tell it once more (the models all
    # loaded by then, the server still starting), never a line per poll.
    lines = slow.stderr.splitlines()
    assert 1 <= len(lines) == len(set(lines)) <= took / 5, slow.stderr
    head = rf"starting tritonserver \(pid {pid}\): loading 2 models"
    assert all(re.fullmatch(head + r"(, 1 READY \(example\))?: (example for \d+ s, )?slow for "
                            r"\d+ s( \(idle \d+ s\))?", line)
               or re.fullmatch(head + r", 2 READY \(example, slow\): every one loaded, the "
                               r"server starting", line)
               for line in lines), slow.stderr
    assert "slow" in lines[0], slow.stderr
    assert "Triton is up" in slow.stdout


@pytest.mark.server
def test_a_piped_warmup_tells_each_slow_phase_a_few_seconds_apart(example_repository, tmp_path,
                                                                   monkeypatch, capsys):
    """Each slow phase gets its line while it lasts, once the last line is PHASE_LINES_EVERY_S
    old (5 s; 2.5 s here — the piped deploy above keeps the real one): two reloads of 3.5 s
    each give 'loading slow_a' at 2.5 s, 'loading slow_b' at 5 s (a load says nothing while
    it blocks: a clock, not the next message, tells it). A quick warm-up prints nothing on
    stderr. In-process, stderr captured: off a terminal, as in a CI log."""
    every = 2.5
    monkeypatch.setattr("tritonkit.cli.warmup.PHASE_LINES_EVERY_S", every)
    marker = tmp_path / "initialize_sleeps"
    for name in ("slow_a", "slow_b"):
        _python_model(example_repository, name, ECHO_CONFIG, _slow_to_load(marker))
    _deploy(example_repository, "--no-warmup")
    try:
        capsys.readouterr()
        started = time.monotonic()
        assert run_cli("warmup", "--repository", example_repository, "--model", "example",
                       *BUSY_HOST_STEADY) == 0
        _said_nothing_if_quick(capsys.readouterr().err, time.monotonic() - started, every)
        marker.write_text("3.5")
        started = time.monotonic()
        code = run_cli("warmup", "--repository", example_repository, "--model", "slow_a",
                       "--model", "slow_b", "--reload", *BUSY_HOST_STEADY)
        took = time.monotonic() - started
        slow = capsys.readouterr()
    finally:
        run_cli("down", "--repository", example_repository)
    assert code == 0, slow.err
    lines = slow.err.splitlines()
    assert lines[:2] == ["loading slow_a", "loading slow_b"], slow.err
    assert len(lines) == len(set(lines)) <= took / every, slow.err   # one a phase, apart
    # then warming, a model's told only where it lasts long past the last line: slow_b's
    # here, and on a busy host slow_a's too (its warm-up follows slow_b's slower load)
    assert all(line.startswith(("warming slow_a", "warming slow_b")) for line in lines[2:]), \
        slow.err
