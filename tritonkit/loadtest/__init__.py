"""Load generation against a Triton server: closed and open loop, histograms, timeline, spikes.

    if __name__ == "__main__":      # each worker imports this script again
        spec = LoadSpec(model="example", concurrency=(1, 8), duration_s=10)
        result = run_loadtest(resolve_endpoint(repository=Path("model_repository")), spec)

Workers are separate processes (a Python client needs several to load a server); each
keeps raw records, builds an HdrHistogram per window once the clock stops, and the
parent merges them. In open loop a request's latency runs from its *scheduled* send
time, so a stalled server shows in the percentiles instead of quietly lowering the
offered load. A stateful model (``sequence_batching``) is sent whole sequences of
requests with correlation IDs, as perf_analyzer sends them (``_sequences``).
``tritonkit.report`` turns a result into a verdict, a table and files.
"""

from tritonkit.loadtest._inputs import Flags, RequestTemplate, parse_shapes, request_template
from tritonkit.loadtest._pool import WorkerPool
from tritonkit.loadtest._run import (
    PERCENTILES,
    Interruption,
    LevelResult,
    LoadSpec,
    LoadTestResult,
    default_workers,
    run_loadtest,
)
from tritonkit.loadtest._sequences import Sequencing, parse_id_range, sequencing
from tritonkit.loadtest._schedule import ARRIVALS, closed_loop, open_loop_schedule, split_schedule
from tritonkit.loadtest._server import ServerEvent, ServerWatcher, StatsSnapshot
from tritonkit.loadtest._timeline import (
    ERROR_WINDOW_SHARE,
    Spike,
    Window,
    cold_start_windows,
    spike_windows,
)
from tritonkit.loadtest._worker import NOT_SENT

__all__ = [
    "ARRIVALS",
    "ERROR_WINDOW_SHARE",
    "Flags",
    "PERCENTILES",
    "Interruption",
    "LevelResult",
    "NOT_SENT",
    "LoadSpec",
    "LoadTestResult",
    "RequestTemplate",
    "Sequencing",
    "ServerEvent",
    "ServerWatcher",
    "Spike",
    "StatsSnapshot",
    "Window",
    "WorkerPool",
    "closed_loop",
    "cold_start_windows",
    "default_workers",
    "open_loop_schedule",
    "parse_id_range",
    "parse_shapes",
    "request_template",
    "run_loadtest",
    "sequencing",
    "spike_windows",
    "split_schedule",
]
