"""tritonkit export: the models users export come out as verified, dynamically batched ONNX.

Each example family is exported once (through the CLI, as a user would) into one
repository for the module; the tests read what that wrote. Exports are slow, so the
tests that need an export of their own use the TorchScript exporter on a tiny model.
"""

from __future__ import annotations

import ast
import errno
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import tritonkit
from tritonkit.server.state import redeploy_command
from tests.conftest import ROOT, run_cli
from tritonkit.export import onnx_export, staging
from tritonkit.export.spec import load_factory

EXAMPLES = ROOT / "examples"
# name → (SPEC, dynamic labels besides the batch)
FAMILIES = {
    "mlp": ("mlp.py:build", {}),
    "cnn": ("cnn.py:build", {}),
    "encoder": ("encoder.py:build", {"sequence"}),
    "multi_output": ("multi_output.py:build", {}),
    "lstm": ("recurrent.py:build", {"time"}),
    "gru": ("recurrent.py:build_gru", {"time"}),
    "sequence": ("sequence.py:build", {"sequence"}),
}
MAX_BATCH = 8


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """Every example family exported once into one repository."""
    repository = tmp_path_factory.mktemp("export") / "models"
    for name, (spec, _) in FAMILIES.items():
        code = run_cli("export", EXAMPLES / spec, "--name", name, "--repository", repository,
                       "--max-batch-size", MAX_BATCH)
        assert code == 0, f"tritonkit export {spec} failed"
    return repository


def report_of(model_dir: Path) -> dict:
    return json.loads((model_dir / "export-report.json").read_text())


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def session(model_dir: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(model_dir / "1" / "model.onnx"),
                                providers=["CPUExecutionProvider"])


def resized(tensor: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """Random values of the example's kind at a new shape (token ids stay valid ids)."""
    generator = torch.Generator().manual_seed(7)
    if tensor.is_floating_point():
        return torch.randn(shape, generator=generator, dtype=tensor.dtype)
    low, high = int(tensor.min()), int(tensor.max())
    return torch.randint(low, high + 1, shape, generator=generator, dtype=tensor.dtype)


@pytest.mark.slow
@pytest.mark.parametrize("name", FAMILIES)
def test_each_family_is_written_as_a_triton_model_folder(exported, name):
    model_dir = exported / name
    for relative in ("1/model.onnx", "config.pbtxt", "export-report.json", "reproduce_export.py"):
        assert (model_dir / relative).is_file(), relative
    onnx.checker.check_model(str(model_dir / "1" / "model.onnx"), full_check=True)
    assert f'name: "{name}"' in (model_dir / "config.pbtxt").read_text()
    assert not [p for p in exported.iterdir() if p.name.startswith(".")], "staging left behind"


@pytest.mark.slow
@pytest.mark.parametrize("name", FAMILIES)
def test_exported_model_runs_at_batch_sizes_and_lengths_it_was_not_traced_with(exported, name):
    spec, labels = FAMILIES[name]
    module, example, *_ = load_factory(str(EXAMPLES / spec))
    inputs = example if isinstance(example, dict) else {"INPUT__0": example}
    report = report_of(exported / name)
    runner = session(exported / name)
    traced = {spec_["name"]: spec_["example_shape"] for spec_ in report["inputs"]}
    for batch, length in ((5, 5), (7, 17)):
        feed = {}
        for input_name, tensor in inputs.items():
            shape = [batch, *tensor.shape[1:]]
            if labels:
                shape[1] = length                    # every dynamic axis here is axis 1
            assert shape != traced[input_name]
            feed[input_name] = resized(tensor, tuple(shape))
        with torch.no_grad():
            expected = module(*feed.values())
        expected = expected if isinstance(expected, tuple) else (expected,)
        actual = runner.run(None, {k: v.numpy() for k, v in feed.items()})
        assert len(actual) == len(expected)
        for want, got in zip(expected, actual):
            assert got.shape[0] == batch
            np.testing.assert_allclose(got, want.numpy(), atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("name", FAMILIES)
def test_graph_axes_are_symbolic_batch_and_declared_labels(exported, name):
    _, labels = FAMILIES[name]
    report = report_of(exported / name)
    for tensor in report["inputs"]:
        assert tensor["dynamic_axes"]["0"] == "batch"
        assert tensor["shape"][0] == -1
        assert set(tensor["dynamic_axes"].values()) == {"batch", *labels}
    for tensor in report["outputs"]:
        assert tensor["dynamic_axes"]["0"] == "batch"


def test_transformer_encoder_takes_int64_ids_and_mask_named_from_the_dict_keys(exported):
    report = report_of(exported / "encoder")
    assert [(t["name"], t["dtype"]) for t in report["inputs"]] == \
        [("input_ids", "int64"), ("attention_mask", "int64")]
    assert [t["name"] for t in report["outputs"]] == ["OUTPUT__0"]
    assert report["declared_dynamic_axes"] == {"input_ids": {"1": "sequence"},
                                               "attention_mask": {"1": "sequence"}}


@pytest.mark.slow
def test_dynamic_axes_in_torch_onnxs_list_form_are_labelled_as_the_flag_labels_them(tmp_path):
    """``{"x": [1]}``, as torch.onnx.export takes them, from a factory or the Python API."""
    result = tritonkit.export(torch.nn.Linear(4, 2), {"x": torch.randn(2, 5, 4)}, name="m",
                              repository=tmp_path, dynamic_axes={"x": [1]},
                              exporters=["torchscript"])
    assert result.report["declared_dynamic_axes"] == {"x": {"1": "x_1"}}
    assert result.report["inputs"][0]["dynamic_axes"] == {"0": "batch", "1": "x_1"}
    lengths = {case["lengths"]["x_1"] for case in result.report["verification"]["cases"]}
    assert len(lengths) > 1, "verified at other lengths than the example's"


@pytest.mark.slow
@pytest.mark.parametrize("input_name,output_name", [("linear", "relu"), ("0.weight", "embedding")],
                         ids=["names of values inside", "an input named like a weight"])
def test_io_names_the_dynamo_exporter_uses_inside_the_graph_export_with_it(
        tmp_path, input_name, output_name):
    """The dynamo exporter names its own values after the ops and weights (linear, relu,
    embedding, 0.weight): an input or output named the same is still exported by it."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                                torch.nn.Linear(8, 3)).eval()
    result = tritonkit.export(model, torch.randn(2, 4), name="m", repository=tmp_path,
                              input_names=[input_name], output_names=[output_name],
                              exporters=["dynamo"])
    assert result.report["exporter"] == "dynamo"
    assert result.report["verification"]["passed"] is True
    graph = onnx.load(str(tmp_path / "m" / "1" / "model.onnx")).graph
    assert [v.name for v in graph.input] == [input_name]
    assert [v.name for v in graph.output] == [output_name]


def test_model_with_several_outputs_gets_triton_style_names_and_an_error_per_output(exported):
    report = report_of(exported / "multi_output")
    names = ["OUTPUT__0", "OUTPUT__1", "OUTPUT__2"]
    assert [t["name"] for t in report["outputs"]] == names
    assert [t["shape"] for t in report["outputs"]] == [[-1, 5], [-1, 16], [-1, 1]]
    assert set(report["verification"]["max_errors"]) == set(names)


def test_report_records_versions_exporter_hashes_and_verification(exported):
    model_dir = exported / "encoder"
    report = report_of(model_dir)
    assert report["name"] == "encoder" and report["format"] == "onnx"
    assert report["opset"] == 18 and report["max_batch_size"] == MAX_BATCH
    assert report["versions"]["torch"] == torch.__version__
    assert report["versions"]["onnx"] == onnx.__version__
    assert report["versions"]["onnxruntime"] == ort.__version__
    assert report["exporter"] in onnx_export.EXPORTERS
    assert report["exporter_attempts"][-1] == {**report["exporter_attempts"][-1],
                                               "exporter": report["exporter"], "ok": True}
    model = model_dir / "1" / "model.onnx"
    assert report["files"]["1/model.onnx"] == {"sha256": sha256(model),
                                              "bytes": model.stat().st_size}
    verification = report["verification"]
    assert verification["passed"] is True
    assert verification["provider"] == "CPUExecutionProvider"
    batches = {case["batch"] for case in verification["cases"]}
    assert {1, MAX_BATCH // 2, MAX_BATCH} <= batches
    lengths = {case["lengths"]["sequence"] for case in verification["cases"]}
    assert len(lengths) >= 3, "the sequence axis is verified at several lengths"
    assert verification["tolerances"]["OUTPUT__0"] == {"atol": 1e-4, "rtol": 1e-3}  # fp32
    worst = verification["max_errors"]["OUTPUT__0"]
    assert set(worst) == {"max_abs_error", "max_rel_error", "atol", "rtol", "tolerance_share",
                          "passed"}
    assert 0 <= worst["max_abs_error"] < 1e-3


def test_every_exporter_attempt_is_recorded_and_the_last_is_the_one_used(exported):
    for name in FAMILIES:
        report = report_of(exported / name)
        *failed, used = report["exporter_attempts"]
        assert used["ok"] is True and used["exporter"] == report["exporter"], name
        for attempt in failed:
            assert attempt["ok"] is False and attempt["error"], name


def test_exporter_falls_back_to_torchscript_when_dynamo_fails(tmp_path, monkeypatch):
    def dynamo_fails(*args, **kwargs):
        raise RuntimeError("Could not guard on data-dependent expression u0 > 3")

    monkeypatch.setattr(onnx_export, "_export_dynamo", dynamo_fails)
    result = tritonkit.export(torch.nn.Linear(4, 3), torch.randn(2, 4), name="linear",
                              repository=tmp_path)
    assert result.report["exporter"] == "torchscript"
    failed, used = result.report["exporter_attempts"]
    assert failed["exporter"] == "dynamo" and failed["ok"] is False
    assert "data-dependent expression" in failed["error"]
    assert used == {**used, "exporter": "torchscript", "ok": True}
    assert result.report["verification"]["passed"] is True


def test_python_api_orders_dict_inputs_like_forward_and_names_them_from_the_keys(tmp_path):
    class Blend(torch.nn.Module):
        def forward(self, image, weight):
            return image * 2 + weight

    # Keys in the other order than forward() takes them.
    example = {"weight": torch.randn(2, 3), "image": torch.randn(2, 3)}
    result = tritonkit.export(Blend(), example, name="blend", repository=tmp_path,
                              exporters=("torchscript",))
    assert [t["name"] for t in result.report["inputs"]] == ["image", "weight"]
    image, weight = np.ones((5, 3), np.float32), np.full((5, 3), 10, np.float32)
    (out,) = session(result.path).run(None, {"weight": weight, "image": image})
    np.testing.assert_allclose(out, image * 2 + weight)


def test_the_python_api_takes_one_string_as_one_name_not_as_its_letters(tmp_path):
    """output_names="logits" named a two-output model's outputs l and o; exporters="torchscript"
    asked for exporters t, o, r..."""
    class Pair(torch.nn.Module):
        def forward(self, x):
            return x * 2

    result = tritonkit.export(Pair(), torch.randn(2, 3), name="one", repository=tmp_path,
                              input_names="features", output_names="logits",
                              exporters="torchscript")
    assert [t["name"] for t in result.report["inputs"]] == ["features"]
    assert [t["name"] for t in result.report["outputs"]] == ["logits"]
    assert result.report["exporter"].startswith("torchscript")


@pytest.mark.slow
def test_a_traced_modules_dict_inputs_are_ordered_by_its_forwards_parameters(tmp_path):
    """A torch.jit.trace'd module (or one torch.jit.load'ed) has no Python signature, only
    its schema: keyed in another order, the ids were fed as the mask under the mask's name,
    and verification, which feeds PyTorch the same way round, passed."""
    class Blend(torch.nn.Module):
        def forward(self, image, weight):
            return image * 2 + weight

    traced = torch.jit.trace(Blend(), (torch.randn(2, 3), torch.randn(2, 3)))
    example = {"weight": torch.randn(2, 3), "image": torch.randn(2, 3)}
    result = tritonkit.export(traced, example, name="blend", repository=tmp_path,
                              exporters=("torchscript",))
    assert [t["name"] for t in result.report["inputs"]] == ["image", "weight"]
    image, weight = np.ones((5, 3), np.float32), np.full((5, 3), 10, np.float32)
    (out,) = session(result.path).run(None, {"weight": weight, "image": image})
    np.testing.assert_allclose(out, image * 2 + weight)


def test_input_names_rename_dict_inputs_in_the_order_the_dict_gives_them(tmp_path):
    """Both inputs are int64 [batch, n]: named the wrong way round, verification passes
    and every client's ids are read as the mask."""
    class Tokens(torch.nn.Module):
        def forward(self, input_ids, attention_mask):
            return (input_ids * 10 + attention_mask).float()

    example = {"attention_mask": torch.randint(0, 2, (2, 5)),
               "input_ids": torch.randint(0, 9, (2, 5))}
    result = tritonkit.export(Tokens(), example, name="tokens", repository=tmp_path,
                              input_names=["mask", "ids"], exporters=("torchscript",))
    assert [t["name"] for t in result.report["inputs"]] == ["ids", "mask"]   # forward()'s order
    ids, mask = np.full((1, 5), 5, np.int64), np.ones((1, 5), np.int64)
    (out,) = session(result.path).run(None, {"ids": ids, "mask": mask})
    np.testing.assert_array_equal(out, np.full((1, 5), 51.0))


def test_input_and_output_names_come_from_the_flags(tmp_path):
    code = run_cli("export", EXAMPLES / "multi_output.py:build", "--name", "heads",
                   "--repository", tmp_path, "--exporter", "torchscript",
                   "--input-names", "features", "--output-names", "logits,embedding,confidence")
    assert code == 0
    graph = onnx.load(str(tmp_path / "heads" / "1" / "model.onnx")).graph
    assert [v.name for v in graph.input] == ["features"]
    assert [v.name for v in graph.output] == ["logits", "embedding", "confidence"]
    assert 'name: "logits"' in (tmp_path / "heads" / "config.pbtxt").read_text()


def test_force_replaces_an_existing_model_folder(tmp_path):
    args = ("export", EXAMPLES / "mlp.py:build", "--name", "mlp", "--repository", tmp_path,
            "--exporter", "torchscript")
    assert run_cli(*args) == 0
    (tmp_path / "mlp" / "stale.txt").write_text("from the old export")
    assert run_cli(*args, "--max-batch-size", "16", "--force") == 0
    assert not (tmp_path / "mlp" / "stale.txt").exists()
    assert report_of(tmp_path / "mlp")["max_batch_size"] == 16
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp"]


def test_force_names_the_versions_and_files_the_replaced_folder_had_and_the_new_one_lacks(
        tmp_path, capsys):
    args = ("export", EXAMPLES / "mlp.py:build", "--name", "mlp", "--repository", tmp_path,
            "--exporter", "torchscript")
    assert run_cli(*args) == 0
    old = tmp_path / "mlp"
    for version in ("2", "7"):          # earlier exports, or versions placed by hand
        shutil.copytree(old / "1", old / version)
    (old / "configs" / "h100.pbtxt").write_text("# written by hand\n")
    (old / "labels.txt").write_text("cat\ndog\n")
    # instances tuned by hand in the A10's config; the P100's left as tritonkit wrote it
    tuned = (old / "configs" / "a10.pbtxt").read_text().replace("count: 2", "count: 3")
    (old / "configs" / "a10.pbtxt").write_text(tuned)
    capsys.readouterr()

    assert run_cli(*args, "--force") == 0
    said = "".join(capsys.readouterr().out.split())     # long paths wrap mid-word
    assert "".join(f"replaced {old}: removed versions 2, 7 and configs/h100.pbtxt, labels.txt, "
                   "which the new export does not have; replaced configs/a10.pbtxt (edited since "
                   "tritonkit wrote it) with the new export's".split()) in said
    assert sorted(p.name for p in old.iterdir() if p.name.isdigit()) == ["1"]
    assert report_of(old)["replaced"] == {
        "removed_versions": ["2", "7"], "removed_files": ["configs/h100.pbtxt", "labels.txt"],
        "edited_configs": {"configs/a10.pbtxt": "edited since tritonkit wrote it"}}


def test_an_export_that_replaces_nothing_records_no_replacement(tmp_path):
    result = tritonkit.export(torch.nn.Linear(4, 3), torch.randn(2, 4), name="linear",
                              repository=tmp_path, exporters=("torchscript",))
    assert "replaced" not in result.report
    assert not [note for note in result.notes if note.startswith("replaced")]


# An export killed mid-way (kill -9, the OOM killer): its staging folder stays, the model
# half written, until the child is killed.
KILLED_EXPORT = """
import sys
from pathlib import Path

from tritonkit.export import staging

with staging.owned_staging(Path(sys.argv[1]), sys.argv[2]) as (folder, _):
    (folder / sys.argv[2] / "1").mkdir(parents=True)
    (folder / sys.argv[2] / "1" / "model.onnx").write_bytes(b"half written")
    print(folder, flush=True)
    sys.stdin.read()
"""


def staging_of_an_export_in_flight(repository: Path, name: str) -> tuple[subprocess.Popen, Path]:
    """A child process midway through staging an export of ``name``, and its staging folder."""
    repository.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen([sys.executable, "-c", KILLED_EXPORT, str(repository), name],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    folder = Path(child.stdout.readline().strip())
    assert folder.parent == repository and folder.name.startswith(f".{name}.export-")
    return child, folder


def staging_of_a_killed_export(repository: Path, name: str, before_the_kill=None) -> Path:
    """The staging folder an export of ``name`` killed midway (kill -9) left behind;
    ``before_the_kill(folder)`` does what the export had done by then."""
    child, folder = staging_of_an_export_in_flight(repository, name)
    if before_the_kill:
        before_the_kill(folder)
    child.kill()
    child.wait()
    return folder


@pytest.mark.slow
def test_a_staging_folder_left_by_a_killed_export_is_removed_by_the_next_export_of_its_name(
        tmp_path, capsys):
    folder = staging_of_a_killed_export(tmp_path, "mlp")
    assert folder.is_dir(), "kill -9 runs no clean-up"

    assert run_cli("export", EXAMPLES / "mlp.py:build", "--name", "mlp", "--repository",
                   tmp_path, "--exporter", "torchscript") == 0
    assert not folder.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp"]
    said = "".join(capsys.readouterr().out.split())     # long paths wrap mid-word
    assert said.count("".join(f"removed {folder}: the staging folder of an export that was "
                              "killed".split())) == 1


@pytest.mark.slow
def test_the_staging_folder_of_an_export_still_running_is_left_alone(tmp_path):
    child, folder = staging_of_an_export_in_flight(tmp_path, "linear")
    try:
        result = tritonkit.export(torch.nn.Linear(4, 3), torch.randn(2, 4), name="linear",
                                  repository=tmp_path, exporters=("torchscript",))
        assert (folder / "linear" / "1" / "model.onnx").read_bytes() == b"half written"
        assert not [note for note in result.notes if str(folder) in note]
    finally:
        child.kill()
        child.wait()


def test_a_staging_folder_is_named_like_one_only_once_it_is_locked(tmp_path, monkeypatch):
    """A concurrent export's clean-up, run at each step of setting a staging folder up,
    neither takes it for a killed export's nor for an old one (no owner.lock): so a folder
    named like a staging folder without owner.lock can only be an old one."""
    said = []

    def clean_up_now():
        said.extend(staging.clear_dead_stagings(tmp_path, "linear"))

    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args, **kwargs):       # right after the folder is made
        clean_up_now()
        return real_mkstemp(*args, **kwargs)

    def flock(fd: int, operation: int) -> None:
        if operation & fcntl.LOCK_NB:   # the clean-up's own
            return REAL_FLOCK(fd, operation)
        clean_up_now()
        REAL_FLOCK(fd, operation)
        clean_up_now()                  # locked, not yet renamed

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    monkeypatch.setattr(fcntl, "flock", flock)
    with staging.owned_staging(tmp_path, "linear") as (folder, notes):
        clean_up_now()
        assert folder.is_dir() and (folder / "owner.lock").is_file()
        assert folder.name.startswith(".linear.export-")
    assert said == [] and notes == []
    assert not list(tmp_path.iterdir())


def test_a_folder_an_export_was_killed_setting_up_is_removed_once_locked_and_passed_by_before(
        tmp_path):
    locked = tmp_path / ".mlp.starting-dead1234"     # killed between lock and rename
    locked.mkdir()
    (locked / "owner.lock").touch()
    unlocked = tmp_path / ".mlp.starting-abcd1234"   # starting now, or killed before its lock
    unlocked.mkdir()
    assert staging.clear_dead_stagings(tmp_path, "mlp") == [
        f"removed {locked}: the staging folder of an export that was killed"]
    assert unlocked.is_dir() and not locked.exists()


def test_a_folder_an_export_was_killed_setting_up_before_its_lock_is_removed_once_old(tmp_path):
    """Killed in the microseconds before its lock: nothing could tell it from one starting
    now, so it stayed for ever. Ten minutes on, with no lock file in it held, it is dead."""
    empty = tmp_path / ".mlp.starting-empty123"          # killed before its lock file
    pending = tmp_path / ".mlp.starting-pend1234"        # killed before it locked that file
    held = tmp_path / ".mlp.starting-held1234"           # a stopped export's, holding its lock
    for folder in (empty, pending, held):
        folder.mkdir()
    (pending / ".owner.x1y2").touch()
    (held / ".owner.z3w4").touch()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(held / ".owner.z3w4")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        young = tmp_path / ".mlp.starting-young123"       # being set up right now
        young.mkdir()
        hour_ago = time.time() - 3600
        for folder in (empty, pending, held):
            os.utime(folder, (hour_ago, hour_ago))
        notes = staging.clear_dead_stagings(tmp_path, "mlp")
        assert sorted(notes) == sorted(f"removed {f}: the staging folder of an export that was killed"
                                       for f in (empty, pending))
        assert held.is_dir() and young.is_dir()
    finally:
        holder.kill()
        holder.wait()


HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


def test_a_staging_folder_without_owner_lock_is_left_with_a_note_that_never_calls_it_dead(
        tmp_path):
    folder = tmp_path / ".mlp.export-old12345"
    (folder / "mlp").mkdir(parents=True)
    [note] = staging.clear_dead_stagings(tmp_path, "mlp")
    assert folder.is_dir()
    assert note == (f"left {folder}: it has no owner.lock (an older tritonkit's export, or one "
                    "on a filesystem that refused to lock it), so it may be an export still "
                    f"running; remove it only once no process on any machine using {tmp_path} "
                    "exports mlp (check with ps)")


def parked_by_a_killed_export(repository: Path, name: str) -> Path:
    """The staging folder of an export of ``name`` killed in the instant between moving the
    user's model folder aside (into it) and moving the new one in."""
    def park(folder: Path) -> None:
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "1" / "model.onnx").write_bytes(b"the user's model")
        (repository / name).rename(folder / ".previous")

    return staging_of_a_killed_export(repository, name, before_the_kill=park)


@pytest.mark.slow
def test_a_model_a_killed_export_was_parking_is_moved_back_and_said_so_though_the_export_fails(
        tmp_path, capsys):
    folder = parked_by_a_killed_export(tmp_path, "mlp")

    assert run_cli("export", EXAMPLES / "mlp.py:build", "--name", "mlp", "--repository",
                   tmp_path, "--exporter", "torchscript") != 0
    said = capsys.readouterr()
    # back in place, so it is the user's model this export (without --force) must not replace
    assert f"error: model {tmp_path / 'mlp'} already exists" in said.err
    assert (tmp_path / "mlp" / "1" / "model.onnx").read_bytes() == b"the user's model"
    assert not folder.exists()
    out = "".join(said.out.split())     # long paths wrap mid-word
    for note in (f"restored {tmp_path / 'mlp'} from {folder}: an export killed while replacing "
                 "it had left it there",
                 f"removed {folder}: the staging folder of an export that was killed"):
        assert "".join(note.split()) in out


@pytest.mark.slow
def test_the_python_apis_error_carries_the_clean_ups_notes(tmp_path):
    folder = parked_by_a_killed_export(tmp_path, "linear")
    with pytest.raises(tritonkit.errors.UsageError, match="already exists") as raised:
        tritonkit.export(torch.nn.Linear(4, 3), torch.randn(2, 4), name="linear",
                         repository=tmp_path, exporters=("torchscript",))
    assert raised.value.__notes__ == [
        f"restored {tmp_path / 'linear'} from {folder}: an export killed while replacing it had "
        "left it there",
        f"removed {folder}: the staging folder of an export that was killed"]


REAL_FLOCK = fcntl.flock


def nfs_flock(fd: int, operation: int) -> None:
    """flock as NFS clients emulate it, with fcntl locks: an exclusive one needs a file open
    for writing."""
    if operation & fcntl.LOCK_EX and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))
    REAL_FLOCK(fd, operation)


def refused_flock(fd: int, operation: int) -> None:
    """flock on a filesystem that has none (some FUSE and SMB mounts)."""
    raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))



@pytest.mark.slow
def test_a_killed_exports_staging_folder_is_removed_where_an_exclusive_lock_needs_write_access(
        tmp_path, monkeypatch):
    folder = staging_of_a_killed_export(tmp_path, "mlp")
    monkeypatch.setattr(fcntl, "flock", nfs_flock)
    notes = staging.clear_dead_stagings(tmp_path, "mlp")
    assert not folder.exists()
    assert notes == [f"removed {folder}: the staging folder of an export that was killed"]


@pytest.mark.slow
def test_a_staging_folder_whose_lock_the_filesystem_refuses_is_left_and_said_to_be_maybe_running(
        tmp_path, monkeypatch):
    folder = staging_of_a_killed_export(tmp_path, "mlp")
    monkeypatch.setattr(fcntl, "flock", refused_flock)
    [note] = staging.clear_dead_stagings(tmp_path, "mlp")
    assert folder.is_dir(), "not proven dead: it may be a running export's"
    assert note.startswith(f"left {folder}: the filesystem refused to lock its owner.lock")
    assert "may be an export still running" in note and "check with ps" in note


def test_an_export_runs_unlocked_where_the_filesystem_refuses_locks_and_says_so(
        tmp_path, monkeypatch):
    monkeypatch.setattr(fcntl, "flock", refused_flock)
    result = tritonkit.export(torch.nn.Linear(4, 3), torch.randn(2, 4), name="linear",
                              repository=tmp_path, exporters=("torchscript",))
    assert (result.path / "1" / "model.onnx").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["linear"]
    assert [note for note in result.notes if note.startswith("staged without a lock: the "
            f"filesystem of {tmp_path} refused one")]


@pytest.mark.slow
def test_reproduce_script_reruns_the_same_export(tmp_path):
    assert run_cli("export", EXAMPLES / "mlp.py:build", "--name", "mlp", "--repository",
                   tmp_path, "--exporter", "torchscript", "--max-batch-size", "4") == 0
    before = report_of(tmp_path / "mlp")
    (tmp_path / "mlp" / "1" / "model.onnx").unlink()

    script = tmp_path / "mlp" / "reproduce_export.py"
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    after = report_of(tmp_path / "mlp")
    for key in ("inputs", "outputs", "max_batch_size", "opset", "exporter", "source"):
        assert after[key] == before[key], key
    assert after["files"] == before["files"], "the same graph, byte for byte"


@pytest.mark.slow
def test_reproduce_script_of_a_package_module_spec_runs_from_anywhere(tmp_path, monkeypatch):
    """package.module:factory imports from the folder the export ran in: the script ran
    from another folder failed to import it."""
    project = tmp_path / "project"
    (project / "zoo").mkdir(parents=True)
    (project / "zoo" / "__init__.py").write_text("")
    (project / "zoo" / "nets.py").write_text(
        "import torch\n\ndef build():\n    return torch.nn.Linear(4, 3), torch.randn(2, 4)\n")
    monkeypatch.chdir(project)
    assert run_cli("export", "zoo.nets:build", "--name", "lin", "--repository", tmp_path / "repo",
                   "--exporter", "torchscript", "--max-batch-size", "4") == 0
    model = tmp_path / "repo" / "lin"
    (model / "1" / "model.onnx").unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, str(model / "reproduce_export.py")], cwd=elsewhere,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (model / "1" / "model.onnx").is_file()


BRANCHY = '''
import torch
from torch import nn


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        if x.mean() > 0:
            return self.linear(x)
        return -self.linear(x)


def build():
    torch.manual_seed(0)
    return Branchy(), torch.randn(2, 4) + 3
'''


@pytest.mark.slow
def test_a_branch_on_a_tensor_value_is_reported_and_warned_about_with_its_line(tmp_path, capsys):
    source = tmp_path / "branchy.py"
    source.write_text(BRANCHY)
    line = BRANCHY.splitlines().index("        if x.mean() > 0:") + 1
    code = run_cli("export", f"{source}:build", "--name", "branchy", "--repository",
                   tmp_path / "repo")
    out, err = capsys.readouterr()
    assert code == 0, err
    report = report_of(tmp_path / "repo" / "branchy")
    # dynamo refuses the branch; the TorchScript trace freezes it, and says where
    dynamo, torchscript = report["exporter_attempts"]
    assert "data-dependent expression" in dynamo["error"]
    assert "the TorchScript trace keeps only the branch the example inputs took" in dynamo["note"]
    assert dynamo["note"] in " ".join(out.split())
    assert report["tracer_warnings"] == [{
        "file": str(source), "line": line,
        "message": "Converting a tensor to a Python boolean might cause the trace to be incorrect."}]
    warned = [text for text in err.splitlines() if text.startswith("warning: ")]
    assert len(warned) == 1 and f"branchy.py:{line}" in warned[0]


def test_a_model_module_named_like_torch_keeps_its_tracer_warnings(tmp_path, monkeypatch):
    """torch leaves its own warnings out by module name "torch." + anything, which would
    drop torchvision's and a user's "torchy_model" too: the file decides, not the name."""
    import importlib

    (tmp_path / "torchy_model.py").write_text(BRANCHY)
    monkeypatch.syspath_prepend(str(tmp_path))
    factory = importlib.import_module("torchy_model").build
    module, example = factory()
    result = tritonkit.export(module, example, name="torchy", repository=tmp_path / "repo",
                              exporters=("torchscript",))
    assert [w["file"] for w in result.report["tracer_warnings"]] == [
        str(tmp_path / "torchy_model.py")]


def test_torchs_own_tracer_warnings_are_left_out(exported):
    # The GRU family falls back to TorchScript, whose tracer warns inside torch.nn.
    report = report_of(exported / "gru")
    assert report["exporter"] == "torchscript"
    assert report["tracer_warnings"] == []


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")   # torch.compile's own imports
@pytest.mark.parametrize("wrap,says", [
    (torch.nn.DataParallel, "inside torch.nn.DataParallel (its .module)"),
    (torch.compile, "torch.compile wrapped (its ._orig_mod)"),
], ids=["DataParallel", "torch.compile"])
def test_a_wrapped_module_is_exported_unwrapped_and_said_so(tmp_path, wrap, says):
    linear = torch.nn.Linear(4, 3)
    result = tritonkit.export(wrap(linear), torch.randn(2, 4), name="wrapped",
                              repository=tmp_path, exporters=("torchscript",))
    assert result.report["verification"]["passed"] is True
    assert [note for note in result.notes if says in note]
    assert result.report["notes"] == [note for note in result.notes if says in note]
    features = np.ones((3, 4), np.float32)
    (out,) = session(result.path).run(None, {"INPUT__0": features})
    np.testing.assert_allclose(out, linear(torch.from_numpy(features)).detach().numpy(),
                               atol=1e-5)


def test_the_python_api_leaves_each_submodule_in_the_mode_it_found_it(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4),
                                torch.nn.Dropout(0.5))
    model.train()
    model[1].eval()      # a frozen batch norm inside a model being trained
    tritonkit.export(model, torch.randn(2, 4), name="training", repository=tmp_path,
                     exporters=("torchscript",))
    assert [m.training for m in model.modules()] == [True, True, False, True]


def reproduce_options(model_dir: Path) -> dict:
    """The flags a reproduce_export.py holds, read without running it."""
    script = (model_dir / "reproduce_export.py").read_text()
    line = next(line for line in script.splitlines() if line.startswith("OPTIONS = "))
    return ast.literal_eval(line.removeprefix("OPTIONS = "))


def test_reproduce_script_records_a_profile_file_by_its_absolute_path_and_a_name_as_typed(
        tmp_path, monkeypatch):
    # A relative --gpu path was recorded as typed: the script, run from anywhere else,
    # failed on a profile it could not find.
    (tmp_path / "profiles").mkdir()
    shutil.copy(ROOT / "configs" / "gpus" / "a10.toml", tmp_path / "profiles" / "card.toml")
    monkeypatch.chdir(tmp_path)
    for gpu, recorded in (("profiles/card.toml", str(tmp_path / "profiles" / "card.toml")),
                          ("a10", "a10")):
        result = tritonkit.export(torch.nn.Linear(4, 3), torch.randn(2, 4), name="linear",
                                  repository="repo", gpu=gpu, exporters=("torchscript",),
                                  force=True)
        assert reproduce_options(result.path)["--gpu"] == recorded


@pytest.mark.slow
def test_a_forced_export_under_a_dead_local_servers_record_warns_of_nothing(tmp_path, capsys):
    """A local deployment recorded but gone (the host rebooted, the server was killed)
    serves nothing: no warning that it "keeps serving" the old model."""
    import os

    from tritonkit.server.state import Deployment, save_deployment

    repo, mlp = tmp_path / "repo", f"{EXAMPLES / 'mlp.py'}:build"
    assert run_cli("export", mlp, "--name", "mlp", "--repository", repo, "--no-verify") == 0
    save_deployment(Deployment(target="local", repository=str(repo.resolve()), host="127.0.0.1",
                               http_port=8000, grpc_port=8001, metrics_port=8002,
                               secret_header="tritonkit-repository-key", models=["mlp"],
                               started_at=time.time(), pid=os.getpid()))    # no tritonserver
    capsys.readouterr()
    assert run_cli("export", mlp, "--name", "mlp", "--repository", repo, "--no-verify",
                   "--force") == 0
    assert "keeps serving" not in capsys.readouterr().err


@pytest.mark.slow
def test_a_forced_export_of_a_model_a_compose_deployment_serves_says_how_to_serve_it(tmp_path,
                                                                                       capsys):
    """The compose server reads the folder itself: a reload serves the new model. A model
    the deployment does not serve, or an export without --force, warns of nothing."""
    from tritonkit.server.state import Deployment, save_deployment

    repo, mlp = tmp_path / "repo", f"{EXAMPLES / 'mlp.py'}:build"
    assert run_cli("export", mlp, "--name", "mlp", "--repository", repo, "--no-verify") == 0
    save_deployment(Deployment(target="compose", repository=str(repo), host="127.0.0.1",
                               http_port=8000, grpc_port=8001, metrics_port=8002,
                               secret_header="tritonkit-repository-key", models=["mlp"],
                               started_at=time.time()))
    capsys.readouterr()
    assert run_cli("export", mlp, "--name", "other", "--repository", repo, "--no-verify") == 0
    assert run_cli("export", mlp, "--name", "other", "--repository", repo, "--no-verify",
                   "--force") == 0
    assert "warning" not in capsys.readouterr().err
    assert run_cli("export", mlp, "--name", "mlp", "--repository", repo, "--no-verify",
                   "--force") == 0
    assert (f"warning: the compose server deployed from {repo} keeps serving the 'mlp' it "
            f"loaded, not this export; to serve this one, reload it (tritonkit warmup "
            f"--repository {repo} --model mlp --reload) or redeploy: {redeploy_command(repo)}"
            ) in capsys.readouterr().err
