"""One door for configuration: every setting is a ``TTS_*`` environment variable.

`Settings.from_env` is the only place that reads the environment (the CLI maps its flags onto the
same names). A bad value fails at start with the variable's name and the value.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PREFIX = "TTS_"
BACKENDS = ("auto", "openvino", "onnxruntime")
PRECISIONS = ("f32", "bf16", "f16")
SCHEDULERS = ("deadline", "fifo")
WIDE_FORMS = ("auto", "bridge", "primary")
SECRETS = ("admin_token", "api_key", "metrics_token")
"""Fields shown only as "set" or empty, never their values."""


class SettingsError(ValueError):
    """A setting has a value the server cannot use; the message names the variable."""


def _default_cache_dir() -> Path:
    return Path(os.path.expanduser("~")) / ".cache" / "kokoro-tts"


@dataclass(frozen=True)
class Settings:
    """Everything the server can be told. Field ``x`` is read from ``TTS_X``."""

    host: str = "0.0.0.0"
    """Interface to listen on (``--host``)."""
    port: int = 8080
    """TCP port (``--port``); ``PORT`` (as Cloud Run sets it) is used when ``TTS_PORT`` is unset."""
    backend: str = "auto"
    """Inference runtime: ``auto`` serves with what ``python -m app tune`` measured fastest on this CPU (among
    the forms that pass the output check), or with OpenVINO where no tuning matches this machine;
    ``openvino`` or ``onnxruntime`` force one."""
    model_path: Path | None = None
    """ONNX model file; unset means the embedded int8 Kokoro-82M assembled from PyPI packages."""
    model_sha256: str = ""
    """Expected sha256 of ``model_path``, checked at start-up (a mismatch is a start-up error naming
    the file); empty skips the check. The embedded model is always checked against its published hash."""
    voices_path: Path | None = None
    """Voices file (``.npz`` or the official ``voices-v1.0.bin``); unset means the embedded voices."""
    cache_dir: Path = field(default_factory=_default_cache_dir)
    """Writable directory for the assembled model and the OpenVINO compile cache."""
    baked_cache_dir: Path | None = None
    """Read-only compile cache baked into the image at build time (`python -m app.runtime.build`); used when
    its key matches. ONNX Runtime's optimized graph saved there (``onnxruntime/``) is opened before the
    writable cache's."""
    compile_cache: bool = True
    """Use OpenVINO's on-disk compile cache (``CACHE_DIR``) under ``cache_dir``."""
    streams: int = 0
    """Inference streams (concurrent inferences); 0 sizes them from the CPUs the container has."""
    threads_per_stream: int = 0
    """Threads per stream; 0 sizes them from the CPUs the container has."""
    runtime_defaults: bool = False
    """Leave streams/threads to the runtime's own defaults (benchmark baseline), ``streams`` slots."""
    precision: str = "f32"
    """OpenVINO inference precision hint; f32 keeps the audio identical to the reference."""
    shape_cache: int = 0
    """OpenVINO's cache of per-input-shape kernels (``CPU_RUNTIME_CACHE_CAPACITY``, entries). Every
    new input length adds to it: at OpenVINO's default (5000) memory grew by 10-20 MB per new length
    without bound; at 0 it levels off (bounded by the longest chunk) for about 6 % less speed
    (bench/results/soak-compare-20261129). -1 keeps OpenVINO's default."""
    tune_memory_price: float = 0.111
    """What ``python -m app tune`` charges for memory when it ranks candidates: the price of one GiB-second in
    vCPU-seconds. An instance-billed platform bills the vCPUs and the memory it reserves, so a candidate's score is
    its audio-seconds per CPU-second over (1 + this x its peak GiB / vCPUs): the most audio per dollar. 0.111 is
    Cloud Run's instance-based price ($0.000002 per GiB-s over $0.000018 per vCPU-s; Fargate's is 0.110); 0 ranks by
    CPU efficiency alone."""
    queue_size: int = 0
    """Requests allowed to wait for a stream beyond those running; 0 means 2 × streams."""
    scheduler: str = "deadline"
    """How a free stream is handed out: ``deadline`` (the chunk whose listener runs out of audio first;
    a request's first chunk is due at once) or ``fifo`` (first come, first served, per chunk)."""
    deadline_margin_s: float = 1.0
    """Safety margin of the deadline scheduler: a later chunk is due this long before the audio already
    sent for its request would have played out at 1x (its expected inference time is taken off as well)."""
    first_chunk_credit_s: float = 3.0
    """Deadline scheduler: a request's first chunk counts as due this many seconds before it arrived, so it also
    overtakes later chunks overdue by less than that, at the risk of their stalling; a chunk overdue by more still
    goes first (none is starved). With ``TTS_BUSY_MAX_CHUNK_TOKENS`` (60) on the 2-vCPU Xeon: 4 clients' first audio
    1.1-1.2 / 1.6-1.7 s p50 / p90 against 2.0-2.3 / 2.6-3.1 s, fewer stalls, the same audio per CPU-second; at 8
    clients (twice what the pool can play) first audio 2.8-3.3 against 4.5-4.6 s p50 and a quarter to a third more
    stalls (README, Latency). 0: a first chunk is due when it arrives."""
    express_slots: int = 0
    """Deadline scheduler: first chunks that may run at once beyond the pool's streams when none is free (the express
    lane), instead of waiting for a running chunk to end; each runs concurrently on one of the streams' ONNX Runtime
    sessions, on CPUs the running chunks share with it for its short while. Not with OpenVINO serving (its executor
    would only queue the call for a stream), nor while first chunks are held for real-time capacity. Off by default:
    on the 2-vCPU Xeon with AMX (2026-12-04/05) it took first audio past capacity (8 clients) from 2.8-2.9 to 0.8-1.0 s
    p50 but the stalls from 36 to 46-58 s per audio-minute, and at 4 clients, with later chunks of 60 tokens, it
    made 3 % more audio per CPU-second in three windows of four and 3 % less in the fourth, for 4-6 x the stalls and
    no sooner first audio (README, Latency; bench/results/latency-20261204-xeon-express, -express2,
    latency-20261205-xeon-express-final).
    For a deployment that would rather every new listener hear its first words within a second under overload (an
    autoscaler adding instances behind it) than keep the admitted ones fed. 0: off."""
    realtime_factor: float = 1.25
    """Real-time admission: a new request waits before its first byte while the requests already playing
    would need more than this × the pool's measured real-time capacity (audio-seconds it makes per
    second), and at least one plays per stream; 0 turns it off. Past capacity it trades a later first byte for fewer
    stalls. On the 2-vCPU Zen 4 (2026-12-05, bench/results/latency-20261205-zen4-admission-factor) at 8 clients 1.25
    made 38 s of stalls per audio-minute against 53 s with 0 (1: 24 s; 20-23 s in -admission and -b), first audio
    3.5 s p50 against 3.8 s (1: 4.9-6.4 s), the same audio per CPU-second; at 4 clients, where that pool runs near its
    capacity (its estimate 3.6-4.7 audio-s per s), 1 held a few requests and made 1.10 and 0.98 s p50 at 0.96 x the
    audio per CPU-second against 0.97-0.99 s with 0, where 1.25 made 0.93-0.95 s at the same efficiency: 1.25 leaves
    a pool near its capacity alone. Off (0) before: on slower streams (about 1x real time, 2026-12-01) it left CPUs
    idle, which holding while fewer requests play than there are streams now rules out."""
    realtime_max_hold_s: float = 10.0
    """With ``TTS_REALTIME_FACTOR``: the longest a new request waits for real-time capacity before its first chunk is
    scheduled as if admission were off. The players it waits for may be long inputs whose synthesis takes minutes,
    longer than a client waits for a first byte; at 8 clients on the bench corpus (2-vCPU Zen 4) the held requests'
    first audio was 8.7-10.1 s p90, so 10 s bounds the tail without undoing the hold. 0: no bound."""
    warm_up: bool = True
    """Run one inference on every stream after each load (start, restore, the primary taking over from the
    bridge) before it serves, so the first request does not pay the runtime's first-call costs."""
    max_input_chars: int = 4096
    """Longest accepted ``input``; longer gets 413."""
    first_chunk_tokens: int = 20
    """Upper bound on the first model chunk: a request's first audio waits for all of it (the first
    sentence, else its first clauses or words within the bound; a first sentence that would leave a rest
    of under 10 tokens is taken whole, since each inference costs a fixed part). 20 tokens is about 1.5 s of speech;
    with ``TTS_SECOND_CHUNK_TOKENS`` the small first chunk costs no inference more than 30 did. On the Xeon with AMX
    (2026-12-04) against 30 under load: 4 clients 0.85-0.92 against 1.15 s p50 at the same audio per CPU-second,
    8 clients 2.67-2.87 against 2.89 s, stalls at 4 clients 4.5-4.9 against 2.9 s per audio-minute
    (bench/results/latency-20261204-xeon-resume; README, Latency)."""
    second_chunk_tokens: int = 60
    """Bound on the second model chunk where it is not sized from its request's playback slack (``TTS_SLACK_CHUNKS``:
    the pool not keeping up, or its speed not yet measured); each later bound doubles from it, up to
    ``TTS_MAX_CHUNK_TOKENS`` (``TTS_BUSY_MAX_CHUNK_TOKENS`` under load). 60 is where a 30-token first chunk's doubling
    went, so a request is cut into as many chunks as before the first chunk's bound went from 30 to 20: every
    inference pays a fixed part (the model's edge silence), and 20 tokens doubling from 20 cost 3-4 % of the audio per
    CPU-second at 4-8 clients on a Zen 5 (bench/results/latency-20261202-zen5-first20). 0: twice the first chunk's
    bound."""
    idle_first_chunk_tokens: int = 0
    """Bound on the first model chunk of a request that finds every stream idle and nothing waiting, or the pool
    keeping up with its listeners (its measured real-time capacity at least ``TTS_SLACK_HEADROOM`` times the requests
    admitted), where it is smaller than ``TTS_FIRST_CHUNK_TOKENS``; past that the first chunk keeps
    ``TTS_FIRST_CHUNK_TOKENS``. For a larger first chunk under load only: with 30 and 20 here (the defaults before
    2026-12-04), 4 clients on the Xeon with AMX got 1.15 s p50 in a slow stretch against 0.85-0.92 s with 20 at any
    load (bench/results/latency-20261204-xeon-resume); on a 2-vCPU Zen 5, idle only, first audio alone 0.54 s p50
    against 0.66 s with 30 (latency-20261202-zen5-idle20). 0 (the default) gives every first chunk
    ``TTS_FIRST_CHUNK_TOKENS``."""
    lone_first_chunk_tokens: int = 12
    """Bound on the first model chunk of a request that finds every stream idle and nothing waiting (a request alone),
    where smaller than the other first-chunk bounds; its words reach the listener sooner, at the cost of one more
    short inference on CPUs nothing else wants. On the 2-vCPU Zen 4 (2026-12-05) 12 took first audio alone from
    0.43 to 0.36 s p50 over the bench corpus at the same 4-client figures (bench/results/latency-20261205-zen4-lone12,
    and 0.45 to 0.37 s in -idle12); as ``TTS_IDLE_FIRST_CHUNK_TOKENS`` (which also applies while a busy pool keeps up)
    12 made 0.90 and 0.79 x the old pool's audio per CPU-second at 4 clients where 20 made 0.865 and 0.875 x
    (``-idle12-load``), so it is the idle pool's alone. 0: none."""
    max_chunk_tokens: int = 120
    """Upper bound on later model chunks (the model accepts at most 510; bounds double from the first
    chunk's up to this): one running chunk holds its stream this long, and a new request's first chunk
    can wait for it; a hung-up client's synthesis stops after the chunk in progress."""
    busy_max_chunk_tokens: int = 45
    """With ``TTS_SLACK_CHUNKS``: upper bound on later model chunks while the pool does not keep up with its
    listeners (``TTS_SLACK_HEADROOM``) but has the measured capacity for them all, where it is smaller than
    ``TTS_MAX_CHUNK_TOKENS``: a running chunk then holds its stream for less time, so a new request's first chunk waits
    less behind it; a request that finds capacity to spare keeps the long chunks, and so do all past capacity, where
    every listener runs short whatever the order and long chunks make the most audio per CPU-second. 45 against 60 on
    the Xeon with AMX (2026-12-04): 4 clients 0.86-0.90 / 1.11-1.17 s first audio p50 / p90 against 0.94-0.98 /
    1.40-1.56 s and a third of the stalls, at 0.98-1.04 x the audio per CPU-second (README, Latency;
    bench/results/latency-20261204-xeon-busy45, -busy45b). 0: ``TTS_MAX_CHUNK_TOKENS`` at any load."""
    busy_short_streams: int = 0
    """While ``TTS_BUSY_MAX_CHUNK_TOKENS`` bounds later chunks, keep it on this many streams only: up to streams less
    this many later chunks past the bound (up to ``TTS_MAX_CHUNK_TOKENS``) may wait or run at once, so a new
    request's first chunk still finds a stream that frees soon while the others run long chunks, fewer inferences.
    On the 2-vCPU Zen 4 (2026-12-05, 4 clients held in the busy regime by ``TTS_SLACK_HEADROOM=2.5``) 1 made 0.93 and
    0.84 x the old pool's audio per CPU-second where the bound on both streams made 0.89 and 0.80 x, at the same first
    audio and twice the stalls (bench/results/latency-20261205-zen4-short1); unmeasured where the default headroom puts
    4 clients in the busy regime (the Xeon with AMX). 0: every later chunk keeps to the bound (at least the streams:
    the same)."""
    wide_chunk_tokens: int = 120
    """A chunk of at most this many tokens, due while every stream is idle and nothing waits, runs on one
    session with all the pool's threads (the ONNX Runtime bridge, then kept loaded beside the primary: about
    90 MB), and the pool's streams wait for it: a request alone gets the CPUs a busy pool would share out.
    Only where the pool has more than one stream; needs ``TTS_RESTORE_BRIDGE`` (or ``TTS_WIDE_FORM=primary``); 0
    turns it off (the bridge is then dropped once the primary serves). A tuned choice (``TTS_BACKEND=auto``) turns it
    off where its tuning run found the bridge on all threads no faster than one stream of the chosen form (the
    Xeon with AMX and bf16: see ``TTS_WIDE_FORM``)."""
    wide_form: str = "auto"
    """What the wide session runs: ``bridge`` (the ONNX Runtime bridge kept loaded), ``primary`` (OpenVINO's
    primary form compiled a second time as one stream with all the pool's threads, loaded behind the primary:
    faster where OpenVINO's form is, at about 0.65 GB more warm memory) or ``auto``: the bridge, except that under
    a tuned choice whose tuning run measured the bridge no faster than one stream of the chosen form the wide
    session is off (`app.runtime.tuning.wide_choice`)."""
    wide_trials: int = 3
    """Lone later chunks (a request's chunks after its first, which have playback slack to spend) measured on each
    path, the wide session and one stream of the idle pool, before the pool sends a chunk that finds it idle by
    their speed: wide only while the wide session's recent seconds per audio-second made (edge silence included:
    what an inference's time follows; per token, a short chunk looks 2 x dearer than a long one) are under 0.9 times
    one stream's (`app.pool.WIDE_GAIN`); first chunks run wide until then. ``/v1/info`` shows ``pool.wide``. On the
    16-vCPU Xeon of 2026-12-04 (gVisor) the server, whose lone requests then ran on the bridge with 16 threads, made
    2.7 x less audio per CPU-second at one client than the same 8 x 2 pool without a wide session
    (bench/results/device-20261204-xeon16-8x2). 0 sends every lone chunk wide, unmeasured."""
    slack_chunks: bool = True
    """Size each later chunk when it is due from its request's playback slack (audio sent, less playback
    elapsed, less ``TTS_DEADLINE_MARGIN_S``) and the pool's measured seconds per token: as many tokens as
    fit, at least ``TTS_FIRST_CHUNK_TOKENS`` and at most ``TTS_MAX_CHUNK_TOKENS``, cut at a sentence, clause
    or word; each bound twice the one before (the doubling rule) until the pool has measured its speed, and
    while it does not keep up with its requests (``TTS_SLACK_HEADROOM``). On a 2-vCPU Zen 5 it took the
    stalls at 1-2 clients from 1.9-2.2 to 0 s per audio-minute at the same efficiency
    (bench/results/latency-20261202-zen5-2x1). The same text is then cut where the load of the moment allows (the
    same words, other joins, so the audio can differ slightly between two requests); 0 keeps the doubling rule
    alone, whose cuts depend on the text only."""
    slack_headroom: float = 1.5
    """With ``TTS_SLACK_CHUNKS``: later chunks are sized from the slack only while the pool's measured real-time
    capacity (audio-seconds it makes per second) is at least this many times the requests admitted (playing or
    waiting for their first chunk); below it every request is short of slack and the doubling rule keeps chunks
    long, which makes the most audio. 0 sizes from the slack at any load."""
    default_voice: str = ""
    """Voice used when a request names none; empty is ``af_heart`` (or the voices file's first voice where it lacks
    that one)."""
    voice_aliases: str = ""
    """Extra voice names, ``alias=voice`` separated by commas (``alloy=af_heart,onyx=am_adam(2)+am_onyx(1)``);
    a voice may be a blend. They add to (and override) the built-in table that maps OpenAI's 13 voice names
    to the official English voices (docs/api.md, "Voices"). A target that is not installed is a start-up error."""
    lang: str = "en-us"
    """Language of voices whose name does not say one (Kokoro's names start with it: ``af_heart``), and the one
    loaded at start: ``en-us`` or ``en-gb``."""
    quiet_window_s: float = 45.0
    """Seconds without a request in flight before inference state is released; 0 never releases."""
    release_frontend: bool = False
    """Also release the text front end (spaCy's pipeline, misaki's lexicon) on release. Off by default:
    kept, it costs about 25 MB of released memory (its lexicon is a 2.6 MB memory-mapped trie); released,
    a restore took 1.0 s instead of 0.8 s here (it reloads in parallel with the inference process's
    start) and the released memory grew by about 1.5 MB per cycle."""
    quick_frontend: bool = True
    """Turn ready as soon as espeak-ng is loaded (about 0.2 s) and load misaki with spaCy (about 1 s, Python that
    holds the server's GIL) behind it at the lowest CPU priority; until it is loaded, requests that ask for no word
    timings are phonemized by espeak-ng alone, as kokoro-onnx does (numbers and currency are read less well, some
    words sound different; `/v1/info` shows `frontend`), and the others wait for misaki. 0 turns ready only with
    misaki loaded."""
    restore_bridge: bool = True
    """After a release, serve the first requests with ONNX Runtime (opens in ~0.5 s) while
    OpenVINO's compiled model is imported in the background, then switch to OpenVINO."""
    bridge_spin_us: int = 50
    """Microseconds the bridge's threads (the session kept as the wide session too) spin for their next piece of work
    before they sleep: a lone request's chunk on all threads ran 11-18 % faster at the same CPU time on the Xeon with
    AMX (bench/results/spin-20261204); 0 sleeps at once. The pool's streams are not affected."""
    start_bridge: bool = True
    """At start too, turn ready as soon as the ONNX Runtime bridge is open and warm, and serve with it while
    OpenVINO's compiled model loads in the background (the switch is invisible to clients; a failure of
    that load leaves the bridge serving, logged and shown in `/v1/info` as `primary_error`). Needs
    `TTS_RESTORE_BRIDGE`; 0 turns ready only once OpenVINO is loaded."""
    inference_process: bool = True
    """Run the model in a child process that a release ends: everything the runtimes held goes back
    to the system (in process about 170 MB stays), and a crash inside a runtime fails only the
    requests in flight; the next request starts a fresh one. 0 runs the model in the server's process."""
    released_bridge: bool = False
    """After a release, start a fresh inference process at once that opens only the ONNX Runtime bridge and holds
    it while released: the next request is served by that session without waiting for a process, its imports and
    the session's opening (a restore's 0.45-0.75 s here), and the primary loads behind that request as after any
    restore. It costs the released state that process and its session: about 180 MB on a Xeon, 195 MB on an AVX2
    EPYC (README, "Lifecycle"). Needs `TTS_INFERENCE_PROCESS` and `TTS_RESTORE_BRIDGE`; ignored (and logged) without
    them."""
    released_process: bool = True
    """After a release, start the next inference process at once: it imports its runtime, gives back the page cache
    and library pages that read, and waits holding no model, so a restore skips the process's start and imports
    (the restore 0.52-0.60 s instead of 0.70-0.90 s on a 2-vCPU AMD EPYC, for 34 MB of released memory: README,
    "Lifecycle"). Needs `TTS_INFERENCE_PROCESS`; `TTS_RELEASED_BRIDGE` (a process with its bridge open) takes its
    place where set. 0: nothing runs while released but the server."""
    malloc_arenas: int = 2
    """glibc malloc arenas (``M_ARENA_MAX``); fewer arenas return more memory on release; 0 keeps glibc's default."""
    malloc_mmap_threshold_kb: int = 256
    """Allocations of this many KiB or more get a mapping of their own, given back when freed
    (``M_MMAP_THRESHOLD``): the warm peak under load 163 MiB lower here at the same speed; 0 keeps glibc's
    sliding threshold, which keeps large freed blocks in the heap."""
    web: bool = True
    """Serve the page at ``/web`` to try voices, blends, formats and speeds from a browser (it calls the
    same API, so ``TTS_API_KEY`` still applies to speech); 0 answers 404 there."""
    admin_token: str = ""
    """Bearer token for admin endpoints (manual release); empty disables them."""
    api_key: str = ""
    """Bearer token required on every endpoint but ``/healthz`` and ``/readyz``; empty means open."""
    metrics_token: str = ""
    """Bearer token for ``/metrics`` alone (a scraper need not hold the API key); empty means ``/metrics``
    takes ``TTS_API_KEY`` like the other endpoints."""
    send_timeout_s: float = 20.0
    """Seconds a streamed response may wait for its client to take bytes before it is aborted: its
    synthesis stops, its admission place is freed, and ``tts_send_timeouts_total`` counts it. The body
    goes out in writes of at most 16 KiB and uvicorn waits once about 64 KiB are unsent, so a client is
    cut when it accepts less than about 48 KiB in this time (a client that reads slowly but keeps reading
    is not). 0 waits for ever."""
    recovery_backoff_s: float = 2.0
    """Seconds before the first background retry of a load or restore that failed; the wait doubles
    after each failed retry, up to 60 s. Readiness comes back by itself when the cause was passing."""
    recovery_attempts: int = 5
    """Failed loads or restores in a row after which ``/healthz`` answers 503 (so the platform restarts
    the container); the retries go on at the longest wait. With the defaults that is 2 + 4 + 8 + 16 = 30 s
    of waits plus the five attempts themselves. 0 keeps ``/healthz`` at 200 however many fail."""
    shutdown_grace_s: float = 10.0
    """Seconds in-flight streams get to finish after SIGTERM."""
    log_level: str = "info"
    """Python logging level name."""

    @classmethod
    def from_process(cls) -> Settings:
        """`from_env` on this process's environment (for entry points other than ``python -m app``)."""
        return cls.from_env(os.environ)

    @classmethod
    def from_env(cls, env: Mapping[str, str], **overrides: Any) -> Settings:
        """Build settings from ``TTS_*`` variables (and ``PORT``); ``overrides`` win over both."""
        values: dict[str, Any] = {}
        if "PORT" in env and f"{PREFIX}PORT" not in env:
            values["port"] = _convert("PORT", env["PORT"], int)
        for f in dataclasses.fields(cls):
            name = f"{PREFIX}{f.name.upper()}"
            if name in env:
                values[f.name] = _convert(name, env[name], _kind(f))
        for key, value in overrides.items():
            if value is not None:
                values[key] = value
        return cls(**values)

    def __post_init__(self) -> None:
        checks = [
            ("backend", self.backend in BACKENDS, f"one of {', '.join(BACKENDS)}"),
            ("precision", self.precision in PRECISIONS, f"one of {', '.join(PRECISIONS)}"),
            ("port", 0 <= self.port <= 65535, "a TCP port"),
            ("streams", self.streams >= 0, "0 (auto) or more"),
            ("threads_per_stream", self.threads_per_stream >= 0, "0 (auto) or more"),
            ("queue_size", self.queue_size >= 0, "0 (auto) or more"),
            ("scheduler", self.scheduler in SCHEDULERS, f"one of {', '.join(SCHEDULERS)}"),
            ("deadline_margin_s", 0 <= self.deadline_margin_s <= 60, "between 0 and 60"),
            ("first_chunk_credit_s", 0 <= self.first_chunk_credit_s <= 60, "between 0 and 60"),
            ("express_slots", 0 <= self.express_slots <= 64, "between 0 (off) and 64"),
            ("realtime_factor", 0 <= self.realtime_factor <= 100, "0 (off) or a positive factor up to 100"),
            ("realtime_max_hold_s", 0 <= self.realtime_max_hold_s <= 3600, "0 (no bound) or seconds up to 3600"),
            ("slack_headroom", 0 <= self.slack_headroom <= 100, "0 (off) or a positive factor up to 100"),
            ("shape_cache", self.shape_cache >= -1, "-1 (OpenVINO's default), 0 (off) or more"),
            ("tune_memory_price", 0 <= self.tune_memory_price <= 10, "between 0 and 10"),
            ("max_input_chars", self.max_input_chars > 0, "positive"),
            ("first_chunk_tokens", 10 <= self.first_chunk_tokens <= 510, "between 10 and 510"),
            ("lone_first_chunk_tokens", self.lone_first_chunk_tokens == 0 or 5 <= self.lone_first_chunk_tokens <= 510,
             "0 (off) or between 5 and 510"),
            ("idle_first_chunk_tokens", self.idle_first_chunk_tokens == 0 or 10 <= self.idle_first_chunk_tokens <= 510,
             "0 or between 10 and 510"),
            ("second_chunk_tokens", self.second_chunk_tokens == 0 or 10 <= self.second_chunk_tokens <= 510,
             "0 (twice the first chunk's) or between 10 and 510"),
            ("max_chunk_tokens", 10 <= self.max_chunk_tokens <= 510, "between 10 and 510"),
            ("busy_short_streams", 0 <= self.busy_short_streams <= 64, "between 0 (off) and 64"),
            ("busy_max_chunk_tokens", self.busy_max_chunk_tokens == 0 or 10 <= self.busy_max_chunk_tokens <= 510,
             "0 or between 10 and 510"),
            ("wide_chunk_tokens", self.wide_chunk_tokens == 0 or 10 <= self.wide_chunk_tokens <= 510,
             "0 (off) or between 10 and 510"),
            ("bridge_spin_us", 0 <= self.bridge_spin_us <= 10000, "between 0 (sleep at once) and 10000"),
            ("wide_form", self.wide_form in WIDE_FORMS, f"one of {', '.join(WIDE_FORMS)}"),
            ("wide_trials", 0 <= self.wide_trials <= 100, "between 0 (unmeasured) and 100"),
            ("lang", self.lang in ("en-us", "en-gb"), "en-us or en-gb"),
            ("quiet_window_s", self.quiet_window_s >= 0, "0 (off) or more"),
            ("shutdown_grace_s", self.shutdown_grace_s >= 0, "0 or more"),
            ("send_timeout_s", self.send_timeout_s >= 0, "0 (off) or more"),
            ("recovery_backoff_s", self.recovery_backoff_s > 0, "positive"),
            ("recovery_attempts", self.recovery_attempts >= 0, "0 (off) or more"),
            ("malloc_arenas", self.malloc_arenas >= 0, "0 (glibc default) or more"),
            ("malloc_mmap_threshold_kb", 0 <= self.malloc_mmap_threshold_kb <= 32768,
             "between 0 (glibc default) and 32768"),
            ("model_sha256", self.model_sha256 == "" or _is_sha256(self.model_sha256), "64 hex digits or empty"),
        ]
        try:
            self.alias_table()
        except ValueError as exc:
            raise SettingsError(f"{PREFIX}VOICE_ALIASES={self.voice_aliases!r}: {exc}") from None
        for name, ok, expected in checks:
            if not ok:
                raise SettingsError(f"{PREFIX}{name.upper()}={getattr(self, name)!r}: must be {expected}")

    def alias_table(self) -> dict[str, str]:
        """`voice_aliases` as a dict; raises ValueError on bad syntax."""
        out: dict[str, str] = {}
        for item in filter(None, (part.strip() for part in self.voice_aliases.split(","))):
            alias, sep, target = (s.strip() for s in item.partition("="))
            if not sep or not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", alias) or not target:
                raise ValueError(f"{item!r} is not 'alias=voice'")
            out[alias] = target
        return out

    def public(self) -> dict[str, Any]:
        """Settings as JSON-safe values, secrets masked (for logs and the info endpoint)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in SECRETS:
                value = "set" if value else ""
            out[f.name] = str(value) if isinstance(value, Path) else value
        return out


def _is_sha256(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text.lower())


def _kind(f: dataclasses.Field[Any]) -> type:
    text = str(f.type)
    for kind in (bool, int, float):
        if text == kind.__name__:
            return kind
    return Path if "Path" in text else str


def _convert(name: str, raw: str, kind: type) -> Any:
    raw = raw.strip()
    try:
        if kind is bool:
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(raw)
        if kind is Path:
            return Path(raw) if raw else None
        return kind(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: expected {kind.__name__}") from None


def documented() -> list[tuple[str, str, str]]:
    """(variable, default, description) for every setting, from the attribute docstrings."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(Settings))
    docs: dict[str, str] = {}
    body = tree.body[0].body  # type: ignore[attr-defined]
    for node, after in zip(body, body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                docs[node.target.id] = str(after.value.value)
    rows = []
    for f in dataclasses.fields(Settings):
        default = f.default if f.default is not dataclasses.MISSING else "~/.cache/kokoro-tts"
        rows.append((f"{PREFIX}{f.name.upper()}", str(default), " ".join(docs.get(f.name, "").split())))
    return rows


TABLE_START = "<!-- generated by `python -m app.settings --readme docs/configuration.md`; do not edit -->"
TABLE_END = "<!-- end of settings table -->"


def table() -> str:
    """The README's settings table, from `documented` (reStructuredText ``code`` becomes Markdown `code`)."""
    lines = [TABLE_START, "| variable | default | meaning |", "|---|---|---|"]
    for name, default, text in documented():
        shown = "unset" if default == "None" else f"`{default}`" if default else "empty"
        # A docstring's results folder may be one git history keeps: named, not linked as a path in the tree.
        meaning = text.replace("``", "`").replace("|", "\\|").replace("bench/results/", "results ")
        lines.append(f"| `{name}` | {shown} | {meaning} |")
    return "\n".join([*lines, TABLE_END])


def with_table(readme: str) -> str:
    """``readme`` with its settings table (between the markers) replaced by the current `table`."""
    start, end = readme.index(TABLE_START), readme.index(TABLE_END) + len(TABLE_END)
    return readme[:start] + table() + readme[end:]


def main(argv: list[str]) -> int:
    """``python -m app.settings``: print the table; ``--readme PATH``: rewrite it in that file."""
    if argv[:1] == ["--readme"] and len(argv) == 2:
        path = Path(argv[1])
        path.write_text(with_table(path.read_text()))
    else:
        sys.stdout.write(table() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
