"""Routing, errors, auth, admission and metrics through `create_app(settings, engine=<fake>)`: no model, fast.

What users do with the real model (speech, streaming, formats, lifecycle, faults) is tested elsewhere with it.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from app.http.server import create_app
from app.settings import Settings
from tests.app.http.fake import FAIL_SPEED, SAMPLES_PER_TOKEN, FakeRuntime, fake_engine

SETTINGS = dict(max_input_chars=600, quiet_window_s=0, streams=1)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(cache_dir=tmp_path_factory.mktemp("cache"), **SETTINGS)  # type: ignore[arg-type]
    with TestClient(create_app(settings, engine=fake_engine(settings))) as c:
        yield c


def metric(client: TestClient, name: str) -> float:
    """One sample of the Prometheus text (0 when absent)."""
    found = re.search(rf"^{re.escape(name)} (\S+)$", client.get("/metrics").text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_a_request_is_spoken_by_the_runtime(client: TestClient) -> None:
    response = client.post("/v1/audio/speech", json={"input": "hello there", "voice": "af_heart",
                                                     "response_format": "pcm"})
    assert response.status_code == 200 and response.headers["content-type"] == "audio/pcm"
    assert len(response.content) == 2 * len("hello there") * SAMPLES_PER_TOKEN  # 16-bit samples, one per token


ERRORS = [
    ({"input": "", "voice": "af_heart"}, 400, "input"),
    ({"input": "   \n\t ", "voice": "af_heart"}, 400, "input"),
    ({"input": "hi", "voice": "nobody"}, 400, "voice"),
    ({"input": "hi", "voice": "af_heart", "response_format": "ogg"}, 400, "response_format"),
    ({"input": "hi", "voice": "af_heart", "speed": 9}, 400, "speed"),
    ({"input": "hi", "voice": "af_heart", "speed": 0.1}, 400, "speed"),
    ({"input": "hi", "voice": "af_heart", "speed": "fast"}, 400, "speed"),
    ({"input": 42, "voice": "af_heart"}, 400, "input"),
    ({"input": "hi", "voice": ["af_heart"]}, 400, "voice"),
    ({"input": "hi", "voice": "af_heart", "stream": "yes"}, 400, "stream"),
    ({"input": "hi", "model": "whisper-1"}, 400, "model"),
    ({"input": "x" * 601, "voice": "af_heart"}, 413, "input"),
    ({"voice": "af_heart"}, 400, "input"),
]


@pytest.mark.parametrize("body, status, param", ERRORS)
def test_bad_input_gets_an_openai_shaped_error(client: TestClient, body: dict[str, object], status: int,
                                               param: str) -> None:
    response = client.post("/v1/audio/speech", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param and error["message"] and error["type"] == "invalid_request_error"


@pytest.mark.parametrize("raw", [b"{", b"[1, 2]", b"\xff\xfe{}", b"null", b'"text"', b"[" * 50_000])
def test_malformed_bodies_get_4xx(client: TestClient, raw: bytes) -> None:
    response = client.post("/v1/audio/speech", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert "error" in response.json()


def test_huge_body_is_refused_before_parsing(client: TestClient) -> None:
    response = client.post("/v1/audio/speech", content=b"{" + b" " * 5_000_000 + b"}")
    assert response.status_code == 413


def test_an_inference_error_is_a_500_before_the_response_starts(client: TestClient) -> None:
    response = client.post("/v1/audio/speech", json={"input": "hi", "voice": "af_heart", "speed": FAIL_SPEED})
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "inference_failed"
    assert client.post("/v1/audio/speech", json={"input": "hi", "voice": "af_heart"}).status_code == 200


def test_catalog_endpoints(client: TestClient) -> None:
    voices = client.get("/v1/audio/voices").json()
    assert len(voices["voices"]) == 54 and voices["default"] == voices["voices"][0]["id"] == "af_heart"
    assert {(v["lang_code"], v["gender"]) for v in voices["voices"]} >= {("a", "female"), ("j", "male"), ("z", "male")}
    assert {lang["lang_code"] for lang in voices["languages"]} == set("abefhijpz")
    legacy = client.get("/v1/audio/voices?legacy=true").json()
    assert legacy["voices"][0] == "af_heart" and len(legacy["voices"]) == 54
    assert "kokoro" in [m["id"] for m in client.get("/v1/models").json()["data"]]
    # Open WebUI's shapes: {base}/audio/voices as {"voices": [{"id", "name"}]}, {base}/audio/models as
    # {"models": [{"id"}]}.
    assert all(v["id"] == v["name"] for v in voices["voices"])
    assert "tts-1" in [m["id"] for m in client.get("/v1/audio/models").json()["models"]]
    # LiveKit's OpenAI plugin prewarms with GET /: the service's name and where to go.
    root = client.get("/").json()
    assert root["name"] == "kokoro-cpu-tts"
    assert all(client.get(path).status_code == 200 for path in root["links"].values() if path != "/v1/audio/speech")
    info = client.get("/v1/info").json()
    assert info["resolved"]["backend"] == "fake" and info["active_backend"] == "fake"
    assert info["pool"]["streams"] == info["pool"]["slots"] == 1 and info["pool"]["listeners"] == 1
    # One listener per slot where the engine brings no pace (the fake's), and no queue while nothing synthesizes.
    assert info["pool"]["capacity"] == 1 and info["pool"]["admitted"] == 0 and info["pace"] is None
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").json() == {"ready": True, "state": "warm", "draining": False}
    assert client.get("/nope").json()["error"]["code"] == "http_404"


def test_metrics_counters_rise(client: TestClient) -> None:
    ok, refused = 'tts_requests_total{outcome="ok"}', 'tts_requests_total{outcome="refused"}'
    before = {name: metric(client, name) for name in (ok, refused, "tts_audio_seconds_total",
                                                      "tts_first_audio_seconds_count")}
    for fmt in ("pcm", "wav"):  # one streamed, one whole
        body = {"input": "abcd", "voice": "af_heart", "response_format": fmt, "stream": fmt == "pcm"}
        assert client.post("/v1/audio/speech", json=body).status_code == 200
    assert client.post("/v1/audio/speech", json={"input": "hi", "voice": "nobody"}).status_code == 400
    assert metric(client, ok) == before[ok] + 2
    assert metric(client, refused) == before[refused] + 1
    made = 2 * 4 * SAMPLES_PER_TOKEN / 24000
    assert metric(client, "tts_audio_seconds_total") == pytest.approx(before["tts_audio_seconds_total"] + made)
    assert metric(client, "tts_first_audio_seconds_count") == before["tts_first_audio_seconds_count"] + 2
    assert metric(client, 'tts_lifecycle_state{state="warm"}') == 1.0
    info = client.get("/v1/info").json()["pool"]
    assert metric(client, "tts_pool_listeners") == info["listeners"] >= 1
    assert metric(client, "tts_pool_capacity_requests") == info["capacity"] == info["listeners"]  # nothing to queue for
    assert metric(client, "tts_pool_admitted") == 0
    assert 'tts_retries_total{process="inference"} 0.0' in client.get("/metrics").text
    assert 'tts_retries_total{process="reader"} 0.0' in client.get("/metrics").text


def test_overload_gets_429_with_retry_after_while_admitted_requests_finish(tmp_path: Path) -> None:
    settings = Settings(cache_dir=tmp_path, max_requests=1, **SETTINGS)  # type: ignore[arg-type]
    engine = fake_engine(settings)  # capacity: one request
    runtime = engine.runtime
    assert isinstance(runtime, FakeRuntime)
    runtime.gate = threading.Event()
    with TestClient(create_app(settings, engine=engine)) as client:
        held: dict[str, int] = {}
        first = threading.Thread(target=lambda: held.update(status=client.post(
            "/v1/audio/speech", json={"input": "hi", "voice": "af_heart"}).status_code))
        first.start()
        assert runtime.started.wait(10)
        refused = client.post("/v1/audio/speech", json={"input": "hi", "voice": "af_heart"})
        bad = client.post("/v1/audio/speech", json={"input": "hi", "voice": "nobody"})  # its 400, not a 429
        runtime.gate.set()
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "voice_not_found"
        first.join(10)
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert held["status"] == 200


def test_api_key_guards_speech_and_voices_not_probes(tmp_path: Path) -> None:
    settings = Settings(cache_dir=tmp_path, api_key="k3y", admin_token="4dmin", **SETTINGS)  # type: ignore[arg-type]
    body = {"input": "Hi.", "voice": "af_heart", "response_format": "pcm"}
    with TestClient(create_app(settings, engine=fake_engine(settings))) as client:
        assert client.post("/v1/audio/speech", json=body).status_code == 401
        wrong = client.post("/v1/audio/speech", json=body, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"
        assert wrong.headers["WWW-Authenticate"] == "Bearer"
        assert client.get("/v1/audio/voices").status_code == 401
        ok = client.post("/v1/audio/speech", json=body, headers={"Authorization": "Bearer k3y"})
        assert ok.status_code == 200 and len(ok.content) > 1000
        assert client.get("/healthz").status_code == 200 and client.get("/readyz").status_code == 200
        # The API key is not the admin token.
        assert client.post("/v1/lifecycle/release", headers={"Authorization": "Bearer k3y"}).status_code == 401
        public = client.get("/v1/info", headers={"Authorization": "Bearer k3y"}).json()["settings"]
        assert public["api_key"] == public["admin_token"] == "set"  # never the secrets themselves


def test_manual_release_is_off_without_an_admin_token(client: TestClient) -> None:
    release = client.post("/v1/lifecycle/release", headers={"Authorization": "Bearer anything"})
    assert release.status_code == 404 and "TTS_ADMIN_TOKEN" in release.json()["error"]["message"]


def test_api_key_guards_every_endpoint_but_the_probes(tmp_path: Path) -> None:
    settings = Settings(cache_dir=tmp_path, api_key="k3y", admin_token="4dmin", **SETTINGS)  # type: ignore[arg-type]
    key = {"Authorization": "Bearer k3y"}
    guarded = ["/", "/v1/models", "/v1/audio/models", "/v1/info", "/metrics", "/v1/lifecycle", "/v1/audio/voices",
               "/no/such/path"]
    with TestClient(create_app(settings, engine=fake_engine(settings))) as client:
        for path in guarded:
            refused = client.get(path)
            assert refused.status_code == 401, path
            assert refused.json()["error"]["type"] == "authentication_error" and set(refused.json()["error"]) == {
                "message", "type", "param", "code"}
            assert refused.headers["WWW-Authenticate"] == "Bearer"
            assert client.get(path, headers={"Authorization": "Bearer k3z"}).status_code == 401, path
            assert client.get(path, headers=key).status_code == (404 if path == "/no/such/path" else 200), path
        for probe in ("/healthz", "/readyz"):
            assert client.get(probe).status_code == 200
        info = client.get("/v1/info", headers=key).text
        assert "k3y" not in info and "4dmin" not in info  # no secret shown, even to a key holder
        # The admin endpoint takes the admin token alone.
        assert client.post("/v1/lifecycle/release", headers=key).status_code == 401
        assert client.post("/v1/lifecycle/release", headers={"Authorization": "Bearer 4dmin"}).status_code == 200


def test_metrics_can_take_a_token_of_its_own(tmp_path: Path) -> None:
    settings = Settings(cache_dir=tmp_path, api_key="k3y", metrics_token="scr4pe", **SETTINGS)  # type: ignore[arg-type]
    with TestClient(create_app(settings, engine=fake_engine(settings))) as client:
        assert client.get("/metrics", headers={"Authorization": "Bearer scr4pe"}).status_code == 200
        assert client.get("/metrics", headers={"Authorization": "Bearer k3y"}).status_code == 401
        assert client.get("/metrics").status_code == 401
        # The scraper's token opens nothing else.
        assert client.get("/v1/info", headers={"Authorization": "Bearer scr4pe"}).status_code == 401
        info = client.get("/v1/info", headers={"Authorization": "Bearer k3y"})
        assert info.json()["settings"]["metrics_token"] == "set" and "scr4pe" not in info.text


def test_metrics_token_alone_guards_only_metrics(tmp_path: Path) -> None:
    settings = Settings(cache_dir=tmp_path, metrics_token="scr4pe", **SETTINGS)  # type: ignore[arg-type]
    with TestClient(create_app(settings, engine=fake_engine(settings))) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/v1/info").status_code == 200


class RestoreWatch:
    """Wraps a fake engine's runtime load and front end: how many loads had finished when each text was phonemized."""

    def __init__(self, engine: object) -> None:
        self.loads_done = 0
        self.phonemized_after_loads: list[int] = []
        runtime, frontend = engine.runtime, engine.frontend  # type: ignore[attr-defined]
        load, phonemize = runtime.load, frontend.phonemize_words

        def slow_load() -> object:
            time.sleep(0.3)  # a restore's load
            try:
                return load()
            finally:
                self.loads_done += 1

        def watched(*args: object, **kwargs: object) -> object:
            # Counted, not flagged while loading: planned beside the restore, the plan may run before the load begins.
            self.phonemized_after_loads.append(self.loads_done)
            return phonemize(*args, **kwargs)

        runtime.load, frontend.phonemize_words = slow_load, watched


def test_a_request_to_a_released_server_is_planned_while_it_restores(tmp_path: Path) -> None:
    """After a release the front end's pages come back from disk (0.05 s of a 0.6 s restore): the request is planned
    beside the restore (a release keeps the front end loaded)."""
    settings = Settings(cache_dir=tmp_path, admin_token="4dmin", **SETTINGS)  # type: ignore[arg-type]
    engine = fake_engine(settings)
    watch = RestoreWatch(engine)
    body = {"input": "hello there", "voice": "af_heart", "response_format": "pcm"}
    with TestClient(create_app(settings, engine=engine)) as client:
        assert client.post("/v1/audio/speech", json=body).status_code == 200
        assert watch.phonemized_after_loads == [1]  # warm: the start's load, nothing to restore
        assert client.post("/v1/lifecycle/release", headers={"Authorization": "Bearer 4dmin"}).json()["released"]
        spoken = client.post("/v1/audio/speech", json=body)
        assert spoken.status_code == 200 and len(spoken.content) == 2 * len("hello there") * SAMPLES_PER_TOKEN
        # Beside the restore: before its load has finished; else after it.
        assert watch.phonemized_after_loads == [1, 1]
        # Bad requests sent to a released server: a clean 400 each, before admission, and nothing is restored.
        assert client.post("/v1/lifecycle/release", headers={"Authorization": "Bearer 4dmin"}).json()["released"]
        for bad, param in (({"speed": 9}, "speed"), ({"voice": "nobody"}, "voice"), ({"lang_code": "xx"}, "lang_code")):
            refused = client.post("/v1/audio/speech", json={**body, **bad})
            assert refused.status_code == 400 and refused.json()["error"]["param"] == param
        assert client.get("/v1/lifecycle").json()["state"] == "released"
        assert client.post("/v1/audio/speech", json=body).status_code == 200
