"""The optional parts of tritonkit, and the extra that installs each.

The base install (``pip install tritonkit``) drives a server: deploy, warmup, loadtest,
down, monitor, diagnose, doctor and config, without torch. What needs more says which
extra to install before it starts, rather than failing on an import halfway:

    export   torch, ONNX Runtime (CPU) and onnxscript      pip install "tritonkit[export]"
             or ONNX Runtime's CUDA build instead           pip install "tritonkit[export-gpu]"
    local    ONNX Runtime, which the local target's          pip install "tritonkit[local]"
             python-backend adapter runs ONNX models with

Imports of these packages stay inside the code that needs them, so the base install never
loads them.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Sequence

from tritonkit.errors import UsageError

EXPORT_MODULES = ("torch", "onnxruntime", "onnxscript")
LOCAL_MODULES = ("onnxruntime",)
HINTS = {
    "export": 'pip install "tritonkit[export]" (or "tritonkit[export-gpu]" for ONNX Runtime\'s '
              "CUDA build)",
    # The local target needs the embedded server as well, which no extra can install.
    "local": "tritonkit install-server (it installs ONNX Runtime with the embedded server), "
             'or pip install "tritonkit[local]"',
}


# ONNX Runtime 1.29+ on Linux records every session it opens in a database under
# ~/.cache/Microsoft/DeveloperTools unless this is set before its import; a user's own
# value stands.
ORT_TELEMETRY_ENV = "ORT_DISABLE_TELEMETRY"


def onnxruntime_telemetry_off(env=os.environ):
    """Set ORT_DISABLE_TELEMETRY=1 in ``env`` (this process's by default) unless it is set;
    returns ``env``."""
    env.setdefault(ORT_TELEMETRY_ENV, "1")
    return env


def missing(modules: Sequence[str]) -> list[str]:
    """The modules of ``modules`` that cannot be imported here (not imported to find out)."""
    return [name for name in modules if importlib.util.find_spec(name) is None]


def require(extra: str, modules: Sequence[str], *, needed_by: str) -> None:
    """A UsageError naming ``extra`` when any of ``modules`` is not installed."""
    absent = missing(modules)
    if absent:
        raise UsageError(f"{needed_by} needs the {extra} extra ({', '.join(absent)} "
                         f"{'is' if len(absent) == 1 else 'are'} not installed)",
                         hint=HINTS.get(extra, f'pip install "tritonkit[{extra}]"'))
