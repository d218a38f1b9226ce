"""Stalled and slow readers on a real uvicorn, through raw sockets with a small receive buffer.

A client that sends a request and never reads is cut after ``TTS_SEND_TIMEOUT_S``: its synthesis stops,
its admission place is freed and ``/metrics`` counts it. A client that reads slowly but
keeps reading gets every byte, however long the download takes.

The server is ``python -m app`` on the tone engine (`tests.reliability.tone_app`): on loopback the kernel
takes about 3 MB of a connection that is not read (the sender's buffer grows to ``tcp_wmem``'s 4 MB
whatever the receiver's window) before uvicorn's sends wait at all, and with the model 3 MB of PCM is a
minute of audio, 40 s of this machine's CPUs. The model's own slow reader, under the default send
timeout, is in test_faults.py.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import LiveServer, live_server

SEND_TIMEOUT_S = 1.0
LONG = " ".join(f"Sentence number {i} keeps this stalled client's stream going for a while." for i in range(52))
"""About 4,000 characters: 4.8 MB of PCM from the tone engine, more than the kernel's buffers hold."""


@pytest.fixture(scope="module")
def stalls(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with live_server(cache_dir, tmp_path_factory.mktemp("logs"), module="tests.reliability.tone_app", streams="1",
                     quiet_window_s="0", send_timeout_s=str(SEND_TIMEOUT_S)) as s:
        yield s


def metric(server: LiveServer, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} (\S+)$", httpx.get(f"{server.url}/metrics", timeout=10).text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def in_flight(server: LiveServer) -> int:
    value: int = httpx.get(f"{server.url}/v1/lifecycle", timeout=10).json()["in_flight"]
    return value


def connect(server: LiveServer, text: str) -> socket.socket:
    """A raw HTTP/1.1 client with a 4 KiB receive buffer (so the kernel's buffers fill at once) that has sent
    its request and read nothing yet."""
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: it sets the TCP window
    sock.connect((host, int(port)))
    body = json.dumps({"input": text, "voice": "af_heart", "response_format": "pcm"}).encode()
    sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                 b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    return sock


def dechunk(raw: bytes) -> tuple[bytes, bytes]:
    """(head, body) of a complete chunked HTTP/1.1 response; fails on a body cut before its last chunk."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    body = bytearray()
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return head, bytes(body)
        assert len(rest) >= size + 2, "the body was cut before its last chunk"
        body.extend(rest[:size])
        rest = rest[size + 2:]


def speak(server: LiveServer, text: str) -> bytes:
    response = httpx.post(f"{server.url}/v1/audio/speech", timeout=60,
                          json={"input": text, "voice": "af_heart", "response_format": "pcm"})
    assert response.status_code == 200, response.text
    return response.content


def test_a_client_that_never_reads_is_cut_and_its_place_freed(stalls: LiveServer) -> None:
    whole_s = len(speak(stalls, LONG)) / 2 / 24000
    timeouts = metric(stalls, "tts_send_timeouts_total")
    aborted = metric(stalls, 'tts_requests_total{outcome="aborted"}')
    audio_before = metric(stalls, "tts_audio_seconds_total")
    sock = connect(stalls, LONG)
    try:
        deadline = time.monotonic() + 60
        while in_flight(stalls) == 0:  # admitted: it holds its place while its sends wait
            assert time.monotonic() < deadline, "the stalled request was never admitted"
            time.sleep(0.05)
        while metric(stalls, "tts_send_timeouts_total") == timeouts:
            assert time.monotonic() < deadline, "the stalled response was never aborted"
            time.sleep(0.1)
        # The client still has its socket open and has read nothing: the server let go on its own.
        assert in_flight(stalls) == 0
        assert metric(stalls, 'tts_requests_total{outcome="aborted"}') == aborted + 1
        made = metric(stalls, "tts_audio_seconds_total") - audio_before
        time.sleep(1.0)
        assert metric(stalls, "tts_audio_seconds_total") - audio_before == made  # synthesis has stopped
        assert 0 < made < whole_s - 10  # stopped well before the end of the input
        assert len(speak(stalls, "The next client is served.")) > 10_000
        # The connection was reset, not left holding megabytes of unsent audio until this client reads.
        sock.settimeout(10)
        with pytest.raises(ConnectionResetError):
            while sock.recv(65536):
                pass
    finally:
        sock.close()


def test_a_client_that_reads_slowly_but_steadily_gets_every_byte(stalls: LiveServer) -> None:
    expected = speak(stalls, LONG)
    timeouts = metric(stalls, "tts_send_timeouts_total")
    sock = connect(stalls, LONG)
    raw = bytearray()
    started = time.monotonic()
    try:
        sock.settimeout(30)
        while part := sock.recv(8192):
            raw.extend(part)
            time.sleep(0.005)  # about 1 MB/s, slower than the tone engine makes it
            if len(raw) // 1_000_000 != (len(raw) - len(part)) // 1_000_000:
                time.sleep(0.6 * SEND_TIMEOUT_S)  # and a pause, shorter than the timeout, every megabyte
    finally:
        sock.close()
    took = time.monotonic() - started
    head, body = dechunk(bytes(raw))
    assert head.startswith(b"HTTP/1.1 200")
    assert body == expected
    assert took > 2 * SEND_TIMEOUT_S  # the download lasted longer than the timeout, and was not cut
    assert metric(stalls, "tts_send_timeouts_total") == timeouts


def test_a_client_that_never_reads_is_cut_even_where_the_server_is_slower_than_its_buffers(
        cache_dir: Path, tmp_path: Path) -> None:
    """The tone made at twice real time (`tests.reliability.slow_tone_app`), about 100 KB a second: the kernel's
    buffers would take half a minute of it before a send waited. The client acknowledges nothing while bytes wait for
    it, so it is cut within the timeout (and a poll or two) of its window closing, not of the buffers filling."""
    with live_server(cache_dir, tmp_path, module="tests.reliability.slow_tone_app", streams="1", quiet_window_s="0",
                     send_timeout_s=str(SEND_TIMEOUT_S)) as slow:
        timeouts = metric(slow, "tts_send_timeouts_total")
        audio_before = metric(slow, "tts_audio_seconds_total")
        sock = connect(slow, LONG)
        try:
            deadline = time.monotonic() + 60
            while in_flight(slow) == 0:
                assert time.monotonic() < deadline, "the stalled request was never admitted"
                time.sleep(0.05)
            admitted = time.monotonic()
            while metric(slow, "tts_send_timeouts_total") == timeouts:
                assert time.monotonic() < deadline, "the stalled response was never aborted"
                time.sleep(0.1)
            assert time.monotonic() - admitted < SEND_TIMEOUT_S + 5
            assert in_flight(slow) == 0
            made_s = metric(slow, "tts_audio_seconds_total") - audio_before
            assert made_s * 48_000 < 1_000_000  # far less than the kernel would have taken before a send waited
        finally:
            sock.close()
