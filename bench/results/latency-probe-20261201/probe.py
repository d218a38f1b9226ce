import time, threading, sys, numpy as np
from app.settings import Settings
from app.sizing import read_budget
from app.services import build_engine
from app.text import chunker
backend = sys.argv[1] if len(sys.argv) > 1 else "openvino"
s = Settings.from_env({}, backend=backend, inference_process=False, restore_bridge=False, warm_up=False)
eng, shape = build_engine(s, read_budget())
t0=time.perf_counter(); print(eng.restore(), flush=True)
text = ("The quick brown fox jumps over the lazy dog while the cat watches from the window sill, "
        "and the birds sing in the trees as the sun goes down over the hills far away, "
        "bringing the long summer day to a quiet end at last for everyone in the village.")
ph = eng.frontend.phonemize(text, "en-us")
ids = eng.vocab.ids(ph)
print(len(ids), "tokens", flush=True)
voice = eng.voices.resolve(eng.voices.names[0])
def infer(slot, n, i=ids):
    t = np.array([[0, *i[:n], 0]], dtype=np.int64)
    t0 = time.perf_counter(); a = eng.runtime.infer(slot, t, voice.style_for(n), 1.0); return time.perf_counter() - t0, a
for n in (30, 30, 30):
    dt, a = infer(0, n); print("slot0 calls n=30", round(dt, 3), flush=True)
for n in (30, 30):
    dt, a = infer(1, n); print("slot1 calls n=30", round(dt,3), flush=True)
for n in (10, 20, 30, 40, 60, 100, 150, 200):
    dts = []
    for _ in range(2):
        dt, a = infer(0, n); dts.append(dt)
    print(f"alone n={n} infer {min(dts):.3f}s audio {len(a)/24000:.2f}s rtf {min(dts)/(len(a)/24000):.3f}", flush=True)
for n in (30, 100, 200):
    res = {}
    def go(slot):
        res[slot] = infer(slot, n)
    ths = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    t0 = time.perf_counter(); [t.start() for t in ths]; [t.join() for t in ths]
    print(f"pair n={n} wall {time.perf_counter()-t0:.3f} each {[round(res[i][0],3) for i in range(2)]} audio {len(res[0][1])/24000:.2f}", flush=True)
# joins
long = ("Well, I think so, but the weather is turning and we should leave soon, before it rains. "
        "The station is far; the last train leaves at nine, and the roads are flooded near the river. "
        "Nobody expected a storm like this in the middle of summer.")
ph = eng.frontend.phonemize(long, "en-us")
chunks = chunker.chunk(ph, 30, 120)
print([len(c) for c in chunks], flush=True)
audios = []
for c in chunks:
    i = eng.vocab.ids(c)
    _, a = infer(0, len(i), i)
    audios.append(a)
def silence(a, thr=0.01):
    idx = np.nonzero(np.abs(a) > thr)[0]
    return (idx[0] / 24, (len(a) - idx[-1]) / 24) if len(idx) else (len(a)/24, 0)
for k, a in enumerate(audios):
    d = np.abs(np.diff(a))
    print(f"chunk {k}: {len(a)/24000:.2f}s lead/trail silence ms {silence(a)} first {a[:3]} last {a[-3:]} p99 step {np.percentile(d,99):.4f} max step {d.max():.4f}", flush=True)
for k in range(len(audios)-1):
    print(f"join {k}: jump {abs(audios[k][-1]-audios[k+1][0]):.5f}", flush=True)
