"""`down` stops the local server that serves a repository even when its record names
another process: a record carried from another pid namespace (a deploy in a container,
`down` on the host), restored from a backup, or edited. The second adversarial pass found
`down` saying "no running server (state cleared)" with the server still running, its
record gone; the process the record named was rightly left alone."""

from __future__ import annotations

import dataclasses
import os
import subprocess

import pytest

from tests.conftest import run_cli
from tritonkit.server.state import load_deployment, save_deployment


@pytest.mark.server
def test_down_stops_the_server_whose_record_names_another_process(deployed, capsys):
    repository = deployed.repository
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        save_deployment(dataclasses.replace(load_deployment(repository), pid=bystander.pid))
        capsys.readouterr()
        assert run_cli("down", "--repository", repository) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"stopped the Triton server for {repository}"), out
        assert bystander.poll() is None                     # not ours: never signalled
        assert not os.path.exists(f"/proc/{deployed.pid}") or \
            open(f"/proc/{deployed.pid}/stat").read().split()[2] == "Z"
        assert run_cli("down", "--repository", repository) == 0
        assert "nothing to stop" in capsys.readouterr().out
    finally:
        bystander.kill()
        bystander.wait()
