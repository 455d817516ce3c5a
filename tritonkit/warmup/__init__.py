"""Explicit load and warm-up until steady, and the cold-start figures that prove it.

After a (re)start or a reload, the first request to a model pays for set-up that later
requests do not (on the local Triton: ~30 ms against a steady p50 under 1 ms). A user
sees that as P99 jitter. ``load_and_warm`` removes it before traffic arrives:

1. wait until the server is live — retrying with backoff while it restarts, under the
   caller's one deadline;
2. check every name against the server's model repository (this needs the deployment's
   secret header, so a wrong secret is caught before anything is touched);
3. load each model that is not READY (steps before the ensembles that use them). A READY
   model is left alone unless ``reload`` is asked for, which brings its cold start back.
   Triton (2.51) reloads a model on a load request only when its files changed (else the
   request does nothing), or when the request carries a config that differs from the
   one loaded: a reload sends a plain load first (changed files are read), then, if the
   model's statistics show it was not reloaded, its served config with one parameter
   changed (``RELOAD_PARAMETER``); the old copy serves until the new one is READY.
   A READY model that no request has reached since its load (the server's statistics:
   nothing run, or only its config's ``model_warmup``) is as cold as a loaded one: a
   restarted server that nothing has warmed yet. The steps Triton loaded with an
   ensemble whose config was not here to read (a ``--url`` server) are read from the
   server after the loads, nested ensembles too, and warmed as models of their own;
4. send requests for every batch size and dynamic-shape bucket of the model's config
   until the latency of each shape is steady (``SteadyRule``) or the budget runs out.
   The cold start is paid once per model *instance* (its python-backend stub, its ONNX
   Runtime session: ~30 ms each here). Sequential requests usually take turns over the
   instances, but not always (under load one instance can take two in a row), so each
   shape also gets one burst of as many concurrent requests as the model has instances:
   an instance runs one execution at a time, so unless the dynamic batcher merges them,
   every instance serves one (tritonkit's generated configs also carry ``model_warmup``,
   which Triton runs on every instance at load);
   a stateful model (sequence batching) is sent whole short sequences instead of single
   requests, and a decoupled one is streamed over gRPC (``Driver``);
5. measure what a user would now see: a fresh client's first request against the p50
   of the requests after it (``cold_start_figures``).

Before step 1, a server given by address alone (``--url``) that refuses every connection
for ``REFUSED_GRACE_S`` fails then, not at the deadline; a recorded deployment's, or one
whose port is open but not live yet, is waited for (``warm_up``).

Nothing is ever unloaded. If the server restarts in the middle, every model is warmed
again from the start on the new server (its models are cold again). A model that fails
(its load refused, its process crashed, a request that never came back) stops only
itself: the others are warmed, then ``WarmupFailed`` carries every model's figures or
failure. The deadline a command gives bounds stalls (``StallDeadline``): each load, each
answered request and each model begun moves it on.
"""

from tritonkit.warmup._context import ABOUT, run_context, utc_now
from tritonkit.warmup._config import (
    load_order,
    model_instances,
    not_warmable,
    sequence_ids,
    sequence_slots,
    warmup_shapes,
)
from tritonkit.warmup._errors import InputRefused, ModelCrashed, WarmupFailed
from tritonkit.warmup._model import CHECK_CLIENTS, CHECK_REQUESTS, cold_start_figures
from tritonkit.warmup._results import ColdStart, ModelWarmup, SteadyRule
from tritonkit.warmup._run import DEFAULT_REQUESTS, REFUSED_GRACE_S, load_and_warm, warm_up
from tritonkit.warmup._server import (RELOAD_PARAMETER, check_triton, load_model,
                                     never_served, quiet_interrupts, repository_index,
                                     served_counts, wait_live, warmup_counts)

__all__ = [
    "ABOUT",
    "CHECK_CLIENTS",
    "CHECK_REQUESTS",
    "DEFAULT_REQUESTS",
    "REFUSED_GRACE_S",
    "RELOAD_PARAMETER",
    "ColdStart",
    "InputRefused",
    "ModelCrashed",
    "ModelWarmup",
    "SteadyRule",
    "WarmupFailed",
    "check_triton",
    "cold_start_figures",
    "load_and_warm",
    "load_model",
    "load_order",
    "model_instances",
    "never_served",
    "served_counts",
    "not_warmable",
    "quiet_interrupts",
    "repository_index",
    "run_context",
    "sequence_ids",
    "sequence_slots",
    "utc_now",
    "wait_live",
    "warm_up",
    "warmup_counts",
    "warmup_shapes",
]
