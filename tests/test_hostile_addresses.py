"""An address given with --url or --grpc-url is HOST:PORT or bad input (exit 2, at once),
for every verb that takes one. The second adversarial pass found a host with a space or a
control character passing the check: `warmup` then retried the client library's refusal
for its whole 120 s wait, `loadtest` ran and reported a bogus "server began shutting
down", and `monitor`, `diagnose --live` and `tune` failed with exit 1; monitor and
diagnose did not check --url at all (`https://host:port` became `http://https://…`)."""

from __future__ import annotations

import time

import pytest

from tests.conftest import run_cli
from tritonkit.client import check_address
from tritonkit.errors import UsageError

HOSTILE = (" 127.0.0.1:8000", "127.0.0.1 :8000", "loc\talhost:8000",
           "127.0.0.1\r\nX-Evil: 1\r\n:8000", "https://127.0.0.1:8000", "127.0.0.1:8000/v2",
           "user@127.0.0.1:8000", "127.0.0.1", "127.0.0.1:\u0663\u0664", "::1:8000",
           "[::1 ]:8000", ":8000", "host\x00:8000", "h\u00f6st:8000")

VERBS = {
    "warmup": ("warmup", "--timeout", "5"),
    "loadtest": ("loadtest", "-m", "mlp", "-c", "1", "--duration", "1"),
    "tune": ("tune", "mlp", "--sla-p99-ms", "10", "--budget-s", "5"),
    "monitor": ("monitor", "--once"),
    "diagnose": ("diagnose", "--live", "--duration", "1", "--interval", "0.5"),
}


@pytest.mark.parametrize("address", HOSTILE)
def test_an_address_that_is_not_host_port_is_refused(address):
    with pytest.raises(UsageError, match="is not HOST:PORT"):
        check_address(address, "--url")


@pytest.mark.parametrize("address", ["127.0.0.1:8000", "localhost:1", "triton.svc_a-1.local:65535",
                                     "[::1]:8001", "[fe80::1%eth0]:8000", "127.0.0.1:8000/"])
def test_an_address_that_is_host_port_passes(address):
    assert check_address(address, "--url") == address.removesuffix("/")


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("address", [" 127.0.0.1:8000", "https://127.0.0.1:8000"])
def test_every_verb_refuses_a_hostile_url_at_once(tmp_path, capsys, monkeypatch, verb, address):
    monkeypatch.chdir(tmp_path)
    started = time.monotonic()
    code = run_cli(*VERBS[verb], "--url", address)
    err = capsys.readouterr().err
    assert code == 2, err
    assert time.monotonic() - started < 30
    error = [line for line in err.splitlines() if line.startswith("error: ")]
    assert error == [f"error: --url {address!r} is not HOST:PORT"], err


def test_a_hostile_grpc_url_is_refused(capsys):
    assert run_cli("loadtest", "-m", "mlp", "-c", "1", "--url", "127.0.0.1:8000",
                   "--grpc-url", "127.0.0.1\t:8001") == 2
    assert "--grpc-url '127.0.0.1\\t:8001' is not HOST:PORT" in capsys.readouterr().err
