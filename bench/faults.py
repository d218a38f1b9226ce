"""Faults a soak injects (`bench.soak` ``--kill-every-s``, ``--hostile-every-s``): the server's helper processes killed,
and bursts of hostile requests.

Kills take turns: the inference process alone, the Japanese reader alone, then both at once (as an out-of-memory kill
of a container's biggest processes would). A hostile burst is what a careless or malicious client sends: bodies that
are not JSON or not the schema, values out of range, input and bodies over the limits, a flood past admission, junk
on the input-streaming socket, and a stream dropped after its first bytes. Each must get a 4xx (or 429 for the
flood, or a close for the socket); a 5xx or a dropped connection is counted against the server.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import psutil
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.sync.client import connect

INFERENCE = "app.runtime.child"
READER = "app.text.readers"
KILLS: tuple[tuple[str, ...], ...] = ((INFERENCE,), (READER,), (INFERENCE, READER))
"""What each kill takes, in turn."""

FLOOD_PAST = 16
"""How many more requests than the server admits the flood sends at once."""
LET_GO_S = 10.0
"""Seconds a server has to let go of a stream its client dropped (it notices at its next send)."""


def helpers(pid: int, modules: tuple[str, ...]) -> list[tuple[psutil.Process, str]]:
    """The live processes under ``pid`` that run one of ``modules``, each with its module."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            command = " ".join(child.cmdline())
            module = next((m for m in modules if m in command), None)
            if module is not None and child.status() != psutil.STATUS_ZOMBIE:
                found.append((child, module))
        except psutil.NoSuchProcess:
            continue
    return found


def kill(pid: int, modules: tuple[str, ...]) -> list[str]:
    """SIGKILL every helper of ``modules`` under ``pid``; what was killed (a reader not started yet is not there)."""
    killed = []
    for process, module in helpers(pid, modules):
        try:
            os.kill(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        killed.append(module)
    return killed


@dataclass(frozen=True)
class Answer:
    name: str
    status: int | str
    """The HTTP status, ``closed`` for a socket closed on us as it should be, or the error that ended the exchange."""

    @property
    def fair(self) -> bool:
        """A clear refusal (any 4xx, 429 included; the socket's close), or, for the flood, speech."""
        if self.name == "flood" and self.status == 200:
            return True
        return self.status == "closed" or (isinstance(self.status, int) and 400 <= self.status < 500)


def burst(url: str, max_input_chars: int, max_requests: int) -> list[Answer]:
    """One of each hostile request, then the flood (`FLOOD_PAST` more requests than ``max_requests`` at once); every
    answer, for the soak's record."""
    speech = f"{url}/v1/audio/speech"
    ok = {"input": "Hostile neighbours.", "voice": "af_heart"}
    posts: list[tuple[str, dict[str, Any]]] = [
        ("not json", {"content": b"{not json", "headers": {"content-type": "application/json"}}),
        ("empty body", {"content": b""}),
        ("wrong type", {"json": {**ok, "input": 5}}),
        ("unknown voice", {"json": {**ok, "voice": "zz_nobody"}}),
        ("speed out of range", {"json": {**ok, "speed": 40}}),
        ("unknown format", {"json": {**ok, "response_format": "midi"}}),
        ("input too long", {"json": {**ok, "input": "a " * max_input_chars}}),
        ("body too large", {"content": b"x" * (max_input_chars * 4 + 128 * 1024)}),
        ("phonemes of no vocabulary", {"json": {**ok, "input": "\u2603\u2603", "input_format": "phonemes"}}),
    ]
    answers = []
    with httpx.Client(timeout=60) as http:
        for name, fields in posts:
            answers.append(_answer(name, functools.partial(_status, http, speech, fields)))
        answers.append(_answer("dropped stream", lambda: dropped(http, speech, ok)))
    answers.append(_answer("socket junk", lambda: _junk(url)))
    flood = max_requests + FLOOD_PAST
    with concurrent.futures.ThreadPoolExecutor(flood) as pool, httpx.Client(timeout=120) as http:
        hi = functools.partial(_status, http, speech, {"json": {**ok, "input": "Hi."}})
        asked = [pool.submit(_answer, "flood", hi) for _ in range(flood)]
        answers += [f.result() for f in asked]
    return answers


def _status(http: httpx.Client, url: str, fields: dict[str, Any]) -> int:
    return http.post(url, **fields).status_code


def _answer(name: str, ask: Callable[[], int | str]) -> Answer:
    try:
        return Answer(name, ask())
    except (httpx.HTTPError, OSError, WebSocketException) as exc:
        return Answer(name, f"{type(exc).__name__}: {exc}"[:200])


def dropped(http: httpx.Client, url: str, body: dict[str, str]) -> int | str:
    """A stream the client stops reading after its first bytes and closes: the server must let it go, which its
    ``tts_requests_total{outcome="aborted"}`` shows within `LET_GO_S`. 499 (nginx's 'client closed request') where it
    did, a fair outcome; ``held`` where it did not, counted against the server."""
    before = _aborted(http, url)
    with http.stream("POST", url, json={**body, "input": "A stream nobody listens to. " * 40,
                                        "response_format": "pcm"}) as response:
        if response.status_code != 200:
            return response.status_code
        next(response.iter_raw())
    deadline = time.monotonic() + LET_GO_S
    while time.monotonic() < deadline:
        if _aborted(http, url) > before:
            return 499
        time.sleep(0.1)
    return "held"


def _aborted(http: httpx.Client, speech_url: str) -> float:
    """The server's count of streams its clients left (``/metrics``, open where no key is set, as the soak runs)."""
    metrics = speech_url.replace("/v1/audio/speech", "/metrics")
    found = re.search(r'^tts_requests_total\{outcome="aborted"\} (\S+)$', http.get(metrics).text, re.M)
    return float(found.group(1)) if found else 0.0


def _junk(url: str) -> int | str:
    """Binary junk on the ElevenLabs-shaped socket: it must be told (an ``error`` message) and closed."""
    socket = url.replace("http://", "ws://") + "/v1/text-to-speech/af_heart/stream-input?model_id=eleven_flash_v2_5"
    with connect(socket, open_timeout=30) as ws:
        ws.send(b"\x00\xff\xfe")
        told = json.loads(ws.recv(timeout=30))
        try:
            ws.recv(timeout=30)
        except ConnectionClosed:
            return "closed" if told.get("error") else "closed untold"
        return "left open"
