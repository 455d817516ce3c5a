"""`down` asks a local server to unload its models (the repository API, with the
deployment's secret) before it signals it: a stopping Triton counts its live models once a
second, and with none left it exits at its first count, not a second or two later. Best
effort: a request in flight still gets its answer, and a server that refuses the request
(a secret that no longer matches) is stopped by the signal as before."""

from __future__ import annotations

import re
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.conftest import ECHO_CONFIG, EXAMPLE_REPOSITORY, add_python_model, echo_model, run_cli
from tests.warmup.conftest import _deploy

pytestmark = pytest.mark.server

LOGGED_STOP = "Signal (2) received"


def _repository(tmp_path: Path, *extra: tuple[str, str]) -> Path:
    """The example model and an echo model, with ``extra`` (name, model.py) beside them."""
    repo = tmp_path / "repo"
    add_python_model(repo, "echo", ECHO_CONFIG, echo_model())
    for name, model_py in extra:
        add_python_model(repo, name, ECHO_CONFIG, model_py)
    shutil.copytree(EXAMPLE_REPOSITORY / "example", repo / "example",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return repo


def _live_counts_after_the_signal(repo: Path) -> list[int]:
    """Each count of live models Triton logged once told to stop, in order."""
    logged = (repo / ".tritonkit" / "server.log").read_text()
    assert LOGGED_STOP in logged, logged[-2000:]
    after = logged[logged.index(LOGGED_STOP):]
    return [int(n) for n in re.findall(r"Found (\d+) live models", after)]


def test_down_unloads_every_model_before_the_signal_so_triton_exits_at_its_first_count(
        tmp_path, capsys):
    repo = _repository(tmp_path)
    _deploy(repo, "--no-warmup")
    capsys.readouterr()
    assert run_cli("down", "--repository", repo) == 0
    assert "it exited on its own" in capsys.readouterr().out
    logged = (repo / ".tritonkit" / "server.log").read_text()
    before = logged[:logged.index(LOGGED_STOP)]
    for name in ("echo", "example"):
        assert f"successfully unloaded '{name}' version 1" in before, name
    assert _live_counts_after_the_signal(repo) == [0]          # no second count, no 1 s sleep


def test_a_request_in_flight_when_down_starts_gets_its_answer(tmp_path):
    slow = echo_model(execute='open(os.path.join(os.path.dirname(__file__), "executing"), '
                              '"w").close()\ntime.sleep(2)')
    repo = _repository(tmp_path, ("slow", slow))
    deployment = _deploy(repo, "--no-warmup")
    served = Path(deployment.extra["served_repository"])
    sent = np.arange(4, dtype=np.float32).reshape(1, 4)
    answers: list = []

    def infer() -> None:
        # A client of its own, closed once answered: a connection left open would hold the
        # stopping server for its exit timeout (30 s), which is not what this test is about.
        client = httpclient.InferenceServerClient(deployment.http_url, network_timeout=60)
        tensor = httpclient.InferInput("INPUT__0", [1, 4], "FP32")
        tensor.set_data_from_numpy(sent)
        try:
            answers.append(client.infer("slow", [tensor]).as_numpy("OUTPUT__0"))
        except Exception as exc:                  # said below, as the test's failure
            answers.append(exc)
        finally:
            client.close()

    thread = threading.Thread(target=infer, daemon=True)
    try:
        thread.start()
        deadline = time.monotonic() + 30
        while not list(served.glob("slow/*/executing")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(served.glob("slow/*/executing")), "the request never reached the model"
        assert run_cli("down", "--repository", repo) == 0
        thread.join(30)
    finally:
        run_cli("down", "--repository", repo)
    [answer] = answers
    assert isinstance(answer, np.ndarray), answer
    np.testing.assert_array_equal(answer, sent)


def test_a_server_that_refuses_the_unload_is_stopped_by_the_signal_as_before(tmp_path, capsys):
    repo = _repository(tmp_path)
    _deploy(repo, "--no-warmup")
    secret = repo / ".tritonkit" / "secret"
    secret.write_text("not-the-secret-the-server-was-given\n")       # its 0600 mode kept
    capsys.readouterr()
    assert run_cli("down", "--repository", repo) == 0
    out, err = capsys.readouterr()
    assert "stopped the Triton server" in out and "error" not in err, err
    logged = (repo / ".tritonkit" / "server.log").read_text()
    assert "successfully unloaded" not in logged[:logged.index(LOGGED_STOP)]
    counts = _live_counts_after_the_signal(repo)
    assert counts[0] == 2 and counts[-1] == 0, counts                 # Triton unloaded them
