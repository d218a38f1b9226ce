"""Audio for voice agents in the shapes their protocols name: ``codec_rate[_bitrate]`` (ElevenLabs' ``output_format``).

``pcm_16000`` is raw 16-bit little-endian mono at 16 kHz, ``ulaw_8000`` G.711 mu-law at 8 kHz for telephony,
``mp3_44100_128`` MP3 at 44.1 kHz and 128 kbit/s. The model speaks at 24 kHz; other rates go through FFmpeg's
resampler (libswresample) and the G.711 and MP3 encoders through FFmpeg's own (libmp3lame for MP3), all from PyAV:
`app.audio.Resampled`, beside the server's other encoders. One encoder per stream of audio (`OutputFormat.encoder`).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.audio import Resampled

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

    def encoder(self) -> Resampled:
        """A fresh encoder of this format for one stream of audio."""
        return Resampled(self.codec, self.rate, self.kbps)
