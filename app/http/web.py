"""``GET /web``: a page to try the server from a browser, served from the package (no build step,
nothing fetched from elsewhere: its Content-Security-Policy allows this origin only)."""

from __future__ import annotations

import functools
from pathlib import Path

from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from app.errors import Disabled
from app.http.common import services

PAGE = Path(__file__).with_name("web") / "index.html"
POLICY = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
          "media-src 'self' blob:; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'")
"""The page's script and style are inline (one file); audio plays from blob: URLs it makes itself."""


@functools.cache
def _page() -> str:
    return PAGE.read_text(encoding="utf-8")


async def web(request: Request) -> HTMLResponse:
    if not services(request).settings.web:
        raise Disabled("the web page is switched off (TTS_WEB=0)")
    return HTMLResponse(_page(), headers={"Content-Security-Policy": POLICY, "Cache-Control": "no-cache"})


routes = [Route("/web", web, methods=["GET"])]
