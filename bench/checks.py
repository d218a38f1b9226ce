"""The output check, as the benchmark reports it: the implementation lives in `app.tune.outputcheck`,
because the build-time tuner (`python -m app tune`) applies the same check to every form it may choose."""

from __future__ import annotations

from app.tune.outputcheck import (
    DURATION_UNIT,
    HOP,
    N_MELS,
    SAMPLE_RATE,
    THRESHOLDS,
    ChunkCheck,
    Thresholds,
    Verdict,
    check_chunk,
    compare,
    dtw_distance,
    log_mel,
    mel_distance,
)
from app.tune.outputcheck import __doc__ as __doc__

__all__ = ["DURATION_UNIT", "HOP", "N_MELS", "SAMPLE_RATE", "THRESHOLDS", "ChunkCheck", "Thresholds", "Verdict",
           "check_chunk", "compare", "dtw_distance", "log_mel", "mel_distance"]
