"""The express lane on the real model: a slot beyond the streams runs concurrently on one of ONNX Runtime's sessions
(or on an OpenVINO infer request of its own) and makes the same audio."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from app.runtime import modelfile
from app.runtime.backends.onnxruntime import OnnxRuntimeBackend
from app.sizing import PoolShape
from app.text.vocab import Vocab
from app.voices import VoiceBank


@pytest.fixture(scope="module")
def model(cache_dir: Path) -> Path:
    return modelfile.resolve(None, [cache_dir / "models"])


def _inputs(text: str) -> tuple[np.ndarray, np.ndarray]:
    ids = Vocab.embedded().ids(text)
    return np.array([[0, *ids, 0]], dtype=np.int64), VoiceBank.load(None).resolve("af_heart").style_for(len(ids))


def test_an_express_slot_runs_beside_its_sessions_own_call_with_the_same_audio(model: Path) -> None:
    backend = OnnxRuntimeBackend(model, PoolShape(2, 1), runtime_defaults=False)
    assert backend.load().slots == 2
    long_tokens, long_style = _inputs("ðɪs ɪz ə lˈɔŋɡɚ sˈɛntəns, ðæt kˈiːps ðə fˈɜːst sˈɛʃən bˈɪzi fɔːɹ ə wˈaɪl.")
    short_tokens, short_style = _inputs("həlˈO ðˈɛɹ.")
    reference = backend.infer(0, short_tokens, short_style, 1.0)
    long_reference = backend.infer(0, long_tokens, long_style, 1.0)

    results: dict[str, np.ndarray] = {}
    inside = threading.Event()

    def long_call() -> None:
        inside.set()
        results["long"] = backend.infer(0, long_tokens, long_style, 1.0)

    thread = threading.Thread(target=long_call)
    thread.start()
    inside.wait(5)
    results["express"] = backend.infer(2, short_tokens, short_style, 1.0)  # slot 2 of a 2-stream backend
    thread.join(30)
    assert np.array_equal(results["express"], reference)
    assert np.array_equal(results["long"], long_reference)  # the session's own call is not disturbed
