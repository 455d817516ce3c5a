"""`tritonkit monitor` alerts: thresholds from a file, when each alert fires and when it does
not fire again."""

from __future__ import annotations

import re
from pathlib import Path
from dataclasses import replace

import pytest

from tests.conftest import ROOT, run_cli
from tests.monitor.conftest import LIMITS, _gpu
from tritonkit.errors import ProfileError
from tritonkit.monitor.alerts import AlertTracker, default_thresholds_path, load_thresholds
from tritonkit.monitor.nvml import GpuSample


def _kinds(tracker: AlertTracker, samples: list[GpuSample]) -> list[list[str]]:
    return [[a.kind for a in tracker.observe(t, s)] for t, s in enumerate(samples)]


def test_a_thresholds_file_decides_when_alerts_fire(tmp_path):
    import pynvml

    hw_slowdown = pynvml.nvmlClocksEventReasonHwSlowdown
    samples = [_gpu(temp=80), replace(_gpu(temp=83), clock_events=hw_slowdown), _gpu(temp=78),
               _gpu(temp=83)]
    default = _kinds(AlertTracker(load_thresholds().alerts), samples)
    text = (ROOT / "configs" / "alerts.toml").read_text()
    changed = tmp_path / "alerts.toml"
    changed.write_text(text.replace("temperature_c = 85", "temperature_c = 79")
                       .replace("temperature_hysteresis_c = 5", "temperature_hysteresis_c = 0")
                       .replace("hw_slowdown_samples = 3", "hw_slowdown_samples = 1"))
    assert default == [[], [], [], []]
    assert _kinds(AlertTracker(load_thresholds(changed).alerts), samples) == [
        ["temperature"], ["clocks"], [], ["temperature"]]


def test_a_hot_card_alerts_once_until_it_cools_down():
    tracker = AlertTracker(LIMITS)
    fired = [tracker.observe(t, _gpu(temp=temp)) for t, temp in
             enumerate([80, 88, 90, 91, 70, 87])]
    kinds = [[a.kind for a in f] for f in fired]
    assert kinds == [[], ["temperature"], [], [], [], ["temperature"]]
    assert "88 °C" in fired[1][0].message


def test_clocks_held_by_heat_or_the_power_brake_alert_once_and_the_power_cap_does_not():
    import pynvml

    power_cap, thermal = (pynvml.nvmlClocksEventReasonSwPowerCap,
                          pynvml.nvmlClocksEventReasonHwThermalSlowdown)
    tracker = AlertTracker(LIMITS)
    events = [power_cap, power_cap | thermal, thermal, 0, pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown]
    fired = [tracker.observe(t, replace(_gpu(), clock_events=e)) for t, e in enumerate(events)]
    assert [[a.kind for a in f] for f in fired] == [[], ["clocks"], [], [], ["clocks"]]
    assert "hw_thermal" in fired[1][0].message and "sw_power_cap" not in fired[1][0].message
    assert "hw_power_brake" in fired[4][0].message


def test_a_card_hovering_at_the_threshold_is_one_temperature_alert():
    tracker = AlertTracker(LIMITS)                  # 85 °C, ending 5 °C below it
    assert _kinds(tracker, [_gpu(temp=t) for t in (86, 84, 86, 81, 86)]) == [
        ["temperature"], [], [], [], []]
    assert _kinds(tracker, [_gpu(temp=t) for t in (79, 86)]) == [[], ["temperature"]]


def test_a_moments_hw_slowdown_at_a_clock_change_is_no_alert_a_lasting_one_is():
    """nvml.h: HwSlowdown "may be also reported during PState or clock change"."""
    import pynvml

    hw = pynvml.nvmlClocksEventReasonHwSlowdown
    events = lambda *bits: [replace(_gpu(), clock_events=b) for b in bits]  # noqa: E731
    assert _kinds(AlertTracker(LIMITS), events(hw, 0, hw, hw, 0)) == [[], [], [], [], []]
    assert _kinds(AlertTracker(LIMITS), events(hw, hw, hw, hw)) == [[], [], ["clocks"], []]
    # with heat's own bit it alerts at once
    thermal = hw | pynvml.nvmlClocksEventReasonHwThermalSlowdown
    assert _kinds(AlertTracker(LIMITS), events(thermal)) == [["clocks"]]


def test_a_bad_hysteresis_or_sample_count_is_refused_naming_the_field(tmp_path):
    text = (ROOT / "configs" / "alerts.toml").read_text()
    for old, new, field in (("temperature_hysteresis_c = 5", "temperature_hysteresis_c = -1",
                             "alerts.temperature_hysteresis_c"),
                            ("hw_slowdown_samples = 3", "hw_slowdown_samples = 0",
                             "alerts.hw_slowdown_samples")):
        bad = tmp_path / "alerts.toml"
        bad.write_text(text.replace(old, new))
        with pytest.raises(ProfileError, match=field):
            load_thresholds(bad)


@pytest.mark.parametrize("table, field, value", [
    ("alerts", "temperature_c", "nan"), ("alerts", "temperature_c", "inf"),
    ("alerts", "temperature_c", "-40"), ("alerts", "memory_pct", "-1"),
    ("alerts", "memory_pct", "101"), ("alerts", "low_utilization_pct", "nan"),
    ("alerts", "low_utilization_minutes", "-5"), ("alerts", "idle_utilization_pct", "inf"),
    ("alerts", "temperature_hysteresis_c", "nan"),
    ("walls", "memory_full_pct", "150"), ("walls", "low_utilization_pct", "-1"),
    ("walls", "small_batch", "nan"), ("walls", "small_batch", "-1"),
    ("walls", "short_compute_us", "inf"), ("walls", "queue_share", "1.5"),
    ("walls", "input_share", "-0.5"),
])
def test_every_threshold_out_of_its_range_is_refused_naming_the_field(tmp_path, capsys,
                                                                      table, field, value):
    """Each threshold is finite and in its range (percentages 0 to 100, shares 0 to 1, counts
    and times 0 or more): nan compares false with every reading, so its alert never fired."""
    text = (ROOT / "configs" / "alerts.toml").read_text()
    head, marker, walls = text.partition("[walls]")
    if table == "alerts":
        head = re.sub(rf"(?m)^{field} = .*$", f"{field} = {value}", head, count=1)
    else:
        walls = re.sub(rf"(?m)^{field} = .*$", f"{field} = {value}", walls, count=1)
    bad = tmp_path / "alerts.toml"
    bad.write_text(head + marker + walls)
    assert bad.read_text() != text
    with pytest.raises(ProfileError, match=rf"field '{table}\.{field}'"):
        load_thresholds(bad)
    # the command says it in one line, exit 2, before any GPU is looked for
    assert run_cli("monitor", "--once", "--thresholds", bad) == 2
    err = capsys.readouterr().err
    assert f"field '{table}.{field}'" in err.splitlines()[0] and "internal error" not in err


def test_memory_above_95_percent_alerts():
    (alert,) = AlertTracker(LIMITS).observe(0, _gpu(mem_pct=97))
    assert alert.kind == "memory" and "97.0 %" in alert.message


def test_low_utilization_alerts_only_after_minutes_under_load():
    tracker = AlertTracker(LIMITS)
    # 40 % busy while Triton serves, every 10 s: nothing for 4m50s, then one alert at 5 min
    fired = [tracker.observe(t, _gpu(util=40), triton_inferences=100) for t in range(0, 310, 10)]
    assert [i for i, f in enumerate(fired) if f] == [30]
    assert fired[30][0].kind == "low_utilization" and "5.0 min" in fired[30][0].message


def test_an_idle_card_is_not_starved():
    tracker = AlertTracker(LIMITS)
    assert not any(tracker.observe(t, _gpu(util=0)) for t in range(0, 900, 10))
    # with Triton watched, low utilization and no inferences is idle too
    assert not any(tracker.observe(t, _gpu(util=30), triton_inferences=0)
                   for t in range(0, 900, 10))


def test_a_busy_minute_resets_the_low_utilization_clock():
    tracker = AlertTracker(LIMITS)
    utils = [40] * 20 + [90] + [40] * 20      # 200 s low, busy, 200 s low: never 5 min
    assert not any(tracker.observe(10 * i, _gpu(util=u), 50) for i, u in enumerate(utils))


def test_a_bad_thresholds_file_names_the_field(tmp_path):
    bad = tmp_path / "alerts.toml"
    text = (Path(__file__).parents[2] / "configs" / "alerts.toml").read_text()
    bad.write_text(text.replace("temperature_c = 85", 'temperature_c = "hot"'))
    with pytest.raises(ProfileError, match="alerts.temperature_c"):
        load_thresholds(bad)


def test_a_thresholds_file_copied_before_the_newer_fields_still_loads_with_their_defaults(tmp_path):
    """Users copy alerts.toml to tune it (--thresholds, TRITONKIT_CONFIGS): a copy made
    before temperature_hysteresis_c, hw_slowdown_samples and the bandwidth wall's two
    shares existed failed to load ("missing field") once they did."""
    newer = ("temperature_hysteresis_c", "hw_slowdown_samples", "pcie_achievable_fraction",
             "pcie_saturated_share")
    current = load_thresholds()
    old = tmp_path / "alerts.toml"
    old.write_text("".join(line for line in default_thresholds_path().read_text()
                           .splitlines(keepends=True) if not line.startswith(newer)))
    copied = load_thresholds(old)
    assert copied == current                 # the defaults are the shipped file's values
