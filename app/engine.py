"""Text in, audio chunks out: the front end, the voices and the stream pool put together.

`Engine.plan` checks and prepares a request (voice, phonemes, chunks) before any byte of the
response is sent, so a bad request gets a clean 4xx instead of a broken 200. `Engine.stream`
then runs one pool inference per chunk and yields each chunk's audio as soon as it exists; each
later chunk is cut when it is due, as long as its request's playback slack allows
(`app.pool.Playback.chunk_bound`).

The engine is also what the lifecycle releases and restores (`release`, `restore`, `files`):
it satisfies `lifecycle.protocol.Reclaimable` without knowing the lifecycle exists.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from app import silence, timestamps
from app.audio import SAMPLE_RATE
from app.errors import InferenceFailed, InvalidInput
from app.pool import StreamPool
from app.runtime.backends.base import Resolved
from app.runtime.protocol import Runtime
from app.runtime.tuning import EngineChoice
from app.text import chunker, languages, words
from app.text.frontend import Frontend
from app.text.languages import Language
from app.text.vocab import Vocab
from app.voices import Voice, VoiceBank

log = logging.getLogger(__name__)

SPEED_RANGE = (0.25, 4.0)

PAST_CAPACITY = 0.8
"""A pool whose measured real-time capacity is under this times its listeners is past capacity: later chunks go back
to ``max_chunk_tokens`` (`Engine._later_ceiling`). On the 2-vCPU Xeon with AMX 8 closed-loop clients ran at 0.55-0.65
and 4 at 1.1-1.3 (bench/results/latency-20261204-xeon-overload): 0.8 keeps both clear of the line, where at 1.0 the
bound flipped between 45 and 120 tokens at 4 clients in the slowest stretch (p90 2.91 s, `-overload-b`)."""


def _audio_s(samples: npt.NDArray[np.float32]) -> float:
    return len(samples) / SAMPLE_RATE


@dataclass(frozen=True)
class Plan:
    """A checked request, ready to synthesize."""

    voice: Voice
    speed: float
    chunks: tuple[str, ...]
    """Phoneme strings, each at most 510 tokens, as the doubling rule cuts them (`app.text.chunker.chunk`);
    what is streamed, unless later chunks are sized from the playback clock."""
    phonemes: str = ""
    """The whole phoneme string the chunks are cut from."""
    spoken: tuple[words.Word, ...] = ()
    """The words read and their spans in ``phonemes`` (`app.text.words`); empty when unknown."""


@dataclass(frozen=True)
class Spoken:
    """One chunk's audio, as it is sent, and when its words are heard."""

    audio: npt.NDArray[np.float32]
    words: tuple[timestamps.WordTime, ...] | None
    """Seconds from the start of the response; None where the served model outputs no durations."""


class Engine:
    def __init__(self, runtime: Runtime, pool: StreamPool, frontend: Frontend, voices: VoiceBank,
                 vocab: Vocab, *, default_lang: str, first_chunk_tokens: int, max_chunk_tokens: int,
                 release_frontend: bool, slack_chunks: bool = False, choice: EngineChoice | None = None,
                 timestamps: bool = False, start_bridge: bool = False, wide_chunk_tokens: int = 0,
                 idle_first_chunk_tokens: int = 0, quick_frontend: bool = False,
                 standby: Callable[[], None] | None = None, busy_max_chunk_tokens: int = 0,
                 second_chunk_tokens: int = 0, busy_short_streams: int = 0, lone_first_chunk_tokens: int = 0) -> None:
        self.runtime = runtime
        self.standby = standby
        """Called at the end of each release (`app.runtime.proxy.ProcessRuntime.standby`: the bridge held open in a
        fresh inference process, ``TTS_RELEASED_BRIDGE``); None: nothing is kept."""
        self.quick_frontend = quick_frontend
        """Turn ready on espeak-ng alone and load misaki behind it (`app.text.frontend.Frontend.load_quick`):
        requests that need no word timings are phonemized by espeak-ng until misaki is loaded."""
        self.timestamps = timestamps
        """Whether the served model outputs its per-token durations (`app.runtime.timed`): word timestamps."""
        self.choice = choice
        """Which form serves and why (`app.runtime.tuning`); None where the caller did not resolve one."""
        self.pool = pool
        self.frontend = frontend
        self.voices = voices
        self.vocab = vocab
        self.default_lang = default_lang
        self.first_chunk_tokens = first_chunk_tokens
        self.idle_first_chunk_tokens = idle_first_chunk_tokens
        """Bound on the first chunk of a request that finds the pool idle (nothing running, nothing waiting), where
        smaller than ``first_chunk_tokens``: its extra inference runs on CPUs nothing else wants. 0: the same."""
        self.lone_first_chunk_tokens = lone_first_chunk_tokens
        """Bound on the first chunk of a request that finds the pool idle (nothing running, nothing waiting), where
        smaller than the other first-chunk bounds: a request alone hears its first words sooner. 0: none."""
        self.second_chunk_tokens = second_chunk_tokens
        """Bound on the second chunk where the playback clock does not size it; later ones double from it (0: twice the
        first chunk's bound): `app.text.chunker.next_bound`."""
        self.max_chunk_tokens = max_chunk_tokens
        self.slack_chunks = slack_chunks
        """Size later chunks from the playback clock (`app.pool.Playback.chunk_bound`), else double each bound."""
        self.busy_max_chunk_tokens = busy_max_chunk_tokens
        """With ``slack_chunks``: the bound on later chunks while the pool does not keep up
        (`app.pool.StreamPool.keeps_up`), where smaller than ``max_chunk_tokens``; 0: none."""
        self.busy_short_streams = busy_short_streams
        """While the busy bound is in force, this many streams' worth of later chunks keep to it and the rest may be cut
        up to ``max_chunk_tokens``: at most ``slots - busy_short_streams`` chunks cut past the bound wait or run at once
        (`_later_ceiling`), so a first chunk still finds a stream that frees soon. 0: every later chunk keeps to it."""
        self._long = 0
        """Later chunks cut past the busy bound that wait for a stream or run now (event loop only)."""
        self.wide_chunk_tokens = wide_chunk_tokens if runtime.has_wide else 0
        """Chunks of at most this many tokens run on the runtime's wide session when the pool is idle (0: never,
        also where the runtime has none)."""
        pool.measurable = lambda: not runtime.bridge_serving  # the bridge on every slot prices no path
        # The express lane runs concurrently on an ONNX Runtime session (the bridge's included); OpenVINO's executor
        # would only queue it for a stream (app.runtime.backends.base.Backend).
        pool.express_ok = lambda: runtime.active_name == "onnxruntime"
        self.release_frontend = release_frontend
        self.start_bridge = start_bridge
        """Open the bridge at the first load too, not only at restores (`app.runtime.local`)."""
        self._state_lock = threading.Lock()
        self._restores = 0

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

    def plan(self, text: str, voice: str, speed: float, *, lang: str | None = None,
             phonemes: bool = False, need_words: bool = True) -> Plan:
        """Validate and prepare; blocking (G2P), so call it from a worker thread. ``lang`` overrides the voice's
        language (`app.text.languages.parse`). Without ``need_words`` (no word timings asked for), an English request
        that comes while misaki loads is phonemized by espeak-ng alone (``quick_frontend``) instead of waiting."""
        resolved, language = self.check(voice, speed, lang)
        if phonemes:
            phoneme_text, spoken = text, words.of_phonemes(text)
        else:
            phoneme_text, spoken = self.frontend.phonemize_words(
                text, language.key, quick=self.quick_frontend and not need_words)
        chunks = chunker.chunk(phoneme_text, self.first_chunk_tokens, self.max_chunk_tokens, self.second_chunk_tokens)
        kept = tuple(c for c in chunks if self.vocab.ids(c))
        if not kept:
            raise InvalidInput("input has nothing to speak", param="input", code="empty_input")
        return Plan(voice=resolved, speed=speed, chunks=kept, phonemes=phoneme_text, spoken=tuple(spoken))

    async def stream(self, plan: Plan) -> AsyncGenerator[npt.NDArray[np.float32], None]:
        """Audio of each chunk in order (`stream_timed` without the word timings)."""
        spoken = self.stream_timed(plan)
        try:
            async for chunk in spoken:
                yield chunk.audio
        finally:
            await spoken.aclose()

    async def stream_timed(self, plan: Plan) -> AsyncGenerator[Spoken, None]:
        """Audio of each chunk in order, with its words' times; stops early if the consumer stops iterating.

        A chunk of at most ``wide_chunk_tokens`` asks the pool for its wide slot (`app.pool.StreamPool.run`):
        it runs on all the pool's threads when it finds the pool idle.

        The consumer asks for chunk k+1 only once chunk k has been handed to the transport, so the
        moment this generator resumes is when that audio left: the playback clock starts there
        and each later chunk is scheduled by when the listener would run out (`app.pool.Playback`).
        That is also when a later chunk is cut: the second within ``second_chunk_tokens``, then each bound twice the one
        before (`app.text.chunker.next_bound`; so the chunks are ``plan.chunks`` where the first chunk's bound is
        ``first_chunk_tokens``), or, with ``slack_chunks`` once the pool has measured its speed,
        as many tokens as the pool infers in the request's slack.
        """
        first_limit = min(self._first_bound(), self.max_chunk_tokens)
        phonemes, rest = chunker.first(plan.phonemes, first_limit, self.max_chunk_tokens)
        bound = 0  # the bound the last later chunk was cut within (none yet)
        skip = 0  # non-whitespace characters of the chunks before this one, to place its words
        dense = words.dense_index(plan.phonemes) if plan.spoken else []
        sent = 0
        long = False  # the chunk about to run counts in ``self._long``
        with self.pool.playback() as clock:
            try:
                while phonemes:
                    ids = self.vocab.ids(phonemes)
                    placed = words.place(plan.phonemes, plan.spoken, [phonemes], self.vocab, skip=skip,
                                         dense=dense)[0] if plan.spoken else ()
                    skip += sum(not c.isspace() for c in phonemes)
                    if ids:
                        last = not any(self.vocab.known(c) for c in rest)
                        tokens = np.array([[0, *ids, 0]], dtype=np.int64)
                        style = plan.voice.style_for(len(ids))
                        # The pause a join keeps is spoken at the request's speed, like the model's own.
                        pause_s = None if last else silence.PAUSE_S[silence.boundary(phonemes)] / plan.speed
                        audio, cut, durations, _ = await self.pool.run(
                            functools.partial(self._infer, tokens=tokens, style=style, speed=plan.speed,
                                              pause_s=pause_s),
                            clock=clock, tokens=len(ids), audio_s=lambda done: _audio_s(done[0]),
                            made_s=lambda done: done[3] / SAMPLE_RATE, wide=len(ids) <= self.wide_chunk_tokens)
                        self._long -= long  # (a chunk past the bound has tokens)
                        long = False
                        heard = None if durations is None else tuple(timestamps.word_times(
                            placed, durations, cut=cut, kept=len(audio), offset=sent))
                        yield Spoken(audio, heard)
                        sent += len(audio)
                        clock.sent(_audio_s(audio))
                    if not rest:
                        return
                    ceiling = self._later_ceiling()
                    doubled = chunker.next_bound(bound, first_limit, self.second_chunk_tokens, ceiling)
                    bound = (clock.chunk_bound(doubled, floor=first_limit, ceiling=ceiling)
                             if self.slack_chunks else doubled)
                    phonemes, rest = chunker.take(rest, bound, whole_within=ceiling)
                    long = self._past_busy(phonemes)
                    self._long += long
            finally:
                self._long -= long

    def _later_ceiling(self) -> int:
        """The bound on the next later chunk: ``busy_max_chunk_tokens`` (with ``slack_chunks``) while the pool does not
        keep up with its listeners but is not past its capacity (`PAST_CAPACITY`), else ``max_chunk_tokens``. With
        ``busy_short_streams``, ``slots - busy_short_streams`` chunks past the busy bound may wait or run at once
        (``_long``) while it is in force: a first chunk then waits at most for a short chunk on the streams kept to
        it, and the long ones make fewer inferences. Past capacity every listener runs short whatever the chunks, and
        long ones make the most audio per CPU-second (bench/results/latency-20261204-xeon-busy45c, -overload)."""
        busy = self.busy_max_chunk_tokens
        if (self.slack_chunks and 0 < busy < self.max_chunk_tokens and not self.pool.keeps_up()
                and self.pool.keeps_up(PAST_CAPACITY)
                and (self.busy_short_streams <= 0 or self._long >= self.pool.slots - self.busy_short_streams)):
            return busy
        return self.max_chunk_tokens

    def _past_busy(self, phonemes: str) -> bool:
        """Whether a chunk goes past the busy bound (so counts in ``_long`` until its inference ends)."""
        busy = self.busy_max_chunk_tokens
        return 0 < busy and self.busy_short_streams > 0 and len(self.vocab.ids(phonemes)) > busy

    def _first_bound(self) -> int:
        """The first chunk's bound: ``lone_first_chunk_tokens`` where set and the pool is idle; else
        ``idle_first_chunk_tokens`` where set and the pool is idle or keeps up with its listeners
        (`app.pool.StreamPool.keeps_up`: capacity to spare for the extra inference); else ``first_chunk_tokens``
        (each where smaller than the next)."""
        idle = self.pool.busy == 0 and self.pool.waiting == 0
        bound = self.first_chunk_tokens
        if (idle or self.pool.keeps_up()) and 0 < self.idle_first_chunk_tokens < bound:
            bound = self.idle_first_chunk_tokens
        if idle and 0 < self.lone_first_chunk_tokens < bound:
            bound = self.lone_first_chunk_tokens
        return bound

    def _infer(self, slot: int, *, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
               speed: float, pause_s: float | None
               ) -> tuple[npt.NDArray[np.float32], int, npt.NDArray[np.int64] | None, int]:
        """The chunk's trimmed audio, the samples the trim cut from its front, its durations (if any), and the
        samples the model made (edge silence included: what the inference's time follows)."""
        try:
            done = self.runtime.infer_timed(slot, tokens, style, speed)
        except Exception as exc:  # a runtime error fails this request only; the slot stays usable
            log.exception("inference failed on slot %d", slot)
            raise InferenceFailed(f"inference failed: {type(exc).__name__}") from exc
        # Here, in the worker thread, not on the event loop: it scans every sample.
        audio, cut = silence.trim_at(done.audio, pause_s=pause_s)
        return audio, cut, done.durations, int(done.audio.size)

    # --- lifecycle (lifecycle.protocol.Reclaimable) ------------------------------------------

    @property
    def resolved(self) -> Resolved | None:
        return self.runtime.resolved

    @property
    def plans_while_released(self) -> bool:
        """Whether a request may be planned before the state is restored, beside the restore: the front end (misaki)
        is loaded and a release keeps it (``release_frontend`` off)."""
        return not self.release_frontend and self.frontend.loaded

    def restore(self) -> dict[str, float]:
        """Build inference state and the front end, in parallel; seconds per part.

        The runtime's load is native code that releases the GIL, the front end's is mostly
        Python: run side by side, a restore costs the longer of the two, not their sum. Where there is a
        bridge, restores open it and serve with it while the primary loads behind (see
        `app.runtime.local`), and so does the first load with ``start_bridge``, the primary loading at once
        since no request waits yet.
        """
        with self._state_lock:
            timings: dict[str, float] = {}
            start = time.perf_counter()
            frontend: threading.Thread | None = None
            quick = threading.Event()
            if not self.frontend.loaded:
                def load_frontend() -> None:
                    try:
                        if self.quick_frontend:
                            timings["frontend_quick_s"] = self.frontend.load_quick(self.default_lang)
                            quick.set()
                            _lower_priority()  # behind the first requests, which espeak-ng can serve
                        loaded = self.frontend.load((self.default_lang,))
                        if not self.quick_frontend:
                            timings["frontend_s"] = loaded
                        else:
                            log.info("misaki loaded behind the quick front end in %.2f s", loaded)
                    except Exception:
                        log.exception("the text front end failed to load")
                    finally:
                        quick.set()

                frontend = threading.Thread(target=load_frontend, name="frontend-load", daemon=True)
                frontend.start()
            try:
                if not self.runtime.loaded:
                    first = self._restores == 0
                    bridged = self.runtime.has_bridge and (self.start_bridge or not first)
                    loaded = (self.runtime.load_bridged(wait_for_request=not first) if bridged
                              else self.runtime.load_primary())
                    timings["bridge_s" if bridged else "backend_s"] = loaded.load_s
                    timings["warm_up_s"] = loaded.warm_up_s
                    log.info("%s ready: %s", "bridge" if bridged else "backend", loaded)
            finally:
                if frontend is not None:
                    if self.quick_frontend:
                        quick.wait()
                    else:
                        frontend.join()
            if not (self.frontend.serving != "none" if self.quick_frontend else self.frontend.loaded):
                raise RuntimeError("the text front end failed to load (see the log)")
            timings["total_s"] = time.perf_counter() - start
            self._restores += 1
            return timings

    def intact(self) -> bool:
        """False when the inference state vanished on its own (the inference process died)."""
        return self.runtime.intact()

    def release(self) -> None:
        with self._state_lock:
            self.runtime.unload()
            self.frontend.release_languages()
            if self.release_frontend:
                self.frontend.unload()
            if self.standby is not None:
                self.standby()

    def close(self) -> None:
        """At shutdown: end the inference process (and wait for it) rather than leave it to notice."""
        with self._state_lock:
            self.runtime.unload()
            self.frontend.release_languages()

    def files(self) -> list[Path]:
        found = self.runtime.files()
        if self.release_frontend:
            found.extend(self.frontend.files())
        return found


def _lower_priority() -> None:
    """This thread at the lowest CPU priority (Linux: a thread's nice value is its own), so a load behind requests
    takes what CPU they leave; elsewhere, nothing."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass
