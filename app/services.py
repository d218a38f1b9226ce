"""Everything a request needs, built once in the app's lifespan (no module globals)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from app import served
from app.engine import Engine
from app.inference_state import InferenceState
from app.metrics import Metrics
from app.pool import DEADLINE_MARGIN_S, FIRST_CHUNK_CREDIT_S, REALTIME_MAX_HOLD_S, StreamPool
from app.runtime.protocol import Runtime
from app.runtime.proxy import ProcessRuntime
from app.runtime.spec import SERVER, Options, build_runtime
from app.settings import Settings
from app.sizing import CpuBudget, PoolShape
from app.text import chunker
from app.text.frontend import Frontend
from app.tune import speed
from app.tune.choice import EngineChoice
from lifecycle.manager import LifecycleManager

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Built:
    """What `build_engine` wires: the engine that serves, the state the lifecycle releases and restores (the same
    runtime and front end), and the pool's shape."""

    engine: Engine
    state: InferenceState
    shape: PoolShape
    pace: speed.Pace | None = None
    """The listeners and the chunk plan's rate (None where a test hands in its own engine)."""


@dataclass
class Services:
    settings: Settings
    engine: Engine
    lifecycle: LifecycleManager
    metrics: Metrics
    budget: CpuBudget
    shape: PoolShape
    pace: speed.Pace | None = None
    draining: bool = field(default=False)

    @property
    def pool(self) -> StreamPool:
        return self.engine.pool


def build_engine(settings: Settings, budget: CpuBudget, options: Options = SERVER) -> Built:
    """Resolve the model and voices and wire the engine and its state, the one place the server builds them; loads
    nothing heavy yet (blocking I/O). ``options``: where a test or the benchmark runs the model otherwise than the
    server does."""
    found = served.resolve(settings, budget, options)
    settings, spec, shape = found.settings, found.spec, found.spec.shape
    runtime: Runtime
    standby: Callable[[], None] | None = None
    if options.in_process:
        runtime = build_runtime(spec)
    else:
        runtime = process = ProcessRuntime(spec)
        process.prestart()
        standby = process.idle_standby
    baked = settings.baked_cache_dir
    frontend = Frontend(spec.writable / "frontend", baked / "frontend" if baked is not None else None)
    # A session on every thread beside the streams: ONNX Runtime's, sized (`app.runtime.backends.onnxruntime`).
    wide = settings.backend == "onnxruntime" and not options.runtime_defaults and shape.streams > 1
    pace = pace_for(found.choice, shape, wide=wide)
    pool = StreamPool(shape.streams, max_requests=settings.max_requests, margin_s=DEADLINE_MARGIN_S,
                      first_credit_s=FIRST_CHUNK_CREDIT_S, listeners=pace.listeners, max_hold_s=REALTIME_MAX_HOLD_S,
                      wide_slot=shape.streams if wide else None, wide_plan=pace.wide,
                      first_tokens=chunker.FIRST_CHUNK_TOKENS)
    engine = Engine(runtime, pool, frontend, found.voices, found.vocab, default_lang=settings.lang,
                    choice=found.choice, timestamps=found.timestamps, rate=pace.rate)
    state = InferenceState(runtime, frontend, default_lang=settings.lang, standby=standby)
    log.info("cpu budget %s -> pool %d streams x %d threads%s; %d listeners at %.2f x real time (%s)%s", budget,
             shape.streams, shape.threads_per_stream, f" and a wide session of {shape.threads}" if wide else "",
             pace.listeners, pace.rate, pace.speed.source,
             f", at most {settings.max_requests} requests" if settings.max_requests else "")
    return Built(engine, state, shape, pace)


def pace_for(choice: EngineChoice, shape: PoolShape, *, wide: bool) -> speed.Pace:
    """The instance's pace: from the tuning figures of the form it serves, else the slowest class on record."""
    found = speed.speed_for(choice.table, choice.backend, choice.precision, choice.form, shape, wide=wide,
                            source=choice.manifest or "") if choice.table else None
    return speed.pace(found or speed.slowest(shape, wide=wide), shape.streams)
