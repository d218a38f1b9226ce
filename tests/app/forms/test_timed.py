"""The timed model: the embedded graph with its per-token durations as a second output. Audio is
bit-identical to the unmodified graph on ONNX Runtime, and the durations account for every sample."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.forms import modelfile, timed
from app.text.vocab import Vocab
from app.voices import VoiceBank

PHRASES = ["həlˈO.", "həlˈO ðˈɛɹ, ðɪs ɪz ə tˈɛst əv ðə dʊɹˈAʃən ˈWtpʊt."]


@pytest.fixture(scope="module")
def model(cache_dir: Path) -> Path:
    return modelfile.resolve(None, [cache_dir / "models"])


def session(path: Path) -> object:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def test_the_timed_copy_speaks_bit_identically_and_its_durations_cover_the_audio(model: Path, tmp_path: Path) -> None:
    copy = timed.derive(model, tmp_path)
    assert copy is not None and copy != model
    assert copy.read_bytes()[:model.stat().st_size] == model.read_bytes()  # the original bytes, then the output
    plain, with_durations = session(model), session(copy)
    assert [o.name for o in with_durations.get_outputs()] == ["audio", timed.DURATION_TENSORS[0]]  # type: ignore[attr-defined]
    vocab, voice = Vocab.embedded(), VoiceBank.load(None).resolve("af_heart")
    # Each phrase at one speed: the short one as written, the longer one faster (durations scaled by the speed).
    for phrase, speed in zip(PHRASES, (1.0, 1.5), strict=True):
        ids = vocab.ids(phrase)
        feed = {"tokens": np.array([[0, *ids, 0]], dtype=np.int64), "style": voice.style_for(len(ids)),
                "speed": np.array([speed], dtype=np.float32)}
        (reference,) = plain.run(["audio"], feed)  # type: ignore[attr-defined]
        audio, durations = with_durations.run(None, feed)  # type: ignore[attr-defined]
        assert np.array_equal(audio, reference)
        assert durations.dtype == np.int64 and durations.reshape(-1).size == len(ids) + 2
        assert durations.sum() * 600 == audio.size  # one unit is 600 samples (25 ms)


def test_the_copy_is_made_once_and_remade_when_the_source_changes(model: Path, tmp_path: Path) -> None:
    source = tmp_path / "model.onnx"
    source.write_bytes(model.read_bytes())
    first = timed.derive(source, tmp_path / "out")
    assert first is not None
    made = first.stat().st_mtime_ns
    assert timed.derive(source, tmp_path / "out") == first and first.stat().st_mtime_ns == made
    source.write_bytes(model.read_bytes())  # touched: a new mtime
    again = timed.derive(source, tmp_path / "out")
    assert again == first and first.stat().st_mtime_ns != made
    assert modelfile.sha256_of(first) != modelfile.sha256_of(source)  # its own compile-cache key
    assert timed.digest(first) == modelfile.sha256_of(first)  # recorded when made, so no start hashes it


def test_the_server_runs_the_timed_copy_keyed_on_its_own_hash(model: Path, tmp_path: Path) -> None:
    from app.runtime import compile_cache
    from app.served import served_model
    from app.settings import Settings

    path, digest = served_model(Settings(cache_dir=model.parents[1]), model.parents[1])
    assert path.name == "kokoro-v1.0.int8.timed.onnx" and digest == timed.digest(path)
    assert digest != modelfile.expected_sha256()
    target = compile_cache.Target("2026.4.1-1", "avx512", "some cpu")
    # An OpenVINO cache compiled for the shipped file is never handed to the timed copy, nor a tuning manifest.
    assert compile_cache.cache_key(path, digest, target=target) != compile_cache.cache_key(
        model, modelfile.expected_sha256(), target=target)


def test_openvino_speaks_the_timed_copy_bit_identically(model: Path, tmp_path: Path) -> None:
    """The audio served does not change: OpenVINO on the timed copy against OpenVINO on the shipped graph."""
    from app.runtime import compile_cache
    from app.runtime.backends.openvino import OpenVinoBackend
    from app.served import served_model
    from app.settings import Settings
    from app.sizing import PoolShape

    # The copy the session's servers run, in their compile cache: imported where a server compiled it already.
    copy, digest = served_model(Settings(cache_dir=model.parents[1]), model.parents[1])
    cache, _ = compile_cache.choose(None, model.parents[1] / "openvino", copy, digest)
    shape = PoolShape(streams=1, threads_per_stream=1)
    plain = OpenVinoBackend(model, shape, runtime_defaults=False, precision="f32", cache_dir=None)
    with_durations = OpenVinoBackend(copy, shape, runtime_defaults=False, precision="f32", cache_dir=cache)
    plain.load()
    with_durations.load()
    vocab, voice = Vocab.embedded(), VoiceBank.load(None).resolve("af_heart")
    # The longer phrase, faster than as written (durations scaled by the speed), once: the compile of the shipped
    # graph is most of this test's time; ONNX Runtime's test above takes both phrases.
    tokens = vocab.tokens(PHRASES[1])
    style = voice.style_for(tokens.shape[1] - 2)
    reference = plain.infer_timed(0, tokens, style, 1.5)
    done = with_durations.infer_timed(0, tokens, style, 1.5)
    assert np.array_equal(done.audio, reference.audio) and reference.durations is None
    assert done.durations is not None and done.durations.size == tokens.shape[1]
    assert int(done.durations.sum()) * 600 == done.audio.size


def test_a_model_without_the_duration_tensor_gets_no_copy(tmp_path: Path) -> None:
    other = tmp_path / "other.onnx"
    other.write_bytes(b"\x08\x07" + b"\0" * 64)
    assert timed.duration_tensor(other) is None and timed.derive(other, tmp_path / "out") is None


def test_the_fragment_is_a_graph_output_as_onnx_reads_it() -> None:
    onnx = pytest.importorskip("onnx")
    model = onnx.ModelProto()
    model.ParseFromString(timed.output_fragment("/encoder/Cast_output_0"))
    (output,) = model.graph.output
    assert output.name == "/encoder/Cast_output_0" and output.type.tensor_type.elem_type == onnx.TensorProto.INT64
