#!/usr/bin/env bash
# The benchmark with the study's pool, 8 OpenVINO streams x 2 threads, on a lent 16-core machine (the `device`
# tool's: no network, Python 3.12 with numpy, onnxruntime and matplotlib, none of our other dependencies).
#
# The dependencies travel as parts that `bench/device_pack.sh` makes here (its header gives the device calls):
# this script unpacks them from $STAGE into $SITE, records the machine and loads the front end, then, by PHASE:
#
#   tune   `python -m app tune` on the machine (every form and shape the tuner knows, one round), its manifest and
#          forms in $TUNED; the tuning log and manifest are copied to $OUT.
#   bench  `python -m bench run` with that tuning: the plain 8 x 2 OpenVINO pool (`ov-sized-8x2`) against the
#          complete system as tuned there (the best form and shape the tuner found, ONNX Runtime's where it won), at
#          1, 4 and 8 clients; `ort-defaults` comes with every run as the output check's reference. Without a
#          manifest in $TUNED it serves the complete system untuned.
#   all    both, one after the other (default): on 2 cores here; on the device each phase is a call of its own, so
#          that each fits the tool's 10 minutes (the machine keeps /tmp between calls while it stays warm).
#
# Each step runs under a time limit (results are saved after every configuration, so a run cut short still leaves
# what it measured) and packs what it wrote into $OUT. The first run (2026-12-04,
# bench/results/device-20261204-xeon16-8x2) took about 440 s for the bench alone at 1 and 8 clients.
#
#   PHASE            tune, bench or all (default all)
#   TUNE_TIMEOUT_S   the tuner's limit (default 420)
#   BENCH_TIMEOUT_S  the bench's limit (default 480; the device call needs about 60 s more)
#   CLIENTS          client counts (default 1,4,8)
#   OV_CONFIG        the OpenVINO pool measured (default ov-sized-8x2, which `bench run` offers where the CPU budget
#                    has 16 cores; ov-sized-2x1 to try the script on 2)
#   TUNED            where the tuning goes (default /tmp/tuned)
#   SITE             where the dependencies are unpacked (default /tmp/dsite)
#   STAGE            where the calls left the parts (default /tmp/stage)
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

phase=${PHASE:-all}
tuned=${TUNED:-/tmp/tuned}
if [ "$phase" = tune ] || [ "$phase" = all ]; then
    say "tune (limit ${TUNE_TIMEOUT_S:-420} s)"
    mkdir -p "$tuned"
    TTS_CACHE_DIR="$tuned" timeout -s TERM "${TUNE_TIMEOUT_S:-420}" "$py" -m app tune --out "$tuned" --rounds 1 \
        2>&1 | tee "$out/tune.log"
    say "tune exit ${PIPESTATUS[0]}"
    cp -r "$tuned/tuning" "$out/" 2>/dev/null
fi
if [ "$phase" = bench ] || [ "$phase" = all ]; then
    tuning=(--no-tune)
    if ls "$tuned"/tuning/*.json > /dev/null 2>&1; then tuning=(--tuned-dir "$tuned"); fi
    say "bench ${tuning[*]} (limit ${BENCH_TIMEOUT_S:-480} s)"
    timeout -s TERM "${BENCH_TIMEOUT_S:-480}" "$py" -m bench run "${tuning[@]}" --no-ceiling \
        --configs "${OV_CONFIG:-ov-sized-8x2},complete" --clients "${CLIENTS:-1,4,8}" --ramp-s 2 --window-s 12 --drain-s 4 \
        --idle-s 10 --quiet-window-s 5 --release-cycles 2 --growth-cycles 2 --cold-starts 1 \
        --out "$out/run" --cache-dir /tmp/kb 2>&1 | tee "$out/bench.log"
    say "bench exit ${PIPESTATUS[0]}"
    tar -czf "$out/run.tgz" -C "$out" run && rm -rf "$out/run"
    # The servers' logs only (the run folders also hold caches and audio: 268 MB on 2026-12-04, over what comes back).
    (cd /tmp/kb/runs && tar -czf "$out/logs.tgz" */logs) 2>/dev/null
fi
ls -la "$out"
