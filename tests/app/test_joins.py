"""Chunks join without a click: at every join of a many-chunk utterance, the step from the last sample of a
chunk to the first of the next is no larger than the steps the model makes inside its own chunks.

The real model, in process, with small chunks so that one utterance has many joins (sentence, clause and
word boundaries).
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from app import silence
from app.runtime.spec import Options
from app.services import build_engine
from app.settings import Settings
from app.sizing import read_budget
from app.text import chunker
from tests.conftest import SPEECH_BACKEND

TEXT = ("Well, I think so, but the weather is turning and we should leave soon, before it rains. "
        "The station is far; the last train leaves at nine.")
"""Cut with the bounds below, five chunks: joins at a comma, inside a clause (between two words), at a sentence's end
and at a semicolon."""


FRENCH = ("Eh bien, je pense que oui, mais le temps change et nous devrions partir avant la pluie. "
          "La gare est loin ; le dernier train part à neuf heures.")
"""The same joins in French, which reads on into the next word at a cut between words (`Language.reads_ahead`): that
join is where the word read ahead was cut off."""


@pytest.mark.parametrize(("voice", "text"), [("af_heart", TEXT), ("ff_siwis", FRENCH)], ids=["en", "fr-read-ahead"])
def test_no_discontinuity_at_joins_beyond_the_models_own(cache_dir: Path, voice: str, text: str) -> None:
    settings = Settings(cache_dir=cache_dir, quiet_window_s=0, backend=SPEECH_BACKEND)
    built = build_engine(settings, read_budget(), Options(in_process=True, warm_up=False))
    engine = built.engine
    built.state.restore()
    try:
        plan = engine.plan(text, voice, 1.0)
        # Small chunks: many joins (the server's chunker, with smaller bounds than its constants).
        chunks = tuple(chunker.chunk(plan.phonemes, 20, 40, 40, read_ahead=plan.read_ahead))
        plan = dataclasses.replace(plan, chunks=chunks)
        assert len(plan.chunks) >= 5
        assert plan.read_ahead == (voice == "ff_siwis")
        assert not plan.read_ahead or any(chunker.lookahead(chunks, k) for k in range(len(chunks)))

        async def collect() -> list[npt.NDArray[np.float32]]:
            return [audio async for audio in engine.stream(plan)]

        chunks = asyncio.run(collect())
    finally:
        built.state.close()
    inner = np.concatenate([np.abs(np.diff(c)) for c in chunks])
    own = float(np.percentile(inner, 99.9))
    for k, (before, after) in enumerate(zip(chunks, chunks[1:], strict=False)):
        jump = abs(float(before[-1]) - float(after[0]))
        assert jump <= own, f"join {k}: a step of {jump:.4f}, beyond the model's own (99.9th percentile {own:.4f})"
        # Both sides of a join are quiet: the model starts and ends each chunk near silence.
        assert np.abs(before[-24:]).max() < 0.05 and np.abs(after[:24]).max() < 0.05, f"join {k} is not quiet"
        # The model's own edge silence (about 1 s at a join) is cut to a short pause.
        gap = _quiet_tail(before) + _quiet_head(after)
        assert gap <= silence.LEAD_S + max(silence.PAUSE_S.values()) + 0.01, f"join {k}: {gap:.2f} s of silence"
    assert _quiet_head(chunks[0]) <= silence.LEAD_S + 0.01  # the first words come right after the first byte


def _quiet_head(audio: npt.NDArray[np.float32]) -> float:
    return float(np.flatnonzero(np.abs(audio) > silence.QUIET)[0]) / silence.SAMPLE_RATE


def _quiet_tail(audio: npt.NDArray[np.float32]) -> float:
    return (len(audio) - 1 - float(np.flatnonzero(np.abs(audio) > silence.QUIET)[-1])) / silence.SAMPLE_RATE
