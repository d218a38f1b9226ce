"""Overload and shape churn, short versions of ``python -m bench overload`` and ``python -m bench soak``
(their recorded long runs are in bench/results/)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import faults, overload, soak
from tests.conftest import SPEECH_BACKEND, LiveServer, live_server


@pytest.fixture(scope="module")
def small_pool(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One stream, at most two requests admitted (TTS_MAX_REQUESTS), so 8 clients are 4 × its capacity."""
    with live_server(cache_dir, tmp_path_factory.mktemp("logs"), streams="1", max_requests="2",
                     quiet_window_s="0", backend=SPEECH_BACKEND) as s:
        yield s


def test_four_times_capacity_loses_nothing_and_refuses_quickly(small_pool: LiveServer) -> None:
    result = overload.run(small_pool.url, duration_s=10, factor=4)
    summary = result.summary()
    assert summary["clients"] == 8 and summary["capacity"] == 2
    assert summary["admitted"] >= 3 and summary["refused"] >= 5
    assert summary["server_errors"] == 0 and summary["other_status"] == [] and summary["transport_errors"] == 0
    assert summary["short_audio"] == 0  # every admitted request brought exactly its solo run's bytes
    assert summary["refused_without_retry_after"] == 0
    assert summary["refusal_p99_s"] < 2.0  # refusals never wait for a stream
    # Admitted requests wait for at most the one ahead of them: bounded by a few solo durations.
    assert summary["admitted_total_max_s"] < 60
    assert summary["healthy_after"] and summary["same_audio_after"]


def test_memory_levels_off_under_shape_churn_and_a_release_brings_it_back(cache_dir: Path, tmp_path: Path) -> None:
    # 30 new input lengths after the warm-up, memory read every 5: the second half's growth is that of the last 15
    # lengths, at OpenVINO's default shape cache (-1) about 10 MB each, well over the bound.
    options = soak.SoakOptions(out=tmp_path, cache_dir=cache_dir, requests=30, lengths=30, speed=4.0,
                               sample_every=5, shape_caches=(0,))
    result = soak.soak_one(options, 0, progress=False)
    summary = result.summary()
    assert summary["errors"] == 0, result.errors[:3]
    assert summary["requests"] == 30
    assert summary["second_half_growth_pct"] < 5, result.series
    assert summary["released_mb"] < 0.5 * summary["peak_mb"]
    assert summary["restored_ok"]
    # Every sample also went to disk as it was taken: a soak cut short keeps what it measured.
    partial = json.loads(soak.partial_path(options, 0).read_text())
    assert partial["series"] == result.series and partial["planned_requests"] == 30


def test_a_soak_with_faults_loses_no_request_and_answers_the_hostile_ones_with_4xx(cache_dir: Path,
                                                                                  tmp_path: Path) -> None:
    """`python -m bench soak` with its faults, short: helper processes killed in turn and hostile bursts (a flood past
    admission among them) while two clients ask, every other request streamed and every eighth Japanese."""
    # Kills at least 7 s apart (inference, reader, both): a request its kill cost is asked once of a fresh process
    # (`app.retry`), whose restore and first chunk take a few seconds on the slowest class under the suite's load; a
    # second kill inside that is the "ended twice" 503 the server documents, not a loss this test is about.
    options = soak.SoakOptions(out=tmp_path, cache_dir=cache_dir, requests=40, lengths=40, speed=4.0, sample_every=10,
                               shape_caches=(0,), backend="auto", duration_s=24, kill_every_s=7, hostile_every_s=9,
                               max_requests=4)
    result = soak.soak_one(options, 0, progress=False)
    summary = result.summary()
    assert summary["lost"] == 0, result.errors[:5]
    # One listener at a time on the slowest class (the others wait for a place): a handful served in 24 s, each whole.
    assert summary["served"] >= 5 and summary["restored_ok"]
    assert not result.fault_errors
    assert [kill["killed"] for kill in result.kills[:2]] == [[faults.INFERENCE], [faults.READER]], result.kills
    assert summary["hostile"] >= 2 * (faults.FLOOD_PAST + 4)
    assert summary["hostile_unfair"] == 0, [a for a in result.hostile if not a.fair]
    assert any(a.status == 429 for a in result.hostile)  # the flood went past admission
