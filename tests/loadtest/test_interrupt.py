"""A load test cut short by a signal keeps its finished levels; a model whose only traffic
since its load is its config's model_warmup is cold — both against the real local Triton."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_REPOSITORY, default_signals, run_cli
from tests.loadtest.conftest import load_test_workers
from tritonkit.client import Endpoint
from tritonkit.deploy import deploy_local, down

# The example model again, with a model_warmup Triton runs at load on each of 2
# instances: entries of count 2 (batch 1) and of the default count (batch 4).
WARMED_CONFIG = '''name: "warmed"
backend: "python"
max_batch_size: 8
input { name: "INPUT__0" data_type: TYPE_FP32 dims: 4 }
output { name: "OUTPUT__0" data_type: TYPE_FP32 dims: 3 }
instance_group { count: 2 kind: KIND_CPU }
model_warmup {
  name: "one" batch_size: 1 count: 2
  inputs { key: "INPUT__0" value { data_type: TYPE_FP32 dims: 4 random_data: true } }
}
model_warmup {
  name: "four" batch_size: 4
  inputs { key: "INPUT__0" value { data_type: TYPE_FP32 dims: 4 random_data: true } }
}
'''


@pytest.fixture(scope="module")
def served(tmp_path_factory, exported_mlp):
    """The example repository, a copy of its model with a model_warmup ("warmed") and an
    exported MLP ("mlp"), served by the real embedded Triton without tritonkit's warm-up
    (``deploy --no-warmup``): only the configs' model_warmup has run."""
    repo = tmp_path_factory.mktemp("interrupt") / "repo"
    shutil.copytree(EXAMPLE_REPOSITORY, repo, ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    shutil.copytree(repo / "example", repo / "warmed")
    (repo / "warmed" / "config.pbtxt").write_text(WARMED_CONFIG)
    exported_mlp(repo)
    deployment = deploy_local(repo, http_port=0, grpc_port=0, metrics_port=0, timeout=120, warmup=False)
    yield deployment
    down(repo)


def _executions(deployment, model: str) -> int:
    client = Endpoint.from_deployment(deployment).http()
    try:
        stats = client.get_inference_statistics(model)["model_stats"]
    finally:
        client.close()
    return sum(int(m["execution_count"]) for m in stats)


@pytest.mark.timing
@pytest.mark.server
@pytest.mark.parametrize("model, warmup_executions", [("warmed", 2 * (2 + 1)), ("mlp", 5)])
def test_a_model_that_ran_only_its_model_warmup_since_its_load_is_called_cold(
        served, tmp_path, capsys, model, warmup_executions):
    """Triton runs a config's model_warmup at load and counts it: the model had served no
    request, yet its execution count is not 0 (2 instances x (2 + 1) runs; an exported MLP's
    5 batch sizes). Its first request — the probe before the first level — is its cold
    start and is said so; once it has served requests it is not."""
    assert _executions(served, model) == warmup_executions      # the warm-up alone, as loaded
    cold = tmp_path / "cold.json"
    assert run_cli("loadtest", "--repository", served.repository, "--model", model, "--concurrency", "1",
                   "--duration", "0.5", "--warmup-s", "0", "--json", cold) == 0
    said = " ".join(capsys.readouterr().out.split())
    data = json.loads(cold.read_text())
    assert (data["cold_first_request_ms"] or 0) > 0
    assert f"cold start: model '{model}': first request since its load" in said
    assert any("model_warmup aside" in w for w in data["verdict"]["warnings"])
    warm = tmp_path / "warm.json"
    assert run_cli("loadtest", "--repository", served.repository, "--model", model, "--concurrency", "1",
                   "--duration", "0.5", "--warmup-s", "0", "--json", warm) == 0
    data = json.loads(warm.read_text())
    assert data["cold_first_request_ms"] is None
    assert not any("first request since its load" in w for w in data["verdict"]["warnings"])


def _signalled_in_level(deployment, out: Path, level: int, signum: int, *args: str,
                        again_every_s: float | None = None):
    """`tritonkit loadtest` (one worker a level, each level a new one) signalled ``level``
    (1, 2, ...) levels in, its worker started: the run, its stdout and stderr, and the
    seconds from the signal to its end. SIGINT goes to the process group, as a terminal's
    Ctrl-C; another signal to the command alone, as a CI runner's. ``again_every_s``: the
    signal again every so often until the command ends (a user pressing Ctrl-C again)."""
    run = subprocess.Popen(
        [sys.executable, "-m", "tritonkit", "loadtest", "--repository", str(deployment.repository),
         "--model", "example", "--workers", "1", "--warmup-s", "0.2", "--json", str(out / "run.json"),
         "--csv", str(out / "run.csv"), "--plot", str(out / "run.png"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=default_signals)
    try:
        seen: set[int] = set()
        deadline = time.monotonic() + 60
        for _ in range(level):
            while not (load_test_workers(run.pid) - seen) and time.monotonic() < deadline:
                time.sleep(0.01)
            new = load_test_workers(run.pid) - seen
            assert new, "the level's worker did not start"
            seen |= new
        time.sleep(0.7)         # its worker started and counted; the level well short of its end
        pressed = time.monotonic()
        send = (lambda: os.killpg(run.pid, signum)) if signum == signal.SIGINT else (
            lambda: os.kill(run.pid, signum))
        send()
        while again_every_s and run.poll() is None and time.monotonic() < pressed + 30:
            time.sleep(again_every_s)
            try:
                send()
            except ProcessLookupError:
                break
        stdout, stderr = run.communicate(timeout=60)
        return run, stdout, stderr, time.monotonic() - pressed
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()


@pytest.mark.timing
@pytest.mark.server
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "SIGTERM"])
def test_a_signal_after_a_level_finished_reports_that_level_and_leaves_out_the_one_it_cut(
        served, tmp_path, signum):
    """perf_analyzer's Ctrl-C prints and writes the levels it finished: so does ours. The
    level cut short is not reported as if complete (left out, named), the levels after it
    are named as not run, no SLA verdict is claimed (exit 128 + the signal), and the last
    line says the run was interrupted. It took: exit 130, nothing printed or written."""
    run, out, err, took = _signalled_in_level(served, tmp_path, 2, signum, "--concurrency", "1,2,3",
                                              "--duration", "4", "--sla-p99-ms", "1000")
    assert run.returncode == 128 + signum, err
    assert "Traceback" not in err, err
    said = "interrupted" if signum == signal.SIGINT else f"stopped by {signum.name}"
    assert err.strip().splitlines()[-1] == f"error: {said}", err
    assert took < 8, f"the signal took {took:.1f} s"
    assert "c=1" in out and "c=2" not in out and "c=3" not in out, out
    flat = " ".join(out.split())
    assert f"{said} during concurrency 2, so no SLA verdict" in flat
    assert "not run: concurrency 3" in flat
    assert "SLA met" not in flat
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["interrupted"] is True
    assert data["interruption"] == {"signal": signum.name, "level_cut_short": "concurrency 2",
                                    "not_run": ["concurrency 3"]}
    assert [lv["label"] for lv in data["levels"]] == ["concurrency 1"]
    assert data["levels"][0]["ok"] > 0 and data["levels"][0]["duration_s"] == 4
    assert data["verdict"]["outcome"] == "interrupted"
    assert data["verdict"]["exit_code"] == 128 + signum
    with open(tmp_path / "run.csv", newline="") as f:
        assert {row["level"] for row in csv.DictReader(f)} == {"concurrency 1"}
    assert (tmp_path / "run.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.server
def test_ctrl_c_pressed_again_and_again_still_says_the_report_and_names_each_file(
        served, tmp_path):
    """A user who presses Ctrl-C again while the finished level's report is written (the
    plot takes a second) got "error: interrupted" alone: no table, the PNG missing, the
    files not named. The signals after the first wait for the report."""
    run, out, err, _ = _signalled_in_level(served, tmp_path, 2, signal.SIGINT, "--concurrency",
                                           "1,2", "--duration", "3", again_every_s=0.05)
    assert run.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "error: interrupted", err
    assert "c=1" in out, out
    for name in ("run.json", "run.csv", "run.png"):
        assert f"wrote {tmp_path / name}" in out, out
        assert (tmp_path / name).stat().st_size > 0
    assert json.loads((tmp_path / "run.json").read_text())["interrupted"] is True


@pytest.mark.server
def test_ctrl_c_before_any_level_finished_writes_nothing(served, tmp_path):
    """Nothing finished, nothing to report: one line, exit 130, no file."""
    run, out, err, took = _signalled_in_level(served, tmp_path, 1, signal.SIGINT, "--concurrency", "1,2",
                                              "--duration", "4")
    assert run.returncode == 130
    assert err.strip().splitlines() == ["error: interrupted"], err
    assert "c=1" not in out
    assert not any(tmp_path.iterdir())
    assert took < 8, f"Ctrl-C took {took:.1f} s"
