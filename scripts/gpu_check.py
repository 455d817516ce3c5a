"""The checks that need a CUDA GPU, in one run; run by scripts/gpu_check.sh.

1. Export each example model with its weights and example inputs on the GPU, in FP32 and
   in FP16, as a user who trains there hands it over: the verification compares ONNX
   Runtime with PyTorch running on CUDA (TF32 off), and the report records it.
2. NVML on a real card: monitor's sampler read while the GPU is idle and while a matrix
   product keeps it busy; utilization, clocks, power and memory must move.
3. What the TensorRT path says on this GPU (the plan build where TensorRT is installed).

Writes ``OUT/gpu_check.json`` and exits non-zero if a check failed.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tritonkit.export import export  # noqa: E402
from tritonkit.export.spec import load_factory  # noqa: E402

EXAMPLES = ("mlp", "cnn", "encoder", "multi_output", "recurrent", "sequence")


def to_device(value, device: str, dtype: torch.dtype):
    """``value``'s tensors on ``device``, its floating ones in ``dtype``."""
    if isinstance(value, torch.Tensor):
        return value.to(device, dtype) if value.is_floating_point() else value.to(device)
    if isinstance(value, dict):
        return {key: to_device(item, device, dtype) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(to_device(item, device, dtype) for item in value)
    return value


def export_on(device: str, repository: Path, dtype: torch.dtype) -> list[dict]:
    """Each example exported from ``device`` in ``dtype``, as a user there hands it over."""
    rows = []
    for name in EXAMPLES:
        row: dict = {"model": name, "device": device, "dtype": str(dtype).removeprefix("torch.")}
        try:
            module, inputs, declared = load_factory(f"{ROOT / 'examples' / name}.py:build")
            module, inputs = module.to(device, dtype), to_device(inputs, device, dtype)
            started = time.perf_counter()
            result = export(module, inputs, name=f"{name}_{device}_{row['dtype']}",
                            repository=repository, dynamic_axes=declared or None, gpu="a10")
            report = result.report
            row.update(ok=True, seconds=round(time.perf_counter() - started, 1),
                       exporter=report.get("exporter"),
                       verification=report.get("verification"),
                       module_device_after=str(next(module.parameters()).device),
                       warnings=result.warnings)
        except Exception as exc:  # one model's failure must not hide the others'
            row.update(ok=False, error=f"{type(exc).__name__}: {exc}",
                       traceback=traceback.format_exc(limit=8))
        print(f"export {name} on {device} in {row['dtype']}: "
              f"{'ok' if row['ok'] else row['error']}", flush=True)
        rows.append(row)
    return rows


def nvml_idle_and_busy() -> dict:
    from tritonkit.monitor.nvml import Nvml

    stop = threading.Event()

    def burn() -> None:
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        while not stop.is_set():
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()

    with Nvml() as nvml:
        idle = [sample.__dict__ for sample in nvml.sample()]
        worker = threading.Thread(target=burn, daemon=True)
        worker.start()
        time.sleep(2.0)
        busy = []
        for _ in range(4):
            busy.append([sample.__dict__ for sample in nvml.sample()])
            time.sleep(0.5)
        stop.set()
        worker.join()
        identities = [identity.__dict__ for identity in nvml.identities()]
        unreachable = [str(fault) for fault in nvml.unreachable]
        driver = nvml.driver_version()
    peak = max(((s[0].get("utilization_pct") or 0) if s else 0) for s in busy)
    return {"driver": driver, "identities": identities, "unreachable": unreachable,
            "idle": idle, "busy": busy, "busy_peak_util_pct": peak,
            "ok": bool(idle) and peak > 50
                  and all(idle[0].get(k) is not None
                          for k in ("memory_total_mib", "sm_clock_mhz", "temperature_c"))}


def tensorrt_path() -> dict:
    """What `--format tensorrt` would say here, for each GPU profile."""
    from tritonkit.export import tensorrt
    from tritonkit.profiles import load_profile

    return {gpu: dict(zip(("can_build", "why_not"), tensorrt.can_build_here(load_profile(gpu))))
            for gpu in ("a10", "p100")}


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "out/gpu-check")
    out.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    result: dict = {"torch": torch.__version__, "cuda": torch.version.cuda,
                    "gpu": torch.cuda.get_device_name() if cuda else None}
    device = "cuda" if cuda else "cpu"
    with tempfile.TemporaryDirectory() as repository:
        result["export"] = [row for dtype in (torch.float32, torch.float16)
                            for row in export_on(device, Path(repository), dtype)]
        # A user who asked for TF32 through PyTorch's per-backend settings: the reference
        # must still be full FP32 (on this card TF32 misses FP32 tolerances by ~1e-3).
        matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv
        before = (matmul.fp32_precision, conv.fp32_precision)
        matmul.fp32_precision = conv.fp32_precision = "tf32"
        try:
            tf32 = export_on(device, Path(repository) / "tf32", torch.float32)
        finally:
            matmul.fp32_precision, conv.fp32_precision = before
        result["export"] += [{**row, "dtype": "float32, tf32 asked"} for row in tf32]
    result["nvml"] = nvml_idle_and_busy() if cuda else {"ok": None, "why": "no CUDA GPU"}
    try:
        result["tensorrt"] = tensorrt_path()
    except Exception as exc:
        result["tensorrt"] = {"error": f"{type(exc).__name__}: {exc}"}
    (out / "gpu_check.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    failed = [f"{row['model']} {row['dtype']}" for row in result["export"] if not row["ok"]]
    if result["nvml"]["ok"] is False:
        failed.append("nvml")
    print(json.dumps({"failed": failed, "gpu": result["gpu"]}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
