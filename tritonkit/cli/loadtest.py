"""`tritonkit loadtest` (not built yet)."""

from __future__ import annotations

from tritonkit.cli import app
from tritonkit.errors import NotBuiltError


@app.command(epilog="Example: tritonkit loadtest --repository model_repository --model example "
                    "--concurrency 1,8 --sla-p99-ms 20")
def loadtest() -> None:
    """Measure QPS and latency percentiles against an SLA (exit code = verdict)."""
    raise NotBuiltError("tritonkit loadtest is not built yet",
                        hint="use perf_analyzer for now")
