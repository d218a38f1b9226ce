"""Every format decodes with a standard decoder, streamed chunk by chunk or whole."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

from app.audio import FORMATS, SAMPLE_RATE, Encoder, whole


def _tone(seconds: float, phase: float = 0.0) -> np.ndarray:
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t + phase)).astype(np.float32)


CHUNKS = [_tone(0.4), _tone(0.7, 1.0), _tone(0.2, 2.0)]
TOTAL = sum(len(c) for c in CHUNKS)


def _decode(fmt: str, data: bytes) -> np.ndarray:
    """Decode with FFmpeg (PyAV), the decoder most players use; pcm is raw int16."""
    if fmt == "pcm":
        return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32767
    return decode_with_ffmpeg(data)


def decode_with_ffmpeg(data: bytes) -> np.ndarray:
    import av

    frames = []
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        assert stream.codec_context.sample_rate in (SAMPLE_RATE, 48000)  # Opus always decodes at 48 kHz
        resample = stream.codec_context.sample_rate != SAMPLE_RATE
        for frame in container.decode(stream):
            frames.append(frame.to_ndarray().reshape(-1).astype(np.float32))
    samples = np.concatenate(frames)
    if samples.dtype.kind == "i":
        samples = samples / 32768
    return samples[::2] if resample else samples


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_streamed_format_decodes(fmt: str) -> None:
    encoder = Encoder(fmt, streaming=True)
    parts = [encoder.encode(c) for c in CHUNKS] + [encoder.finish()]
    assert parts[0] or fmt in ("opus", "mp3", "flac")  # codecs may hold back their first frames
    decoded = _decode(fmt, b"".join(parts))
    # Lossy codecs pad or trim a frame at the ends; lossless ones are exact.
    tolerance = 0 if fmt in ("wav", "pcm", "flac") else 2048
    assert abs(len(decoded) - TOTAL) <= tolerance
    assert np.isfinite(decoded).all() and np.abs(decoded).max() > 0.1


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_whole_format_decodes(fmt: str) -> None:
    decoded = _decode(fmt, whole(fmt, CHUNKS))
    tolerance = 0 if fmt in ("wav", "pcm", "flac") else 2048
    assert abs(len(decoded) - TOTAL) <= tolerance


def test_streamed_wav_header_says_unknown_length() -> None:
    data = Encoder("wav", streaming=True).encode(CHUNKS[0])
    assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt "
    assert struct.unpack("<I", data[4:8])[0] == 0xFFFFFFFF
    assert struct.unpack("<I", data[40:44])[0] == 0xFFFFFFFF
    rate, = struct.unpack("<I", data[24:28])
    assert rate == SAMPLE_RATE


def test_whole_wav_header_has_exact_sizes() -> None:
    data = whole("wav", CHUNKS)
    assert struct.unpack("<I", data[40:44])[0] == TOTAL * 2
    assert len(data) == 44 + TOTAL * 2


def test_pcm_is_int16_little_endian_and_clipped() -> None:
    loud = np.array([2.0, -2.0, 0.5], dtype=np.float32)
    data = Encoder("pcm", streaming=True).encode(loud)
    assert np.frombuffer(data, dtype="<i2").tolist() == [32767, -32767, 16383]
