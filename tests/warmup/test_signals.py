"""`tritonkit warmup` stopped by a signal: SIGTERM (a service manager, a cancelled CI job)
and SIGHUP (a closed terminal) end it as Ctrl-C does, in one line with 128 + the signal.
An adversarial pass found both killing it silently (exit -15, -1) mid warm-up."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
import tritonclient.http as httpclient

from tests.conftest import ROOT, default_signals
from tests.warmup.conftest import _ready

pytestmark = pytest.mark.timeout(120)


def _served_requests(url: str, model: str) -> int:
    client = httpclient.InferenceServerClient(url)
    try:
        stats = client.get_inference_statistics(model)["model_stats"]
        return sum(int(m["inference_stats"]["success"]["count"]) for m in stats)
    finally:
        client.close()


@pytest.mark.server
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_mid_warm_up_is_one_line_and_128_plus_the_signal(warm_server, signum):
    # A rule no latency meets: the warm-up sends requests until the signal comes.
    warmup = subprocess.Popen(
        [sys.executable, "-m", "tritonkit", "warmup", "--repository", warm_server.repository,
         "--model", "example", "--reload", "--requests", "100000", "--steady-tolerance",
         "0.001", "--steady-floor-ms", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        preexec_fn=default_signals)
    try:
        # Signalled once it has sent 20 requests since the fewest seen: a reload may
        # start the model's counts again from 0.
        seen, end = [], time.monotonic() + 60
        while not seen or seen[-1] - min(seen) < 20:
            assert time.monotonic() < end and warmup.poll() is None, warmup.stderr.read()
            seen.append(_served_requests(warm_server.http_url, "example"))
            time.sleep(0.05)
        warmup.send_signal(signum)
        out, err = warmup.communicate(timeout=30)
    finally:
        warmup.kill()
    assert warmup.returncode == 128 + signum, err
    assert "Traceback" not in err and "Interrupted" not in err, err
    assert err.strip().splitlines() == [f"error: stopped by {signal.Signals(signum).name}"]
    assert _ready(warm_server) and _ready(warm_server, "pipeline")
