"""Find the model config with the highest throughput that meets an SLA, measured on the
running server, and show that its gain is real.

    if __name__ == "__main__":       # the load generator's workers import this script again
        result = tune(resolve_endpoint(repository=Path("model_repository")), "mlp",
                      Sla(p99_ms=10), budget_s=300)
        print(result.winner.label if result.winner else f"none met it; closest {result.closest.label}")

1. The space (``_space``): instances, ``max_batch_size``, dynamic batching's queue delay
   and preferred sizes, ONNX Runtime's threads, the GPU accelerator — each knob's values
   from the card's profile (``configs/gpus/<gpu>.toml``, ``[tune]``) or, for a model
   served on the CPU (the local target), the CPU profile's; ``--space`` changes them.
2. A trial (``_trial``): the config loaded in place of the served one through Triton's
   load API (a config override, behind the deployment's secret; no restart, the old
   config serves until the new one is READY), warmed up by our warm-up, then measured.
3. Per config (``_search.highest_load``): the highest closed-loop concurrency that meets
   the p99 limit, by bracketing, then the SLA judged in open loop at the rate it carried.
4. Over the space (``_search.coordinate_search``): one knob at a time from the served
   config, a change kept only when it beats the noise, within the budget.
5. The winner, the served config and Triton's bare default re-measured interleaved, a
   confidence interval on each ratio (``_interval``): a gain inside the noise is "no
   significant difference", and the served config then stays.
6. The served config is put back (on Ctrl-C, SIGTERM and errors too), and ``--write``
   puts the winner's changes into the model's config file, stamped as tune's.
"""

from tritonkit.tune._interval import RatioInterval, interleave, paired_interval, t_quantile
from tritonkit.tune._run import (BARE, DEFAULT_BUDGET_S, SERVED, Comparison, Trial, TuneProgress,
                                 TuneResult, tune)
from tritonkit.tune._search import CLOSED, OPEN, Found, Probe, coordinate_search, highest_load
from tritonkit.tune._space import (KNOBS, LABEL_LEGEND, Candidate, cpu_space, read_space_file,
                                   space_keys)
from tritonkit.tune._write import WriteTarget, how_to_serve, write_target

__all__ = [
    "BARE",
    "CLOSED",
    "DEFAULT_BUDGET_S",
    "KNOBS",
    "LABEL_LEGEND",
    "OPEN",
    "SERVED",
    "Candidate",
    "Comparison",
    "Found",
    "Probe",
    "RatioInterval",
    "Trial",
    "TuneProgress",
    "TuneResult",
    "WriteTarget",
    "coordinate_search",
    "cpu_space",
    "highest_load",
    "how_to_serve",
    "interleave",
    "paired_interval",
    "read_space_file",
    "space_keys",
    "t_quantile",
    "tune",
    "write_target",
]
