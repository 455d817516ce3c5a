"""`tune --write`: which config file it writes, what it refuses to replace, and that only the
knobs the tune changed move (the production config keeps its own platform, kind and warm-up)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from tests import onnx_graphs
from tritonkit.datafiles import CONFIGS_ENV, shipped_configs_dir
from tritonkit.errors import UsageError
from tritonkit.model_config import configure, edited_by_hand, read_config, stamped_profile
from tritonkit.profiles import TuneSpace
from tritonkit.report import Sla
from tritonkit.server.state import Deployment, save_deployment
from tritonkit.tune import Candidate, Found, Probe, Trial, TuneResult, how_to_serve, write_target
from tritonkit.tune._write import write_winner


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    onnx_graphs.mlp(tmp_path / "mlp")
    (tmp_path / "mlp" / "export-report.json").write_text(json.dumps(
        {"max_batch_size": 32, "inputs": [{"name": "INPUT__0", "example_shape": [4, 16]}]}))
    configure(tmp_path, "mlp", gpu="a10")
    return tmp_path


def _record(repo: Path, **extra) -> None:
    save_deployment(Deployment(target="local", repository=str(repo), host="127.0.0.1", http_port=1,
                               grpc_port=2, metrics_port=3, secret_header="h", models=["mlp"],
                               started_at=0.0, extra=extra))


def test_write_goes_to_the_gpu_asked_else_the_deployed_profile_else_config_pbtxt(repo):
    assert write_target(repo, "mlp", gpu="p100").path == repo / "mlp" / "configs" / "p100.pbtxt"
    assert write_target(repo, "mlp").path == repo / "mlp" / "config.pbtxt"     # nothing recorded
    _record(repo, gpu="a10")
    assert write_target(repo, "mlp").path == repo / "mlp" / "configs" / "a10.pbtxt"


def test_a_local_deployment_writes_the_cpu_profile_where_one_exists(repo, tmp_path, monkeypatch):
    _record(repo)
    assert write_target(repo, "mlp").path == repo / "mlp" / "configs" / "cpu.pbtxt"
    configs = tmp_path / "configs"
    shutil.copytree(shipped_configs_dir(), configs)
    (configs / "gpus" / "cpu.toml").unlink()          # a configs/ folder without one
    monkeypatch.setenv(CONFIGS_ENV, str(configs))
    assert write_target(repo, "mlp").path == repo / "mlp" / "config.pbtxt"


def test_what_serves_the_written_file_is_said_with_the_redeploy_that_reads_it(repo):
    # a local deployment without --gpu serves config.pbtxt: a plain redeploy would not serve
    # the CPU profile's file tune wrote
    _record(repo)
    redeploy = f"tritonkit down -r {repo} && tritonkit deploy -r {repo} --gpu cpu"
    assert how_to_serve(write_target(repo, "mlp")) == (
        f"the deployment serves config.pbtxt; to serve the tuned config: {redeploy}")
    _record(repo, gpu="cpu", model_config_name="cpu")
    assert how_to_serve(write_target(repo, "mlp")) == f"the server serves it once redeployed: {redeploy}"
    _record(repo, gpu="a10", model_config_name="a10")
    assert how_to_serve(write_target(repo, "mlp", gpu="p100")).startswith(
        "the deployment serves configs/a10.pbtxt; to serve the tuned config: tritonkit down")


@pytest.mark.parametrize("edit", ["by hand", "not tritonkit's"])
def test_a_config_not_as_tritonkit_wrote_it_is_refused_without_force(repo, edit):
    path = repo / "mlp" / "config.pbtxt"
    text = path.read_text()
    path.write_text(text.replace("max_batch_size: 32", "max_batch_size: 24") if edit == "by hand"
                    else text.split("# sha256", 1)[1].split("\n", 1)[1])
    with pytest.raises(UsageError, match=f"{path} was .*: --write would replace it") as refused:
        write_target(repo, "mlp").check()
    assert "--force" in refused.value.hint
    write_target(repo, "mlp", force=True).check()
    configure(repo, "mlp", gpu="a10", force=True)       # as generated: no --force needed
    write_target(repo, "mlp").check()


def test_no_config_to_start_from_is_refused(tmp_path):
    (tmp_path / "mlp").mkdir()
    with pytest.raises(UsageError, match="no config of 'mlp' to write the winner into"):
        write_target(tmp_path, "mlp").check()


def _result(winner: Candidate) -> TuneResult:
    judged = Probe("open", 800.0, 790.0, 1.2, 8.5)
    trial = Trial(point=winner, found=Found(probes=[judged], concurrency=8, judged=judged))
    return TuneResult(model="mlp", server="127.0.0.1:8000", sla=Sla(p99_ms=10), space=TuneSpace(),
                      trials=[trial], best=trial, winner=trial, target="cpu",
                      started_at="2026-12-04T00:00:00+00:00")


def test_only_the_knobs_the_tune_changed_are_written(repo):
    served = Candidate(instance_count=1, max_batch_size=32, max_queue_delay_us=0)
    winner = Candidate(instance_count=3, max_batch_size=32, max_queue_delay_us=500)
    path = write_winner(write_target(repo, "mlp"), _result(winner), served_point=served)
    config = read_config(path)
    assert config.platform == "onnxruntime_onnx" and config.max_batch_size == 32
    assert [(g.kind, g.count) for g in config.instance_group] == [(mc.ModelInstanceGroup.KIND_GPU, 3)]
    assert config.dynamic_batching.max_queue_delay_microseconds == 500
    text = path.read_text()
    assert text.startswith("# Generated by tritonkit tune for profile 'a10'")
    assert "790 requests/s in open loop at p99 <= 10 ms" in text
    assert "instance_count 1 -> 3; max_queue_delay_us 0 -> 500" in text
    assert "measured on the CPU, not on the a10's card" not in text      # config.pbtxt: no profile
    assert edited_by_hand(path) is None


def test_a_lower_batch_limit_written_takes_its_warm_up_along(repo):
    served = Candidate(instance_count=1, max_batch_size=32)
    path = write_winner(write_target(repo, "mlp", gpu="a10"),
                        _result(Candidate(instance_count=1, max_batch_size=8)), served_point=served)
    config = read_config(path)
    assert config.max_batch_size == 8
    assert max(w.batch_size for w in config.model_warmup) == 8
    assert "measured on the CPU, not on the a10's card" in path.read_text()


@pytest.mark.timeout(60)
def test_the_profile_a_config_is_stamped_for_is_read_with_the_configs_bound(repo):
    """The stamp that names the profile of config.pbtxt is read as the config is: a regular
    file within its bound (a config swapped for a FIFO between the two reads blocked the
    write for ever, waiting for a writer)."""
    path = repo / "mlp" / "config.pbtxt"
    assert stamped_profile(path) == "a10"
    path.unlink()
    os.mkfifo(path)
    assert stamped_profile(path) is None
