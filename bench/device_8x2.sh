#!/usr/bin/env bash
# The benchmark with the study's pool, 8 OpenVINO streams x 2 threads, on a lent 16-core machine (the `device`
# tool's: no network, Python 3.12 with numpy, onnxruntime and matplotlib, none of our other dependencies).
#
# The dependencies travel as parts that `bench/device_pack.sh` makes here (its header gives the device calls):
# this script unpacks them from $STAGE into $SITE, records the machine and loads the front end, then runs
# `python -m bench run` under a time limit (results are saved after every configuration, so a run cut short still
# leaves what it measured) and packs what it wrote into $OUT.
#
# What it measures, chosen from the first run (2026-12-04, bench/results/device-20261204-xeon16-8x2): the plain
# 8 x 2 OpenVINO pool against the complete system as shipped (the server's defaults, untuned), at 1 and 8 clients; `ort-defaults` comes with every run as
# the output check's reference, and there its in-process jobs took 162 s (ONNX Runtime's thread defaults on 16
# vCPUs in gVisor). About 440 s expected.
#
#   BENCH_TIMEOUT_S  the bench's limit (default 500; the device call needs about 60 s more)
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

say "bench (limit ${BENCH_TIMEOUT_S:-500} s)"
timeout -s TERM "${BENCH_TIMEOUT_S:-500}" "$py" -m bench run --no-tune --no-ceiling --pool 8x2 \
    --configs ov-sized-8x2,complete --clients 1,8 --ramp-s 2 --window-s 12 --drain-s 4 \
    --idle-s 10 --quiet-window-s 5 --release-cycles 3 --growth-cycles 3 --cold-starts 1 \
    --out "$out/run" --cache-dir /tmp/kb 2>&1 | tee "$out/bench.log"
say "bench exit ${PIPESTATUS[0]}"
tar -czf "$out/run.tgz" -C "$out" run && rm -rf "$out/run"
# The servers' logs only (the run folders also hold caches and audio: 268 MB on 2026-12-04, over what comes back).
(cd /tmp/kb/runs && tar -czf "$out/logs.tgz" */logs) 2>/dev/null
ls -la "$out"
