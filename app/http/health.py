"""Probes: ``/healthz`` says the process is alive, ``/readyz`` that it can serve a request now.

``/healthz`` answers 503 once the inference state could not be built `lifecycle.manager.MAX_FAILURES` (5)
times in a row (the lifecycle is BROKEN): a restart of the container is then the platform's best remedy."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.http.common import services
from lifecycle.states import State

READY = {State.WARM, State.RELEASED, State.RELEASING, State.RESTORING}
"""Released states still serve: the next request restores. Loading, failed and draining do not."""


async def healthz(request: Request) -> JSONResponse:
    lifecycle = services(request).lifecycle
    if lifecycle.alive:
        return JSONResponse({"status": "ok"})
    body = {"status": "broken", "failures_in_a_row": lifecycle.failures, "last_error": lifecycle.last_error}
    return JSONResponse(body, status_code=503)


async def readyz(request: Request) -> JSONResponse:
    svc = services(request)
    state = svc.lifecycle.state
    ready = state in READY and not svc.draining
    body = {"ready": ready, "state": state.value, "draining": svc.draining}
    return JSONResponse(body, status_code=200 if ready else 503)


routes = [Route("/healthz", healthz, methods=["GET"]), Route("/readyz", readyz, methods=["GET"])]
