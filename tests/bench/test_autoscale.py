"""Autoscaling simulation: hand-checked traces, a naive reference simulator, and the shipped spike's shape."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import autoscale

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "bench" / "traces"


def _load(rpm: list[float], interpolation: autoscale.Interpolation = "step", step_s: float = 1.0) -> np.ndarray:
    return autoscale.load_per_step(rpm, step_s, interpolation)


def test_step_with_instant_start_turns_none_away() -> None:
    load = _load([0, 120, 120, 120])
    result = autoscale.simulate(load, autoscale.FleetParams(capacity_rpm=50, buffer=0, start_time_s=0))
    assert result.turned_away == 0
    assert result.worst_minute is None
    assert result.max_instances == 3  # ceil(120 / 50)


def test_step_with_start_time_turns_away_the_computable_amount() -> None:
    # 0 -> 120 requests/min (2/s) at t = 60 s; instances ordered then are ready at 90 s:
    # 2 requests/s x 30 s = 60 requests turned away, all in minute 1.
    load = _load([0, 120, 120, 120])
    result = autoscale.simulate(load, autoscale.FleetParams(capacity_rpm=50, buffer=0, start_time_s=30))
    assert result.turned_away == pytest.approx(60)
    assert result.worst_minute == 1
    assert result.turned_away_per_minute == pytest.approx((0, 60, 0, 0))
    # No buffer of spare capacity can help a fleet that starts from zero instances.
    params = autoscale.FleetParams(capacity_rpm=50, buffer=0, start_time_s=30)
    assert autoscale.buffer_needed(load, params) is None


def test_steady_load_needs_no_spare_capacity_whatever_the_start_time() -> None:
    load = _load([600.0] * 5, "linear")
    params = autoscale.FleetParams(capacity_rpm=70, buffer=0, start_time_s=336)
    assert autoscale.simulate(load, params).turned_away == 0
    assert autoscale.buffer_needed(load, params) == 0.0


def test_scale_down_window_keeps_instances_for_a_returning_load() -> None:
    # 120/min, a silent minute, 120/min again. Kept instances serve the return; without the window the
    # fleet drops to zero and the return loses 2 requests/s x 30 s.
    load = _load([120, 0, 120])
    kept = autoscale.FleetParams(capacity_rpm=50, buffer=0, start_time_s=30, scale_down_window_s=300)
    dropped = autoscale.FleetParams(capacity_rpm=50, buffer=0, start_time_s=30, scale_down_window_s=0)
    assert autoscale.simulate(load, kept).turned_away == 0
    assert autoscale.simulate(load, dropped).turned_away == pytest.approx(60)


def test_linear_ramp_needs_its_relative_growth_over_the_start_time() -> None:
    # 6000/min, then +600/min each minute for 10 minutes: with linear interpolation the load rises 10/min
    # per second from t = 570 s. Capacity ordered at t - T must cover the load at t:
    # 6000 (1 + b) >= 6000 + 10 T, so b = T / 600. Tiny instances make rounding negligible.
    rpm = [6000.0] * 10 + [6000.0 + 600 * k for k in range(1, 11)] + [12000.0] * 5
    load = _load(rpm, "linear")
    for start in (60.0, 120.0):
        params = autoscale.FleetParams(capacity_rpm=1, buffer=0, start_time_s=start)
        assert autoscale.buffer_needed(load, params) == pytest.approx(start / 600, abs=0.002)


def _naive_turned_away(rpm: list[float], params: autoscale.FleetParams,
                       interpolation: autoscale.Interpolation) -> list[float]:
    """Instance-by-instance reference: launch when short, retire newest first, ready after the start time."""
    load = autoscale.load_per_step(rpm, params.step_s, interpolation)
    cap = params.capacity_rpm / 60
    targets = [max(math.ceil(x * (1 + params.buffer) / cap - 1e-9), params.min_instances) for x in load]
    window = round(params.scale_down_window_s / params.step_s)
    wait = math.ceil(params.start_time_s / params.step_s - 1e-9)
    fleet = [-10**9] * targets[0]  # the fleet wanted before the trace is already up
    per_minute = [0.0] * len(rpm)
    steps_per_minute = round(60 / params.step_s)
    for i, x in enumerate(load):
        wanted = max(targets[max(0, i - window):i + 1])
        while len(fleet) < wanted:
            fleet.append(i)
        while len(fleet) > wanted:
            fleet.pop()
        ready = sum(1 for launched in fleet if i - launched >= wait)
        per_minute[i // steps_per_minute] += max(0.0, x - ready * cap) * params.step_s
    return per_minute


@settings(max_examples=40, deadline=None)
@given(
    rpm=st.lists(st.integers(0, 400).map(float), min_size=1, max_size=5),
    capacity=st.sampled_from([7.0, 50.0, 130.0]),
    buffer=st.floats(0, 0.5),
    start=st.floats(0, 200),
    step=st.sampled_from([1.0, 5.0, 10.0]),
    window=st.sampled_from([0.0, 30.0, 300.0]),
    min_instances=st.integers(0, 2),
    interpolation=st.sampled_from(["linear", "step"]),
)
def test_vectorized_simulation_matches_the_naive_fleet(
    rpm: list[float], capacity: float, buffer: float, start: float, step: float, window: float,
    min_instances: int, interpolation: autoscale.Interpolation,
) -> None:
    params = autoscale.FleetParams(capacity, buffer, start, step, window, min_instances)
    fast = autoscale.simulate(autoscale.load_per_step(rpm, step, interpolation), params)
    assert fast.turned_away_per_minute == pytest.approx(_naive_turned_away(rpm, params, interpolation), abs=1e-9)


def test_shipped_spike_needs_little_spare_at_26_s_and_much_at_5_6_min() -> None:
    trace = autoscale.load_trace(TRACES / "security_outage_spike.csv")
    load = autoscale.load_per_step(trace.requests(6.0).tolist(), 1.0, "linear")
    starts = [2.2, 6.2, 26.0, 60.0, 120.0, 336.0]
    rows = autoscale.sweep(load, autoscale.FleetParams(capacity_rpm=100, buffer=0.05, start_time_s=0), starts)
    needed = {row.start_time_s: row.buffer_needed for row in rows}
    values = [needed[s] for s in starts]
    assert all(v is not None for v in values)
    assert values == sorted(values)  # type: ignore[type-var]
    assert needed[26.0] is not None and needed[26.0] < 0.03
    assert needed[336.0] is not None and 0.14 <= needed[336.0] <= 0.22
    # At 5 % spare capacity, the 26 s fleet keeps up and the 5.6 min fleet does not.
    by_start = {row.start_time_s: row.result for row in rows}
    assert by_start[26.0].turned_away == 0
    assert by_start[336.0].turned_away > 0 and by_start[336.0].worst_minute is not None


def test_shipped_traces_regenerate_exactly(tmp_path: Path) -> None:
    autoscale.write_shipped_traces(tmp_path)
    for name in ("security_outage_spike.csv", "steady_day.csv"):
        assert (tmp_path / name).read_bytes() == (TRACES / name).read_bytes()


def test_steady_day_is_about_two_audio_hours() -> None:
    trace = autoscale.load_trace(TRACES / "steady_day.csv")
    assert len(trace.per_minute) == 1440
    assert 1.8 <= trace.audio_seconds(6.0).sum() / 3600 <= 2.2
    assert trace.per_minute[:420] == (0.0,) * 420  # closed before 07:00


def test_load_trace_accepts_audio_seconds_and_rejects_bad_files(tmp_path: Path) -> None:
    good = tmp_path / "a.csv"
    good.write_text("minute,audio_seconds\n0,12\n1,0\n")
    trace = autoscale.load_trace(good)
    assert trace.unit == "audio_seconds"
    assert trace.requests(6.0).tolist() == [2.0, 0.0]
    for text in ("minute,requests\n", "minute,calls\n0,1\n", "minute,requests\n0,1\n2,1\n", "minute,requests\n0,-1\n"):
        bad = tmp_path / "bad.csv"
        bad.write_text(text)
        with pytest.raises(ValueError):
            autoscale.load_trace(bad)
