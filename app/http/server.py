"""The Starlette app: `create_app` builds everything in the lifespan and maps domain errors to HTTP."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app import agents, errors
from app.engine import Engine
from app.http import admin, captioned, catalog, elevenlabs, health, speech, web
from app.http.auth import KeyGuard
from app.inference_state import InferenceState
from app.metrics import Metrics
from app.runtime.spec import SERVER, Options
from app.services import Built, Services, build_engine
from app.settings import Settings
from app.sizing import read_budget, shape_for
from lifecycle.manager import Busy, LifecycleManager, NotReady

log = logging.getLogger(__name__)

# One table from domain errors to HTTP: (status, OpenAI error type).
STATUS: list[tuple[type[Exception], int, str]] = [
    (errors.InputTooLarge, 413, "invalid_request_error"),
    (errors.InvalidType, 400, "invalid_request_error"),  # OpenAI answers a wrong type with 400, not 422
    (errors.InvalidInput, 400, "invalid_request_error"),
    (errors.Unauthorized, 401, "authentication_error"),
    (errors.Disabled, 404, "invalid_request_error"),
    (Busy, 409, "invalid_request_error"),
    (errors.Overloaded, 429, "rate_limit_error"),
    (errors.Unavailable, 503, "server_error"),
    (NotReady, 503, "server_error"),
    (errors.InferenceFailed, 500, "server_error"),
    (errors.NoTimestamps, 501, "invalid_request_error"),
]


def error_body(message: str, kind: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


async def _domain_error(request: Request, exc: Exception) -> Response:
    status, kind = next(((s, k) for cls, s, k in STATUS if isinstance(exc, cls)), (500, "server_error"))
    headers = {}
    if isinstance(exc, errors.Overloaded):
        headers["Retry-After"] = str(exc.retry_after_s)
    if isinstance(exc, errors.Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    param = getattr(exc, "param", None)
    code = getattr(exc, "code", None) if isinstance(exc, errors.ServiceError) else type(exc).__name__.lower()
    return JSONResponse(error_body(str(exc), kind, param, code), status_code=status, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return JSONResponse(error_body(str(exc.detail), "invalid_request_error", None, f"http_{exc.status_code}"),
                        status_code=exc.status_code, headers=exc.headers)


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return JSONResponse(error_body("internal error", "server_error", None, "internal_error"), status_code=500)


def create_app(settings: Settings, *, engine: Engine | None = None, options: Options = SERVER) -> Starlette:
    """The app; ``engine`` replaces the real one (fast routing tests use a fake). ``options``: where the benchmark
    or a test runs the model otherwise than the server does (`app.runtime.spec.Options`)."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Services]]:
        budget = read_budget()
        if engine is None:
            built = await anyio.to_thread.run_sync(build_engine, settings, budget, options)
        else:
            built = Built(engine, InferenceState(engine.runtime, engine.frontend, default_lang=engine.default_lang),
                          shape_for(budget, settings.streams, settings.threads_per_stream))
        metrics = Metrics()
        manager = LifecycleManager(built.state, quiet_window_s=settings.quiet_window_s,
                                   on_event=metrics.observe_lifecycle)
        metrics.watch(manager.snapshot)
        metrics.watch_pool(built.engine.pool.snapshot)
        metrics.watch_readers(lambda: built.engine.frontend.reader_retries)
        services = Services(settings, built.engine, manager, metrics, budget, built.shape, built.pace)
        await manager.start()
        log.info("serving %s: %s", settings.backend, built.engine.resolved)
        stop_agents = await agents.start(services)
        try:
            yield {"services": services}
        finally:
            await stop_agents()
            await manager.stop()
            await anyio.to_thread.run_sync(built.state.close)

    handlers: dict[Any, Any] = {cls: _domain_error for cls, _, _ in STATUS}
    handlers[HTTPException] = _http_error
    handlers[Exception] = _unexpected
    routes = (speech.routes + captioned.routes + catalog.routes + health.routes + admin.routes + web.routes
              + elevenlabs.routes)
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers,
                     middleware=[Middleware(KeyGuard, settings=settings)])
