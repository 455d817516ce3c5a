"""`tritonkit monitor`, `tritonkit diagnose` and `tritonkit doctor` (not built yet)."""

from __future__ import annotations

from tritonkit.cli import app
from tritonkit.errors import NotBuiltError


@app.command(epilog="Example: tritonkit monitor --interval 10 --csv gpu.csv")
def monitor() -> None:
    """Sample the GPU's vital signs (NVML) and Triton's metrics."""
    raise NotBuiltError("tritonkit monitor is not built yet")


@app.command(epilog="Example: tritonkit diagnose gpu.csv")
def diagnose() -> None:
    """Name the bottleneck (memory, bandwidth, I/O or scheduling wall) from a monitor CSV."""
    raise NotBuiltError("tritonkit diagnose is not built yet")


@app.command(epilog="Example: tritonkit doctor --gpu a10 --repository model_repository")
def doctor() -> None:
    """Check a deployment host: driver, compute capability, Docker, ports, repository."""
    raise NotBuiltError("tritonkit doctor is not built yet")
