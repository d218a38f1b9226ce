"""Audio for voice agents in the shapes their protocols name: ``codec_rate[_bitrate]`` (ElevenLabs' ``output_format``).

``pcm_16000`` is raw 16-bit little-endian mono at 16 kHz, ``ulaw_8000`` G.711 mu-law at 8 kHz for telephony,
``mp3_44100_128`` MP3 at 44.1 kHz and 128 kbit/s. The model speaks at 24 kHz; other rates go through FFmpeg's
resampler (libswresample) and the G.711 and MP3 encoders through FFmpeg's own (libmp3lame for MP3), all from PyAV,
which the server already ships for AAC (`app.audio`). One `Output` per stream of audio: the resampler and the MP3
encoder keep state across chunks, so a stream cut into chunks gives the same bytes as one whole, and `finish` hands
out what they still hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from app.audio import SAMPLE_RATE

PCM_RATES = (8000, 16000, 22050, 24000, 32000, 44100, 48000)
MP3_RATES = (22050, 24000, 44100)
MP3_KBPS = (32, 64, 96, 128, 192)
DEFAULT = "mp3_44100_128"
"""ElevenLabs' default ``output_format``."""


@dataclass(frozen=True)
class OutputFormat:
    codec: str
    """``pcm``, ``ulaw``, ``alaw`` or ``mp3``."""
    rate: int
    kbps: int = 0

    @classmethod
    def parse(cls, name: str) -> OutputFormat:
        """The format ``name`` says, or ValueError with the names this server makes."""
        parts = name.strip().lower().split("_")
        try:
            if parts[0] == "pcm" and len(parts) == 2 and int(parts[1]) in PCM_RATES:
                return cls("pcm", int(parts[1]))
            if parts[0] in ("ulaw", "alaw") and parts[1:] == ["8000"]:
                return cls(parts[0], 8000)
            if (parts[0] == "mp3" and len(parts) == 3 and int(parts[1]) in MP3_RATES
                    and int(parts[2]) in MP3_KBPS):
                return cls("mp3", int(parts[1]), int(parts[2]))
        except ValueError:
            pass
        raise ValueError(f"output_format {name!r} is not one this server makes: pcm_<{'|'.join(map(str, PCM_RATES))}>, "
                         f"ulaw_8000, alaw_8000, mp3_<{'|'.join(map(str, MP3_RATES))}>_<"
                         f"{'|'.join(map(str, MP3_KBPS))}>")

    @property
    def name(self) -> str:
        return f"{self.codec}_{self.rate}" + (f"_{self.kbps}" if self.kbps else "")


_CODECS = {"ulaw": "pcm_mulaw", "alaw": "pcm_alaw", "mp3": "libmp3lame"}


class Output:
    """Float chunks at the model's rate in, bytes of one `OutputFormat` out. One owner; not thread-safe."""

    def __init__(self, fmt: OutputFormat) -> None:
        import av

        self.format = fmt
        self._resampler: Any = (av.AudioResampler(format="s16", layout="mono", rate=fmt.rate)
                                if fmt.rate != SAMPLE_RATE else None)
        self._codec: Any = None
        if fmt.codec in _CODECS:
            self._codec = av.CodecContext.create(_CODECS[fmt.codec], "w")
            self._codec.sample_rate = fmt.rate
            self._codec.layout = "mono"
            self._codec.format = "s16p" if fmt.codec == "mp3" else "s16"
            if fmt.kbps:
                self._codec.bit_rate = fmt.kbps * 1000
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

        pcm = (np.clip(samples, -1.0, 1.0) * 32767.0).astype(np.int16).reshape(1, -1)
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
            if self.format.codec == "mp3":
                frame = _planar(frame)
            frame.pts = None
            for packet in self._codec.encode(frame):
                out += bytes(packet)
        return bytes(out)


def _planar(frame: Any) -> Any:
    """The same mono s16 samples as an s16p frame (libmp3lame takes planar samples only)."""
    import av

    planar = av.AudioFrame.from_ndarray(frame.to_ndarray().reshape(1, -1), format="s16p", layout="mono")
    planar.sample_rate = frame.sample_rate
    return planar
