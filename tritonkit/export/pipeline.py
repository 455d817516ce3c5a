"""One export, start to finish: build the model folder beside the repository, then move it in.

Everything is written into a hidden staging folder in the repository
(``DIR/.<name>.export-*/<name>``) and renamed to ``DIR/<name>`` only once the graph
is exported, checked, verified, reported and configured; on any failure the
staging folder is removed and the repository is as it was. A replaced model folder
goes whole (a version it kept would be served instead of the new one): what it held
that the new one lacks is named in the notes and the report. Staging folders that
killed exports of the name left behind are removed first (staging.py), and said so at
once: a failure of the export after it does not undo that.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from tritonkit.errors import (ExportError, TritonkitError, UsageError, UserCodeError,
                             VerificationError, shell_word)
from tritonkit.export import onnx_export, reproduce, staging, tensorrt, user_code
from tritonkit.export.forward import ForwardCall, call, named_outputs
from tritonkit.export.report import build_report, file_record
from tritonkit.export.spec import (FORWARD_DUTY, ModelInputs, axes_by_input, beside_the_file,
                                   default_output_name, load_factory, names_a_file,
                                   normalize_inputs, order_like_forward, passes_by_keyword,
                                   refuse_empty_names)
from tritonkit.export.verify import (VERIFY_BATCHES, budget_for, check_graph, open_session,
                                     reference_mode, verify_against_torch)
from tritonkit.fileio import atomic_write, refuse_overwrite
from tritonkit.frames import from_a_roomy_frame
from tritonkit.model_config import DEFAULT_GPU, MAX_BATCH_SIZE, configure
from tritonkit.profiles import GpuProfile, load_profile
from tritonkit.repository import ONNX_FILENAME, REPORT_FILENAME, check_model_name
from tritonkit.server.local import is_our_server
from tritonkit.server.state import is_recorded, load_deployment, redeploy_command

FORMATS = ("onnx", "tensorrt")
VERSION = "1"


@dataclass(frozen=True)
class ExportOptions:
    """How to export: where to, which format and checks. ``exporters`` are tried in order.

    ``verify_batches``: "budget" verifies the example, batch 1 and a small batch always, the
    middle and largest batches while their runs fit a share of the exporter's CPU time
    (verify.BUDGET_SHARE); "all" verifies every batch whatever it costs."""

    name: str
    repository: Path
    gpu: str | None = None
    format: str = "onnx"
    max_batch_size: int = 32
    opset: int = 18
    atol: float | None = None
    rtol: float | None = None
    verify: bool = True
    verify_batches: str = "budget"
    force: bool = False
    input_names: tuple[str, ...] | None = None
    output_names: tuple[str, ...] | None = None
    exporters: tuple[str, ...] = onnx_export.EXPORTERS


@dataclass(frozen=True)
class ExportResult:
    """The model folder now in the repository, its report, the files written, any notes,
    and warnings: things that may be wrong with the model, which the export could not check."""

    path: Path
    report: dict
    written: list[Path]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def export_spec(spec: str, options: ExportOptions,
                dynamic_axes: Mapping[str, Mapping[int, str]] | None = None, *,
                on_note: Callable[[str], None] | None = None) -> ExportResult:
    """Export the model a SPEC's factory builds (``file.py:factory`` or ``pkg.module:factory``).

    ``dynamic_axes`` adds to (and overrides) what the factory declares; ``on_note`` is
    export_model's.
    """
    _check_options(options)
    # Refuse before the factory runs: building a large model only to refuse it wastes minutes.
    refuse_overwrite(Path(options.repository) / options.name, force=options.force, what="model",
                     instead="choose another --name")
    with beside_the_file(spec):
        module, example_inputs, declared = load_factory(spec)
        axes = axes_by_input(declared or {})
        for name, extra in axes_by_input(dynamic_axes or {}).items():
            axes.setdefault(name, {}).update(extra)
        target, sep, attr = spec.rpartition(":")
        if names_a_file(target):
            spec = f"{Path(target).resolve()}{sep}{attr}"
        return export_model(module, example_inputs, options, dynamic_axes=axes, spec=spec,
                            on_note=on_note)


def export_model(module: torch.nn.Module, example_inputs: Any, options: ExportOptions, *,
                 dynamic_axes: Mapping[str, Mapping[int, str]] | None = None,
                 spec: str | None = None,
                 on_note: Callable[[str], None] | None = None) -> ExportResult:
    """Export ``module`` to ``options.repository/options.name``, verified against PyTorch.

    The module is in eval mode meanwhile, and afterwards in the modes the caller had it in.
    Before the export, killed exports' staging folders are cleared (a model one had parked
    is moved back): ``on_note`` hears each note of that at once, and an error raised after
    carries them too (``add_note``, shown under its traceback), since the failure does not
    undo them. The result's notes repeat them.
    """
    _check_options(options)
    if not isinstance(module, torch.nn.Module):
        raise UsageError(f"the model is a {type(module).__name__}, not a torch.nn.Module",
                         hint="pass the torch.nn.Module to export")
    profile = load_profile(options.gpu) if options.gpu else None
    if options.format == "tensorrt":
        if profile is None:
            raise UsageError("--format tensorrt needs --gpu: a plan is built for one GPU",
                             hint="add --gpu a10 (or another profile in configs/gpus/)")
        tensorrt.refuse_unsupported(profile)
    else:
        _refuse_unloadable_opset(profile or load_profile(DEFAULT_GPU), options.opset)

    repository = Path(options.repository)
    # Before the overwrite check: a killed export may have left the model it was replacing
    # parked, which is the user's model again once it is moved back.
    cleared = staging.clear_dead_stagings(repository, options.name)
    for note in cleared if on_note else ():
        on_note(note)
    try:
        # Around the rest: the model's code also runs outside forward() (its train(),
        # parameters(), a tensor subclass's methods). From a roomy frame: the exporters'
        # hot loops map no frame chunk per call, whatever the caller's depth (frames).
        with user_code.running("the model's code", "the model's code computes its outputs"):
            result = from_a_roomy_frame(lambda: _export_cleared(
                module, example_inputs, options, profile, dynamic_axes, spec))
    except BaseException as exc:
        for note in cleared if hasattr(exc, "add_note") else ():    # Python 3.11+
            exc.add_note(note)
        raise
    return dataclasses.replace(result, notes=cleared + result.notes,
                               warnings=result.warnings + _still_served(options))


def _still_served(options: ExportOptions) -> list[str]:
    """A warning when a running deployment of the repository serves the model just
    replaced: it keeps the model it loaded (the local one, its mirror's snapshot). A
    compose deployment is taken at its record's word: asking Docker is not worth it here."""
    repository = Path(options.repository)
    if not options.force or not is_recorded(repository):
        return []
    try:
        deployment = load_deployment(repository)
    except UsageError:
        return []
    if deployment.target not in ("local", "compose") or options.name not in deployment.models:
        return []
    if deployment.target == "local" and not is_our_server(deployment):
        return []                # a record its server did not outlive: nothing serves it
    how = f"redeploy: {redeploy_command(repository)}"
    # compose serves links to the model folders: a reload loads the new one (with the
    # python backend's adapter, a snapshot, as the local target's)
    if deployment.target == "compose" and \
            deployment.extra.get("onnx_backend", "onnxruntime") == "onnxruntime":
        how = (f"reload it (tritonkit warmup --repository {shell_word(repository)} --model {shell_word(options.name)} "
               f"--reload) or {how}")
    return [f"the {deployment.target} server deployed from {repository} keeps serving the "
            f"'{options.name}' it loaded, not this export; to serve this one, {how}"]


def _refuse_unloadable_opset(served: GpuProfile, opset: int) -> None:
    """Before minutes of export and verification: the card its config.pbtxt is for could
    not load the model (other cards' configs are left out, each with the reason)."""
    why = served.onnx_refusal(opset)
    if why:
        raise UsageError(f"--opset {opset}: {why}",
                         hint=f"use --opset {served.stack.onnx_max_opset} or lower")


def _export_cleared(module: torch.nn.Module, example_inputs: Any, options: ExportOptions,
                    profile: GpuProfile | None,
                    dynamic_axes: Mapping[str, Mapping[int, str]] | None,
                    spec: str | None) -> ExportResult:
    """export_model once the killed exports' staging folders are cleared."""
    repository = Path(options.repository)
    target = repository / options.name
    refuse_overwrite(target, force=options.force, what="model", instead="choose another --name")
    if repository.exists() and not repository.is_dir():
        raise UsageError(f"model repository {repository} is not a folder",
                         hint="pass --repository with a folder (it is created if missing)")

    with _eval_mode(module):
        model, unwrapped = _unwrap(module)
        ordered = order_like_forward(model, example_inputs)
        inputs = normalize_inputs(ordered, dynamic_axes=dynamic_axes,
                                  input_names=_names_as_given(example_inputs, ordered,
                                                              options.input_names),
                                  by_keyword=passes_by_keyword(model, example_inputs))
        if options.format == "tensorrt":
            tensorrt.refuse_unshapeable_names(inputs.names)
        _refuse_meta(model, inputs)
        if inputs.batch_size > options.max_batch_size:
            raise UsageError(f"the example batch ({inputs.batch_size}) is larger than "
                             f"--max-batch-size {options.max_batch_size}",
                             hint="use a smaller example batch or a larger --max-batch-size")
        outputs = _reference_outputs(model, inputs)
        output_names = _output_names(outputs, options.output_names, inputs.names)
        traced = ForwardCall(model, inputs.keywords)

        created = _missing_folders(repository)
        repository.mkdir(parents=True, exist_ok=True)
        try:
            with staging.owned_staging(repository, options.name) as (folder, unlocked):
                stage = folder / options.name
                result = _build(stage, traced, inputs, output_names,
                                [tensor for _, tensor in outputs], options, profile, spec,
                                unwrapped)
                replaced = _record_replaced(target, stage, result.report)
                _move_into_place(stage, target, folder / staging.PREVIOUS, force=options.force)
        except BaseException:
            for created_folder in created:  # a repository this export created goes with it
                with contextlib.suppress(OSError):
                    created_folder.rmdir()
            raise
    written = [target / path.relative_to(stage) for path in result.written]
    replaced_lines = [staging.replaced_line(target, replaced)] if replaced else []
    notes = unlocked + replaced_lines + result.notes
    return ExportResult(path=target, report=result.report, written=written, notes=notes,
                        warnings=result.warnings)


def _names_as_given(example_inputs: Any, ordered: Any,
                    names: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """``--input-names`` in forward()'s order: they name the inputs in the order given,
    which for a dict is its own, and order_like_forward may have put it in forward()'s.
    Taken in forward()'s order, ``{"attention_mask": m, "input_ids": i}`` with
    ``--input-names mask,ids`` named the ids "mask", and verification cannot tell."""
    if not names or not isinstance(example_inputs, Mapping) or \
            not isinstance(ordered, Mapping) or len(names) != len(example_inputs):
        return names            # normalize_inputs refuses a count that does not match
    given = dict(zip((str(key) for key in example_inputs), names))
    return tuple(given[str(key)] for key in ordered)


def _record_replaced(target: Path, stage: Path, report: dict) -> dict | None:
    """Add to the staged report what replacing ``target`` removes (None: nothing replaced)."""
    replaced = staging.replaced_record(target, stage)
    if replaced is not None:
        report["replaced"] = replaced
        atomic_write(stage / REPORT_FILENAME, json.dumps(report, indent=2) + "\n")
    return replaced


@contextlib.contextmanager
def _eval_mode(module: torch.nn.Module):
    """``module`` in eval mode for the export; every submodule back in its own mode after.

    Dropout and batch-norm statistics must not move while tracing. The module is the
    caller's (the Python API): one being trained must come back training, each submodule
    as it was (a frozen batch norm inside a training model stays frozen).
    """
    modes = [(submodule, submodule.training) for submodule in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for submodule, training in modes:
            submodule.training = training


def _unwrap(module: torch.nn.Module) -> tuple[torch.nn.Module, list[str]]:
    """The model inside (Distributed)DataParallel and torch.compile wrappers, and a note each.

    Neither exporter takes a wrapper (DataParallel's scatter, a compiled module's frame
    hooks), and what Triton serves is the model inside: its batches and GPUs are Triton's.
    """
    notes = []
    while True:
        if isinstance(module, (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)):
            notes.append(f"exported the module inside torch.nn.{type(module).__name__} (its "
                         ".module): Triton spreads batches over GPUs with its instance groups")
            module = module.module
        elif _is_compiled(module):
            notes.append("exported the module torch.compile wrapped (its ._orig_mod): the "
                         "ONNX graph takes the place of the compiled code")
            module = module._orig_mod
        else:
            return module, notes


def _is_compiled(module: torch.nn.Module) -> bool:
    # torch.compile imports torch._dynamo itself; importing it here for models that were
    # never compiled would cost every export a second.
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    return eval_frame is not None and isinstance(module, eval_frame.OptimizedModule)


def _refuse_meta(module: torch.nn.Module, inputs: ModelInputs) -> None:
    """Refuse weights or inputs on the meta device before anything runs: they hold no values.

    A model built under ``torch.device("meta")`` (to be loaded later) would otherwise fail
    deep inside forward() or an exporter with a message about devices.
    """
    meta = [name for name, tensor in chain(module.named_parameters(), module.named_buffers())
            if tensor.is_meta]
    if meta:
        more = f" and {len(meta) - 1} more" if len(meta) > 1 else ""
        raise UsageError(f"the model's weights are on the meta device ({meta[0]}{more}): they "
                         "were never loaded",
                         hint="load them before exporting, e.g. model.to_empty(device='cpu') "
                              "then model.load_state_dict(state_dict)")
    meta_inputs = [name for name, tensor in zip(inputs.names, inputs.tensors) if tensor.is_meta]
    if meta_inputs:
        raise UsageError(f"example input {', '.join(meta_inputs)} is on the meta device: it "
                         "holds no values", hint="give real tensors, e.g. torch.randn(4, 16)")


def _missing_folders(path: Path) -> list[Path]:
    """``path`` and those of its parents that do not exist yet, deepest first."""
    missing = []
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing.append(folder)
    return missing


def _check_options(options: ExportOptions) -> None:
    check_model_name(options.name)
    if options.format not in FORMATS:
        raise UsageError(f"--format {options.format} is not one of {', '.join(FORMATS)}",
                         hint="use --format onnx (or tensorrt on a GPU that runs plans)")
    if not 1 <= options.max_batch_size <= MAX_BATCH_SIZE:
        raise UsageError(f"--max-batch-size {options.max_batch_size} is not from 1 to "
                         f"{MAX_BATCH_SIZE} (the largest a Triton config holds)",
                         hint="e.g. --max-batch-size 32")
    for flag, tolerance in (("--atol", options.atol), ("--rtol", options.rtol)):
        # A negative or NaN tolerance fails every comparison, even of equal outputs.
        if tolerance is not None and not tolerance >= 0:
            raise UsageError(f"{flag} {tolerance} is not a tolerance: it must be 0 or more",
                             hint=f"e.g. {flag} 1e-3, or leave it out for the output "
                                  "dtype's default")
    if options.verify_batches not in VERIFY_BATCHES:
        raise UsageError(f"--verify-batches {options.verify_batches} is not one of "
                         f"{', '.join(VERIFY_BATCHES)}",
                         hint="use --verify-batches all to verify every batch, whatever it costs")
    unknown = set(options.exporters) - set(onnx_export.EXPORTERS)
    if unknown or not options.exporters:
        raise UsageError(f"unknown exporter(s) {', '.join(sorted(unknown)) or '(none given)'}",
                         hint=f"choose from {', '.join(onnx_export.EXPORTERS)}")


def _reference_outputs(module: torch.nn.Module,
                       inputs: ModelInputs) -> list[tuple[str | None, torch.Tensor]]:
    """forward() on the example inputs, called as the export calls it: its named tensors."""
    with user_code.running("the model's forward() on the example inputs", FORWARD_DUTY):
        try:
            with reference_mode():
                # Copies: see torch_outputs.
                result = call(module, tuple(tensor.clone() for tensor in inputs.tensors),
                              inputs.keywords)
        except Exception as exc:
            raise UsageError(f"the model's forward() raised {type(exc).__name__} on the "
                             f"example inputs: {onnx_export.summarize_exception(exc)}",
                             hint="check the example inputs' shapes and dtypes") from exc
    named = named_outputs(result)
    if not named:
        raise UsageError("the model's forward() returns no tensor",
                         hint="return a tensor, a tuple of tensors or a dict of them")
    return named


def _output_names(outputs: list[tuple[str | None, torch.Tensor]], given: tuple[str, ...] | None,
                  input_names: tuple[str, ...]) -> tuple[str, ...]:
    """The outputs' names: given, else those forward() gave (named_outputs), else
    OUTPUT__<i>; each its own."""
    if given:
        if len(given) != len(outputs):
            raise UsageError(f"{len(given)} output names for {len(outputs)} outputs",
                             hint="give one name per output, in the order forward() returns them")
        names = tuple(given)
    else:
        names = tuple(name if name is not None else default_output_name(i)
                      for i, (name, _) in enumerate(outputs))
    refuse_empty_names(names, "output", default_output_name)
    if len(set(names)) != len(names):
        raise UsageError(f"output names repeat: {', '.join(names)}", hint="give each its own name")
    shared = [name for name in names if name in input_names]
    if shared:   # a graph cannot hold two tensors of one name: the exporters fail obscurely
        raise UsageError(f"{', '.join(shared)} names both an input and an output",
                         hint="give the outputs names of their own (--output-names) or rename "
                              "the inputs (--input-names)")
    return names


def _build(stage: Path, module, inputs: ModelInputs, output_names, outputs,
           options: ExportOptions, profile: GpuProfile | None, spec: str | None,
           unwrapped: list[str]) -> ExportResult:
    model_path = stage / VERSION / ONNX_FILENAME
    exported, exporter, attempts, verification, saved = _export_verified(
        module, inputs, output_names, outputs, options, model_path)
    model = exported.model
    written = list(saved)   # the graph, and past 2 GiB its weights file beside it
    notes = list(unwrapped)
    served = profile or load_profile(DEFAULT_GPU)
    for said in ("largest_batch", "left_out_note"):
        if verification and verification.get(said):
            notes.append(verification[said])
    rule = verification.get("length_rule") if verification else None
    if rule and rule["model_refuses"]:
        notes.append(f"the graph holds only where {rule['rule']}, as the model's forward() "
                     f"does; Triton does not check it: clients must send such lengths only")
    if verification and served.serving.precision != "fp32":
        verification["served_precision"] = (
            f"the {served.name} config serves {served.serving.precision.upper()}, checked only on "
            f"the {served.display_name} (verified here as exported, on CPU)")
        notes.append(verification["served_precision"])
    report = build_report(
        name=options.name, model=model, fmt=options.format, max_batch_size=options.max_batch_size,
        opset=onnx_export.opset_of(model), exporter=exporter, attempts=attempts,
        example_shapes={n: list(t.shape) for n, t in zip(inputs.names, inputs.tensors)},
        output_shapes={n: list(t.shape) for n, t in zip(output_names, outputs)},
        verification=verification, source={"spec": spec} if spec else {"python": True},
        gpu=profile.name if profile else None)
    if inputs.dynamic_axes:
        report["declared_dynamic_axes"] = {name: {str(a): label for a, label in axes.items()}
                                           for name, axes in inputs.dynamic_axes.items()}
    report["tracer_warnings"] = list(exported.tracer_warnings)
    if unwrapped:
        report["notes"] = list(unwrapped)
    warnings = [_tracer_warning_line(exported.tracer_warnings)] if exported.tracer_warnings else []

    if options.format == "tensorrt":
        notes.append(_tensorrt(stage, model_path, report, profile, inputs, options, written))

    report["files"] = {str(path.relative_to(stage)): file_record(path) for path in written}
    written.append(atomic_write(stage / REPORT_FILENAME, json.dumps(report, indent=2) + "\n"))
    options_as_flags = reproduce.cli_options(
        name=options.name, repository=options.repository, gpu=options.gpu, fmt=options.format,
        max_batch_size=options.max_batch_size, opset=options.opset, atol=options.atol,
        rtol=options.rtol, verify=options.verify, verify_batches=options.verify_batches,
        input_names=options.input_names,
        output_names=options.output_names, dynamic_axes=inputs.dynamic_axes,
        exporters=options.exporters if options.exporters != onnx_export.EXPORTERS else None)
    written.append(reproduce.write_reproduce_script(stage, spec=spec, options=options_as_flags))
    configured = configure(stage.parent, options.name, gpu=options.gpu, force=True, loaded=model)
    written += configured.written
    notes += [f"no config for {gpu}: {why}" for gpu, why in configured.skipped.items()]
    return ExportResult(path=stage, report=report, written=written, notes=notes,
                        warnings=warnings)


def _tracer_warning_line(tracer_warnings) -> str:
    """One line naming where the TorchScript trace froze a tensor's value (the first three)."""
    places = [f"{Path(found['file']).name}:{found['line']}" for found in tracer_warnings]
    more = f" and {len(places) - 3} more" if len(places) > 3 else ""
    return (f"the TorchScript trace froze a value forward() computed from a tensor at "
            f"{', '.join(places[:3])}{more} ({tracer_warnings[0]['message'].rstrip('.')}): a "
            f"branch on it goes the example inputs' way for every input; tracer_warnings in "
            f"{REPORT_FILENAME} lists each place")


def _export_verified(module, inputs: ModelInputs, output_names, outputs,
                     options: ExportOptions, model_path: Path):
    """Try each exporter until one's graph passes the checker and the verification.

    Returns (exported graph, exporter used, every attempt's record, verification section,
    the files written). If none passes, raises the error of the attempt that got furthest
    (verification beats export).
    """
    attempts: list[dict] = []
    failures: list[tuple[str, TritonkitError]] = []
    # What torch.export found forward() assumes of the lengths is the model's: the next
    # exporter's graph is verified where those assumptions break too.
    rules = None
    for exporter in options.exporters:
        started, cpu = time.perf_counter(), time.process_time()
        try:
            exported = onnx_export.export_onnx(module, inputs, exporter=exporter,
                                               output_names=output_names, opset=options.opset,
                                               max_batch_size=options.max_batch_size)
            rules = exported.length_rules or rules
            exporter_cpu_s = time.process_time() - cpu
            saved, serialized = onnx_export.save_model(exported.model, model_path)
            verification = None
            with ThreadPoolExecutor(max_workers=1) as loader:
                # ONNX Runtime loads the graph while the checker reads it (one core each:
                # the session lets go of the GIL); a checker's error still comes first.
                session = loader.submit(open_session, model_path) if options.verify else None
                check_graph(model_path, serialized)
                serialized = None       # not held through the verification
                if options.verify:
                    verification = verify_against_torch(
                        model_path, module, inputs, output_names=output_names,
                        max_batch_size=options.max_batch_size, atol=options.atol,
                        rtol=options.rtol, example_outputs=outputs, loaded=exported.model,
                        session=session, budget_cpu_s=budget_for(exporter_cpu_s)
                        if options.verify_batches == "budget" else None,
                        length_rules=rules)
        except UserCodeError:
            raise                   # the next exporter would run the same code
        except ExportError as exc:
            attempts.append({"exporter": exporter, "ok": False,
                             "error": _without_prefix(exc.message, exporter),
                             "seconds": round(time.perf_counter() - started, 2)})
            note = onnx_export.fallback_note(exc.message)
            if note:
                attempts[-1]["note"] = note
            failures.append((exporter, exc))
            for leftover in model_path.parent.glob(f"{ONNX_FILENAME}*"):
                leftover.unlink()
            continue
        attempts.append({"exporter": exporter, "ok": True,
                         "seconds": round(time.perf_counter() - started, 2)})
        return exported, exporter, attempts, verification, saved
    raise _furthest(failures)


def _furthest(failures: list[tuple[str, TritonkitError]]) -> TritonkitError:
    verified = [(e, exc) for e, exc in failures if isinstance(exc, VerificationError)]
    exporter, error = (verified or failures)[0]
    said = _without_prefix(error.message, exporter)
    others = []
    for other, exc in failures:
        if exc is not error:
            text = _without_prefix(exc.message, other)
            others.append(f"{other}: {'the same' if text == said else text}")
    message = f"{exporter} exporter: {said}"
    hint = error.hint or ""
    if others:
        tried = "; ".join(others)
        hint = f"{hint} (also tried {tried})" if hint else f"also tried {tried}"
    made = type(error)(message, hint=hint, detail=error.detail)
    # TRITONKIT_DEBUG's traceback goes on down to the exporter's own, as the hint says
    made.__cause__ = error.__cause__ or error
    return made


def _without_prefix(message: str, exporter: str) -> str:
    return message.removeprefix(f"{exporter} exporter: ")


def _tensorrt(stage: Path, model_path: Path, report: dict, profile: GpuProfile,
              inputs: ModelInputs, options: ExportOptions, written: list[Path]) -> str:
    """Build the plan here if this is the target GPU; otherwise record how to build it there."""
    buildable, why_not = tensorrt.can_build_here(profile)
    if buildable:
        plan_path = stage / VERSION / tensorrt.plan_filename(profile)
        report["tensorrt_build"] = tensorrt.build_plan(model_path, plan_path, profile, inputs,
                                                       options.max_batch_size)
        report["plans"] = {profile.cc_key: plan_path.name}
        written.append(plan_path)
        return (f"built {plan_path.name} for compute capability {profile.cc_key} with TensorRT "
                f"{report['tensorrt_build']['tensorrt']}: it loads only in a Triton of that "
                f"TensorRT release ({profile.stack.triton_image_tensorrt})")
    report["tensorrt_recipe"] = tensorrt.build_recipe(profile, inputs, options.max_batch_size,
                                                      version=VERSION, onnx_name=ONNX_FILENAME)
    # The config serves the plan deploy will build; the ONNX file stays for other cards.
    report["plans"] = {profile.cc_key: tensorrt.plan_filename(profile)}
    return (f"{why_not}: the plan must be built on the target ({profile.display_name}); "
            f"tritonkit deploy runs the recipe in {REPORT_FILENAME} (tensorrt_recipe) there, "
            f"in the model's folder: {shlex.join(report['tensorrt_recipe']['command'])}")


def _move_into_place(stage: Path, target: Path, previous: Path, *, force: bool) -> None:
    """Rename the finished folder in; a replaced one is kept until the new one is there.

    Without ``force`` the name is checked again: it was free when the export began,
    minutes ago, and another export of it (a second CI job on a shared repository) may
    have moved its model in since. The rename itself refuses a folder that appears, with
    files in it, in the instant between; an empty one (another export that has made its
    folder but not filled it) rename(2) would replace, a window of microseconds.
    """
    if not force:
        refuse_overwrite(target, force=False, what="model", instead="choose another --name")
        try:
            os.rename(stage, target)
        except OSError:
            refuse_overwrite(target, force=False, what="model", instead="choose another --name")
            raise
        return
    if target.exists():
        os.replace(target, previous)
    try:
        os.replace(stage, target)
    except BaseException:
        if previous.exists() or previous.is_symlink():
            os.replace(previous, target)
        raise
