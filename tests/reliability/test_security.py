"""Security defaults: no outbound connections, nothing read because a request named it, in the server and
in the inference process (`app.runtime.child`, where the runtimes run).

(Admin endpoints off without a token and the API key: tests/app/http/test_routes.py; non-root: tests/deploy/.)"""

from __future__ import annotations

import os

import httpx
import psutil

from tests.conftest import LiveServer


def test_the_server_opens_no_connection_of_its_own(server: LiveServer) -> None:
    """After serving, every socket of the process is its listener or a client's connection to it."""
    response = httpx.post(f"{server.url}/v1/audio/speech", timeout=120,
                          json={"input": "No telemetry, please.", "voice": "af_heart", "response_format": "pcm"})
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
    for voice in ("/etc/passwd", "../../../etc/passwd", "af_heart/../../etc/hostname"):
        response = httpx.post(f"{server.url}/v1/audio/speech", timeout=60,
                              json={"input": "hi", "voice": voice, "response_format": "pcm"})
        assert response.status_code == 400
    response = httpx.post(f"{server.url}/v1/audio/speech", timeout=60,
                          json={"input": "hi", "voice": "af_heart", "response_format": "/etc/passwd"})
    assert response.status_code == 400
    assert {f.path for f in process.open_files()} <= before


def inference_processes(server: LiveServer) -> list[psutil.Process]:
    """The server's children, after a request made sure the inference process runs."""
    assert httpx.post(f"{server.url}/v1/audio/speech", timeout=120, json={
        "input": "Wake the inference process.", "voice": "af_heart", "response_format": "pcm"}).status_code == 200
    children = psutil.Process(server.process.pid).children(recursive=True)
    assert any("app.runtime.child" in " ".join(c.cmdline()) for c in children), children
    return children


def assert_no_socket_and_no_telemetry(child: psutil.Process) -> None:
    """It talks to the server over two pipes only: no socket of any kind (inet, inet6, unix), so no
    telemetry could leave it; ONNX Runtime's telemetry is switched off in its environment, and no telemetry
    library is loaded (OpenVINO's would be: tests/app/test_warmup.py runs this on an OpenVINO inference
    process, the session's server here runs ONNX Runtime)."""
    assert child.net_connections(kind="all") == [], child.cmdline()
    sockets = [os.readlink(f"/proc/{child.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{child.pid}/fd")]
    assert not [s for s in sockets if s.startswith("socket:")], sockets
    assert child.environ().get("ORT_DISABLE_TELEMETRY") == "1"
    assert not [m.path for m in child.memory_maps() if "telemetry" in m.path.lower()]


def test_the_inference_process_has_no_socket_and_no_telemetry(server: LiveServer) -> None:
    for child in inference_processes(server):
        assert_no_socket_and_no_telemetry(child)


def test_requests_never_make_the_inference_process_open_files(server: LiveServer) -> None:
    """Paths in a request (as voice, format, or spoken text) open nothing in the inference process."""
    children = inference_processes(server)
    before = {c.pid: {f.path for f in c.open_files()} for c in children}
    hostile = [{"voice": "/etc/passwd"}, {"voice": "../../../etc/hostname"}, {"response_format": "/etc/passwd"},
               {"model": "/etc/passwd"}]
    for fields in hostile:
        body = {"input": "hi", "voice": "af_heart", "response_format": "pcm", **fields}
        assert httpx.post(f"{server.url}/v1/audio/speech", timeout=60, json=body).status_code == 400
    spoken = httpx.post(f"{server.url}/v1/audio/speech", timeout=120, json={
        "input": "/etc/passwd and ../../etc/shadow", "voice": "af_heart", "response_format": "pcm"})
    assert spoken.status_code == 200  # read out as words, not opened
    for child in children:
        opened = {f.path for f in child.open_files()}
        assert opened <= before[child.pid], opened - before[child.pid]
        assert not [p for p in opened if p.startswith("/etc/")], opened
