"""`tritonkit monitor` GPU samples through NVML: units, clock event reasons, readings a card
does not support, GPUs lost, reset or out of reach."""

from __future__ import annotations

import pytest

from tests.monitor.conftest import (
    LIMITS, _failing_from_now_on, _fake_pynvml, _gpu, _nvml_error, _raising)
from tritonkit.monitor.alerts import AlertTracker
from tritonkit.monitor.nvml import GpuSample, GpuUnavailableError, Nvml
from tritonkit.monitor.watch import Monitor


def test_nvml_samples_are_converted_to_mib_watts_and_decimal_mb_per_s():
    with Nvml(_fake_pynvml()) as nvml:
        (gpu,) = nvml.sample()
        (identity,) = nvml.identities()
        assert nvml.driver_version() == "535.104.05"
    assert identity.name == "Tesla P100-PCIE-16GB" and identity.compute_capability == 6.0
    assert identity.memory_total_mib == 16 * 1024
    assert gpu.utilization_pct == 93 and gpu.memory_pct == 75.0
    assert gpu.memory_used_mib == 12 * 1024 and gpu.power_w == 187.5
    assert (gpu.sm_clock_mhz, gpu.memory_clock_mhz, gpu.temperature_c) == (1328, 715, 71)
    assert gpu.pcie_rx_mb_s == pytest.approx(12_288.0)   # 12e6 KB/s * 1024 B
    assert gpu.pcie_tx_mb_s == pytest.approx(512.0)
    assert (gpu.pcie_gen, gpu.pcie_width) == (3, 16)


def test_clock_event_reasons_are_a_bitmask_of_which_only_slowdowns_count():
    import pynvml

    held = (pynvml.nvmlClocksEventReasonGpuIdle | pynvml.nvmlClocksEventReasonSwPowerCap
            | pynvml.nvmlClocksEventReasonHwThermalSlowdown)
    with Nvml(_fake_pynvml(clock_events=held)) as nvml:
        (gpu,) = nvml.sample()
    assert gpu.clock_events == held
    assert gpu.slowdowns == ("sw_power_cap", "hw_thermal")     # idle is no slowdown
    with Nvml(_fake_pynvml(clock_events=pynvml.nvmlClocksEventReasonGpuIdle)) as nvml:
        assert nvml.sample()[0].slowdowns == ()


def test_a_reading_the_card_does_not_support_is_empty_not_an_error():
    with Nvml(_fake_pynvml(power_supported=False)) as nvml:
        (gpu,) = nvml.sample()
    assert gpu.power_w is None and gpu.utilization_pct == 93 and gpu.error is None


@pytest.mark.parametrize("error", ["TIMEOUT", "IN_USE", "VGPU_ECC_NOT_SUPPORTED", "NOT_SUPPORTED"])
def test_a_reading_that_fails_for_another_reason_is_empty_and_the_card_not_lost(error):
    """A PCIe counter timing out once, or a vGPU's ECC: not a card to reset."""
    fake = _fake_pynvml()
    fake.nvmlDeviceGetPowerUsage = _raising(error)
    with Nvml(fake) as nvml:
        monitor = Monitor(nvml, None, LIMITS)
        snapshot = monitor.snapshot()
    (gpu,) = snapshot.gpus
    assert gpu.error is None and gpu.power_w is None and gpu.utilization_pct == 93
    assert snapshot.alerts == []


@pytest.mark.parametrize("error", ["GPU_IS_LOST", "DRIVER_NOT_LOADED", "RESET_REQUIRED",
                                   "UNKNOWN"])
def test_a_gpu_lost_mid_run_is_a_failed_sample_and_one_alert_naming_it(error):
    fake = _fake_pynvml()
    with Nvml(fake) as nvml:
        monitor = Monitor(nvml, None, LIMITS)
        first = monitor.snapshot()
        _failing_from_now_on(fake, error)           # it falls off the bus
        lost, still_lost = monitor.snapshot(), monitor.snapshot()
    assert first.alerts == [] and first.gpus[0].error is None
    (gpu,) = lost.gpus
    assert gpu.error.endswith(f"(NVML_ERROR_{error})") and gpu.utilization_pct is None
    assert (gpu.index, gpu.name, gpu.uuid) == (0, "Tesla P100-PCIE-16GB", "GPU-abc")  # as it was
    (alert,) = lost.alerts
    assert alert.kind == "gpu_lost" and alert.gpu == 0
    assert f"GPU 0 (Tesla P100-PCIE-16GB) cannot be read: {gpu.error}" in alert.message
    assert still_lost.alerts == []                  # edge-triggered: once
    assert [(r.gpu, r.util_pct) for r in lost.rows()] == [(0, None)]


def test_the_gpu_table_says_why_a_lost_gpus_row_is_empty():
    from rich.console import Console

    from tritonkit.cli.monitor import _snapshot_view

    fake = _fake_pynvml()
    with Nvml(fake) as nvml:
        monitor = Monitor(nvml, None, LIMITS)
        _failing_from_now_on(fake, "GPU_IS_LOST")
        snapshot = monitor.snapshot()
    console = Console(record=True, width=300)
    console.print(_snapshot_view(snapshot))
    said = " ".join(console.export_text().split())        # the caption wraps to the table
    assert "0 = Tesla P100-PCIE-16GB; cannot be read: " + snapshot.gpus[0].error in said


def test_a_gpu_lost_before_its_first_sample_is_named_by_the_uuid_it_had_when_opened():
    """The UUID is how a monitor pairs NVML's GPUs with the server's."""
    fake = _fake_pynvml()
    with Nvml(fake) as nvml:
        _failing_from_now_on(fake, "GPU_IS_LOST")
        (gpu,) = nvml.sample()
    assert (gpu.name, gpu.uuid) == ("Tesla P100-PCIE-16GB", "GPU-abc") and gpu.error


def test_a_gpu_back_after_a_reset_alerts_again_if_it_is_lost_again():
    tracker = AlertTracker(LIMITS)
    lost = GpuSample.failed(0, "NVIDIA A10", "GPU-1", "GPU is lost (NVML_ERROR_GPU_IS_LOST)")
    fired = [tracker.observe(t, s) for t, s in enumerate([_gpu(), lost, lost, _gpu(), lost])]
    assert [[a.kind for a in f] for f in fired] == [[], ["gpu_lost"], [], [], ["gpu_lost"]]


def test_a_hot_card_lost_and_back_still_hot_is_not_a_second_temperature_alert():
    tracker = AlertTracker(LIMITS)
    lost = GpuSample.failed(0, "NVIDIA A10", "GPU-1", "GPU is lost (NVML_ERROR_GPU_IS_LOST)")
    fired = [tracker.observe(t, s) for t, s in enumerate([_gpu(temp=90), lost, _gpu(temp=90)])]
    assert [[a.kind for a in f] for f in fired] == [["temperature"], ["gpu_lost"], []]


def test_clock_events_on_a_driver_before_r535_are_read_by_their_throttle_name():
    """nvidia-ml-py has nvmlDeviceGetCurrentClocksEventReasons whatever the driver; a
    driver before NVML 12.2 (R470, R525: the P100's) lacks the symbol and answers
    FUNCTION_NOT_FOUND. The throttle call gives the same bits."""
    import pynvml

    fake, asked = _fake_pynvml(), []

    def events(handle):
        asked.append(handle)
        raise _nvml_error("FUNCTION_NOT_FOUND")

    fake.nvmlDeviceGetCurrentClocksEventReasons = events
    fake.nvmlDeviceGetCurrentClocksThrottleReasons = (
        lambda h: pynvml.nvmlClocksThrottleReasonHwThermalSlowdown)        # 0x40
    with Nvml(fake) as nvml:
        first, second = nvml.sample()[0], nvml.sample()[0]
    assert first.clock_events == 0x40 and first.slowdowns == ("hw_thermal",)
    assert second.slowdowns == ("hw_thermal",) and len(asked) == 1      # the choice is kept
    (alert,) = AlertTracker(LIMITS).observe(0, first)
    assert alert.kind == "clocks" and "hw_thermal" in alert.message


def test_a_gpu_this_process_may_not_use_is_named_and_the_others_are_watched():
    """nvmlDeviceGetCount_v2 counts GPUs whose handle is NVML_ERROR_NO_PERMISSION."""
    fake = _fake_pynvml()
    fake.nvmlDeviceGetCount = lambda: 3
    fake.nvmlDeviceGetHandleByIndex = (
        lambda i: _raising("NO_PERMISSION")() if i == 1 else f"h{i}")
    with Nvml(fake) as nvml:
        assert [g.index for g in nvml.sample()] == [0, 2]
        assert [g.index for g in nvml.identities()] == [0, 2]
        assert [str(f) for f in nvml.unreachable] == [
            "gpu 1: Insufficient Permissions (NVML_ERROR_NO_PERMISSION)"]


def test_a_gpu_that_fails_while_identified_is_named_not_raised():
    fake = _fake_pynvml()
    fake.nvmlDeviceGetCount = lambda: 2
    fake.nvmlDeviceGetCudaComputeCapability = (
        lambda h: _raising("GPU_IS_LOST")() if h == "h0" else (6, 0))
    with Nvml(fake) as nvml:
        assert [g.index for g in nvml.identities()] == [1]
    assert [str(f) for f in nvml.unreachable] == ["gpu 0: GPU is lost (NVML_ERROR_GPU_IS_LOST)"]


def test_when_no_gpu_can_be_reached_each_is_named_in_one_line():
    fake = _fake_pynvml()
    fake.nvmlDeviceGetCount = lambda: 2
    fake.nvmlDeviceGetHandleByIndex = _raising("NO_PERMISSION")
    with pytest.raises(GpuUnavailableError) as raised:
        Nvml(fake).open()
    assert "gpu 0: Insufficient Permissions" in raised.value.message
    assert "gpu 1: Insufficient Permissions" in raised.value.message
    assert "\n" not in raised.value.message and raised.value.hint
