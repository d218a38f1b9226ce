"""What the server offers: voices, models, and how the pool resolved."""

from __future__ import annotations

import dataclasses

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.audio import FORMATS
from app.http.common import require_bearer, services
from app.http.request import MODELS
from app.served import default_voice


async def list_voices(request: Request) -> JSONResponse:
    svc = services(request)
    if svc.settings.api_key:
        require_bearer(request, svc.settings.api_key, "this endpoint")
    voices = svc.engine.voices
    return JSONResponse({"voices": voices.names, "default": default_voice(svc.settings, voices),
                         "aliases": voices.aliases})


async def list_models(request: Request) -> JSONResponse:
    data = [{"id": name, "object": "model", "created": 0, "owned_by": "kokoro-tts"} for name in MODELS]
    return JSONResponse({"object": "list", "data": data})


async def info(request: Request) -> JSONResponse:
    svc = services(request)
    resolved = svc.engine.resolved
    choice = svc.engine.choice
    return JSONResponse({
        "backend": choice.backend if choice else svc.settings.backend,
        "engine": choice.public() if choice else None,
        "resolved": dataclasses.asdict(resolved) if resolved else None,
        "active_backend": svc.engine.runtime.active_name,
        "bridge_serving": svc.engine.runtime.bridge_serving,
        "primary_error": svc.engine.runtime.primary_error,
        "inferences_by_backend": dict(svc.engine.runtime.served),
        "frontend": svc.engine.frontend.serving,
        "cpu_budget": {**dataclasses.asdict(svc.budget), "cpus": svc.budget.cpus, "cores": svc.budget.cores},
        "pool": {"streams": svc.shape.streams, "threads_per_stream": svc.shape.threads_per_stream,
                 "slots": svc.pool.slots, "queue_size": svc.pool.queue_size, "capacity": svc.pool.capacity,
                 **svc.pool.snapshot()},
        "formats": list(FORMATS),
        "settings": svc.settings.public(),
    })


routes = [
    Route("/v1/audio/voices", list_voices, methods=["GET"]),
    Route("/v1/models", list_models, methods=["GET"]),
    Route("/v1/info", info, methods=["GET"]),
]
