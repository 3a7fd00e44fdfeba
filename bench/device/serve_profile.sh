#!/bin/bash
# Issue #38 item 1 on the H200: the served engine against the engine alone, and where a served
# step's time goes, one device call per part (the machine stays up between calls sent at once):
#   bench/device/serve_profile.sh engine [BATCHES]           # engine alone (bench/engine_decode.py)
#   bench/device/serve_profile.sh served [LEVELS] [WORKERS]  # served + py-spy at each level
# Both run bench/device/setup.sh first (carry .h200p3 in the call that completes the GGUF) and
# .pyspy/ (py-spy's manylinux wheel) in any call from the first setup on (setup.sh installs it). `served` starts `specscope serve --backend engine
# --device cuda --drafter none --max-batch 256`, warms it up, then per level C: py-spy attached
# to the server (sampling, non-blocking), `specscope probe --prompt-tokens 256 --max-tokens 256
# --concurrency C --repeat 2` (--workers WORKERS from C = 64), py-spy stopped (--gil: only the
# thread holding the interpreter is sampled), its samples summed by part and the server's own
# account of a step read from /metrics before and after (bench/serve_profile.py). DEVICE=cpu runs the same on this machine at small levels
# (a check of the script, not a figure). Everything comes back as $OUT/serve_profile_PART.tgz.
set -u
PART=${1:-served}
source bench/device/env.sh
if [ "$DEVICE" != cuda ] && [ -d .pyspy ] && [ ! -x /tmp/pyspy/bin/py-spy ]; then
  $PY -m pip install -q --no-index --no-deps --target /tmp/pyspy .pyspy/*.whl  # setup.sh's on cuda
fi
SPY=/tmp/pyspy/bin/py-spy
W=$OUT/work_$PART
mkdir -p $W

if [ "$PART" = engine ]; then
  BATCHES=${2:-1,16,64,256}
  timeout 540 $PY bench/engine_decode.py --device $DEVICE --batches $BATCHES --contexts 256 \
    --skip-hf --json $W/engine.json > $W/engine.txt 2>&1
  echo "engine rc=$?"; tail -20 $W/engine.txt
fi

if [ "$PART" = served ]; then
  LEVELS=${2:-1,16,64,256}; WORKERS=${3:-4}
  URL=http://127.0.0.1:30000
  $PY -m specscope.cli serve --backend engine --device $DEVICE --drafter none --max-batch 256 \
    --port 30000 > $W/serve.log 2>&1 &
  SRV=$!
  up() { $PY -c "import urllib.request as u; u.urlopen('$URL/v1/models', timeout=2)" 2>/dev/null; }
  for _ in $(seq 300); do up && break; kill -0 $SRV 2>/dev/null || break; sleep 1; done
  up || { echo "server did not start"; tail -30 $W/serve.log; exit 1; }
  echo "server up after $SECONDS s"
  $PY -m specscope.cli probe $URL --prompt-tokens 256 --max-tokens 32 --concurrency 8 \
    --json --out $W/warmup > /dev/null 2> $W/warmup.err
  for C in ${LEVELS//,/ }; do
    FLAGS=""; [ "$C" -ge 64 ] && [ "$WORKERS" -gt 1 ] && FLAGS="--workers $WORKERS"
    $SPY record --pid $SRV --rate 250 --nonblocking --gil --threads --format raw -o $W/spy_$C.txt \
      > $W/spy_$C.log 2>&1 &
    SPYP=$!
    sleep 1
    $PY -c "import urllib.request as u; print(u.urlopen('$URL/metrics').read().decode())" > $W/metrics_$C.before
    T0=$(date +%s.%N)
    timeout 240 $PY -m specscope.cli probe $URL --prompt-tokens 256 --max-tokens 256 \
      --concurrency $C --repeat 2 $FLAGS --json --out $W/probe_$C > $W/probe_$C.json \
      2> $W/probe_$C.err
    echo "probe C=$C rc=$?"
    $PY -c "import urllib.request as u; print(u.urlopen('$URL/metrics').read().decode())" > $W/metrics_$C.after
    kill -INT $SPYP 2>/dev/null; wait $SPYP
    HELD=$($PY -c "print((float('$(date +%s.%N)') - float('$T0')) * 250)")
    echo "== C=$C" >> $W/profile.txt
    $PY bench/serve_profile.py --metrics $W/metrics_$C.before $W/metrics_$C.after \
      --slots "$HELD" $W/spy_$C.txt >> $W/profile.txt 2>&1
    $PY -c "import json,sys; s=json.load(open('$W/probe_$C.json'))['summary']; print('C=$C', {k: s.get(k) for k in ('decode_tps','mean_step_s','ok','failed')}, 'client', {k: (s.get('client') or {}).get(k) for k in ('lag_p99_s','lag_excess_s','limits_step_time')})" 2>&1 | tee -a $W/levels.txt
  done
  kill -INT $SRV; wait $SRV
  cat $W/profile.txt
fi
tar czf $OUT/serve_profile_$PART.tgz -C $W . && ls -la $OUT
