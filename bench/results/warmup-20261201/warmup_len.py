"""Usage: python warmup_len.py CACHE_ROOT ROUNDS 0,3,20 (from the repository root).

Does a shorter warm-up buy the same first request? One fresh process per (round, variant), interleaved.

Each process: import the compiled timed copy (2 streams x 1 thread, as the 2-vCPU server), warm each slot with
N tokens (0 = none), then time a 30-token first chunk on each slot, then the same again (warm)."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

PHRASE_30 = "ðə fˈɜɹst sˈɛntəns ɪz ʃˈɔɹt. ðə sˈɛkənd wʌn ɪz lˈɔŋɡəɹ."
WARM_20 = "wˈɔɹm ˈʌp ðə stɹˈim."  # the warm-up phrase before this run (20 tokens); N tokens are its first N


def child(cache_root: str, n: str) -> None:
    import numpy as np

    from app.runtime import compile_cache
    from app.runtime.backends.openvino import OpenVinoBackend
    from app.served import served_model
    from app.settings import Settings
    from app.sizing import PoolShape
    from app.text.vocab import Vocab
    from app.voices import VoiceBank

    root = Path(cache_root)
    copy, digest = served_model(Settings(cache_dir=root), root)
    cache, _ = compile_cache.choose(None, root / "openvino", copy, digest)
    backend = OpenVinoBackend(copy, PoolShape(streams=2, threads_per_stream=1), runtime_defaults=False,
                              precision="f32", cache_dir=cache)
    t = time.perf_counter()
    backend.load()
    load_s = time.perf_counter() - t
    vocab, voice = Vocab.embedded(), VoiceBank.load(None).resolve("jf_alpha")
    tokens = int(n)
    warm_s = 0.0
    if tokens:
        ids = vocab.ids(WARM_20)[:tokens]
        warm = np.array([[0, *ids, 0]], dtype=np.int64)
        t = time.perf_counter()
        for slot in range(2):
            backend.infer(slot, warm, voice.style_for(len(ids)), 1.0)
        warm_s = time.perf_counter() - t
    ids = vocab.ids(PHRASE_30)
    real = np.array([[0, *ids, 0]], dtype=np.int64)
    style = voice.style_for(len(ids))
    first, second = [], []
    for slot in range(2):
        t = time.perf_counter()
        backend.infer(slot, real, style, 1.0)
        first.append(time.perf_counter() - t)
    for slot in range(2):
        t = time.perf_counter()
        backend.infer(slot, real, style, 1.0)
        second.append(time.perf_counter() - t)
    print(json.dumps({"n": tokens, "load_s": load_s, "warm_s": warm_s, "first": first, "second": second,
                      "real_tokens": len(ids)}))


def main() -> None:
    cache_root, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    rows = []
    for r in range(rounds):
        for n in (variants if r % 2 == 0 else variants[::-1]):
            out = subprocess.run([sys.executable, __file__, "child", cache_root, n], capture_output=True, text=True,
                                 check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            row["round"] = r
            rows.append(row)
            print(json.dumps(row), flush=True)
    import statistics as st
    for n in variants:
        mine = [x for x in rows if x["n"] == int(n)]
        print(f"warm-up {n:>2} tokens: warm-up {st.median(x['warm_s'] for x in mine):.2f} s, first request slot0 "
              f"{st.median(x['first'][0] for x in mine):.3f} s slot1 {st.median(x['first'][1] for x in mine):.3f} s, "
              f"warm {st.median(x['second'][0] for x in mine):.3f} s, ratio first/warm "
              f"{st.median(x['first'][0] / x['second'][0] for x in mine):.2f}")


if __name__ == "__main__":
    if sys.argv[1] == "child":
        child(sys.argv[2], sys.argv[3])
    else:
        main()
