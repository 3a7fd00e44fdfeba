#!/bin/bash
# The fault matrix on the H200, one device call at a time (docs/faults.md, "On the H200"):
#   [FM=FILE.json] [WORK=DIR] bench/device/fault_matrix.sh ROWS [REPEATS] [BUDGET_S] [FLAGS...]
# ROWS as bench/fault_matrix.py --faults takes ("" = all rows). Each call goes on where the last
# one stopped (the outcomes live in $FM, /tmp/fm.json unless set, while the machine is held:
# --resume) and starts no run that would end past BUDGET_S. FLAGS go to fault_matrix.py: a try
# kept apart from the matrix takes its own FM and WORK (e.g. FM=/tmp/fm_prose.json
# WORK=/tmp/prosework ... --workload prose-edit). Back under $OUT: setup.log, NAME.out (the
# tables, one per invocation, appended), NAME.err (per run), the fm*.json outcomes, NAME.tgz
# (server logs, diagnose run directories), NAME = $FM's name without .json.
set -u
ROWS=$1; REPEATS=${2:-2}; BUDGET=${3:-500}; shift 3 2>/dev/null || shift $#
FM=${FM:-/tmp/fm.json}; WORK=${WORK:-/tmp/fmwork}; NAME=$(basename "$FM" .json)
source bench/device/env.sh  # the H200: setup, PYTHONPATH, the GPU line
timeout -s INT $((BUDGET + 60)) python3 bench/fault_matrix.py --device cuda --faults "$ROWS" \
  --repeats $REPEATS --out "$FM" --resume --budget-s $BUDGET --work-dir "$WORK" \
  --timeout 300 "$@" >> $OUT/$NAME.out 2>> $OUT/$NAME.err
echo "rc=$?"
cp /tmp/fm*.json $OUT/ 2>/dev/null
tail -40 $OUT/$NAME.out; tail -30 $OUT/$NAME.err
(cd "$WORK" 2>/dev/null && tar czf $OUT/$NAME.tgz --exclude='*.html' .); ls -la $OUT
