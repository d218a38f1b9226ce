"""The API key at the door: every path but the probes needs ``Authorization: Bearer <TTS_API_KEY>``.

A middleware rather than a check in each route, so that an endpoint added later is guarded without
anyone remembering to guard it. ``/metrics`` takes ``TTS_METRICS_TOKEN`` instead when one is set
(a scraper need not hold the key that speaks); ``/v1/lifecycle/release`` is the admin token's alone
(`app.http.admin`), so it is left to its route.
"""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from app.settings import Settings

OPEN = frozenset({"/healthz", "/readyz"})
"""Probes: the platform calls them without credentials."""
OWN_TOKEN = frozenset({"/v1/lifecycle/release"})
"""Paths whose route checks a token of its own."""


def token_for(path: str, settings: Settings) -> str:
    """The bearer token ``path`` needs; empty when it is open."""
    if path in OPEN or path in OWN_TOKEN:
        return ""
    if path == "/metrics" and settings.metrics_token:
        return settings.metrics_token
    return settings.api_key


def bearer_matches(header: str, token: str) -> bool:
    """``header`` is ``Bearer <token>``, compared in constant time."""
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


class KeyGuard:
    """ASGI middleware: a request without the token its path needs gets 401 in OpenAI's error shape."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            token = token_for(scope["path"], self.settings)
            if token and not bearer_matches(Headers(scope=scope).get("authorization", ""), token):
                what = "/metrics" if scope["path"] == "/metrics" else "this endpoint"
                body = {"error": {"message": f"{what} needs 'Authorization: Bearer <token>'",
                                  "type": "authentication_error", "param": None, "code": "unauthorized"}}
                response = JSONResponse(body, status_code=401, headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
