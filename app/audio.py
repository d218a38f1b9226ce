"""Audio encoders for streamed and whole responses.

Every format is encoded incrementally, chunk by chunk, so the first bytes leave with the first
chunk. WAV streams with 0xFFFFFFFF in the RIFF and data sizes (the convention decoders accept
for unknown length); ``pcm`` is raw 16-bit little-endian mono at 24 kHz. FLAC, MP3 and Opus
go through libsndfile (``soundfile``) writing into `_Sink`: at close libsndfile seeks back to
patch headers it has already written; bytes already sent cannot change, so for a stream those
patches are dropped, which leaves the "length unknown" values that decoders accept.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt

SAMPLE_RATE = 24000

FORMATS: dict[str, str] = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
_SOUNDFILE = {"mp3": ("MP3", "MPEG_LAYER_III"), "opus": ("OGG", "OPUS"), "flac": ("FLAC", "PCM_16")}


def to_int16(samples: npt.NDArray[np.float32]) -> bytes:
    clipped = np.clip(samples, -1.0, 1.0)
    return (clipped * 32767.0).astype("<i2").tobytes()


def wav_header(n_samples: int | None) -> bytes:
    """A 44-byte PCM WAV header; ``None`` writes 0xFFFFFFFF sizes for a stream of unknown length."""
    data = 0xFFFFFFFF if n_samples is None else n_samples * 2
    riff = 0xFFFFFFFF if n_samples is None else 36 + data
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVEfmt " +
            struct.pack("<IHHIIHH", 16, 1, 1, SAMPLE_RATE, SAMPLE_RATE * 2, 2, 16) +
            b"data" + struct.pack("<I", data))


class Encoder:
    """Turns float chunks into bytes of one format; `finish` flushes what the codec still holds."""

    def __init__(self, fmt: str, *, streaming: bool) -> None:
        if fmt not in FORMATS:
            raise ValueError(fmt)
        self.format = fmt
        self.media_type = FORMATS[fmt]
        self._streaming = streaming
        self._started = False
        self._sink: _Sink | None = None
        self._file: Any = None
        if fmt in _SOUNDFILE:
            import soundfile

            container, subtype = _SOUNDFILE[fmt]
            self._sink = _Sink(keep_patches=not streaming)
            self._file = soundfile.SoundFile(self._sink, "w", SAMPLE_RATE, 1, subtype, format=container)

    def encode(self, samples: npt.NDArray[np.float32]) -> bytes:
        if self._file is not None and self._sink is not None:
            self._file.write(np.clip(samples, -1.0, 1.0))
            if not self._streaming:
                return b""
            out = self._sink.take()
            if self.format == "mp3" and not self._started and out:
                out = _drop_tag_placeholder(out)
            self._started = self._started or bool(out)
            return out
        out = to_int16(samples)
        if self.format == "wav" and not self._started and self._streaming:
            out = wav_header(None) + out
        self._started = True
        return out

    def finish(self) -> bytes:
        """The bytes that end the stream (or, not streaming, the whole file for soundfile formats)."""
        if self._file is not None and self._sink is not None:
            self._file.close()
            return self._sink.take()
        if self.format == "wav" and self._streaming and not self._started:
            return wav_header(None)
        return b""


def whole(fmt: str, chunks: list[npt.NDArray[np.float32]]) -> bytes:
    """A complete file in ``fmt`` with exact sizes in its headers."""
    if fmt == "wav":
        body = b"".join(to_int16(c) for c in chunks)
        return wav_header(len(body) // 2) + body
    encoder = Encoder(fmt, streaming=False)
    body = b"".join(encoder.encode(c) for c in chunks)
    return body + encoder.finish()


def _drop_tag_placeholder(data: bytes) -> bytes:
    """Drop the empty first MP3 frame that LAME fills with its Xing/Info tag at close.

    A stream cannot be patched after it is sent, and an unfilled tag frame (zeros after the
    header) makes decoders misread the start, so streams go out without it.
    """
    if len(data) < 4 or data[0] != 0xFF or (data[1] & 0xE0) != 0xE0:
        return data
    version = (data[1] >> 3) & 0x3  # 3 = MPEG-1, 2 = MPEG-2, 0 = MPEG-2.5
    bitrate_index, rate_index, padding = data[2] >> 4, (data[2] >> 2) & 0x3, (data[2] >> 1) & 0x1
    bitrates = (_MPEG1_L3_KBPS if version == 3 else _MPEG2_L3_KBPS)
    rates = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}.get(version)
    if rates is None or rate_index == 3 or bitrate_index in (0, 15):
        return data
    per_frame = 144 if version == 3 else 72
    length = per_frame * bitrates[bitrate_index] * 1000 // rates[rate_index] + padding
    frame = data[:length]
    payload = frame[4:]
    if len(frame) == length and (not payload.strip(b"\0") or b"Xing" in frame or b"Info" in frame):
        return data[length:]
    return data


_MPEG1_L3_KBPS = (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320)
_MPEG2_L3_KBPS = (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)


class _Sink:
    """A write-only, seekable byte sink for libsndfile whose new bytes can be taken as they come.

    ``keep_patches=False`` drops writes that land before what was already taken (sent).
    """

    def __init__(self, keep_patches: bool) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._taken = 0
        self._keep_patches = keep_patches

    def write(self, data: bytes) -> int:
        data = bytes(data)
        start, end = self._pos, self._pos + len(data)
        if end > len(self._buf):
            self._buf.extend(b"\0" * (end - len(self._buf)))
        lo = start if self._keep_patches else max(start, self._taken)
        if lo < end:
            self._buf[lo:end] = data[lo - start:]
        self._pos = end
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: len(self._buf)}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, size: int = -1) -> bytes:
        return b""

    def flush(self) -> None:
        return None

    def take(self) -> bytes:
        out = bytes(self._buf[self._taken:])
        self._taken = len(self._buf)
        return out
