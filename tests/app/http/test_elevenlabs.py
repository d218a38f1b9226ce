"""The ElevenLabs-shaped sockets on the fake engine (fast): the key at the door, admission past capacity, the
lifecycle counting speech rather than open sockets, the inactivity timeout. The real clients and model are in
test_elevenlabs_live.py."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient, WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect

from app.agents import utterance
from app.agents.elevenlabs import TRANSITIONS, Kind, State
from app.agents.stream import TEXT_PER_STREAM
from app.http.server import create_app
from app.settings import Settings
from tests.app.http.fake import FakeRuntime, fake_engine

KEY = {"xi-api-key": "secret"}


@pytest.fixture
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, FakeRuntime]]:
    settings = Settings(cache_dir=tmp_path_factory.mktemp("cache"), quiet_window_s=0, streams=1, max_requests=1,
                        api_key="secret", admin_token="admin")
    engine = fake_engine(settings)
    with TestClient(create_app(settings, engine=engine)) as client:
        yield client, engine.runtime  # type: ignore[misc]


def receive(ws: Any, timeout_s: float = 10.0) -> Any:
    """The next JSON message, within ``timeout_s``: TestClient's own receive waits for ever, so that a regression that
    sends nothing would hang the suite instead of failing its test."""
    async def within() -> Any:
        with anyio.fail_after(timeout_s):
            return await ws._send_rx.receive()  # private: the stream TestClient's receive reads, with no time limit

    message = ws.portal.call(within)
    if message["type"] == "websocket.close":
        raise WebSocketDisconnect(message.get("code", 1000), message.get("reason", ""))
    return json.loads(message["text"])


def until_final(ws: Any, context: str | None = None) -> list[dict[str, Any]]:
    found = []
    while True:
        found.append(receive(ws))
        if found[-1].get("isFinal") and found[-1].get("contextId") == context:
            return found


def test_the_key_is_needed_in_either_header(setup: tuple[TestClient, FakeRuntime]) -> None:
    client, _ = setup
    with pytest.raises(WebSocketDenialResponse) as denied:
        with client.websocket_connect("/v1/text-to-speech/af_heart/stream-input"):
            pass
    assert denied.value.status_code == 401 and denied.value.json()["error"]["code"] == "unauthorized"
    for headers in (KEY, {"Authorization": "Bearer secret"}):
        with client.websocket_connect("/v1/text-to-speech/af_heart/stream-input?output_format=pcm_16000",
                                      headers=headers) as ws:
            ws.send_json({"text": " ", "voice_settings": {"speed": 1.1, "stability": 0.5}, "generation_config": {}})
            ws.send_json({"text": "Hello there. ", "try_trigger_generation": True})
            ws.send_json({"text": ""})
            found = until_final(ws)
            assert found[0]["audio"] and found[0]["alignment"]["chars"] and "contextId" not in found[0]


def test_a_context_past_capacity_gets_an_error_not_a_stall(setup: tuple[TestClient, FakeRuntime]) -> None:
    client, runtime = setup
    runtime.gate = threading.Event()
    try:
        with client.websocket_connect("/v1/text-to-speech/af_heart/multi-stream-input", headers=KEY) as ws:
            ws.send_json({"text": "Hello there. ", "context_id": "a"})
            assert runtime.started.wait(10)
            ws.send_json({"text": "Me too. ", "context_id": "b"})
            refused = receive(ws)
            assert refused["contextId"] == "b" and refused["error"] == "overloaded" and refused["message"]
            assert receive(ws) == {"isFinal": True, "contextId": "b"}
            runtime.gate.set()
            ws.send_json({"context_id": "a", "flush": True})
            ws.send_json({"context_id": "a", "close_context": True})
            assert any(m.get("audio") for m in until_final(ws, "a"))
    finally:
        runtime.gate.set()
        runtime.gate = None


def test_an_idle_socket_holds_nothing_and_its_next_text_restores(setup: tuple[TestClient, FakeRuntime],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    client, _ = setup
    monkeypatch.setattr(utterance, "GAP_S", 0.0)  # let go as soon as the queue is empty
    with client.websocket_connect("/v1/text-to-speech/af_heart/multi-stream-input", headers=KEY) as ws:
        ws.send_json({"text": "First. ", "context_id": "a"})
        assert receive(ws)["audio"]
        ws.send_json({"text": "", "context_id": "a"})  # keep-alive
        deadline = time.monotonic() + 5
        while client.get("/v1/lifecycle", headers={"Authorization": "Bearer secret"}).json()["in_flight"]:
            assert time.monotonic() < deadline, "an idle socket still holds the instance warm"
            time.sleep(0.01)
        released = client.post("/v1/lifecycle/release", headers={"Authorization": "Bearer admin"}).json()
        assert released["released"] is True and released["state"] == "released"
        ws.send_json({"text": "Second. ", "context_id": "a"})
        assert receive(ws)["audio"]
        assert client.get("/readyz").json()["state"] == "warm"


def test_an_idle_socket_closes_after_its_inactivity_timeout(setup: tuple[TestClient, FakeRuntime]) -> None:
    client, _ = setup
    with client.websocket_connect("/v1/text-to-speech/af_heart/stream-input?inactivity_timeout=0.3",
                                  headers=KEY) as ws:
        ws.send_json({"text": " "})
        message = receive(ws)
        assert message["error"] == "input_timeout_exceeded"
        with pytest.raises(WebSocketDisconnect) as closed:
            receive(ws)
        assert closed.value.code == 1008


def test_malformed_messages_close_with_a_reason(setup: tuple[TestClient, FakeRuntime]) -> None:
    client, _ = setup
    for frame, code in ((json.dumps([1, 2]), 1008), (json.dumps({"text": 5}), 1008)):
        with client.websocket_connect("/v1/text-to-speech/af_heart/stream-input", headers=KEY) as ws:
            ws.send_text(frame)
            assert receive(ws)["error"] == "invalid_message"
            with pytest.raises(WebSocketDisconnect) as closed:
                receive(ws)
            assert closed.value.code == code


def test_every_state_answers_every_kind_of_message() -> None:
    assert set(TRANSITIONS) == {(state, kind) for state in State for kind in Kind}


def test_text_past_a_contexts_limit_ends_that_context_or_the_single_stream(tmp_path: Path) -> None:
    settings = Settings(cache_dir=tmp_path, quiet_window_s=0, streams=1, max_input_chars=20)
    too_much = "word " * (20 * TEXT_PER_STREAM // 5 + 1)
    with TestClient(create_app(settings, engine=fake_engine(settings))) as client:
        with client.websocket_connect("/v1/text-to-speech/af_heart/multi-stream-input") as ws:
            ws.send_json({"text": too_much, "context_id": "a"})
            refused = receive(ws)
            assert (refused["error"], refused["contextId"]) == ("input_too_large", "a")
            assert receive(ws) == {"isFinal": True, "contextId": "a"}
            ws.send_json({"text": "Still here. ", "context_id": "b", "flush": True})  # the socket goes on
            ws.send_json({"context_id": "b", "close_context": True})
            assert any(m.get("audio") for m in until_final(ws, "b"))
        with client.websocket_connect("/v1/text-to-speech/af_heart/stream-input") as ws:
            ws.send_json({"text": too_much})
            assert receive(ws)["error"] == "input_too_large"
            with pytest.raises(WebSocketDisconnect) as closed:
                receive(ws)
            assert closed.value.code == 1008
