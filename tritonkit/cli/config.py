"""`tritonkit config` (not built yet)."""

from __future__ import annotations

from tritonkit.cli import app
from tritonkit.errors import NotBuiltError


@app.command(epilog="Example: tritonkit config mlp --repository model_repository --gpu a10")
def config() -> None:
    """Generate a model's Triton config.pbtxt from its exported graph, tuned per GPU profile."""
    raise NotBuiltError("tritonkit config is not built yet")
