"""The app on the fake engine behind a real uvicorn, in a thread: for the benchmark's clients, which speak HTTP and
WebSocket over a socket as they do to a real server (fast; the real model is in tests/reliability)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import uvicorn

from app.http.server import create_app
from app.settings import Settings
from bench.server import free_port
from tests.app.http.fake import fake_engine


@contextlib.contextmanager
def fake_server(cache_dir: Path, **settings: object) -> Iterator[str]:
    """Its ``http://`` URL while it runs; ``settings`` as `Settings` takes them."""
    chosen = Settings(cache_dir=cache_dir, **{"quiet_window_s": 0, "streams": 2, **settings})  # type: ignore[arg-type]
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(chosen, engine=fake_engine(chosen)), host="127.0.0.1",
                                           port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
