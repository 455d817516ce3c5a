"""What warm-up raises, in tritonkit's tree (``tritonkit.errors``)::

    TritonkitError
     +-- ModelLoadError
     |    +-- LoadFailed     a model failed to load; the others were warmed anyway
     +-- ServerError
          +-- InputRefused   a READY model refused a request built from its config

``ServerGone`` is warm-up's own signal, never a user's: the server went away in the
middle, so the whole warm-up starts over on the server that comes back."""

from __future__ import annotations

from tritonkit.errors import ModelLoadError, ServerError
from tritonkit.warmup._results import ModelWarmup


class ServerGone(Exception):
    """The server stopped answering (or lost a model) in the middle: start over."""


class LoadFailed(ModelLoadError):
    """A model failed to load; ``results`` are the figures of the others, warmed anyway."""

    def __init__(self, error: ModelLoadError, results: list[ModelWarmup]) -> None:
        hint = error.hint or ""
        if results:
            hint += f"; the other models were warmed: {', '.join(r.model for r in results)}"
        super().__init__(error.message, hint, detail=error.detail)
        self.results = results


class InputRefused(ServerError):
    """A READY model refused a warm-up request built from its config."""
