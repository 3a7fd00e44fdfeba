#!/bin/bash
# The fault matrix on the H200, one device call at a time (docs/faults.md, "On the H200"):
#   bench/device/fault_matrix.sh ROWS [REPEATS] [BUDGET_S]
# ROWS as bench/fault_matrix.py --faults takes ("" = all rows). Each call goes on where the last
# one stopped (the outcomes live in /tmp/fm.json while the machine is held: --resume) and starts
# no run that would end past BUDGET_S. Back under $OUT: setup.log, fm.out (the table so far),
# fm.err (per run), fm.json (every outcome), work.tgz (server logs, diagnose run directories).
set -u
ROWS=$1; REPEATS=${2:-2}; BUDGET=${3:-500}
bash bench/device/setup.sh > $OUT/setup.log 2>&1 || { cat $OUT/setup.log; exit 1; }
tail -1 $OUT/setup.log
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
timeout -s INT $((BUDGET + 60)) python3 bench/fault_matrix.py --device cuda --faults "$ROWS" \
  --repeats $REPEATS --out /tmp/fm.json --resume --budget-s $BUDGET --work-dir /tmp/fmwork \
  --timeout 300 > $OUT/fm.out 2> $OUT/fm.err
echo "rc=$?"
cp /tmp/fm.json $OUT/ 2>/dev/null
cat $OUT/fm.out; tail -30 $OUT/fm.err
cd /tmp/fmwork 2>/dev/null && tar czf $OUT/work.tgz --exclude='*.html' . 2>/dev/null; ls -la $OUT
