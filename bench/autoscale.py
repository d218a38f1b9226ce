"""Traffic traces and a deterministic autoscaling simulation of a fleet replaying them.

The fleet is simulated on a fixed time step (1 s by default). At each step the autoscaler targets
``ceil(load * (1 + buffer) / capacity)`` instances; it scales down only to the largest target of the last
``scale_down_window_s`` (a stabilization window, as Kubernetes' HPA does), retiring the newest instance
first. A launched instance takes calls only ``start_time_s`` after launch. Demand above the capacity of the
instances that are ready is turned away.

Because retirement is newest-first, the k-th oldest instance is ready at time t exactly when the fleet has
wanted at least k instances throughout [t - start_time, t]; the ready count is therefore a sliding minimum
of the wanted count, and the whole simulation is a few vectorized window reductions.
"""

from __future__ import annotations

import csv
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

LOG = logging.getLogger(__name__)

TraceUnit = Literal["requests", "audio_seconds"]
Interpolation = Literal["linear", "step"]
FloatArray = npt.NDArray[np.float64]

# Below this many requests in a whole run, a run "turns none away": it only absorbs float rounding.
NONE_TURNED_AWAY = 1e-6


@dataclass(frozen=True)
class Trace:
    """A per-minute traffic trace."""

    name: str
    """Label (file stem)."""
    per_minute: tuple[float, ...]
    """One value per minute, in ``unit``."""
    unit: TraceUnit
    """``requests`` or ``audio_seconds`` per minute."""

    def requests(self, audio_per_request_s: float) -> FloatArray:
        """Requests per minute (audio-seconds converted with the mean audio per request)."""
        values = np.asarray(self.per_minute, dtype=np.float64)
        return values if self.unit == "requests" else values / audio_per_request_s

    def audio_seconds(self, audio_per_request_s: float) -> FloatArray:
        """Audio-seconds of demand per minute."""
        values = np.asarray(self.per_minute, dtype=np.float64)
        return values if self.unit == "audio_seconds" else values * audio_per_request_s


def load_trace(path: Path) -> Trace:
    """Read a CSV with header ``minute,requests`` or ``minute,audio_seconds``, one row per minute in order."""
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        header = [h.strip() for h in next(reader)]
        if len(header) != 2 or header[0] != "minute" or header[1] not in ("requests", "audio_seconds"):
            raise ValueError(f"{path}: header must be minute,requests or minute,audio_seconds, got {header}")
        values: list[float] = []
        for row in reader:
            if not row:
                continue
            if int(row[0]) != len(values):
                raise ValueError(f"{path}: expected minute {len(values)}, got {row[0]}")
            value = float(row[1])
            if value < 0 or not math.isfinite(value):
                raise ValueError(f"{path}: minute {row[0]} has invalid value {row[1]}")
            values.append(value)
    if not values:
        raise ValueError(f"{path}: no minutes")
    unit: TraceUnit = "requests" if header[1] == "requests" else "audio_seconds"
    return Trace(path.stem, tuple(values), unit)


def write_trace(path: Path, trace: Trace) -> None:
    """Write a trace CSV (integers when the values are whole)."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["minute", trace.unit])
        for minute, value in enumerate(trace.per_minute):
            writer.writerow([minute, int(value) if float(value).is_integer() else value])


def security_outage_spike() -> Trace:
    """Four night hours on a shared platform when a home-security support line's alarms go off.

    Other tenants send a steady 10,000 requests/min. The security line sends 300/min at night; at minute 60
    an outage starts and its traffic climbs linearly to 3,600/min (12x) within 10 minutes, stays there for
    45 minutes, then falls back to 300/min over 20 minutes. The 10,000/min background is the calibration:
    the spare capacity a start time T needs is about the load's relative growth over T at the foot of the
    ramp, 5.5/s x T / 10,300 (about 1.4 % at 26 s, 18 % at 336 s).
    """
    background, night, peak = 10_000.0, 300.0, 3_600.0
    ramp_at, ramp_min, plateau_min, decay_min, total_min = 60, 10, 45, 20, 240
    values: list[float] = []
    for minute in range(total_min):
        x = minute - ramp_at
        if x < 0:
            line = night
        elif x < ramp_min:
            line = night + (peak - night) * x / ramp_min
        elif x < ramp_min + plateau_min:
            line = peak
        elif x < ramp_min + plateau_min + decay_min:
            line = peak - (peak - night) * (x - ramp_min - plateau_min) / decay_min
        else:
            line = night
        values.append(float(round(background + line)))
    return Trace("security_outage_spike", tuple(values), "requests")


def _lcg_uniforms(seed: int) -> Iterator[float]:
    """Uniforms in (0, 1) from a 32-bit LCG (Numerical Recipes constants).

    Self-contained on purpose: the committed traces must regenerate bit for bit whatever numpy's random
    streams do in later versions.
    """
    state = seed
    while True:
        state = (1664525 * state + 1013904223) % 2**32
        yield (state + 0.5) / 2**32


def _poisson(rate: float, uniforms: Iterator[float]) -> int:
    """Knuth's multiplication method; fine for the small per-minute rates used here."""
    limit, product, count = math.exp(-rate), next(uniforms), 0
    while product > limit:
        product *= next(uniforms)
        count += 1
    return count


def steady_day() -> Trace:
    """A business day of one tenant: Poisson arrivals with a smooth two-humped rate from 07:00 to 22:00.

    Expected about 1,200 requests (2 audio-hours at 6 s each, like the cost model's bursty day); the rate
    peaks near 4 per minute and many minutes are empty, so scale-to-zero wakes many times.
    """
    uniforms = _lcg_uniforms(seed=20_240_601)
    values: list[float] = []
    for minute in range(1440):
        hour = minute / 60.0
        if 7.0 <= hour < 22.0:
            phase = (hour - 7.0) / 15.0  # 0..1 over the open hours
            shape = math.sin(math.pi * phase) ** 2 * (1.0 + 0.5 * math.sin(4 * math.pi * phase))
            values.append(float(_poisson(2.667 * shape, uniforms)))
        else:
            values.append(0.0)
    return Trace("steady_day", tuple(values), "requests")


def load_per_step(requests_per_minute: Sequence[float], step_s: float, interpolation: Interpolation) -> FloatArray:
    """Load in requests per second at each step start.

    ``linear`` interpolates between minute centres (flat beyond the first and last centre); ``step`` holds
    each minute's rate for the whole minute, which makes hand-checked tests exact.
    """
    steps_per_minute = 60.0 / step_s
    if not math.isclose(steps_per_minute, round(steps_per_minute)):
        raise ValueError("step_s must divide 60 s")
    rpm = np.asarray(requests_per_minute, dtype=np.float64)
    times = np.arange(len(rpm) * round(steps_per_minute), dtype=np.float64) * step_s
    if interpolation == "step":
        per_min = rpm[(times // 60.0).astype(np.int64)]
    else:
        per_min = np.interp(times, np.arange(len(rpm)) * 60.0 + 30.0, rpm)
    result: FloatArray = per_min / 60.0
    return result


def _window(values: npt.NDArray[np.int64], size: int, reduce: Literal["min", "max"]) -> npt.NDArray[np.int64]:
    """Reduce over the trailing ``size`` steps, current included; before the trace the first value holds."""
    if size <= 1:
        return values
    padded = np.concatenate([np.full(size - 1, values[0]), values])
    view = sliding_window_view(padded, size)
    out: npt.NDArray[np.int64] = view.min(axis=1) if reduce == "min" else view.max(axis=1)
    return out


@dataclass(frozen=True)
class FleetParams:
    """Autoscaler and fleet settings."""

    capacity_rpm: float
    """Requests per minute one instance serves."""
    buffer: float
    """Spare capacity the autoscaler keeps, as a fraction of the current load."""
    start_time_s: float
    """Launch to taking calls (cold start, or restore from released)."""
    step_s: float = 1.0
    """Simulation step; start times are rounded up to whole steps."""
    scale_down_window_s: float = 300.0
    """The fleet shrinks only to the largest target of this trailing window."""
    min_instances: int = 0
    """Floor of the fleet."""


@dataclass(frozen=True)
class FleetResult:
    """Outcome of one replay."""

    params: FleetParams
    """Settings replayed."""
    demand: float
    """Requests that arrived."""
    turned_away: float
    """Requests turned away."""
    turned_away_per_minute: tuple[float, ...]
    """Requests turned away in each minute."""
    worst_minute: int | None
    """Minute with the most turned away; None when none were."""
    max_instances: int
    """Largest fleet wanted (starting instances included)."""
    instance_s: float
    """Instance-seconds of the fleet (starting instances included)."""

    @property
    def worst_minute_turned_away(self) -> float:
        """Requests turned away in the worst minute."""
        return max(self.turned_away_per_minute, default=0.0)


def simulate(load_rps: FloatArray, params: FleetParams) -> FleetResult:
    """Replay a per-step load (requests per second) on an autoscaled fleet."""
    cap_rps = params.capacity_rpm / 60.0
    # Subtracting a hair keeps an exact multiple of capacity from rounding up to one more instance.
    raw = np.ceil(load_rps * (1.0 + params.buffer) / cap_rps - 1e-9)
    target = np.maximum(raw.astype(np.int64), params.min_instances)
    wanted = _window(target, round(params.scale_down_window_s / params.step_s) + 1, "max")
    ready = _window(wanted, math.ceil(params.start_time_s / params.step_s - 1e-9) + 1, "min")
    away_per_step = np.maximum(0.0, load_rps - ready * cap_rps) * params.step_s
    steps_per_minute = round(60.0 / params.step_s)
    per_minute = away_per_step.reshape(-1, steps_per_minute).sum(axis=1)
    total = float(per_minute.sum())
    worst = int(np.argmax(per_minute)) if total > NONE_TURNED_AWAY else None
    return FleetResult(params, float(load_rps.sum() * params.step_s), total,
                       tuple(float(v) for v in per_minute), worst, int(wanted.max(initial=0)),
                       float(wanted.sum() * params.step_s))


def buffer_needed(load_rps: FloatArray, params: FleetParams, max_buffer: float = 1.0,
                  tolerance: float = 0.001) -> float | None:
    """Smallest buffer (to ``tolerance``, rounded up) that turns none away; None if even ``max_buffer`` fails.

    Bisection is sound because a larger buffer wants at least as many instances at every step, and so has
    at least as many ready.
    """
    def ok(buffer: float) -> bool:
        probe = FleetParams(params.capacity_rpm, buffer, params.start_time_s, params.step_s,
                            params.scale_down_window_s, params.min_instances)
        return simulate(load_rps, probe).turned_away <= NONE_TURNED_AWAY

    if ok(0.0):
        return 0.0
    if not ok(max_buffer):
        return None
    low, high = 0.0, max_buffer
    while high - low > tolerance:
        mid = (low + high) / 2.0
        if ok(mid):
            high = mid
        else:
            low = mid
    return high


@dataclass(frozen=True)
class SweepRow:
    """One start time of a sweep."""

    start_time_s: float
    """Launch to taking calls."""
    result: FleetResult
    """Replay at the sweep's buffer."""
    buffer_needed: float | None
    """Spare capacity needed to turn none away; None above the search range."""


def sweep(load_rps: FloatArray, base: FleetParams, start_times_s: Sequence[float]) -> list[SweepRow]:
    """Replay at ``base.buffer`` and search the needed buffer for each start time."""
    rows = []
    for start in sorted(start_times_s):
        params = FleetParams(base.capacity_rpm, base.buffer, start, base.step_s, base.scale_down_window_s,
                             base.min_instances)
        rows.append(SweepRow(start, simulate(load_rps, params), buffer_needed(load_rps, params)))
        LOG.info("start %.1f s: buffer needed %s", start, rows[-1].buffer_needed)
    return rows


def write_shipped_traces(folder: Path) -> None:
    """Regenerate the committed traces: ``python -c 'from bench.autoscale import *; write_shipped_traces(...)'``."""
    folder.mkdir(parents=True, exist_ok=True)
    for trace in (security_outage_spike(), steady_day()):
        write_trace(folder / f"{trace.name}.csv", trace)
