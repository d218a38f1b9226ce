#!/bin/bash
# Interleaved: in-process ORT 2x1 (4 threads) and served variants (4 clients), ROUNDS times; machine busy CPU around each.
cd /work/wt-engine
PY=/work/main/.venv/bin/python
busy() { awk '/^cpu /{print ($2+$3+$4+$7+$8+$9)/100}' /proc/stat; }
for r in $(seq 1 ${ROUNDS:-2}); do
  if [ -z "$NOINPROC" ]; then
  b0=$(busy)
  $PY -m bench.inprocess --jobs /tmp/prof/jobs.json --out-dir /tmp/prof/ip >/dev/null 2>&1
  b1=$(busy)
  $PY -c "import json;d=json.load(open('/tmp/prof/ip/ort-sized.json'));print('INPROC round $r', json.dumps({k:round(d[k],3) for k in ['efficiency','delivered_efficiency','audio_s','delivered_audio_s','cpu_s','wall_s']}), 'machine busy', round($b1-$b0,1))"
  fi
  for v in "$@"; do
    $PY /tmp/prof/served.py "r$r-$v" $(echo $v | tr ',' ' ') > /tmp/prof/served-r$r-$v.json 2>/tmp/prof/served-r$r-$v.err
    $PY -c "import json;d=json.load(open('/tmp/prof/served-r$r-$v.json'));print('SERVED round $r $v', round(d['efficiency'],3), 'audio', round(d['audio_s'],1), 'cpu', round(d['server_cpu_s'],1), 'machine busy', round(d.get('machine_busy_cpu_s',0),1), 'fa50', round(d['first_audio_p50'],2), {p:(v['name'],round(v['cpu'],1)) for p,v in d['per_process'].items()})"
  done
done
