#!/usr/bin/env bash
# The benchmark with the study's pool, 8 OpenVINO streams x 2 threads, on a lent 16-core machine (the `device`
# tool's: no network, Python 3.12 with numpy, onnxruntime and matplotlib, none of our other dependencies).
#
# The dependencies travel as cp312 wheels unpacked, trimmed (OpenVINO's GPU/NPU plugins and its non-ONNX front
# ends, spaCy's tests) and packed as xz tarballs, themselves tarred and split into parts of at most 47.4 MB, since
# one call carries 64 MiB with the tree: each call brings one part into $STAGE (default /tmp/stage: the tree's ignored folders do not survive between calls) and the last runs this script,
# which unpacks them into $SITE and runs `python -m bench run` under a time limit (results are saved after every
# configuration, so a run cut short still leaves what it measured), then packs what it wrote into $OUT.
#
#   BENCH_TIMEOUT_S  the bench's limit (default 450)
#   SITE             where the dependencies are unpacked (default /tmp/dsite)
set -uo pipefail
out=${OUT:?OUT: the folder whose files come back}
site=${SITE:-/tmp/dsite}
stage=${STAGE:-/tmp/stage}
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
say() { echo "[$(date -u +%T)] $*"; }

if [ ! -d "$site/openvino" ]; then
    say "unpacking $(cat "$stage"/part.* | wc -c) bytes from $(ls "$stage" | tr '\n' ' ')"
    cat "$stage"/part.* | sha256sum
    cat "$stage"/part.* | tar -xf - -C "$stage" || exit 3
    mkdir -p "$site"
    "$py" -c 'import sys, tarfile
for f in sys.argv[2:]:
    with tarfile.open(f, "r:xz") as t:
        t.extractall(sys.argv[1], filter="data")' "$site" "$stage"/*.tar.xz || exit 3
    say "unpacked: $(du -sh "$site" | cut -f1)"
fi
export PYTHONPATH="$site:$PWD"

{ lscpu; echo; echo "nproc $(nproc)"; cat /sys/fs/cgroup/cpu.max 2>&1; "$py" --version; } > "$out/machine.txt" 2>&1
"$py" - > "$out/smoke.txt" 2>&1 <<'EOF'
import time
t = time.perf_counter()
import numpy, onnxruntime, openvino, starlette, uvicorn, soundfile  # noqa: E401,F401
from app.sizing import read_budget, shape_for
from app.text.frontend import Frontend
print("imports", round(time.perf_counter() - t, 2), "s")
front = Frontend()
print("front end loaded in", round(front.load(), 2), "s:", front.phonemize("Hello world, it is 3:15 pm.", "en-us"))
budget = read_budget()
print("numpy", numpy.__version__, "onnxruntime", onnxruntime.__version__, "openvino", openvino.__version__)
print("budget", budget, "cpus", budget.cpus, "cores", budget.cores, "rule", shape_for(budget))
core = openvino.Core()
print("CPU", core.get_property("CPU", "FULL_DEVICE_NAME"), core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
EOF
rc=$?
cat "$out/machine.txt" | grep -E "Model name|^CPU\(s\)|Thread|Core|Socket|nproc|cpu.max|Python" ; cat "$out/smoke.txt"
[ $rc -eq 0 ] || exit 4

say "bench (limit ${BENCH_TIMEOUT_S:-450} s)"
timeout -s TERM "${BENCH_TIMEOUT_S:-450}" "$py" -m bench run --no-tune --no-ceiling --pool 8x2 \
    --configs ort-defaults,ort-sized,ov-sized-8x2,complete --clients 1,8,16 --ramp-s 2 --window-s 12 --drain-s 4 \
    --idle-s 10 --quiet-window-s 5 --release-cycles 3 --growth-cycles 3 --cold-starts 1 \
    --out "$out/run" --cache-dir /tmp/kb 2>&1 | tee "$out/bench.log"
say "bench exit ${PIPESTATUS[0]}"
tar -czf "$out/run.tgz" -C "$out" run && rm -rf "$out/run"
tar -czf "$out/logs.tgz" -C /tmp/kb/runs . 2>/dev/null
ls -la "$out"
