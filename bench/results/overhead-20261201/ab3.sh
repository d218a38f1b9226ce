#!/bin/bash
# Interleaved rounds: in-process job (new and old code) and served fixed-work variants.
PY=/work/main/.venv/bin/python
busy() { awk '/^cpu /{print ($2+$3+$4+$7+$8+$9)/100}' /proc/stat; }
for r in $(seq 1 ${ROUNDS:-2}); do
  for tree in ${INPROC_TREES}; do
    cd $tree; b0=$(busy)
    $PY -m bench.inprocess --jobs /tmp/prof/jobs.json --out-dir /tmp/prof/ip >/dev/null 2>&1
    b1=$(busy)
    $PY -c "import json;d=json.load(open('/tmp/prof/ip/ort-sized.json'));print('INPROC $r $tree', json.dumps({k:round(d[k],3) for k in ['efficiency','delivered_efficiency','audio_s','delivered_audio_s','cpu_s','wall_s']}), 'foreign', round($b1-$b0-d['cpu_s'],1))"
  done
  cd /work/wt-engine
  for v in "$@"; do
    $PY /tmp/prof/fixed.py "r$r-$v" $(echo $v | tr ',' ' ') 2>/tmp/prof/fixed-r$r.err | sed "s/^/SERVED $r /"
  done
done
