"""What warm-up raises, in tritonkit's tree (``tritonkit.errors``)::

    TritonkitError
     +-- ServerError
          +-- WarmupFailed   models failed to load or to warm up; the others were warmed
          +-- InputRefused   a READY model refused a request built from its config
          +-- ModelCrashed   a model's process died or hung during a warm-up request

``ServerGone`` is warm-up's own signal, never a user's: the server went away in the
middle, so the whole warm-up starts over on the server that comes back."""

from __future__ import annotations

from tritonkit.errors import ServerError, TritonkitError
from tritonkit.warmup._results import ModelWarmup


class ServerGone(Exception):
    """The server stopped answering (or lost a model) in the middle: start over."""


class WarmupFailed(ServerError):
    """Models failed to load or to warm up (``failures``, by model, in the order they
    failed); ``results`` hold every model's figures, a failed one's ``error`` set. Said as
    the first failure, the others named after it."""

    def __init__(self, failures: dict[str, TritonkitError], results: list[ModelWarmup]) -> None:
        first = next(iter(failures.values()))
        message = first.message
        if len(failures) > 1:
            message += f" (also failed: {', '.join(list(failures)[1:])})"
        hint = first.hint or ""
        warmed = [r.model for r in results if r.error is None]
        if warmed:
            hint += f"{'; ' if hint else ''}the other models were warmed: {', '.join(warmed)}"
        super().__init__(message, hint or None, detail=first.detail)
        self.failures = failures
        self.results = results


class InputRefused(ServerError):
    """A READY model refused a warm-up request built from its config."""


class ModelCrashed(ServerError):
    """A model's process (its python-backend stub) died or stopped answering during a
    warm-up request: no input of ours was refused."""
