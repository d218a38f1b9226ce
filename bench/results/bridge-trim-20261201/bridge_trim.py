"""Warm memory after the primary takes over from the start bridge: with and without a malloc_trim after the
bridge is dropped (EXP_TRIM). Fresh servers, variants interleaved; run from a tree whose app/runtime/local.py
calls lifecycle.trim.collect_and_trim() after the bridge's unload when EXP_TRIM=1."""
from __future__ import annotations

import json
import statistics as st
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.server import launch, terminate, wait_ready

CACHE = Path(sys.argv[1])
ROUNDS = int(sys.argv[2])


def tree_rss(pid: int) -> int:
    proc = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)])


rows: list[dict[str, Any]] = []
for r in range(ROUNDS):
    for trim in (("0", "1") if r % 2 == 0 else ("1", "0")):
        port = 18000 + r * 2 + int(trim)
        log = Path(f"/tmp/exp-trim-{r}-{trim}.log")
        env = {"TTS_CACHE_DIR": str(CACHE), "TTS_QUIET_WINDOW_S": "0", "EXP_TRIM": trim, "PYTHONUNBUFFERED": "1"}
        proc = launch(env, port, log, cwd=Path.cwd())
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, proc, log, timeout_s=180)
            while httpx.get(f"{url}/v1/info", timeout=10).json()["bridge_serving"]:
                time.sleep(0.2)
            time.sleep(2)
            idle = tree_rss(proc.pid)
            body = {"input": "Memory after the takeover, measured.", "voice": "jf_alpha", "response_format": "pcm"}
            assert httpx.post(f"{url}/v1/audio/speech", json=body, timeout=120).status_code == 200
            time.sleep(1)
            after = tree_rss(proc.pid)
            rows.append({"round": r, "trim": trim, "idle_mb": idle / 2**20, "after_request_mb": after / 2**20})
            print(json.dumps(rows[-1]), flush=True)
        finally:
            terminate(proc, 30)
for trim in ("0", "1"):
    mine = [x for x in rows if x["trim"] == trim]
    print(f"trim={trim}: after takeover {st.median(x['idle_mb'] for x in mine):.0f} MB, after one request "
          f"{st.median(x['after_request_mb'] for x in mine):.0f} MB (n={len(mine)})")
