"""The pace: listeners and the chunk plan's rate from the served form's tuning figures, per class on record."""

from __future__ import annotations

import json

import pytest

from app.sizing import PoolShape
from app.text import chunker
from app.tune import speed
from app.tune.manifest import DIRECTORY, SHIPPED


def _pace(name: str, shape: PoolShape | None = None, *, wide: bool = True) -> speed.Pace:
    shape = shape or PoolShape(2, 1)
    table = json.loads((SHIPPED / DIRECTORY / name).read_text())["table"]
    found = speed.speed_for(table, "onnxruntime", "f32", "fused", shape, wide=wide, source=name)
    assert found is not None
    return speed.pace(found, shape.streams)


def test_each_class_on_record_admits_the_listeners_its_speed_plays() -> None:
    """A stream of the AVX2 EPYC makes about 1.2 audio-s per second busy, too slow to outgrow a chunk's padding with
    a listener of its own: one listener, on both cores (the wide session). Zen 4's streams play one listener each;
    the AMX Xeon's three listeners share two streams."""
    zen3 = _pace("amd-avx2-2cpu.json")
    assert (zen3.listeners, zen3.wide) == (1, True) and zen3.rate == pytest.approx(zen3.speed.wide)
    assert zen3.speed.stream < chunker.min_rate() <= zen3.speed.wide  # type: ignore[operator]
    assert _pace("amd-avx2-2cpu.json", wide=False).listeners == 1  # without a wide session too (its rate is lower)
    zen4 = _pace("amd-avx512-bf16-2cpu.json")
    assert (zen4.listeners, zen4.wide) == (2, False) and zen4.rate == pytest.approx(zen4.speed.stream)
    xeon = _pace("intel-amx-2cpu.json")
    assert xeon.listeners == 3 and xeon.rate == pytest.approx(2 * xeon.speed.stream / 3)
    assert all(p.rate >= chunker.min_rate() for p in (zen3, zen4, xeon))


def test_a_cpu_of_no_class_paces_as_the_slowest_on_record() -> None:
    slowest = speed.slowest(PoolShape(2, 1), wide=True)
    assert "amd-avx2-2cpu.json" in slowest.source
    assert slowest == speed.Speed(_pace("amd-avx2-2cpu.json").speed.stream, slowest.wide, slowest.source)
    assert speed.pace(slowest, 2).listeners == 1
    # Eight two-thread streams (the study's 32-vCPU shape): a stream is the 2-vCPU class's wide figure.
    study = speed.slowest(PoolShape(8, 2), wide=False)
    assert study.stream == pytest.approx(_pace("amd-avx2-2cpu.json").speed.wide) and study.wide is None
    assert speed.pace(study, 8).listeners == 8


@pytest.mark.parametrize("rate", [2.2, 2.6, 3.5])
def test_a_paced_plan_never_lets_its_listener_run_dry_at_its_rate(rate: float) -> None:
    """The plan's own model: a chunk of t tokens takes (t + padding) / rate to make, begun when the one before it has
    been sent; the listener must still hold the margin then. And on a fast enough stream the doubling rule stands."""
    text = " ".join(["ðɪs ɪz ə sˈɛntəns ɒv sˈʌm lˈɛŋθ, wɪθ ə klˈɔz."] * 40)
    chunks = chunker.chunk(text, rate=rate)
    assert "".join(chunks).replace(" ", "") == text.replace(" ", "")
    ahead = float(len(chunks[0]))
    for piece in chunks[1:]:
        made_in = (len(piece) + chunker.PAD_TOKENS) / rate
        assert made_in <= ahead - chunker.MARGIN_TOKENS + 1e-9 or len(piece) <= chunker.FIRST_CHUNK_TOKENS // 2 + 9
        ahead += len(piece) - made_in
    assert chunker.chunk(text, rate=50.0) == chunker.chunk(text)
