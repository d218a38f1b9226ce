"""Chunks depend on the text alone: a request streams the chunks `app.text.chunker` cuts from it, alone or beside
others, on a fresh pool or a measured one, and every word is heard once, in order.

Fast: the engine runs on the fake runtime of `tests/app/http/fake.py`, with an inference time proportional to its
tokens (the real model's determinism is tests/app/test_determinism.py's).
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import numpy.typing as npt

from app.engine import Engine
from app.pool import DEADLINE_MARGIN_S, FIRST_CHUNK_CREDIT_S, REALTIME_MAX_HOLD_S, StreamPool
from app.runtime.backends.base import Inference
from app.text import chunker, languages
from app.text.vocab import Vocab
from app.voices import VoiceBank
from tests.app.http.fake import SAMPLES_PER_TOKEN, FakeFrontend, FakeRuntime

TEXT = " ".join(f"here is sentence {'abcdefhijk'[n % 10] * (1 + n // 10)}, of many. " for n in range(30))
WARM = "warm up the pool with a few short sentences. " * 3


class TimedRuntime(FakeRuntime):
    """The fake runtime, taking ``per_token_s`` per token, recording each inference's token count."""

    def __init__(self, per_token_s: float, slots: int = 1) -> None:
        super().__init__(slots)
        self.per_token_s = per_token_s
        self.tokens: list[int] = []

    def infer_timed(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
                    speed: float) -> Inference:
        count = tokens.shape[1] - 2
        self.tokens.append(count)
        time.sleep(self.per_token_s * count)
        return super().infer_timed(slot, tokens, style, speed)


def _engine(per_token_s: float = 0.0005, *, slots: int = 1) -> tuple[Engine, TimedRuntime]:
    """The engine on the server's own pool constants."""
    runtime = TimedRuntime(per_token_s, slots)
    runtime.load()
    pool = StreamPool(slots, max_requests=slots + 16, margin_s=DEADLINE_MARGIN_S, first_credit_s=FIRST_CHUNK_CREDIT_S,
                      max_hold_s=REALTIME_MAX_HOLD_S)
    engine = Engine(runtime, pool, FakeFrontend(), VoiceBank.load(None), Vocab.embedded(),  # type: ignore[arg-type]
                    default_lang="en-us", timestamps=True)
    return engine, runtime


async def _listen(engine: Engine, text: str, lang: str | None = None) -> tuple[list[str], bytes]:
    """The words heard, in order (their times checked: in order, inside the audio), and the audio's bytes."""
    heard: list[str] = []
    starts: list[float] = []
    audio: list[bytes] = []
    samples = 0
    async for spoken in engine.stream_timed(engine.plan(text, "af_heart", 1.0, lang=lang)):
        assert spoken.words is not None
        heard.extend(w.word for w in spoken.words)
        starts.extend(w.start_time for w in spoken.words)
        samples += len(spoken.audio)
        audio.append(spoken.audio.tobytes())
        assert all(w.end_time <= samples / 24_000 + 1e-6 for w in spoken.words)
    assert starts == sorted(starts)
    return heard, b"".join(audio)


def _planned(engine: Engine, text: str) -> list[int]:
    return [len(engine.vocab.ids(c)) for c in engine.plan(text, "af_heart", 1.0).chunks]


def test_the_plan_is_the_chunkers_cut_with_its_constants() -> None:
    engine, _ = _engine()
    plan = engine.plan(TEXT, "af_heart", 1.0)
    assert plan.chunks == tuple(chunker.chunk(plan.phonemes))
    sizes = _planned(engine, TEXT)
    # A first sentence whose rest would be tiny is taken whole (`chunker.MIN_REST`).
    assert sizes[0] <= chunker.FIRST_CHUNK_TOKENS + chunker.MIN_REST and sizes[1] <= chunker.SECOND_CHUNK_TOKENS
    assert max(sizes) <= chunker.MAX_CHUNK_TOKENS and len(sizes) >= 5


def test_a_request_alone_streams_its_planned_chunks_on_a_fresh_pool_and_on_a_measured_one() -> None:
    engine, runtime = _engine()
    first = asyncio.run(_listen(engine, TEXT))
    assert runtime.tokens == _planned(engine, TEXT)
    asyncio.run(_listen(engine, WARM))  # the pool has measured its speed and its capacity now
    assert engine.pool.realtime_capacity is not None
    runtime.tokens.clear()
    again = asyncio.run(_listen(engine, TEXT))
    assert runtime.tokens == _planned(engine, TEXT)
    assert again == first and first[0] == TEXT.split()  # every word, once, in order


def test_requests_under_load_stream_the_same_chunks_and_audio_as_alone() -> None:
    """Four requests at once on two streams, beside a running inference that holds one of them: each is cut as it is
    alone (the pool decides when its chunks run, never what they hold), and each sounds the same."""
    engine, runtime = _engine(slots=2)
    alone = asyncio.run(_listen(engine, TEXT))
    planned = _planned(engine, TEXT)

    async def together() -> list[tuple[list[str], bytes]]:
        gate = threading.Event()
        holder = asyncio.create_task(engine.pool.run(lambda slot: gate.wait(0.5)))
        while engine.pool.busy == 0:
            await asyncio.sleep(0.001)
        runtime.tokens.clear()
        done = await asyncio.gather(*(_listen(engine, TEXT) for _ in range(4)))
        gate.set()
        await holder
        return list(done)

    for heard in asyncio.run(together()):
        assert heard == alone
    assert sorted(runtime.tokens) == sorted(planned * 4)


def test_the_audio_is_the_whole_text() -> None:
    engine, _ = _engine()
    _, audio = asyncio.run(_listen(engine, TEXT))
    seconds = len(audio) / 4 / 24_000  # float32 samples
    tokens = len(engine.vocab.ids(engine.plan(TEXT, "af_heart", 1.0).phonemes))
    # The fake's tone is all sound (nothing to trim but a few samples): about one 25 ms unit per token.
    assert abs(seconds - tokens * SAMPLES_PER_TOKEN / 24_000) < 0.05 * seconds


def test_mandarin_and_portuguese_start_with_a_longer_first_chunk_and_english_keeps_its_bound() -> None:
    """Where the chunker's first bound is too little speech to hear right (`Language.first_tokens`), the first chunk
    may grow to that language's bound; the other languages keep the chunker's own, so their audio is unchanged."""
    engine, _ = _engine()
    text = "here is a first sentence that runs on for a while before it ends. and then another one."
    english = engine.plan(text, "af_heart", 1.0)
    assert english.chunks == tuple(chunker.chunk(english.phonemes))
    assert len(english.chunks[0]) <= chunker.FIRST_CHUNK_TOKENS
    for lang in ("zh", "pt-br"):
        plan = engine.plan(text, "af_heart", 1.0, lang=lang)
        bound = languages.parse(lang).first_tokens
        assert chunker.FIRST_CHUNK_TOKENS < len(plan.chunks[0]) <= bound
        assert plan.chunks == tuple(chunker.chunk(plan.phonemes, first_max=bound))
    spanish = engine.plan(text, "af_heart", 1.0, lang="es")
    assert spanish.chunks == english.chunks


READ_AHEAD = "here is a first sentence that runs on for a while before it ends. and then another one."


def test_a_chunk_cut_between_words_is_read_on_into_the_next_word_whose_audio_is_cut_off() -> None:
    """In a language that reads ahead (French, Italian, Mandarin: `Language.reads_ahead`), the model reads the next
    chunk's first word after a chunk cut inside a clause (`chunker.lookahead`), so the chunk's end is spoken
    mid-phrase; that word's audio is cut where the durations say it begins, so every word is still heard once, and
    the audio is the text's once."""
    engine, runtime = _engine()
    plan = engine.plan(READ_AHEAD, "af_heart", 1.0, lang="fr")
    assert plan.read_ahead and plan.chunks == tuple(chunker.chunk(plan.phonemes, read_ahead=True))
    read = [engine.vocab.ids(chunker.lookahead(plan.chunks, k)) for k in range(len(plan.chunks))]
    assert read[0] and engine.vocab.ids(" " + plan.chunks[1].split()[0]) == read[0]  # cut between words
    assert not read[-1]  # nothing after the last
    heard, audio = asyncio.run(_listen(engine, READ_AHEAD, lang="fr"))
    assert runtime.tokens == [len(engine.vocab.ids(c)) + len(r) for c, r in zip(plan.chunks, read, strict=True)]
    assert heard == READ_AHEAD.split()  # every word once, in order
    seconds = len(audio) / 4 / 24_000
    tokens = len(engine.vocab.ids(plan.phonemes))
    assert abs(seconds - tokens * SAMPLES_PER_TOKEN / 24_000) < 0.05 * seconds  # the words read ahead are cut off


def test_english_and_an_untimed_model_read_no_word_ahead() -> None:
    """English was heard as well with its chunks read alone, which keeps its first chunks as short to make (and its
    bytes as they were); and without durations nothing says where a word read ahead would begin."""
    engine, runtime = _engine()
    english = engine.plan(READ_AHEAD, "af_heart", 1.0)
    assert not english.read_ahead and english.chunks == tuple(chunker.chunk(english.phonemes))
    asyncio.run(_listen(engine, READ_AHEAD))
    assert runtime.tokens == _planned(engine, READ_AHEAD)
    runtime.tokens.clear()
    runtime.timed = engine.timestamps = False
    french = engine.plan(READ_AHEAD, "af_heart", 1.0, lang="fr")
    assert not french.read_ahead

    async def collect() -> int:
        return sum([len(a) async for a in engine.stream(french)])

    assert asyncio.run(collect()) > 0
    assert runtime.tokens == [len(engine.vocab.ids(c)) for c in french.chunks]
