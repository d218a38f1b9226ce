"""Everything a request needs, built once in the app's lifespan (no module globals)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from app import served
from app.engine import Engine
from app.metrics import Metrics
from app.pool import StreamPool
from app.runtime.protocol import Runtime
from app.runtime.proxy import ProcessRuntime
from app.runtime.spec import build_runtime
from app.settings import Settings
from app.sizing import CpuBudget, PoolShape
from app.text.frontend import Frontend
from lifecycle.manager import LifecycleManager

log = logging.getLogger(__name__)


@dataclass
class Services:
    settings: Settings
    engine: Engine
    lifecycle: LifecycleManager
    metrics: Metrics
    budget: CpuBudget
    shape: PoolShape
    draining: bool = field(default=False)

    @property
    def pool(self) -> StreamPool:
        return self.engine.pool


def build_engine(settings: Settings, budget: CpuBudget) -> tuple[Engine, PoolShape]:
    """Resolve the model and voices and wire the engine; loads nothing heavy yet (blocking I/O)."""
    found = served.resolve(settings, budget)
    settings, spec, shape = found.settings, found.spec, found.spec.shape
    runtime: Runtime
    standby: Callable[[], None] | None = None
    if settings.inference_process:
        runtime = process = ProcessRuntime(spec)
        process.prestart()
        if settings.released_bridge and spec.has_bridge:
            standby = process.standby
        elif settings.released_process:
            standby = process.idle_standby
    else:
        runtime = build_runtime(spec)
    if settings.released_bridge and not (settings.inference_process and spec.has_bridge):
        log.warning("TTS_RELEASED_BRIDGE is ignored: it needs the inference process (TTS_INFERENCE_PROCESS) and "
                    "a bridge (TTS_RESTORE_BRIDGE, a primary other than the bridge's own form)")
    writable, baked = spec.writable, settings.baked_cache_dir
    queue = settings.queue_size or 2 * shape.streams
    frontend = Frontend(writable / "frontend", baked / "frontend" if baked is not None else None)
    pool = StreamPool(shape.streams, queue, scheduler=settings.scheduler, margin_s=settings.deadline_margin_s,
                      first_credit_s=settings.first_chunk_credit_s,
                      realtime_factor=settings.realtime_factor, slack_headroom=settings.slack_headroom,
                      wide_trials=settings.wide_trials, express=settings.express_slots,
                      max_hold_s=settings.realtime_max_hold_s)
    engine = Engine(runtime, pool, frontend, found.voices, found.vocab,
                    default_lang=settings.lang, first_chunk_tokens=settings.first_chunk_tokens,
                    max_chunk_tokens=settings.max_chunk_tokens, slack_chunks=settings.slack_chunks,
                    release_frontend=settings.release_frontend,
                    choice=found.choice, timestamps=found.timestamps, start_bridge=settings.start_bridge,
                    wide_chunk_tokens=settings.wide_chunk_tokens,
                    idle_first_chunk_tokens=settings.idle_first_chunk_tokens,
                    lone_first_chunk_tokens=settings.lone_first_chunk_tokens,
                    quick_frontend=settings.quick_frontend, standby=standby,
                    busy_max_chunk_tokens=settings.busy_max_chunk_tokens,
                    busy_short_streams=settings.busy_short_streams,
                    second_chunk_tokens=settings.second_chunk_tokens)
    log.info("cpu budget %s -> pool %d streams x %d threads, queue %d", budget, shape.streams,
             shape.threads_per_stream, queue)
    return engine, shape


