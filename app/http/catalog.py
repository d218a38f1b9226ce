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
from app.text import languages


async def list_voices(request: Request) -> JSONResponse:
    """Every voice as an object (``id``, ``name``, ``language``, ``lang_code``, ``gender``: the shape Open WebUI and
    Kokoro-FastAPI's clients read), the default, what each alias stands for, and the languages with whether this
    install can read each. ``?legacy=true``: ``voices`` as plain names, as this endpoint gave before."""
    svc = services(request)
    if svc.settings.api_key:
        require_bearer(request, svc.settings.api_key, "this endpoint")
    voices = svc.engine.voices
    listed: list[object]
    if request.query_params.get("legacy", "").lower() in ("1", "true", "yes"):
        listed = list(voices.names)
    else:
        listed = [_voice(name) for name in voices.names]
    return JSONResponse({"voices": listed, "default": default_voice(svc.settings, voices), "aliases": voices.aliases,
                         "languages": [lang.public() for lang in languages.LANGUAGES.values()]})


def _voice(name: str) -> dict[str, object]:
    language = languages.of_voice(name)
    return {"id": name, "name": name, "language": language.name if language else None,
            "lang_code": language.code if language else None, "gender": languages.gender_of(name)}


async def list_models(request: Request) -> JSONResponse:
    data = [{"id": name, "object": "model", "created": 0, "owned_by": "kokoro-tts"} for name in MODELS]
    return JSONResponse({"object": "list", "data": data})


async def list_audio_models(request: Request) -> JSONResponse:
    """The speech models as Open WebUI reads ``GET {base}/audio/models``: ``{"models": [{"id": ...}]}``."""
    return JSONResponse({"models": [{"id": name, "name": name} for name in MODELS]})


async def root(request: Request) -> JSONResponse:
    """``GET /``: what this is and where to go (LiveKit's OpenAI plugin prewarms its connection with it)."""
    return JSONResponse({"name": "kokoro-cpu-tts", "description": "Kokoro-82M text to speech, OpenAI's speech API",
                         "links": LINKS})


LINKS = {"speech": "/v1/audio/speech", "voices": "/v1/audio/voices", "models": "/v1/models",
         "audio_models": "/v1/audio/models", "info": "/v1/info", "web": "/web", "health": "/healthz",
         "ready": "/readyz", "metrics": "/metrics"}


async def info(request: Request) -> JSONResponse:
    svc = services(request)
    resolved = svc.engine.resolved
    choice = svc.engine.choice
    return JSONResponse({
        "backend": choice.backend if choice else svc.settings.backend,
        "engine": choice.public() if choice else None,
        "resolved": dataclasses.asdict(resolved) if resolved else None,
        "active_backend": svc.engine.runtime.active_name,
        "inferences_by_backend": dict(svc.engine.runtime.served),
        "frontend": svc.engine.frontend.serving,
        "languages_loaded": svc.engine.frontend.languages_loaded,
        "cpu_budget": {**dataclasses.asdict(svc.budget), "cpus": svc.budget.cpus, "cores": svc.budget.cores},
        "pool": {"streams": svc.shape.streams, "threads_per_stream": svc.shape.threads_per_stream,
                 "slots": svc.pool.slots, **svc.pool.snapshot()},
        "pace": svc.pace.public() if svc.pace is not None else None,
        "formats": list(FORMATS),
        "settings": svc.settings.public(),
    })


routes = [
    Route("/v1/audio/voices", list_voices, methods=["GET"]),
    Route("/v1/models", list_models, methods=["GET"]),
    Route("/v1/audio/models", list_audio_models, methods=["GET"]),
    Route("/", root, methods=["GET"]),
    Route("/v1/info", info, methods=["GET"]),
]
