"""Audio encoders for streamed and whole responses.

How each format streams, chosen so that what is sent opens in libsndfile, FFmpeg and browsers
with a correct length or none (a stream cannot go back to patch its header):

- ``wav``: 0xFFFFFFFF in the RIFF and data sizes, the convention decoders read as "to the end".
- ``pcm``: raw 16-bit little-endian mono at 24 kHz, no header.
- ``mp3``: constant bitrate (64 kbit/s) without the Xing/Info tag frame, which LAME fills only at
  close; decoders then count frames from the size, which is right for a constant bitrate (with
  the default variable bitrate libsndfile guessed the length from the first frame: 5,868 or
  324,288 frames for 57,600 samples). Whole files stay variable bitrate with an exact tag.
- ``opus``: Ogg pages; the last page's granule position gives the exact length.
- ``aac``: ADTS frames (FFmpeg's encoder through PyAV), self-delimiting, no length anywhere.
  libsndfile does not read AAC at all.
- ``flac``: *not progressive*. A FLAC stream of unknown length says 0 samples in STREAMINFO, which
  libsndfile reads as 2^63-1 frames (``soundfile.read`` fails: "array is too big"), so a streamed
  FLAC is held until the end and sent whole, with its exact total.

MP3, Opus and FLAC go through libsndfile (``soundfile``) writing into `_Sink`: at close libsndfile
seeks back to patch headers it has already written; for a stream those patches are dropped.
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
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
PROGRESSIVE = frozenset({"mp3", "opus", "aac", "wav", "pcm"})
"""Formats sent as they are synthesized; the others are sent whole, with exact headers, at the end."""
_SOUNDFILE = {"mp3": ("MP3", "MPEG_LAYER_III"), "opus": ("OGG", "OPUS"), "flac": ("FLAC", "PCM_16")}
_MP3_STREAM_LEVEL = 0.6
"""libsndfile's compression level for streamed MP3: 64 kbit/s at constant bitrate (24 kHz is MPEG-2)."""


def int16(samples: npt.NDArray[np.float32]) -> npt.NDArray[np.int16]:
    """Float samples as 16-bit little-endian integers, clipped to [-1, 1]: the one conversion every encoder uses."""
    return (np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2")


def to_int16(samples: npt.NDArray[np.float32]) -> bytes:
    return int16(samples).tobytes()


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
        self.progressive = streaming and fmt in PROGRESSIVE
        """Bytes come out chunk by chunk; otherwise all of them come out of `finish`."""
        self._started = False
        self._sink: _Sink | None = None
        self._file: Any = None
        self._aac: _AacWriter | None = None
        if fmt == "aac":
            self._aac = _AacWriter()
        elif fmt in _SOUNDFILE:
            import soundfile

            container, subtype = _SOUNDFILE[fmt]
            self._sink = _Sink(keep_patches=not self.progressive)
            cbr = {"compression_level": _MP3_STREAM_LEVEL, "bitrate_mode": "CONSTANT"}
            self._file = soundfile.SoundFile(self._sink, "w", SAMPLE_RATE, 1, subtype, format=container,
                                             **(cbr if fmt == "mp3" and self.progressive else {}))

    def encode(self, samples: npt.NDArray[np.float32]) -> bytes:
        if self._aac is not None:
            out = self._aac.write(samples)
            return out if self.progressive else self._aac.hold(out)
        if self._file is not None and self._sink is not None:
            self._file.write(np.clip(samples, -1.0, 1.0))
            if not self.progressive:
                return b""
            out = self._sink.take()
            if self.format == "mp3" and not self._started and out:
                out = _drop_tag_placeholder(out)
            self._started = self._started or bool(out)
            return out
        out = to_int16(samples)
        if self.format == "wav" and not self._started and self.progressive:
            out = wav_header(None) + out
        self._started = True
        return out

    def finish(self) -> bytes:
        """The bytes that end the stream (or, not progressive, the whole file for encoded formats)."""
        if self._aac is not None:
            return self._aac.close()
        if self._file is not None and self._sink is not None:
            self._file.close()
            return self._sink.take()
        if self.format == "wav" and self.progressive and not self._started:
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


_CODECS = {"ulaw": "pcm_mulaw", "alaw": "pcm_alaw", "mp3": "libmp3lame"}


class Resampled:
    """Float chunks at the model's rate in, bytes at ``rate`` out: raw 16-bit PCM (``pcm``), G.711 (``ulaw``,
    ``alaw``) or MP3 at ``kbps`` (the voice agents' formats, `app.agents.output`), through FFmpeg's resampler and
    encoders from PyAV. The resampler and the MP3 encoder keep state across chunks, so a stream cut into chunks gives
    the same bytes as one whole, and `finish` hands out what they still hold. One owner; not thread-safe."""

    def __init__(self, codec: str, rate: int, kbps: int = 0) -> None:
        import av

        self.codec = codec
        self._resampler: Any = (av.AudioResampler(format="s16", layout="mono", rate=rate)
                                if rate != SAMPLE_RATE else None)
        self._codec: Any = None
        if codec in _CODECS:
            self._codec = av.CodecContext.create(_CODECS[codec], "w")
            self._codec.sample_rate = rate
            self._codec.layout = "mono"
            self._codec.format = "s16p" if codec == "mp3" else "s16"
            if kbps:
                self._codec.bit_rate = kbps * 1000
            self._codec.open()
        self._pts = 0

    def encode(self, samples: npt.NDArray[np.float32]) -> bytes:
        return self._out(self._resample(samples))

    def finish(self) -> bytes:
        """What the resampler and the encoder still hold; the output is done after it."""
        frames = self._resampler.resample(None) if self._resampler is not None else []
        out = self._out(frames)
        if self._codec is not None:
            out += b"".join(bytes(p) for p in self._codec.encode(None))
        return out

    def _resample(self, samples: npt.NDArray[np.float32]) -> list[Any]:
        import av

        pcm = int16(samples).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
        frame.sample_rate = SAMPLE_RATE
        frame.pts = self._pts
        self._pts += pcm.shape[1]
        return list(self._resampler.resample(frame)) if self._resampler is not None else [frame]

    def _out(self, frames: list[Any]) -> bytes:
        if self._codec is None:
            return b"".join(f.to_ndarray().astype("<i2").tobytes() for f in frames)
        out = bytearray()
        for frame in frames:
            if self.codec == "mp3":
                frame = _planar_s16(frame)
            frame.pts = None
            for packet in self._codec.encode(frame):
                out += bytes(packet)
        return bytes(out)


def _planar_s16(frame: Any) -> Any:
    """The same mono s16 samples as an s16p frame (libmp3lame takes planar samples only)."""
    import av

    planar = av.AudioFrame.from_ndarray(frame.to_ndarray().reshape(1, -1), format="s16p", layout="mono")
    planar.sample_rate = frame.sample_rate
    return planar


class _AacWriter:
    """AAC-LC in ADTS frames from FFmpeg's native encoder (PyAV); FFmpeg buffers to 1024-sample frames."""

    def __init__(self) -> None:
        import av

        self._out = _Buffer()
        self._held = bytearray()
        self._container: Any = av.open(self._out, "w", format="adts")
        self._stream: Any = self._container.add_stream("aac", rate=SAMPLE_RATE, layout="mono")
        self._stream.bit_rate = 64000
        self._pts = 0

    def write(self, samples: npt.NDArray[np.float32]) -> bytes:
        import av

        frame = av.AudioFrame.from_ndarray(np.clip(samples, -1.0, 1.0).astype(np.float32).reshape(1, -1),
                                           format="flt", layout="mono")
        frame.sample_rate = SAMPLE_RATE
        frame.pts = self._pts
        self._pts += len(samples)
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        return self._out.take()

    def hold(self, data: bytes) -> bytes:
        self._held.extend(data)
        return b""

    def close(self) -> bytes:
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        out = bytes(self._held) + self._out.take()
        self._held.clear()
        return out


class _Buffer:
    """A write-only byte sink whose new bytes can be taken as they come (ADTS never seeks)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def write(self, data: bytes) -> int:
        self._buf.extend(data)
        return len(data)

    def take(self) -> bytes:
        out = bytes(self._buf)
        self._buf.clear()
        return out


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
