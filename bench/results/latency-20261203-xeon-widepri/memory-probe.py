import json, os, subprocess, sys, time, concurrent.futures as cf
import httpx, psutil
corpus = json.load(open("/work/main/bench/corpus/study16-v1.json"))["utterances"]
def tree_rss(pid):
    p = psutil.Process(pid); procs = [p] + p.children(recursive=True)
    return sum(q.memory_info().rss for q in procs) / 2**20
def speak(url, text, voice):
    r = httpx.post(url + "/v1/audio/speech", json={"input": text, "voice": voice, "response_format": "pcm"}, timeout=300)
    assert r.status_code == 200, r.text
for name, extra in [("nowide", {"TTS_WIDE_CHUNK_TOKENS": "0"}), ("primary-wide", {}), ("bridge-wide", {"TTS_WIDE_FORM": "bridge"})]:
    env = {**os.environ, "TTS_BAKED_CACHE_DIR": "/root/.cache/kokoro-tts", "TTS_PORT": "8093", "TTS_QUIET_WINDOW_S": "0", **extra}
    proc = subprocess.Popen([".venv/bin/python", "-m", "app"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = "http://127.0.0.1:8093"
    for _ in range(200):
        try:
            if httpx.get(url + "/readyz").status_code == 200: break
        except Exception: pass
        time.sleep(0.2)
    time.sleep(8)  # the primary and the wide session load behind
    texts = sorted(corpus, key=lambda u: -len(u["text"]))[:6]
    peak = 0
    for u in texts:
        speak(url, u["text"], u["voice"]); peak = max(peak, tree_rss(proc.pid))
    with cf.ThreadPoolExecutor(2) as ex:
        list(ex.map(lambda u: speak(url, u["text"], u["voice"]), texts[:4]))
    peak = max(peak, tree_rss(proc.pid))
    time.sleep(12)
    info = httpx.get(url + "/v1/info").json()
    print(name, "warm rss after requests MB", round(tree_rss(proc.pid)), "peak seen", round(peak), "wide", info["pool"]["wide_session"], info["pool"]["granted"], flush=True)
    proc.terminate(); proc.wait()
