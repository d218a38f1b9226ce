"""HTTP routes. Only this package and `app.http.server` know about Starlette."""

from __future__ import annotations

import hmac

from starlette.requests import Request

from app.errors import Unauthorized
from app.services import Services


def services(request: Request) -> Services:
    found: Services = request.state.services
    return found


def require_bearer(request: Request, token: str, what: str) -> None:
    """Check ``Authorization: Bearer <token>`` in constant time."""
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise Unauthorized(f"{what} needs 'Authorization: Bearer <token>'")
