"""Watching a deployment: the GPU's vital signs, Triton's counters, the wall behind them.

    nvml            GPU samples through NVML (utilization, memory, temperature, power,
                    clocks, PCIe rx/tx); GpuUnavailableError without a driver
    triton_metrics  Triton's Prometheus endpoint parsed into per-model counters and rates
    alerts          thresholds from configs/alerts.toml; edge-triggered alerts
    recording       the monitor CSV (one row per sample per GPU): writer and reader
    watch           the sampling loop behind ``tritonkit monitor``
    diagnose        which wall (memory, bandwidth, scheduling, I/O) a recording shows
    doctor          host facts (driver, GPUs, docker, ports) and the checks on them
"""

from tritonkit.monitor.alerts import Alert, AlertTracker, Thresholds, load_thresholds
from tritonkit.monitor.diagnose import Diagnosis, diagnose, guess_profile
from tritonkit.monitor.doctor import Check, HostFacts, gather_host_facts, run_doctor
from tritonkit.monitor.nvml import GpuSample, GpuUnavailableError, Nvml
from tritonkit.monitor.recording import COLUMNS, CsvRecorder, MonitorRow, read_monitor_csv
from tritonkit.monitor.triton_metrics import TritonMetrics, parse_metrics, scrape
from tritonkit.monitor.watch import Monitor, Snapshot, open_monitor, watch

__all__ = [
    "Alert", "AlertTracker", "COLUMNS", "Check", "CsvRecorder", "Diagnosis", "GpuSample",
    "GpuUnavailableError", "HostFacts", "Monitor", "MonitorRow", "Nvml", "Snapshot",
    "Thresholds", "TritonMetrics", "diagnose", "gather_host_facts", "guess_profile",
    "load_thresholds", "open_monitor", "parse_metrics", "read_monitor_csv", "run_doctor",
    "scrape", "watch",
]
