"""Probes: ``/healthz`` says the process is alive, ``/readyz`` that it can serve a request now."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.http.common import services
from lifecycle.states import State

READY = {State.WARM, State.RELEASED, State.RELEASING, State.RESTORING}
"""Released states still serve: the next request restores. Loading, failed and draining do not."""


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> JSONResponse:
    svc = services(request)
    state = svc.lifecycle.state
    ready = state in READY and not svc.draining
    body = {"ready": ready, "state": state.value, "draining": svc.draining}
    return JSONResponse(body, status_code=200 if ready else 503)


routes = [Route("/healthz", healthz, methods=["GET"]), Route("/readyz", readyz, methods=["GET"])]
