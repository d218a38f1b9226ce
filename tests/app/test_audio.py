"""Every format decodes with a standard decoder, streamed chunk by chunk or whole."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

from app.audio import FORMATS, PROGRESSIVE, SAMPLE_RATE, Encoder, whole


def _tone(seconds: float, phase: float = 0.0) -> np.ndarray:
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t + phase)).astype(np.float32)


CHUNKS = [_tone(0.4), _tone(0.7, 1.0), _tone(0.2, 2.0)]
TOTAL = sum(len(c) for c in CHUNKS)


LIBSNDFILE = [f for f in FORMATS if f != "aac"]
"""libsndfile reads every format but AAC (it has no AAC decoder at all)."""
EXACT = ("wav", "pcm", "flac")
"""Lossless formats decode to exactly the samples sent; lossy codecs add priming and padding."""


def _decode(fmt: str, data: bytes) -> np.ndarray:
    """Decode with FFmpeg (PyAV), the decoder most players use."""
    return decode_with_ffmpeg(data, fmt)


def decode_with_ffmpeg(data: bytes, fmt: str = "") -> np.ndarray:
    """All samples FFmpeg decodes (resampled to 24 kHz for Opus, which always decodes at 48 kHz)."""
    import av

    # pcm is headerless: FFmpeg needs to be told what it is, as a player would be.
    options = {"format": "s16le", "options": {"sample_rate": str(SAMPLE_RATE), "ch_layout": "mono"}} \
        if fmt == "pcm" else {}
    frames = []
    with av.open(io.BytesIO(data), **options) as container:
        stream = container.streams.audio[0]
        assert stream.codec_context.sample_rate in (SAMPLE_RATE, 48000)
        resample = stream.codec_context.sample_rate != SAMPLE_RATE
        for frame in container.decode(stream):
            frames.append(frame.to_ndarray().reshape(-1).astype(np.float32))
    samples = np.concatenate(frames)
    if samples.dtype.kind == "i":
        samples = samples / 32768
    return samples[::2] if resample else samples


def decode_with_soundfile(fmt: str, data: bytes) -> tuple[np.ndarray, int]:
    """libsndfile's samples (``soundfile.read``) and the length its header claims (``frames``)."""
    import soundfile as sf

    raw = {"format": "RAW", "subtype": "PCM_16", "samplerate": SAMPLE_RATE, "channels": 1} if fmt == "pcm" else {}
    with sf.SoundFile(io.BytesIO(data), **raw) as handle:
        declared = handle.frames
        assert handle.samplerate == SAMPLE_RATE
    samples, _ = sf.read(io.BytesIO(data), dtype="float32", **raw)
    return samples, declared


def _stream(fmt: str) -> tuple[list[bytes], bytes]:
    encoder = Encoder(fmt, streaming=True)
    parts = [encoder.encode(c) for c in CHUNKS] + [encoder.finish()]
    return parts, b"".join(parts)


def _check_length(fmt: str, n: int) -> None:
    # Lossy codecs pad or trim a frame at the ends; lossless ones are exact.
    assert abs(n - TOTAL) <= (0 if fmt in EXACT else 2048), (fmt, n, TOTAL)


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("streaming", [True, False])
def test_every_format_opens_in_ffmpeg_with_its_length(fmt: str, streaming: bool) -> None:
    data = _stream(fmt)[1] if streaming else whole(fmt, CHUNKS)
    decoded = decode_with_ffmpeg(data, fmt)
    _check_length(fmt, len(decoded))
    assert np.isfinite(decoded).all() and np.abs(decoded).max() > 0.1


@pytest.mark.parametrize("fmt", LIBSNDFILE)
@pytest.mark.parametrize("streaming", [True, False])
def test_every_format_opens_in_libsndfile_with_a_true_length(fmt: str, streaming: bool) -> None:
    data = _stream(fmt)[1] if streaming else whole(fmt, CHUNKS)
    samples, declared = decode_with_soundfile(fmt, data)
    assert declared == len(samples)  # the header (or the size) tells the truth
    _check_length(fmt, len(samples))
    assert np.abs(samples).max() > 0.1


def test_libsndfile_does_not_read_aac() -> None:
    import soundfile as sf

    with pytest.raises(sf.LibsndfileError):
        sf.read(io.BytesIO(_stream("aac")[1]))


@pytest.mark.parametrize("fmt", sorted(PROGRESSIVE))
def test_progressive_formats_send_audio_before_the_end(fmt: str) -> None:
    parts, _ = _stream(fmt)
    assert Encoder(fmt, streaming=True).progressive
    assert sum(len(p) for p in parts[:-1]) > 0.5 * sum(len(p) for p in parts)


def test_streamed_flac_is_held_and_sent_whole_with_its_exact_length() -> None:
    parts, data = _stream("flac")
    assert not Encoder("flac", streaming=True).progressive
    assert not any(parts[:-1]) and data == whole("flac", CHUNKS)


def test_streamed_mp3_is_constant_bitrate_without_a_placeholder_tag() -> None:
    import av

    _, data = _stream("mp3")
    with av.open(io.BytesIO(data)) as container:
        sizes = {packet.size for packet in container.demux(audio=0) if packet.size}
    assert max(sizes) - min(sizes) <= 1  # constant bitrate: frames differ only by a padding byte
    assert b"Xing" not in data[:1024] and b"Info" not in data[:1024]


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
