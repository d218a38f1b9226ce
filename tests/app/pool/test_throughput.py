"""The measured speed: seconds per token and the real-time capacity, from exponential averages."""

from __future__ import annotations

import pytest

from app.pool import Throughput


def test_the_realtime_capacity_weighs_each_inference_by_its_time() -> None:
    """A stream that spends 2 s making 5 audio-s and 0.2 s making 0.2 (a short chunk, mostly edge audio the joins
    trim) makes about 2.4 audio-s per second of its time; the average of the two ratios would read about 1.8 (where
    the last inference was short)."""
    throughput = Throughput(2)
    for _ in range(4):
        throughput.observe(2.0, 60, 5.0)
        throughput.observe(0.2, 12, 0.2)
    capacity = throughput.capacity
    assert capacity is not None and 2 * 2.1 < capacity < 2 * 2.5, capacity


def test_the_capacity_is_unknown_until_four_inferences_made_audio() -> None:
    throughput = Throughput(1)
    for n in range(3):
        assert throughput.observe(1.0, 10, 2.0)
        assert throughput.capacity is None, n
    assert not throughput.observe(1.0, 10, 0.0)  # no audio: the capacity does not change
    assert throughput.capacity is None
    assert throughput.observe(1.0, 10, 2.0)
    assert throughput.capacity == pytest.approx(2.0)


def test_seconds_per_token_is_an_exponential_average() -> None:
    throughput = Throughput(1)
    assert not throughput.observe(0.0, 10, 1.0)  # an inference that took no time is not counted
    throughput.observe(1.0, 100, 0.0)
    assert throughput.seconds_per_token == pytest.approx(0.01)  # the first value, as it is
    throughput.observe(2.0, 100, 0.0)
    assert throughput.seconds_per_token == pytest.approx(0.8 * 0.01 + 0.2 * 0.02)
