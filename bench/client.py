"""One-off requests to a running server, as a user would send them: speech, lifecycle, release, info."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import httpx

BYTES_PER_AUDIO_S = 48_000.0
Api = Literal["openai", "kokoro-pi"]
"""How a server is asked for streamed 16-bit PCM: OpenAI's ``POST /v1/audio/speech`` (this server, fastkokoro), or
kokoro-pi's ``POST /v1/tts`` (its ``/v1/audio/speech`` buffers the whole response: `bench.peers`)."""
APIS: tuple[Api, ...] = ("openai", "kokoro-pi")


def request_for(api: Api, text: str, voice: str, speed: float = 1.0) -> tuple[str, dict[str, Any]]:
    """The route and JSON body of one streamed 24 kHz mono 16-bit little-endian PCM request: the least adapter
    that asks each server for the same thing."""
    if api == "kokoro-pi":
        return "/v1/tts", {"text": text, "voice": voice, "format": "s16le", "speed": speed, "stream": True}
    return "/v1/audio/speech", {"model": "kokoro", "input": text, "voice": voice, "response_format": "pcm",
                                "speed": speed, "stream": True}


class RequestFailed(RuntimeError):
    """The server answered with an error, or the stream broke."""


@dataclass(frozen=True)
class Speech:
    """One streamed response, timed from the moment the request was sent."""

    first_audio_s: float
    """Until the first audio bytes arrived."""
    total_s: float
    """Until the body had fully arrived."""
    audio_s: float
    """Audio-seconds received."""


def speak(url: str, text: str, voice: str, *, timeout_s: float = 300.0, api: Api = "openai") -> Speech:
    """Send one streamed PCM request and time it; `RequestFailed` on any error."""
    path, body = request_for(api, text, voice)
    sent = time.perf_counter()
    first: float | None = None
    received = 0
    with httpx.Client(base_url=url, timeout=timeout_s) as http, \
            http.stream("POST", path, json=body) as response:
        if response.status_code != 200:
            raise RequestFailed(f"speech: {response.status_code} {response.read().decode(errors='replace')[:300]}")
        for part in response.iter_raw():
            if part and first is None:
                first = time.perf_counter()
            received += len(part)
    end = time.perf_counter()
    if first is None:
        raise RequestFailed("speech: the response carried no audio")
    return Speech(first - sent, end - sent, received / BYTES_PER_AUDIO_S)


def get_json(url: str, path: str, *, timeout_s: float = 10.0) -> dict[str, Any]:
    response = httpx.get(url + path, timeout=timeout_s)
    response.raise_for_status()
    data: dict[str, Any] = response.json()
    return data


def release(url: str, token: str, *, timeout_s: float = 60.0) -> dict[str, Any]:
    """Ask for a manual release (needs ``TTS_ADMIN_TOKEN``); returns the lifecycle snapshot it answers with."""
    response = httpx.post(url + "/v1/lifecycle/release", headers={"Authorization": f"Bearer {token}"},
                          timeout=timeout_s)
    if response.status_code != 200:
        raise RequestFailed(f"release: {response.status_code} {response.text[:300]}")
    data: dict[str, Any] = response.json()
    return data


def wait_for_state(url: str, state: str, *, timeout_s: float = 60.0, poll_s: float = 0.05) -> dict[str, Any]:
    """Poll ``/v1/lifecycle`` until it reports ``state``; returns that snapshot."""
    deadline = time.monotonic() + timeout_s
    while True:
        snapshot = get_json(url, "/v1/lifecycle")
        if snapshot.get("state") == state:
            return snapshot
        if time.monotonic() > deadline:
            raise TimeoutError(f"lifecycle still {snapshot.get('state')!r} after {timeout_s:.0f} s, wanted {state!r}")
        time.sleep(poll_s)
