"""The warm memory of the server's process tree with and without a wide session (run from the checkout's root)."""

import concurrent.futures as cf
import json
import os
import subprocess
import time

import httpx
import psutil

CORPUS = json.load(open("bench/corpus/study16-v1.json"))["utterances"]
URL = "http://127.0.0.1:8093"
VARIANTS = [("nowide", {"TTS_WIDE_CHUNK_TOKENS": "0"}), ("primary-wide", {}),
            ("bridge-wide", {"TTS_WIDE_FORM": "bridge"})]


def tree_rss(pid: int) -> float:
    root = psutil.Process(pid)
    return float(sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])) / 2**20


def speak(utterance: dict[str, str]) -> None:
    body = {"input": utterance["text"], "voice": utterance["voice"], "response_format": "pcm"}
    response = httpx.post(URL + "/v1/audio/speech", json=body, timeout=300)
    assert response.status_code == 200, response.text


def ready() -> bool:
    try:
        return httpx.get(URL + "/readyz").status_code == 200
    except httpx.HTTPError:
        return False


for name, extra in VARIANTS:
    env = {**os.environ, "TTS_BAKED_CACHE_DIR": "/root/.cache/kokoro-tts", "TTS_PORT": "8093",
           "TTS_QUIET_WINDOW_S": "0", **extra}
    proc = subprocess.Popen([".venv/bin/python", "-m", "app"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    for _ in range(200):
        if ready():
            break
        time.sleep(0.2)
    time.sleep(8)  # the primary and the wide session load behind
    longest = sorted(CORPUS, key=lambda u: -len(u["text"]))[:6]
    peak = 0.0
    for utterance in longest:
        speak(utterance)
        peak = max(peak, tree_rss(proc.pid))
    with cf.ThreadPoolExecutor(2) as pool:
        list(pool.map(speak, longest[:4]))
    peak = max(peak, tree_rss(proc.pid))
    time.sleep(12)
    info = httpx.get(URL + "/v1/info").json()
    print(name, "warm rss after requests MB", round(tree_rss(proc.pid)), "peak seen", round(peak), "wide",
          info["pool"]["wide_session"], info["pool"]["granted"], flush=True)
    proc.terminate()
    proc.wait()
