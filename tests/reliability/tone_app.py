"""``python -m app`` on the fake engine of `tests.app.http.fake` (a tone, made at once): real uvicorn, real
sockets and the real response path, no model. For transport tests that need many megabytes of body fast: the
kernel takes about 3 MB of a stalled loopback connection before a send waits, a minute of the model's audio.
The tests start it as ``python -m tests.reliability.tone_app``."""

from __future__ import annotations

import sys

import app.http.server
from app.inference_state import InferenceState
from app.runtime.spec import Options
from app.services import Built
from app.settings import Settings
from app.sizing import CpuBudget, shape_for
from tests.app.http.fake import fake_engine


def _build(settings: Settings, budget: CpuBudget, options: Options) -> Built:
    engine = fake_engine(settings)
    state = InferenceState(engine.runtime, engine.frontend, default_lang=settings.lang)
    return Built(engine, state, shape_for(budget, settings.streams or 1, settings.threads_per_stream))


app.http.server.build_engine = _build  # type: ignore[assignment]

if __name__ == "__main__":
    from app.__main__ import main

    sys.exit(main(None, Options(in_process=True)))  # no inference process: no model
