"""Text in, audio chunks out: the front end, the voices and the stream pool put together.

`Engine.plan` checks and prepares a request (voice, phonemes, chunks) before any byte of the
response is sent, so a bad request gets a clean 4xx instead of a broken 200. `Engine.stream`
then runs one pool inference per chunk and yields each chunk's audio as soon as it exists.

Speech is a function of the request: the chunks are cut from the text by `app.text.chunker` alone,
and the pool decides only when each one runs. So the same request gives the same bytes alone or
under load, streamed or whole, before or after a release, wherever the same model form serves it.

The engine serves on a runtime and a front end it does not load: building and dropping them is
`app.inference_state.InferenceState`'s, the lifecycle's side of the same objects.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncGenerator
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from app import silence, timestamps
from app.audio import SAMPLE_RATE
from app.errors import InferenceFailed, InvalidInput
from app.pool import Playback, StreamPool, admission
from app.runtime.backends.base import Resolved
from app.runtime.protocol import Runtime
from app.text import chunker, languages, words
from app.text.frontend import Frontend
from app.text.languages import Language
from app.text.normalize import DEFAULT, Normalization
from app.text.vocab import Vocab
from app.tune.choice import EngineChoice
from app.voices import Voice, VoiceBank

log = logging.getLogger(__name__)

SPEED_RANGE = (0.25, 4.0)


def _audio_s(samples: npt.NDArray[np.float32]) -> float:
    return len(samples) / SAMPLE_RATE


@dataclass(frozen=True)
class Plan:
    """A checked request, ready to synthesize."""

    voice: Voice
    speed: float
    chunks: tuple[str, ...]
    """Phoneme strings, each at most 510 tokens, as `app.text.chunker.chunk` cuts them from ``phonemes``: what is
    synthesized, one inference each (a chunk with no model token, if any, is skipped)."""
    phonemes: str = ""
    """The whole phoneme string the chunks are cut from."""
    spoken: tuple[words.Word, ...] = ()
    """The words read and their spans in ``phonemes`` (`app.text.words`); empty when unknown."""
    read_ahead: bool = False
    """Whether a chunk cut between words is read on into the next word (`app.text.chunker.lookahead`): the language
    asks for it and the served model outputs the durations that say where to cut it off."""


@dataclass(frozen=True)
class Spoken:
    """One chunk's audio, as it is sent, and when its words are heard."""

    audio: npt.NDArray[np.float32]
    words: tuple[timestamps.WordTime, ...] | None
    """Seconds from the start of the response; None where the served model outputs no durations."""


class Engine:
    """Plans requests and streams their audio. `plan` runs in a worker thread (the front end blocks); `stream_timed`
    runs on the event loop and each inference in one of the pool's worker threads, on the slot the pool leased."""

    def __init__(self, runtime: Runtime, pool: StreamPool, frontend: Frontend, voices: VoiceBank,
                 vocab: Vocab, *, default_lang: str, choice: EngineChoice | None = None,
                 timestamps: bool = False, rate: float = 0.0) -> None:
        self.runtime = runtime
        self.rate = rate
        """The pace later chunks are planned at (`app.text.chunker.chunk`, `app.tune.speed.Pace`); fixed for the
        instance, so the same request is cut the same way at any load. 0: the doubling rule alone."""
        self.timestamps = timestamps
        """Whether the served model outputs its per-token durations (`app.forms.timed`): word timestamps."""
        self.choice = choice
        """Which form serves and why (`app.tune.choice`); None where the caller did not resolve one."""
        self.pool = pool
        self.frontend = frontend
        self.voices = voices
        self.vocab = vocab
        self.default_lang = default_lang

    # --- requests -------------------------------------------------------------------------

    def check(self, voice: str, speed: float, lang: str | None = None) -> tuple[Voice, Language]:
        """The request's voice and language, or `InvalidInput` (a 400): an unknown voice, a bad speed, or a language
        this server cannot read. Cheap and loads nothing, so a request is refused before it is admitted or wakes a
        released instance."""
        if not SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]:
            raise InvalidInput(f"speed must be between {SPEED_RANGE[0]} and {SPEED_RANGE[1]}", param="speed")
        resolved = self.voices.resolve(voice)
        language = (languages.parse(lang) if lang else resolved.language) or languages.parse(self.default_lang)
        language.require()
        return resolved, language

    def plan(self, text: str, voice: str, speed: float, *, lang: str | None = None, phonemes: bool = False,
             first_max: int = chunker.FIRST_CHUNK_TOKENS, normalization: Normalization = DEFAULT) -> Plan:
        """Validate and prepare; blocking (G2P), so call it from a worker thread. ``lang`` overrides the voice's
        language (`app.text.languages.parse`); ``first_max`` bounds the first chunk (a segment of streamed text
        that follows others may start larger: `app.agents.utterance`; a language may ask for more,
        `app.text.languages.Language.first_tokens`); ``normalization``: what of English text is
        rewritten before it is read (`app.text.normalize`). The chunks depend on the text and these arguments only."""
        resolved, language = self.check(voice, speed, lang)
        if phonemes:
            phoneme_text, spoken = text, words.of_phonemes(text)
        else:
            phoneme_text, spoken = self.frontend.phonemize_words(text, language.key, normalization)
        first_max = max(first_max, language.first_tokens)
        read_ahead = language.reads_ahead and self.timestamps
        chunks = tuple(chunker.chunk(phoneme_text, first_max=first_max, rate=self.rate, read_ahead=read_ahead))
        if not any(self.vocab.ids(c) for c in chunks):
            raise InvalidInput("input has nothing to speak", param="input", code="empty_input")
        return Plan(voice=resolved, speed=speed, chunks=chunks, phonemes=phoneme_text, spoken=tuple(spoken),
                    read_ahead=read_ahead)

    async def stream(self, plan: Plan) -> AsyncGenerator[npt.NDArray[np.float32], None]:
        """Audio of each chunk in order (`stream_timed` without the word timings)."""
        spoken = self.stream_timed(plan)
        try:
            async for chunk in spoken:
                yield chunk.audio
        finally:
            await spoken.aclose()

    async def stream_timed(self, plan: Plan, playback: Playback | None = None) -> AsyncGenerator[Spoken, None]:
        """Audio of each of ``plan.chunks`` in order, with its words' times; stops early if the consumer stops
        iterating. ``playback``: a clock the caller keeps across plans (the segments of streamed text, one
        listener); None opens one for this plan.

        The consumer asks for chunk k+1 only once chunk k has been handed to the transport, so the
        moment this generator resumes is when that audio left: the playback clock starts there
        and each later chunk is scheduled by when the listener would run out (`app.pool.playback.Playback`).
        The clock decides when a chunk runs, never what it holds.
        """
        ids = [self.vocab.ids(c) for c in plan.chunks]
        placed = (words.place(plan.phonemes, plan.spoken, plan.chunks, self.vocab) if plan.spoken
                  else [()] * len(plan.chunks))
        last = max(k for k, found in enumerate(ids) if found)
        sent = 0
        ticket = admission.CURRENT.get()
        with nullcontext(playback) if playback is not None else self.pool.playback() as clock:
            for k, phonemes in enumerate(plan.chunks):
                if not ids[k]:
                    continue
                if ticket is not None:  # what admission prices this request's place by
                    ticket.remaining_tokens = sum(len(i) for i in ids[k:])
                # Cut between two words, the chunk is read on into the next word (`app.text.chunker.lookahead`),
                # whose audio is cut off again where the durations say it begins.
                ahead = self.vocab.ids(chunker.lookahead(plan.chunks, k)) if plan.read_ahead and k < last else []
                tokens = np.array([[0, *ids[k], *ahead, 0]], dtype=np.int64)
                style = plan.voice.style_for(len(ids[k]) + len(ahead))
                # The pause a join keeps is spoken at the request's speed, like the model's own.
                pause_s = None if k == last else silence.PAUSE_S[silence.boundary(phonemes)] / plan.speed
                audio, cut, durations = await self.pool.run(
                    functools.partial(self._infer, tokens=tokens, style=style, speed=plan.speed, pause_s=pause_s,
                                      own=len(ids[k]) if ahead else None),
                    playback=clock, tokens=len(ids[k]) + len(ahead), audio_s=lambda done: _audio_s(done[0]))
                heard = None if durations is None else tuple(timestamps.word_times(
                    placed[k], durations, cut=cut, kept=len(audio), offset=sent))
                yield Spoken(audio, heard)
                sent += len(audio)
                clock.sent(_audio_s(audio))
                if k == last:
                    return

    def _infer(self, slot: int, *, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
               speed: float, pause_s: float | None, own: int | None = None
               ) -> tuple[npt.NDArray[np.float32], int, npt.NDArray[np.int64] | None]:
        """The chunk's trimmed audio, the samples the trim cut from its front, and its durations (if any). ``own``:
        the chunk's tokens where the model read on into the next chunk's first word, whose audio is cut off."""
        try:
            done = self.runtime.infer_timed(slot, tokens, style, speed)
        except Exception as exc:  # a runtime error fails this request only; the slot stays usable
            log.exception("inference failed on slot %d", slot)
            raise InferenceFailed(f"inference failed: {type(exc).__name__}") from exc
        # Here, in the worker thread, not on the event loop: it scans every sample.
        audio = done.audio
        if own is not None and done.durations is not None:
            audio = silence.cut_between_words(audio, timestamps.token_edges(done.durations), own)
        audio, cut = silence.trim_at(audio, pause_s=pause_s)
        return audio, cut, done.durations

    # --- what is served ---------------------------------------------------------------------

    @property
    def resolved(self) -> Resolved | None:
        return self.runtime.resolved

    @property
    def plans_while_released(self) -> bool:
        """Whether a request may be planned before the state is restored, beside the restore: the front end (misaki)
        is loaded, and a release keeps it."""
        return self.frontend.loaded
