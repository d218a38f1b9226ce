"""``GET /web``: served from the package with nothing from elsewhere (fast, fake engine), and used in a
real headless Chromium against a real server on the real model: it synthesizes and the audio plays."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from app.http.server import create_app
from app.settings import Settings
from tests.app.http.fake import fake_engine
from tests.conftest import LiveServer

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(cache_dir=tmp_path_factory.mktemp("cache"), quiet_window_s=0)
    with TestClient(create_app(settings, engine=fake_engine(settings))) as c:
        yield c


def test_the_page_is_served_from_the_package_and_fetches_nothing_elsewhere(client: TestClient) -> None:
    response = client.get("/web")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    policy = response.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "connect-src 'self'" in policy
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", response.text)  # no CDN, no other origin
    assert "/v1/audio/speech" in response.text and "/v1/audio/voices" in response.text
    assert "speech.audio.timestamps" in response.text  # it shows the word timings the SSE stream carries


def test_the_voice_list_carries_the_aliases_the_page_offers(client: TestClient) -> None:
    found = client.get("/v1/audio/voices").json()
    assert {"id": "af_heart", "name": "af_heart", "language": "American English", "lang_code": "a",
            "gender": "female"} in found["voices"]
    assert found["default"] == "af_heart" and found["aliases"]["alloy"] == "af_alloy"


def test_the_page_can_be_switched_off(tmp_path: Path) -> None:
    settings = Settings(cache_dir=tmp_path, quiet_window_s=0, web=False)
    with TestClient(create_app(settings, engine=fake_engine(settings))) as c:
        assert c.get("/web").status_code == 404


def wait_until(page: Any, expression: str, timeout_s: float) -> None:
    """Poll ``expression`` in the page (Playwright's wait_for_function evaluates strings with eval, which the
    page's Content-Security-Policy forbids, rightly; DevTools' own evaluation is not subject to it)."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"timed out waiting for {expression}: {page.evaluate('window.ttsState')}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--autoplay-policy=no-user-gesture-required", "--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install -y chromium)")
@pytest.mark.parametrize("fmt, voice, mode", [("mp3", "af_heart", "media source"),
                                              ("aac", "onyx", "media source"),
                                              ("pcm", "af_heart(2)+am_michael(1)", "web audio"),
                                              ("wav", "af_bella-am_michael(0.3)", "web audio"),
                                              ("opus", "nova", "whole file"),
                                              ("flac", "am_michael", "whole file")])
def test_chromium_speaks_and_plays_the_stream(chromium: Any, server: LiveServer, fmt: str, voice: str,
                                              mode: str) -> None:
    page = chromium.new_page()
    try:
        requested: list[str] = []
        page.on("request", lambda r: requested.append(r.url))
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{server.url}/web")
        wait_until(page, "document.querySelector('#voice option[value=af_heart]') !== null", 10)
        page.fill("#text", "Hello from the browser. The rest streams after it.")  # two chunks
        if "+" in voice or "-" in voice:
            page.fill("#blend", voice)
        else:
            page.select_option("#voice", voice)
        page.select_option("#format", fmt)
        page.fill("#speed", "1.2")
        page.click("#speak")
        wait_until(page, "['received', 'failed'].includes(window.ttsState.status)", 120)
        wait_until(page, "window.ttsState.error !== null || window.ttsState.playedS > 0.5", 30)
        state = page.evaluate("window.ttsState")
        shown = page.evaluate("document.querySelectorAll('#words span').length")
    finally:
        page.close()
    assert state["error"] is None and errors == []
    assert state["mode"] == mode and state["bytes"] > 10_000 and state["firstByteMs"] is not None
    # The word timings arrived (SSE events after each chunk's audio) and are shown, in order, in the audio.
    heard = state["words"]
    assert [w["word"] for w in heard] == ["Hello", "from", "the", "browser", "The", "rest", "streams", "after", "it"]
    assert all(a["start_time"] <= a["end_time"] <= b["start_time"] for a, b in zip(heard[:-1], heard[1:], strict=True))
    assert shown == len(heard)
    assert all(url.startswith(server.url) or url.startswith("blob:") for url in requested), requested
