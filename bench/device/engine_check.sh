#!/bin/bash
# The engine's CUDA path checked after a change to its host side, in one device call, before
# anything is served (random weights: no GGUF needed): bench/engine_lossless.py (graph runner
# against the eager runner, speculation against plain greedy) and bench/engine_step_python.py
# (the engine's host time per decode step at batch 1/64/256, SmolLM2's shape). Runs
# bench/device/setup.sh first (carry .whl and a GGUF part). Back under $OUT: engine_check.txt.
#   bash bench/device/engine_check.sh
set -u
source bench/device/env.sh  # the H200: setup, PYTHONPATH, the GPU line
R=$OUT/engine_check.txt
: > $R
echo "== engine_lossless --device cuda --random-weights" >> $R
timeout 240 python3 bench/engine_lossless.py --device cuda --random-weights >> $R 2>&1
echo "lossless rc=$?" | tee -a $R
echo "== engine_step_python --device cuda --model-shape smollm2" >> $R
timeout 200 python3 bench/engine_step_python.py --device cuda --model-shape smollm2 \
  --json $OUT/engine_step_python.json >> $R 2>&1
echo "step_python rc=$?" | tee -a $R
tail -40 $R
