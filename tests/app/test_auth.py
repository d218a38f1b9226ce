"""Optional API key on the speech endpoints; admin endpoints off unless a token is set."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from app.http.server import create_app
from app.settings import Settings


def test_api_key_guards_speech_and_voices_not_probes(cache_dir: Path) -> None:
    settings = Settings(cache_dir=cache_dir, backend="onnxruntime", api_key="k3y", quiet_window_s=0)
    body = {"input": "Hi.", "voice": "jf_alpha", "response_format": "pcm"}
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/audio/speech", json=body).status_code == 401
        wrong = client.post("/v1/audio/speech", json=body, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"
        assert client.get("/v1/audio/voices").status_code == 401
        ok = client.post("/v1/audio/speech", json=body, headers={"Authorization": "Bearer k3y"})
        assert ok.status_code == 200 and len(ok.content) > 1000
        assert client.get("/healthz").status_code == 200 and client.get("/readyz").status_code == 200
        # No admin token configured: manual release does not exist.
        release = client.post("/v1/lifecycle/release", headers={"Authorization": "Bearer k3y"})
        assert release.status_code == 404 and "TTS_ADMIN_TOKEN" in release.json()["error"]["message"]
        assert "api_key" in client.get("/v1/info").json()["settings"]
        assert client.get("/v1/info").json()["settings"]["api_key"] == "set"  # never the secret itself
