#!/bin/bash
# The fault matrix on the H200 for some rows, in one device call (docs/faults.md, "On the H200"):
#   bench/device/fault_matrix.sh ROWS [REPEATS]    (ROWS as bench/fault_matrix.py --faults takes)
# Everything it measured comes back under $OUT: setup.log, fm.out (the table), fm.err (per run),
# fm.json (every outcome), work.tgz (server logs and diagnose run directories).
set -u
ROWS=$1; REPEATS=${2:-2}
bash bench/device/setup.sh > $OUT/setup.log 2>&1 || { cat $OUT/setup.log; exit 1; }
tail -1 $OUT/setup.log
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
timeout 560 python3 bench/fault_matrix.py --device cuda --faults "$ROWS" --repeats $REPEATS \
  --out $OUT/fm.json --work-dir /tmp/fmwork --timeout 300 > $OUT/fm.out 2> $OUT/fm.err
echo "rc=$?"
cat $OUT/fm.out; tail -40 $OUT/fm.err
cd /tmp/fmwork && tar czf $OUT/work.tgz --exclude='*.html' . 2>/dev/null; ls -la $OUT
