"""Lifecycle state, manual release (admin token only) and Prometheus metrics."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.errors import Disabled
from app.http.common import require_bearer, services


async def lifecycle_state(request: Request) -> JSONResponse:
    return JSONResponse(services(request).lifecycle.snapshot())


async def release(request: Request) -> JSONResponse:
    svc = services(request)
    if not svc.settings.admin_token:
        raise Disabled("manual release is disabled: set TTS_ADMIN_TOKEN to enable it")
    require_bearer(request, svc.settings.admin_token, "manual release")
    released = await svc.lifecycle.release(manual=True)
    return JSONResponse({"released": released, **svc.lifecycle.snapshot()})


async def metrics(request: Request) -> Response:
    return Response(services(request).metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


routes = [
    Route("/v1/lifecycle", lifecycle_state, methods=["GET"]),
    Route("/v1/lifecycle/release", release, methods=["POST"]),
    Route("/metrics", metrics, methods=["GET"]),
]
