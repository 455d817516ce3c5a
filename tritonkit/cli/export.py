"""`tritonkit export` (not built yet)."""

from __future__ import annotations

from tritonkit.cli import app
from tritonkit.errors import NotBuiltError


@app.command(epilog="Example: tritonkit export examples/mlp.py:build --name mlp --repository model_repository")
def export() -> None:
    """Export a PyTorch model to ONNX, verified against PyTorch, into a model repository."""
    raise NotBuiltError("tritonkit export is not built yet",
                        hint="put a model folder in the repository by hand for now")
