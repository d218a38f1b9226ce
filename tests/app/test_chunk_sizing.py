"""Later chunks sized from the playback clock: long with slack, short near the deadline, bounded, doubling first.

Fast: the pool's speed is measured from inferences that sleep, the engine runs on the fake runtime of
`tests/app/http/fake.py` with an inference time proportional to its tokens.
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import numpy.typing as npt
import pytest

from app.engine import Engine
from app.pool import MIN_OBSERVED, Playback, StreamPool
from app.runtime.backends.base import Inference
from app.text import chunker
from app.text.vocab import Vocab
from app.voices import VoiceBank
from tests.app.http.fake import SAMPLES_PER_TOKEN, FakeFrontend, FakeRuntime

PER_TOKEN_S = 0.05
FLOOR, CEILING, FALLBACK = 30, 120, 60


def _measured(seconds_per_token: float = PER_TOKEN_S) -> StreamPool:
    """A pool that has priced `MIN_OBSERVED` inferences of one token each at about ``seconds_per_token``."""
    pool = StreamPool(1, 4, margin_s=1.0)

    async def measure() -> None:
        for _ in range(MIN_OBSERVED):
            await pool.run(lambda slot: time.sleep(seconds_per_token), tokens=1)

    asyncio.run(measure())
    return pool


def _clock(pool: StreamPool, *, started_ago: float, sent_s: float) -> Playback:
    clock = Playback(order=0, pool=pool)
    clock.sent(sent_s)
    assert clock.started is not None
    clock.started -= started_ago
    return clock


def _bound(clock: Playback) -> int:
    return clock.chunk_bound(FALLBACK, floor=FLOOR, ceiling=CEILING)


def test_the_bound_grows_with_slack() -> None:
    pool = _measured()
    per_token = pool.measured_seconds_per_token
    assert per_token is not None and PER_TOKEN_S <= per_token < 2 * PER_TOKEN_S  # sleeps run long, never short
    # Slack (sent - elapsed - margin) worth 50 and then 100 tokens at the measured speed.
    bounds = [_bound(_clock(pool, started_ago=0.0, sent_s=1.0 + tokens * per_token)) for tokens in (50, 100)]
    assert 48 <= bounds[0] <= 50 and 98 <= bounds[1] <= 100, bounds
    assert bounds[0] != FALLBACK and bounds[1] != FALLBACK


def test_the_bound_shrinks_to_the_floor_near_the_deadline() -> None:
    pool = _measured()
    assert _bound(_clock(pool, started_ago=0.0, sent_s=1.2)) == FLOOR  # 0.2 s of slack: 4 tokens fit, floor 30
    assert _bound(_clock(pool, started_ago=9.0, sent_s=8.0)) == FLOOR  # already late: the listener waits


def test_the_bound_never_exceeds_the_largest_chunk() -> None:
    pool = _measured()
    assert _bound(_clock(pool, started_ago=0.0, sent_s=600.0)) == CEILING


def test_the_doubling_rule_holds_until_the_pool_has_measured_its_speed() -> None:
    pool = StreamPool(1, 4)
    assert pool.measured_seconds_per_token is None
    assert _bound(_clock(pool, started_ago=0.0, sent_s=600.0)) == FALLBACK

    async def price(count: int) -> None:
        for _ in range(count):
            await pool.run(lambda slot: time.sleep(0.001), tokens=10)

    asyncio.run(price(MIN_OBSERVED - 1))
    assert _bound(_clock(pool, started_ago=0.0, sent_s=600.0)) == FALLBACK
    asyncio.run(price(1))
    assert _bound(_clock(pool, started_ago=0.0, sent_s=600.0)) == CEILING
    # Before its first audio a request has no clock to size by.
    assert Playback(order=1, pool=pool).chunk_bound(FALLBACK, floor=FLOOR, ceiling=CEILING) == FALLBACK


def test_a_pool_short_of_capacity_keeps_the_doubling_rule() -> None:
    """Below `slack_headroom` x the requests playing, the slack rule would only shorten chunks: doubling holds."""
    pool = StreamPool(1, 4, margin_s=1.0, slack_headroom=1.5)
    assert pool.keeps_up()  # nothing measured yet: the slack rule's own conditions decide

    async def measure() -> None:  # 0.2 audio-s per inference of at least 20 ms: at most 10 audio-s per second
        for _ in range(MIN_OBSERVED):
            await pool.run(lambda slot: time.sleep(0.02), tokens=1, audio_s=lambda _: 0.2)

    asyncio.run(measure())
    capacity = pool.realtime_capacity
    assert capacity is not None and 1.5 <= capacity <= 10.0
    per_token = pool.measured_seconds_per_token
    assert per_token is not None
    one = _clock(pool, started_ago=0.0, sent_s=1.0 + 50 * per_token)  # one listener, 50 tokens of slack
    assert pool.playing == 1 and pool.keeps_up()
    assert _bound(one) not in (FALLBACK, FLOOR)
    others = [_clock(pool, started_ago=0.0, sent_s=1.0) for _ in range(7)]  # 8 listeners need 12 audio-s/s
    assert pool.playing == 8 and not pool.keeps_up()
    assert _bound(one) == FALLBACK
    assert pool.snapshot()["keeps_up"] is False
    crowded = StreamPool(1, 32, margin_s=1.0, slack_headroom=1.5)
    crowded._audio_mean, crowded._seconds_mean, crowded._observed = 4.0, 1.0, MIN_OBSERVED  # 4 audio-s per second
    with crowded.admit(), crowded.admit():
        assert crowded.keeps_up()  # 2 requests need 3 audio-s per second at 1.5 x
        with crowded.admit():
            assert not crowded.keeps_up()  # a third waiting for its first chunk counts too: 4.5 > 4
    off = StreamPool(1, 4, slack_headroom=0.0)
    off._playing = 1000
    assert off.keeps_up()  # 0: sized from the slack at any load
    assert others


class TimedRuntime(FakeRuntime):
    """The fake runtime, taking ``per_token_s`` per token, recording each inference's token count."""

    def __init__(self, per_token_s: float, slots: int = 1) -> None:
        super().__init__(slots)
        self.per_token_s = per_token_s
        self.tokens: list[int] = []
        self.past = 0  # inferences of more than ``past_bound`` tokens running now, and the most at once
        self.past_bound = 0
        self.most_past = 0

    def infer_timed(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
                    speed: float) -> Inference:
        count = tokens.shape[1] - 2
        self.tokens.append(count)
        past = 0 < self.past_bound < count
        self.past += past  # (the GIL makes += on one attribute from two threads safe enough for a count of 2)
        self.most_past = max(self.most_past, self.past)
        try:
            time.sleep(self.per_token_s * count)
        finally:
            self.past -= past
        return super().infer_timed(slot, tokens, style, speed)


TEXT = " ".join(f"here is sentence {'abcdefhijk'[n % 10] * (1 + n // 10)} of many." for n in range(30))


def _engine(per_token_s: float, *, slack: bool, slots: int = 1) -> tuple[Engine, TimedRuntime]:
    runtime = TimedRuntime(per_token_s, slots)
    runtime.load_primary()
    engine = Engine(runtime, StreamPool(slots, 4, margin_s=1.0), FakeFrontend(),  # type: ignore[arg-type]
                    VoiceBank.load(None), Vocab.embedded(), default_lang="en-us", first_chunk_tokens=FLOOR,
                    max_chunk_tokens=CEILING, release_frontend=False, slack_chunks=slack, timestamps=True)
    return engine, runtime


def _speak(engine: Engine, text: str) -> tuple[list[str], float]:
    """The words heard, in order (their times checked: in order, inside the audio), and the seconds of audio."""
    plan = engine.plan(text, VoiceBank.load(None).names[0], 1.0)

    async def collect() -> tuple[list[str], float]:
        heard: list[str] = []
        starts: list[float] = []
        samples = 0
        async for spoken in engine.stream_timed(plan):
            assert spoken.words is not None
            heard.extend(w.word for w in spoken.words)
            starts.extend(w.start_time for w in spoken.words)
            samples += len(spoken.audio)
            assert all(w.end_time <= samples / 24_000 + 1e-6 for w in spoken.words)
        assert starts == sorted(starts)
        return heard, samples / 24_000

    return asyncio.run(collect())


def test_a_request_with_slack_gets_long_chunks_and_one_near_its_deadline_short_ones() -> None:
    # 25 ms of audio per token made in 1 ms: the listener's buffer grows fast once it has passed the margin.
    engine, runtime = _engine(0.001, slack=True)
    _speak(engine, "warm up the pool with a few short sentences. " * 3)  # prices MIN_OBSERVED inferences
    runtime.tokens.clear()
    heard, _ = _speak(engine, TEXT)
    sizes = runtime.tokens
    planned = [len(engine.vocab.ids(c)) for c in engine.plan(TEXT, "af_heart", 1.0).chunks]
    assert sizes[0] <= FLOOR
    # Chunk 2 is due while the first chunk's 0.75 s of audio is still inside the 1 s margin: the floor,
    # where doubling gives it twice the first.
    assert sizes[1] <= FLOOR < planned[1]
    assert all(size <= CEILING for size in sizes)
    assert max(sizes) > 3 * FLOOR  # seconds of audio buffered: as many whole sentences as the bound holds
    assert heard == TEXT.split()  # every word, once, in order, with its time
    assert sum(sizes) >= sum(planned) - len(planned) - len(sizes)  # nothing dropped (a space at most per cut)


def test_without_slack_sizing_the_request_streams_its_planned_chunks() -> None:
    engine, runtime = _engine(0.001, slack=False)
    _speak(engine, "warm up the pool with a few short sentences. " * 3)
    runtime.tokens.clear()
    _speak(engine, TEXT)
    planned = [len(engine.vocab.ids(c)) for c in engine.plan(TEXT, "af_heart", 1.0).chunks]
    assert runtime.tokens == planned


def test_the_first_request_on_a_fresh_pool_is_cut_by_the_doubling_rule() -> None:
    engine, runtime = _engine(0.001, slack=True)
    text = " ".join(TEXT.split(" ")[:24])
    plan = engine.plan(text, "af_heart", 1.0)
    assert len(plan.chunks) <= MIN_OBSERVED  # every later chunk is cut before the pool has priced enough
    _speak(engine, text)
    assert runtime.tokens == [len(engine.vocab.ids(c)) for c in plan.chunks]
    assert plan.chunks == tuple(chunker.chunk(plan.phonemes, FLOOR, CEILING))


def test_audio_of_sized_chunks_is_the_whole_text() -> None:
    engine, _ = _engine(0.001, slack=True)
    _speak(engine, "warm up the pool with a few short sentences. " * 3)
    _, seconds = _speak(engine, TEXT)
    tokens = len(engine.vocab.ids(TEXT))
    # The fake's tone is all sound (nothing to trim but a few samples): about one 25 ms unit per token.
    assert abs(seconds - tokens * SAMPLES_PER_TOKEN / 24_000) < 0.05 * seconds


def test_a_request_alone_gets_the_lone_first_chunk_and_one_beside_another_does_not() -> None:
    """``lone_first_chunk_tokens``: the first chunk of a request that finds the pool idle is cut within it; one that
    finds an inference running is not, even while the pool keeps up (that is ``idle_first_chunk_tokens``' case)."""
    engine, runtime = _engine(0.001, slack=False, slots=2)
    engine.first_chunk_tokens, engine.lone_first_chunk_tokens = 2 * FLOOR, 12
    engine.pool.keeps_up = lambda headroom=None: True  # type: ignore[method-assign]
    text = " ".join(TEXT.split(" ")[:24])
    heard, _ = _speak(engine, text)
    assert runtime.tokens[0] <= 12 and heard == text.split()

    async def beside_a_running_inference() -> tuple[int, list[str]]:
        gate = threading.Event()
        holder = asyncio.create_task(engine.pool.run(lambda slot: gate.wait(10)))
        while engine.pool.busy == 0:
            await asyncio.sleep(0.001)
        runtime.tokens.clear()
        heard: list[str] = []
        async for spoken in engine.stream_timed(engine.plan(text, "af_heart", 1.0)):
            assert spoken.words is not None
            heard.extend(w.word for w in spoken.words)
        gate.set()
        await holder
        return runtime.tokens[0], heard

    first, heard = asyncio.run(beside_a_running_inference())
    assert 12 < first <= 2 * FLOOR and heard == text.split()


@pytest.mark.parametrize("keeps_up", [False, True])
def test_a_request_that_finds_the_pool_idle_or_keeping_up_gets_the_smaller_first_chunk(keeps_up: bool) -> None:
    """``idle_first_chunk_tokens``: alone, the first chunk is cut within it; beside a running inference, within it too
    while the pool keeps up with its listeners (capacity to spare for the extra inference), else within
    ``first_chunk_tokens``; nothing is lost either way."""
    engine, runtime = _engine(0.001, slack=False)
    engine.idle_first_chunk_tokens = 15
    engine.pool.keeps_up = lambda headroom=None: keeps_up  # type: ignore[method-assign]
    text = " ".join(TEXT.split(" ")[:24])
    heard, _ = _speak(engine, text)
    assert runtime.tokens[0] <= 15 and heard == text.split()
    alone = list(runtime.tokens)

    async def beside_a_running_inference() -> list[int]:
        gate = asyncio.Event()
        release = asyncio.get_running_loop()

        def hold(slot: int) -> None:
            while not gate.is_set():
                time.sleep(0.001)

        holder = asyncio.create_task(engine.pool.run(hold))
        while engine.pool.busy == 0:
            await asyncio.sleep(0.001)
        runtime.tokens.clear()
        spoken = engine.stream_timed(engine.plan(text, "af_heart", 1.0))
        first = asyncio.create_task(spoken.__anext__())
        await asyncio.sleep(0.01)  # the first chunk was cut and waits for the held slot
        release.call_soon(gate.set)
        await first
        async for _ in spoken:
            pass
        await holder
        return list(runtime.tokens)

    busy = asyncio.run(beside_a_running_inference())
    if keeps_up:
        assert busy[0] <= 15 and busy == alone
        return
    assert 15 < busy[0] <= FLOOR and busy != alone
    assert sum(busy) == sum(alone) or abs(sum(busy) - sum(alone)) <= len(busy) + len(alone)  # the same text


def test_a_pool_that_does_not_keep_up_bounds_later_chunks_by_the_busy_bound() -> None:
    """``TTS_BUSY_MAX_CHUNK_TOKENS``: while the pool does not keep up with its listeners (by ``TTS_SLACK_HEADROOM``)
    but has the capacity for them all, later chunks stay within the busy bound (a running chunk holds its stream for
    less time); with capacity to spare, and past capacity (every listener short whatever the chunks: the long ones
    make the most audio), they grow past it."""
    busy_bound = 2 * FLOOR
    sizes: dict[str, list[int]] = {}
    # (keeps up with headroom, has the capacity for every listener)
    for name, spare, capacity in (("spare", True, True), ("near", False, True), ("past", False, False)):
        engine, runtime = _engine(0.001, slack=True)
        engine.busy_max_chunk_tokens = busy_bound
        _speak(engine, "warm up the pool with a few short sentences. " * 3)
        engine.pool.keeps_up = (  # type: ignore[method-assign]
            lambda headroom=None, spare=spare, capacity=capacity: spare if headroom is None else capacity)
        runtime.tokens.clear()
        heard, _ = _speak(engine, TEXT)
        assert heard == TEXT.split()  # every word, once, in order
        sizes[name] = list(runtime.tokens)
    assert max(sizes["spare"]) > busy_bound
    assert max(sizes["near"][1:]) <= busy_bound and len(sizes["near"]) > len(sizes["spare"])
    assert max(sizes["past"]) > busy_bound and len(sizes["past"]) < len(sizes["near"])


def _near_capacity(engine: Engine) -> None:
    """Make ``engine``'s pool short of headroom but not past its capacity: the busy bound is in force."""
    engine.pool.keeps_up = lambda headroom=None: headroom is not None  # type: ignore[method-assign]


async def _together(engine: Engine, count: int) -> list[list[str]]:
    """The words each of ``count`` concurrent requests for `TEXT` heard."""
    async def one() -> list[str]:
        heard: list[str] = []
        async for spoken in engine.stream_timed(engine.plan(TEXT, "af_heart", 1.0)):
            assert spoken.words is not None
            heard.extend(w.word for w in spoken.words)
        return heard

    return list(await asyncio.gather(*(one() for _ in range(count))))


def test_the_busy_bound_can_be_kept_on_some_streams_only() -> None:
    """``TTS_BUSY_SHORT_STREAMS``: while the busy bound is in force, streams less this many chunks past it may wait or
    run at once (the others keep to it, so a first chunk finds a stream that frees soon); 0 bounds every later chunk.
    Three requests on two streams: with 1, one long chunk at a time runs beside short ones, fewer inferences."""
    busy_bound = FLOOR + 10
    runs: dict[int, tuple[list[int], int]] = {}
    for short in (0, 1):
        engine, runtime = _engine(0.0005, slack=True, slots=2)
        engine.busy_max_chunk_tokens, engine.busy_short_streams = busy_bound, short
        _speak(engine, "warm up the pool with a few short sentences. " * 3)
        _near_capacity(engine)
        runtime.tokens.clear()
        runtime.past_bound = busy_bound
        assert asyncio.run(_together(engine, 3)) == [TEXT.split()] * 3  # every word, once, in order, for each
        assert engine._long == 0
        runs[short] = (list(runtime.tokens), runtime.most_past)
    bounded, mixed = runs[0][0], runs[1][0]
    assert max(bounded) <= busy_bound and runs[0][1] == 0
    assert max(mixed) > busy_bound and runs[1][1] == 1  # one stream's worth past the bound, never two
    assert len(mixed) < len(bounded)


def test_a_chunk_past_the_busy_bound_stops_counting_when_its_request_is_cancelled() -> None:
    """A client that hangs up while its long chunk runs gives its place back (`Engine._long`), so the bound on the
    other streams does not stick."""
    engine, runtime = _engine(0.002, slack=True, slots=2)
    engine.busy_max_chunk_tokens, engine.busy_short_streams = FLOOR + 10, 1
    _speak(engine, "warm up the pool with a few short sentences. " * 3)
    _near_capacity(engine)

    async def hang_up_during_a_long_chunk() -> int:
        async def listen() -> None:
            async for _ in engine.stream_timed(engine.plan(TEXT, "af_heart", 1.0)):
                pass

        task = asyncio.create_task(listen())
        while engine._long == 0:
            assert not task.done()
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return engine._long

    assert asyncio.run(hang_up_during_a_long_chunk()) == 0


def test_keeps_up_takes_its_headroom_from_the_caller_or_the_setting() -> None:
    """`StreamPool.keeps_up`: 1.5 x by default here, another headroom (1.0 x: capacity for every listener) where
    asked."""
    pool = StreamPool(2, 8, slack_headroom=1.5)
    assert pool.keeps_up() and pool.keeps_up(1.0)  # not measured yet
    for _ in range(MIN_OBSERVED):
        pool._observe(1.0, 10, 2.5)  # 2.5 audio-s per inference-second a slot: 5 for the pool
    with pool.admit(), pool.admit(), pool.admit(), pool.admit():
        assert not pool.keeps_up() and pool.keeps_up(1.0)  # 4 listeners: 5 < 6, 5 >= 4
        with pool.admit(), pool.admit():
            assert not pool.keeps_up(1.0) and pool.keeps_up(0.8)  # 6 listeners: 5 < 6, 5 >= 4.8
    assert pool.keeps_up(0)


def test_the_second_chunk_gets_its_own_bound_where_the_slack_does_not_size_it() -> None:
    """``TTS_SECOND_CHUNK_TOKENS``: a first chunk within 20 tokens, then (the pool not keeping up, so no slack sizing)
    a second within 60 and later ones doubling from it: as many inferences as a 30-token first chunk doubled, where
    20 doubled from 20 makes more; every word heard once, in order."""
    text = " ".join(f"here is a long sentence {'abcdefhijk'[n % 10] * (1 + n // 10)} that goes on and on with many "
                    f"words in it." for n in range(12))
    counts: dict[str, int] = {}
    for name, first, second in (("20+60", 20, 60), ("30 doubled", 30, 0), ("20 doubled", 20, 0)):
        engine, runtime = _engine(0.001, slack=True)
        engine.first_chunk_tokens, engine.second_chunk_tokens = first, second
        _speak(engine, "warm up the pool with a few short sentences. " * 3)
        _near_capacity(engine)  # short of headroom, not past capacity
        runtime.tokens.clear()
        heard, _ = _speak(engine, text)
        assert heard == text.split()
        sizes = list(runtime.tokens)
        assert sizes[0] <= first
        if name == "20+60":
            assert 2 * first < sizes[1] <= second
            assert sizes == [len(engine.vocab.ids(c)) for c in engine.plan(text, "af_heart", 1.0).chunks]
        counts[name] = len(sizes)
    assert counts["20+60"] <= counts["30 doubled"] < counts["20 doubled"]


def test_the_express_lane_is_offered_where_onnx_runtime_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    """`app.engine` wires `StreamPool.express_ok`: ONNX Runtime runs the lane's call beside a stream's; OpenVINO's
    executor would only queue it for a stream."""
    engine, runtime = _engine(0.001, slack=True)
    pool = engine.pool
    assert not pool.express_ok()  # the fake runtime is not ONNX Runtime
    served = {"name": "onnxruntime"}
    monkeypatch.setattr(type(runtime), "active_name", property(lambda self: served["name"]))
    assert pool.express_ok()
    for _ in range(MIN_OBSERVED):
        pool._observe(1.0, 10, 2.0)  # one slot making 2 audio-s per second
    with pool.admit(), pool.admit(), pool.admit():
        assert pool.express_ok()  # past capacity too: the setting is the deployment's choice
    served["name"] = "openvino"
    assert not pool.express_ok()
