"""The config generator: Triton's own schema, tuned per GPU profile, round-tripping."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from tests import onnx_graphs
from tests.conftest import run_cli
from tritonkit.errors import ProfileError, UsageError
from tritonkit.model_config import (ORT_TRT_CACHE_ROOT, config_to_text, configure,
                                    engine_cache_path, read_config)
from tritonkit.profiles import load_profile

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("TRITONKIT_UPDATE_GOLDEN") == "1"


def _export_report(model_dir: Path, max_batch_size: int, examples: dict[str, list[int]],
                   verified: list[dict[str, int]] | None = None, **extra) -> None:
    """An export report as `tritonkit export` writes it: example shapes and, when
    ``verified`` is given, one verification case per dict of lengths."""
    model_file = model_dir / "1" / "model.onnx"
    report = {"max_batch_size": max_batch_size,
              "inputs": [{"name": n, "example_shape": s} for n, s in examples.items()],
              # a fixed hash keeps the golden files independent of the onnx package's bytes
              "files": {"1/model.onnx": {"sha256": f"{model_dir.name}-sha256",
                                          "bytes": model_file.stat().st_size}},
              **extra}
    if verified is not None:
        report["verification"] = {"passed": True, "cases": [
            {"case": f"case {i}", "batch": 1, "lengths": lengths} for i, lengths in enumerate(verified)]}
    (model_dir / "export-report.json").write_text(json.dumps(report))


@pytest.fixture
def mlp_repo(tmp_path: Path) -> Path:
    onnx_graphs.mlp(tmp_path / "mlp")
    _export_report(tmp_path / "mlp", 32, {"INPUT__0": [4, 16]})
    return tmp_path


@pytest.fixture
def encoder_repo(tmp_path: Path) -> Path:
    onnx_graphs.token_encoder(tmp_path / "encoder")
    _export_report(tmp_path / "encoder", 8, {"input_ids": [2, 12], "attention_mask": [2, 12]},
                   verified=[{"seq": 12}, {"seq": 12}, {"seq": 18}, {"seq": 6}])
    return tmp_path


@pytest.mark.parametrize("model,gpu", [("mlp", "a10"), ("mlp", "p100"),
                                       ("encoder", "a10"), ("encoder", "p100")])
def test_generated_configs_match_the_golden_files(model, gpu, mlp_repo, encoder_repo, request):
    repo = mlp_repo if model == "mlp" else encoder_repo
    configure(repo, model, gpu=gpu)
    text = (repo / model / "config.pbtxt").read_text()
    golden = GOLDEN / f"{model}_{gpu}.pbtxt"
    if UPDATE:
        golden.write_text(text)
    assert text == golden.read_text()
    # The default config and the per-profile one are the same file for that profile.
    assert (repo / model / "configs" / f"{gpu}.pbtxt").read_text() == text


def test_configs_round_trip_through_tritons_schema(mlp_repo):
    for path in configure(mlp_repo, "mlp", gpu="a10").written:
        parsed = read_config(path)
        again = mlp_repo / "again.pbtxt"
        again.write_text(config_to_text(parsed))
        assert read_config(again) == parsed


def test_inputs_outputs_and_dims_come_from_the_graph(encoder_repo):
    configure(encoder_repo, "encoder", gpu="a10")
    config = read_config(encoder_repo / "encoder" / "config.pbtxt")
    assert config.max_batch_size == 8
    assert [(i.name, mc.DataType.Name(i.data_type), list(i.dims)) for i in config.input] == [
        ("input_ids", "TYPE_INT64", [-1]), ("attention_mask", "TYPE_INT64", [-1])]
    assert [(o.name, mc.DataType.Name(o.data_type), list(o.dims)) for o in config.output] == [
        ("hidden", "TYPE_FP32", [-1, 8])]


def test_a10_gets_the_tensorrt_accelerator_in_fp16_and_two_instances(mlp_repo):
    configure(mlp_repo, "mlp", gpu="a10")
    config = read_config(mlp_repo / "mlp" / "config.pbtxt")
    assert config.platform == "onnxruntime_onnx"
    accel = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert [a.name for a in accel] == ["tensorrt"]
    assert accel[0].parameters["precision_mode"] == "FP16"
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    assert config.instance_group[0].count == 2


def test_p100_config_has_no_tensorrt_and_runs_fp32_on_the_cuda_provider(mlp_repo):
    configure(mlp_repo, "mlp", gpu="p100")
    config = read_config(mlp_repo / "mlp" / "config.pbtxt")
    assert not config.optimization.execution_accelerators.gpu_execution_accelerator
    text = (mlp_repo / "mlp" / "config.pbtxt").read_text()
    assert "tensorrt" not in text.split("name:", 1)[1]       # only the comment may say why
    assert "FP16" not in text and "BF16" not in text and "INT8" not in text


def test_warmup_covers_the_batch_sizes_and_every_length_the_export_verified(encoder_repo):
    configure(encoder_repo, "encoder", gpu="p100")
    config = read_config(encoder_repo / "encoder" / "config.pbtxt")
    warm = {(w.batch_size, tuple(w.inputs["input_ids"].dims)) for w in config.model_warmup}
    assert warm == {(b, (s,)) for b in [1, 2, 4, 8] for s in [6, 12, 18]}
    # inputs that share an axis name always get the same length
    assert all(w.inputs["input_ids"].dims == w.inputs["attention_mask"].dims
               for w in config.model_warmup)
    # Triton's recommended start: the batcher is on, with no preferred sizes and no delay
    assert config.HasField("dynamic_batching")
    assert not config.dynamic_batching.preferred_batch_size
    assert config.dynamic_batching.max_queue_delay_microseconds == 0
    # Token ids are indices: zeros are always in range, random values are not.
    assert all(w.inputs["input_ids"].zero_data for w in config.model_warmup)


def test_max_batch_size_is_bounded_by_what_fits_the_card(mlp_repo, tmp_path):
    tiny = (Path(load_profile("p100").path).read_text()
            .replace("gib = 16", "gib = 0.000015").replace('name = "p100"', 'name = "tiny"'))
    (tmp_path / "tiny.toml").write_text(tiny)
    profile = load_profile(tmp_path / "tiny.toml")
    from tritonkit.model_config import build_config, memory_bound_batch, read_graph

    graph = read_graph(mlp_repo / "mlp" / "1" / "model.onnx")
    bound = memory_bound_batch(graph, profile, instances=1)
    assert 1 <= bound < 32
    config, tuning = build_config("mlp", graph, profile, max_batch_size=32)
    assert config.max_batch_size == bound
    assert any("lowered to" in note for note in tuning.notes)


def test_a_model_that_does_not_fit_the_card_is_refused(mlp_repo, tmp_path):
    tiny = (Path(load_profile("p100").path).read_text()
            .replace("gib = 16", "gib = 0.000001").replace('name = "p100"', 'name = "tiny"'))
    (tmp_path / "tiny.toml").write_text(tiny)
    from tritonkit.model_config import build_config, read_graph

    graph = read_graph(mlp_repo / "mlp" / "1" / "model.onnx")
    with pytest.raises(UsageError, match="does not fit"):
        build_config("mlp", graph, load_profile(tmp_path / "tiny.toml"), max_batch_size=32)


def test_tensorrt_plans_are_used_on_the_a10_and_refused_on_the_p100(mlp_repo):
    report = json.loads((mlp_repo / "mlp" / "export-report.json").read_text())
    report["plans"] = {"8.6": "model_a10.plan"}
    (mlp_repo / "mlp" / "export-report.json").write_text(json.dumps(report))
    configure(mlp_repo, "mlp", gpu="a10")
    a10 = read_config(mlp_repo / "mlp" / "configs" / "a10.pbtxt")
    p100 = read_config(mlp_repo / "mlp" / "configs" / "p100.pbtxt")
    assert a10.platform == "tensorrt_plan"
    assert dict(a10.cc_model_filenames) == {"8.6": "model_a10.plan"}
    assert a10.optimization.cuda.graphs
    assert p100.platform == "onnxruntime_onnx"


def test_a_graph_without_a_batch_axis_gets_max_batch_size_0_whatever_the_export_asked(tmp_path):
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "fixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 16])])
    onnx_graphs._save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                      tmp_path / "fixed")
    _export_report(tmp_path / "fixed", 8, {"x": [3, 16]})
    configure(tmp_path, "fixed", gpu="a10")
    text = (tmp_path / "fixed" / "config.pbtxt").read_text()
    assert "max_batch_size: 0\n" in text
    assert "no batch axis shared by every input and output" in text
    config = read_config(tmp_path / "fixed" / "config.pbtxt")
    assert list(config.input[0].dims) == [3, 16] and not config.HasField("dynamic_batching")
    assert [list(w.inputs["x"].dims) for w in config.model_warmup] == [[3, 16]]


def test_max_batch_size_0_asked_for_says_so_explicitly(tmp_path):
    onnx_graphs.mlp(tmp_path / "fixed")
    configure(tmp_path, "fixed", gpu="a10", max_batch_size=0)
    text = (tmp_path / "fixed" / "config.pbtxt").read_text()
    assert "max_batch_size: 0" in text
    config = read_config(tmp_path / "fixed" / "config.pbtxt")
    assert list(config.input[0].dims) == [-1, 16]            # batch axis kept as a dim
    assert not config.HasField("dynamic_batching")


def test_a_batch_limit_past_what_a_triton_config_holds_is_refused_naming_the_range(tmp_path):
    from onnx import TensorProto, helper

    # One bool in, one out: so few bytes a sample that the card bounds no batch below int32.
    graph = helper.make_graph(
        [helper.make_node("Not", ["x"], ["y"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.BOOL, ["batch"])],
        [helper.make_tensor_value_info("y", TensorProto.BOOL, ["batch"])])
    onnx_graphs._save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                      tmp_path / "tiny")
    with pytest.raises(UsageError, match=r"--max-batch-size 3000000000 is not a batch limit "
                                         r"Triton takes \(0 to 2147483647"):
        configure(tmp_path, "tiny", gpu="a10", max_batch_size=3_000_000_000)
    assert not (tmp_path / "tiny" / "config.pbtxt").exists()
    configure(tmp_path, "tiny", gpu="a10", max_batch_size=2**31 - 1)
    assert read_config(tmp_path / "tiny" / "config.pbtxt").max_batch_size == 2**31 - 1


def test_an_unknown_field_is_refused_with_tritons_field_name(tmp_path):
    bad = tmp_path / "config.pbtxt"
    bad.write_text('name: "m"\nmax_batch: 4\n')
    with pytest.raises(UsageError, match='no field named "max_batch"'):
        read_config(bad)


def test_an_existing_config_is_not_overwritten_without_force(mlp_repo, capsys):
    configure(mlp_repo, "mlp", gpu="a10")
    config = mlp_repo / "mlp" / "config.pbtxt"
    config.write_text("# my hand-tuned config\n" + config.read_text())
    assert run_cli("config", "mlp", "--repository", mlp_repo, "--gpu", "p100") == 2
    assert "already exists" in capsys.readouterr().err
    assert config.read_text().startswith("# my hand-tuned config")
    assert run_cli("config", "mlp", "--repository", mlp_repo, "--gpu", "p100", "--force") == 0
    assert "profile 'p100'" in config.read_text()


def test_a_bad_profile_file_names_the_field(tmp_path):
    text = Path(load_profile("a10").path).read_text().replace("instance_count = 2",
                                                             'instance_count = "two"')
    (tmp_path / "bad.toml").write_text(text)
    with pytest.raises(ProfileError, match="serving.instance_count"):
        load_profile(tmp_path / "bad.toml")


def test_a_profile_cannot_ask_for_a_precision_the_card_lacks(tmp_path):
    text = Path(load_profile("p100").path).read_text().replace('precision = "fp32"',
                                                              'precision = "bf16"')
    (tmp_path / "p100bf16.toml").write_text(text)
    with pytest.raises(ProfileError, match="no bf16 support"):
        load_profile(tmp_path / "p100bf16.toml")


def test_a_profile_cannot_set_a_precision_the_cuda_provider_has_no_setting_for(tmp_path):
    """The P100 has FP16, but the CUDA provider runs the exported graph's precision: an
    "fp16" there would be written in the notes and served as FP32."""
    text = Path(load_profile("p100").path).read_text().replace('precision = "fp32"',
                                                              'precision = "fp16"')
    (tmp_path / "p100fp16.toml").write_text(text)
    with pytest.raises(ProfileError, match="'cuda' has no precision setting"):
        load_profile(tmp_path / "p100fp16.toml")


def test_a_user_can_add_a_profile_and_use_it_by_name(mlp_repo, tmp_path, monkeypatch):
    configs = tmp_path / "configs"
    shutil.copytree(Path(load_profile("a10").path).parent.parent, configs)
    text = (configs / "gpus" / "a10.toml").read_text().replace('name = "a10"', 'name = "l4"')
    (configs / "gpus" / "l4.toml").write_text(text)
    monkeypatch.setenv("TRITONKIT_CONFIGS", str(configs))
    configure(mlp_repo, "mlp", gpu="l4")
    assert (mlp_repo / "mlp" / "configs" / "l4.pbtxt").is_file()
    assert "profile 'l4'" in (mlp_repo / "mlp" / "config.pbtxt").read_text()


def test_warmup_never_goes_past_the_lengths_the_export_verified(tmp_path):
    # A failing warm-up request makes Triton refuse the model: a position table may end at 18.
    onnx_graphs.token_encoder(tmp_path / "encoder")
    _export_report(tmp_path / "encoder", 4, {"input_ids": [2, 12], "attention_mask": [2, 12]},
                   verified=[{"seq": 12}, {"seq": 18}])
    configure(tmp_path, "encoder", gpu="a10")
    text = (tmp_path / "encoder" / "config.pbtxt").read_text()
    lengths = {tuple(w.inputs["input_ids"].dims) for w in read_config(
        tmp_path / "encoder" / "config.pbtxt").model_warmup}
    assert lengths == {(12,), (18,)}
    assert "seq [12, 18] (the lengths the export verified)" in text


def test_a_tensorrt_plans_profile_bounds_the_warmup_lengths(tmp_path):
    onnx_graphs.token_encoder(tmp_path / "encoder")
    shapes = {n: {"min": [1, 1], "opt": [4, 12], "max": [4, 16]} for n in ("input_ids", "attention_mask")}
    _export_report(tmp_path / "encoder", 4, {"input_ids": [2, 12], "attention_mask": [2, 12]},
                   verified=[{"seq": 12}, {"seq": 18}, {"seq": 6}],
                   tensorrt_recipe={"shapes": shapes})
    configure(tmp_path, "encoder", gpu="a10")
    config = read_config(tmp_path / "encoder" / "config.pbtxt")
    assert {w.inputs["input_ids"].dims[0] for w in config.model_warmup} == {6, 12}
    # a plan from elsewhere whose profile ends below every verified length: its own limit
    shapes = {n: {"min": [1, 1], "opt": [4, 4], "max": [4, 4]} for n in ("input_ids", "attention_mask")}
    _export_report(tmp_path / "encoder", 4, {"input_ids": [2, 12], "attention_mask": [2, 12]},
                   verified=[{"seq": 12}, {"seq": 18}], tensorrt_build={"shapes": shapes})
    configure(tmp_path, "encoder", gpu="a10", force=True)
    config = read_config(tmp_path / "encoder" / "config.pbtxt")
    assert {w.inputs["input_ids"].dims[0] for w in config.model_warmup} == {4}


def test_without_an_export_report_default_lengths_are_warmed_and_called_unverified(tmp_path):
    onnx_graphs.token_encoder(tmp_path / "encoder")
    configure(tmp_path, "encoder", gpu="p100", max_batch_size=2)
    config = read_config(tmp_path / "encoder" / "config.pbtxt")
    assert {w.inputs["input_ids"].dims[0] for w in config.model_warmup} == {16, 64, 128}
    assert "unverified (no export report)" in (tmp_path / "encoder" / "config.pbtxt").read_text()


def test_axes_with_different_names_are_warmed_at_their_own_lengths(tmp_path):
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["tokens"], ["T"]), helper.make_node("Identity", ["pixels"], ["P"])],
        "two_axes",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["batch", "width"])],
        [helper.make_tensor_value_info("T", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("P", TensorProto.FLOAT, ["batch", "width"])])
    onnx_graphs._save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                      tmp_path / "two")
    _export_report(tmp_path / "two", 2, {"tokens": [2, 8], "pixels": [2, 100]},
                   verified=[{"seq": 8, "width": 100}, {"seq": 12, "width": 150},
                             {"seq": 4, "width": 50}])
    configure(tmp_path, "two", gpu="p100")
    warm = {w.name: (tuple(w.inputs["tokens"].dims), tuple(w.inputs["pixels"].dims))
            for w in read_config(tmp_path / "two" / "config.pbtxt").model_warmup}
    assert warm["batch_1_seq_4_width_50"] == ((4,), (50,))
    assert {pair for pair in warm.values()} == {((4,), (50,)), ((8,), (100,)), ((12,), (150,))}


def test_force_names_each_config_it_replaces_that_was_tuned_or_written_by_hand(mlp_repo, capsys):
    """--force is consent to replace, not to lose a hand-tuned config without a word."""
    configure(mlp_repo, "mlp", gpu="a10")
    model = mlp_repo / "mlp"
    (model / "config.pbtxt").write_text((model / "config.pbtxt").read_text()
                                        .replace("count: 2", "count: 4"))
    (model / "configs" / "p100.pbtxt").write_text('name: "mlp"\nmax_batch_size: 8\n')
    assert run_cli("config", "mlp", "--repository", str(mlp_repo), "--gpu", "a10", "--force") == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "replaced config.pbtxt: edited since tritonkit wrote it" in out
    assert "replaced configs/p100.pbtxt: not written by tritonkit" in out
    assert "configs/a10.pbtxt:" not in out                 # as tritonkit wrote it: nothing to say
    configured = configure(mlp_repo, "mlp", gpu="a10", force=True)   # all as written now
    assert not [n for n in configured.notes if n.startswith("replaced")]


def test_force_says_removed_for_a_tuned_config_of_a_card_the_model_no_longer_gets_one_for(mlp_repo):
    configure(mlp_repo, "mlp", gpu="a10")
    p100 = mlp_repo / "mlp" / "configs" / "p100.pbtxt"
    p100.write_text(p100.read_text().replace("max_batch_size: 32", "max_batch_size: 16"))
    _stamped(mlp_repo, opset=22, ir_version=10)                 # the P100's image cannot load it
    configured = configure(mlp_repo, "mlp", gpu="a10", force=True)
    assert [n for n in configured.notes if "p100" in n] == [
        "removed configs/p100.pbtxt: edited since tritonkit wrote it (no config for p100: "
        + configured.skipped["p100"] + ")"]
    assert not p100.exists()


def test_force_says_so_of_a_config_from_a_tritonkit_that_recorded_no_digest(mlp_repo):
    configure(mlp_repo, "mlp", gpu="a10")
    config = mlp_repo / "mlp" / "config.pbtxt"
    config.write_text("".join(line for line in config.read_text().splitlines(keepends=True)
                              if not line.startswith("# sha256 of the config below")))
    configured = configure(mlp_repo, "mlp", gpu="a10", force=True)
    assert ("replaced config.pbtxt: written by a tritonkit that recorded no digest, so an edit "
            "by hand cannot be told") in configured.notes


def _stamped(repo: Path, opset: int, ir_version: int, **report) -> None:
    """The mlp model stamped with another opset and IR version (what an exporter asked for
    ``--opset`` writes), its export report after it."""
    import onnx

    path = repo / "mlp" / "1" / "model.onnx"
    model = onnx.load(str(path))
    model.opset_import[0].version, model.ir_version = opset, ir_version
    onnx.save(model, str(path))
    _export_report(repo / "mlp", 32, {"INPUT__0": [4, 16]}, **report)


def test_a_card_whose_onnx_runtime_cannot_load_the_model_gets_no_config_saying_why(
        mlp_repo, tmp_path_factory):
    """Triton 24.10, the P100's image, runs ONNX Runtime 1.19.2: an opset-22 model fails
    its load on the card ("official support for domain ai.onnx is till opset 21"), while
    the embedded server here, on this machine's newer ONNX Runtime, serves it."""
    _stamped(mlp_repo, opset=22, ir_version=10)
    configured = configure(mlp_repo, "mlp", force=True)          # the A10's 1.23.2 takes 23
    assert configured.skipped == {"p100": (
        "model 'mlp' is ONNX opset 22, IR version 10: ONNX Runtime 1.19.2 in the p100 "
        "profile's Triton (nvcr.io/nvidia/tritonserver:24.10-py3) loads opset 21 at most")}
    assert sorted(p.name for p in configured.written) == ["a10.pbtxt", "config.pbtxt"]
    with pytest.raises(UsageError, match="loads opset 21 at most") as refused:
        configure(mlp_repo, "mlp", gpu="p100", force=True)
    assert refused.value.hint.startswith("re-export it with --opset 21 or lower")
    out = tmp_path_factory.mktemp("deploy") / "docker"
    code = run_cli("deploy", "--target", "compose", "--repository", str(mlp_repo), "--gpu", "p100",
                   "--out", str(out), "--no-up")
    assert code == 2 and not out.exists()         # no config for it: nothing written


@pytest.mark.parametrize("opset, ir_version, refused", [
    (21, 11, {"p100": "IR version 10 at most"}),            # onnx >= 1.18 stamps 11 at opset 23
    (24, 12, {"p100": "opset 21 and IR version 10 at most", "a10": "opset 23 and IR version 11 at most"}),
    (18, 10, {}),                                             # tritonkit export's default
])
def test_each_card_is_checked_for_the_opset_and_the_ir_version(mlp_repo, opset, ir_version, refused):
    _stamped(mlp_repo, opset, ir_version)
    for gpu in ("a10", "p100"):
        if gpu in refused:
            with pytest.raises(UsageError, match=refused[gpu] + "$"):
                configure(mlp_repo, "mlp", gpu=gpu, force=True)
        else:
            configure(mlp_repo, "mlp", gpu=gpu, force=True)
            assert read_config(mlp_repo / "mlp" / "config.pbtxt").platform == "onnxruntime_onnx"


def test_a_card_served_from_a_tensorrt_plan_is_not_held_to_onnx_runtime(mlp_repo):
    _stamped(mlp_repo, opset=24, ir_version=12, plans={"8.6": "model.a10.plan"})
    configured = configure(mlp_repo, "mlp", gpu="a10", force=True)
    assert read_config(mlp_repo / "mlp" / "config.pbtxt").platform == "tensorrt_plan"
    assert "opset 21" in configured.skipped["p100"]           # the P100 has no plan: ONNX Runtime


def test_a_profile_the_model_does_not_fit_is_left_out_not_a_failure(mlp_repo, monkeypatch):
    import tritonkit.model_config as model_config

    real = model_config.build_config

    def p100_too_small(name, graph, profile, **kwargs):
        if profile.name == "p100":
            raise UsageError(f"model '{name}' does not fit on the {profile.display_name}")
        return real(name, graph, profile, **kwargs)

    (mlp_repo / "mlp" / "configs").mkdir()
    (mlp_repo / "mlp" / "configs" / "p100.pbtxt").write_text("# an earlier one\n")
    monkeypatch.setattr(model_config, "build_config", p100_too_small)
    configured = configure(mlp_repo, "mlp", gpu="a10", force=True)
    assert configured.skipped == {"p100": "model 'mlp' does not fit on the Tesla P100 PCIe 16 GB"}
    assert sorted(p.name for p in configured.written) == ["a10.pbtxt", "config.pbtxt"]
    assert not (mlp_repo / "mlp" / "configs" / "p100.pbtxt").exists()  # stale: would mis-serve
    with pytest.raises(UsageError, match="does not fit on the Tesla P100"):
        configure(mlp_repo, "mlp", gpu="p100", force=True)   # the profile asked for


def test_a_batch_limit_above_the_verified_one_is_flagged_and_refused_for_a_plan(mlp_repo):
    configured = configure(mlp_repo, "mlp", gpu="a10", max_batch_size=64)
    assert configured.notes == ["max_batch_size 64 is above the 32 the export verified: "
                                "re-export with --max-batch-size 64 to verify it"]
    report = json.loads((mlp_repo / "mlp" / "export-report.json").read_text())
    report["plans"] = {"8.6": "model_a10.plan"}
    (mlp_repo / "mlp" / "export-report.json").write_text(json.dumps(report))
    with pytest.raises(UsageError, match="above the 32 the TensorRT plan of 'mlp' was built for"):
        configure(mlp_repo, "mlp", gpu="a10", max_batch_size=64, force=True)


def test_bfloat16_tensors_are_triton_bf16():
    from onnx import TensorProto

    from tritonkit.model_config import triton_data_type

    assert triton_data_type(TensorProto.BFLOAT16) == "TYPE_BF16"
    assert triton_data_type(TensorProto.FLOAT16) == "TYPE_FP16"


def test_the_engine_cache_is_kept_per_model_file_and_image(mlp_repo):
    configure(mlp_repo, "mlp", gpu="a10")
    path = _engine_cache(mlp_repo / "mlp" / "config.pbtxt")
    # one folder under the volume's root: ONNX Runtime creates the last folder only
    assert path.startswith(ORT_TRT_CACHE_ROOT + "/mlp-") and path.count("/") == ORT_TRT_CACHE_ROOT.count("/") + 1
    assert engine_cache_path("mlp", "d", "nvcr.io/nvidia/tritonserver:25.12-py3") != \
        engine_cache_path("mlp", "d", "nvcr.io/nvidia/tritonserver:26.01-py3")
    # weights stored beside the graph are part of the model file
    (mlp_repo / "mlp" / "1" / "model.onnx.data").write_bytes(b"weights")
    configure(mlp_repo, "mlp", gpu="a10", force=True)
    assert _engine_cache(mlp_repo / "mlp" / "config.pbtxt") != path
    (mlp_repo / "mlp" / "1" / "model.onnx.data").unlink()
    configure(mlp_repo, "mlp", gpu="a10", force=True)
    assert _engine_cache(mlp_repo / "mlp" / "config.pbtxt") == path
    # a re-export with other weights: the report's hash no longer describes the file
    onnx_graphs.mlp(mlp_repo / "mlp", hidden=32)
    configure(mlp_repo, "mlp", gpu="a10", force=True)
    assert _engine_cache(mlp_repo / "mlp" / "config.pbtxt") != path


def _engine_cache(config_path: Path) -> str:
    (accel,) = read_config(config_path).optimization.execution_accelerators.gpu_execution_accelerator
    return accel.parameters["trt_engine_cache_path"]


def test_warm_up_covers_the_smallest_and_the_largest_shape_first(encoder_repo):
    """ONNX Runtime's TensorRT accelerator builds an engine again for every shape outside
    the range it has seen: after the two extremes, no warm-up entry grows it."""
    configure(encoder_repo, "encoder", gpu="a10")
    config = read_config(encoder_repo / "encoder" / "configs" / "a10.pbtxt")

    def size(warm) -> tuple[int, int]:
        (length,) = {tuple(i.dims) for i in warm.inputs.values()}
        return warm.batch_size, length[0]

    sizes = [size(w) for w in config.model_warmup]
    smallest = (min(b for b, _ in sizes), min(n for _, n in sizes))
    largest = (config.max_batch_size, max(n for _, n in sizes))
    assert sizes[:2] == [smallest, largest]
    assert len(set(sizes)) == len(sizes) > 2        # every shape still warmed, once
