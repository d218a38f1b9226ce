"""The wide session: a lone chunk on every thread of the pool speaks the streams' bytes, bit for bit.

Same bytes at any load is the server's promise (`app.engine`); the pool runs a chunk on the wide session where it
finds the others idle (`app.pool.schedule`), so its audio must not depend on the thread count. The real served form
(the one `app.served` resolves for this CPU, ``fused`` wherever the tuning on record or the portable default serves),
opened as the server opens it, from its saved graph.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from app import served
from app.runtime.backends.onnxruntime import OnnxRuntimeBackend
from app.settings import Settings
from app.sizing import CpuBudget, PoolShape
from app.text.vocab import Vocab
from app.voices import VoiceBank

PHRASES = ("həlˈO ðˈɛɹ, ðɪs ɪz ə tˈɛst.", "ðə kwˈɪk bɹˈWn fˈɑks ʤˈʌmps ˈOvəɹ ðə lˈAzi dˈɔɡ.")


def test_the_wide_session_speaks_the_streams_bytes(cache_dir: Path) -> None:
    settings = Settings(cache_dir=cache_dir)
    found = served.resolve(settings, CpuBudget(host_logical=2, host_physical=2, affinity=2, quota=None))
    # The server's own saved graph (`app.runtime.spec`): saved by the run's first server on ONNX Runtime, or here.
    saved = found.spec.writable / "onnxruntime"
    backend = OnnxRuntimeBackend(found.spec.model_path, PoolShape(2, 1), runtime_defaults=False, optimized_dir=saved)
    resolved = backend.load()
    assert backend.wide_slot == 2 and resolved.slots == 2 and resolved.extra["wide_threads"] == 2
    deadline = time.monotonic() + 60
    while not backend.wide_open and time.monotonic() < deadline:  # opened behind the streams: wait for it here
        time.sleep(0.05)
    assert backend.wide_open
    vocab, voice = Vocab.embedded(), VoiceBank.load(None).resolve("af_heart")
    for phonemes in PHRASES:
        ids = vocab.ids(phonemes)
        tokens = np.array([[0, *ids, 0]], dtype=np.int64)
        style = voice.style_for(len(ids))
        stream = backend.infer_timed(0, tokens, style, 1.0)
        wide = backend.infer_timed(2, tokens, style, 1.0)
        assert len(stream.audio) > 24_000 and np.array_equal(stream.audio, wide.audio)
        assert stream.durations is not None and np.array_equal(stream.durations, wide.durations)
    one = OnnxRuntimeBackend(found.spec.model_path, PoolShape(1, 2), runtime_defaults=False, optimized_dir=saved)
    assert one.wide_slot is None  # one stream already has every thread
