"""Security defaults: no outbound connections, nothing read because a request named it.

(Admin endpoints off without a token and the API key: tests/app/http/test_routes.py; non-root: tests/deploy/.)"""

from __future__ import annotations

import httpx
import psutil

from tests.conftest import LiveServer


def test_the_server_opens_no_connection_of_its_own(server: LiveServer) -> None:
    """After serving, every socket of the process is its listener or a client's connection to it."""
    response = httpx.post(f"{server.url}/v1/audio/speech", timeout=120,
                          json={"input": "No telemetry, please.", "voice": "jf_alpha", "response_format": "pcm"})
    assert response.status_code == 200
    port = int(server.url.rsplit(":", 1)[1])
    for connection in psutil.Process(server.process.pid).net_connections(kind="inet"):
        assert connection.laddr.port == port, connection  # nothing dialled out, nothing else listening
        if connection.raddr:
            assert connection.raddr.ip == "127.0.0.1", connection


def test_requests_never_make_the_server_open_files(server: LiveServer) -> None:
    """Voices, formats and models are names from a fixed table: a path in a request is refused, not opened."""
    process = psutil.Process(server.process.pid)
    before = {f.path for f in process.open_files()}
    for voice in ("/etc/passwd", "../../../etc/passwd", "jf_alpha/../../etc/hostname"):
        response = httpx.post(f"{server.url}/v1/audio/speech", timeout=60,
                              json={"input": "hi", "voice": voice, "response_format": "pcm"})
        assert response.status_code == 400
    response = httpx.post(f"{server.url}/v1/audio/speech", timeout=60,
                          json={"input": "hi", "voice": "jf_alpha", "response_format": "/etc/passwd"})
    assert response.status_code == 400
    assert {f.path for f in process.open_files()} <= before
