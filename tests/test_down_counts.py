"""`down` says one count of what a stopping Triton waits for: the progress line and the last
line agree (models unload one by one: '3 live models' is where the wait began, '1 live
models' what held it up to the end)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ECHO_CONFIG, ROOT, add_python_model, default_signals, echo_model, run_cli
from tritonkit.server.local import EXIT_TIMEOUT, EXITED, _held_up_by, _waits, ending_from_log

# What Triton 2.51 logged for a stop where five of six models unloaded at once and the
# sixth held the stop until the exit timeout expired (the issue's `down`).
SIX_THEN_ONE = "\n".join(
    ['I1204 server.cc:321] "Timeout 8: Found 0 model versions that have in-flight inferences"',
     'I1204 server.cc:336] "All models are stopped, unloading models"',
     'I1204 server.cc:345] "Timeout 8: Found 6 live models and 0 in-flight non-inference requests"']
    + [f'I1204 server.cc:345] "Timeout {t}: Found 1 live models and 0 in-flight non-inference '
       f'requests"' for t in range(7, 0, -1)]
    + ['E1204 server.cc:364] "Exit timeout expired. Exiting immediately."'])


def test_what_held_a_stop_up_is_the_last_count_of_the_phase_that_held_it():
    assert _held_up_by(_waits(SIX_THEN_ONE)) == \
        "1 live models and 0 in-flight non-inference requests"
    # A connection that held the whole timeout is what held it, not the models it left no
    # time to unload.
    connection_then_models = "\n".join(
        [f'I1204 http_server.cc:1] "Timeout {t}: Found 1 HTTP service connections"'
         for t in range(8, 0, -1)]
        + ['I1204 server.cc:345] "Timeout 0: Found 6 live models and 0 in-flight '
           'non-inference requests"'])
    assert _held_up_by(_waits(connection_then_models)) == "1 HTTP service connections"
    # In-flight requests count though no model is live.
    assert _waits('"Timeout 3: Found 0 live models and 2 in-flight non-inference requests"')



def test_a_connection_held_to_the_end_of_the_exit_timeout_is_said_though_triton_is_silent():
    """Its models unloaded before the signal (`down` asks for that first), Triton gives up
    on a client's connection at the end of its exit timeout without saying "Exit timeout
    expired" (what it logs only for models still live): the spent countdown says it."""
    logged = "\n".join(
        [f'I1205 http_server.cc:248] "Timeout {t}: Found 1 HTTP service connections"'
         for t in range(4, 0, -1)]
        + ['I1205 server.cc:321] "Timeout 0: Found 0 model versions that have in-flight '
           'inferences"',
           'I1205 server.cc:345] "Timeout 0: Found 0 live models and 0 in-flight non-inference '
           'requests"'])
    ended = ending_from_log(logged, pid=1, killed=False, seconds=4.9, timeout=40)
    assert (ended.how, ended.waited_for) == (EXIT_TIMEOUT, "1 HTTP service connections")
    # A countdown that never counted anything, as under an exit timeout of 0, is no expiry.
    quiet = 'I1205 server.cc:345] "Timeout 0: Found 0 live models and 0 in-flight non-inference '
    assert ending_from_log(quiet + 'requests"', pid=1, killed=False, seconds=0.1,
                           timeout=40).how == EXITED

@pytest.mark.server
def test_down_says_the_same_count_while_it_waits_and_when_the_exit_timeout_expires(tmp_path):
    """Three models, one slow to unload (its finalize takes 30 s), under an 8 s exit
    timeout: the other two unload at once, and both the waiting line and the last line
    say 1 live model."""
    repo = tmp_path / "repo"
    add_python_model(repo, "fast_a", ECHO_CONFIG, echo_model())
    add_python_model(repo, "fast_b", ECHO_CONFIG, echo_model())
    add_python_model(repo, "slow_unload", ECHO_CONFIG,
                     echo_model() + "\n    def finalize(self):\n        time.sleep(30)\n")
    settings = tmp_path / "server.toml"
    settings.write_text((ROOT / "configs" / "server.toml").read_text().replace(
        "exit_timeout_secs = 30", "exit_timeout_secs = 8"))
    assert run_cli("deploy", "--repository", repo, "--no-warmup", "--server-config", settings,
                   "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0") == 0
    try:
        done = subprocess.run([sys.executable, "-m", "tritonkit", "down", "--repository",
                               str(repo), "--timeout", "30"],
                              capture_output=True, text=True, cwd=ROOT, timeout=60,
                              preexec_fn=default_signals)
    finally:
        run_cli("down", "--repository", repo)
    assert done.returncode == 0, done.stderr
    said = done.stdout.strip()
    assert said.startswith(f"stopped the Triton server for {repo}: Triton's exit timeout "
                           "expired and it exited"), said
    assert said.endswith("held up by 1 live models and 0 in-flight non-inference requests"), said
    [waiting] = done.stderr.splitlines()
    assert re.fullmatch(r"stopping tritonserver \(pid \d+\): Triton waits for 1 live models and 0 "
                        r"in-flight non-inference requests \(\d+ s left of its exit timeout\)",
                        waiting), waiting
