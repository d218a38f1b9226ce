"""`tests.reliability.tone_app` made at twice real time instead of at once: a server too slow to fill a stalled
connection's kernel buffers for minutes (as the model is on a slow CPU), for the stalled-reader tests. Started as
``python -m tests.reliability.slow_tone_app``."""

from __future__ import annotations

import sys
import time

import numpy as np
import numpy.typing as npt

from app.runtime.backends.base import Inference
from app.runtime.spec import Options
from tests.app.http import fake
from tests.reliability import tone_app  # noqa: F401  (importing it replaces the server's engine with the tone)

SECONDS_PER_TOKEN = 0.0125
"""Half the tone's 25 ms of audio per token: twice real time, about 100 KB of PCM a second."""

_tone = fake.FakeRuntime.infer_timed


def _slow(self: fake.FakeRuntime, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
          speed: float) -> Inference:
    time.sleep(SECONDS_PER_TOKEN * (tokens.shape[1] - 2))
    return _tone(self, slot, tokens, style, speed)


fake.FakeRuntime.infer_timed = _slow  # type: ignore[method-assign]

if __name__ == "__main__":
    from app.__main__ import main

    sys.exit(main(None, Options(in_process=True)))
