"""`tritonkit warmup` (not built yet)."""

from __future__ import annotations

from tritonkit.cli import app
from tritonkit.errors import NotBuiltError


@app.command(epilog="Example: tritonkit warmup --repository model_repository")
def warmup() -> None:
    """Load every model explicitly and warm it up until its latency is steady."""
    raise NotBuiltError("tritonkit warmup is not built yet",
                        hint="tritonkit deploy already waits until every model is READY")
