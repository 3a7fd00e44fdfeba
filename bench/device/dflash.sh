#!/bin/bash
# Issue #39 on the H200, one stage a device call (docs/dflash.md "The device plan"):
#   bench/device/dflash.sh check            the drafter's graphs, uncompiled and fused by
#                                           torch.compile, against the eager path (dflash_step
#                                           --check, fp32 and bf16, the GPU preset's 2 layers and
#                                           block 16), its step split on every path, and the
#                                           trainer's tokens/s on a corpus's lengths (~4 min)
#   bench/device/dflash.sh profile          where the served (captured, compiled) drafting step's
#                                           time goes (dflash_step --profile: device-busy time
#                                           and kernels a step against its wall time), per block
#                                           attention (ATTENTIONS, "sdpa grouped"), and the
#                                           anchor's (bench/device/anchor.sh build, in the same
#                                           call) on the same machine; VERIFY=1: the target's
#                                           17-node verify too (engine_step_profile; ~1 min each)
#   bench/device/dflash.sh train [MIN]      responses, then training, resumed from where the last
#                                           call stopped; stops after MIN minutes (default 7) with
#                                           a checkpoint under /tmp/dflash (kept while the machine
#                                           is warm: send the next call at once); exit 3 = go on
#   bench/device/dflash.sh decay A B        item 5, the story's decay: each trained drafter (folders
#                                           under /tmp/dflash, e.g. one trained with RESPONSE=256
#                                           and NAME=short, one with RESPONSE=1024 and NAME=long;
#                                           or a path, e.g. the shipped drafter's folder)
#                                           served with DDTree (DEPTH, BUDGET) and diagnosed with
#                                           --no-ignore-eos on long free-form generations
#                                           (WORKLOAD, long-writing; MAX_TOKENS, 1500; DIAG_FLAGS;
#                                           DIAG_TIMEOUT, 420 s)
#   bench/device/dflash.sh compare          an earlier tree against this one on the same machine
#                                           (bench/device/anchor.sh build first): ROUNDS (2)
#                                           rounds of the anchor's eval, then this tree's, each
#                                           its own process, after one short warm-up eval
#                                           (DRAFTER: the shipped one by
#                                           default), into $OUT/compare.tgz and the table of
#                                           bench/engine_spec_table.py ($OUT/compare.txt)
#   bench/device/dflash.sh eval             the trained drafter exported (bf16, in two parts),
#                                           its card, and bench/engine_spec.py on the shipped
#                                           held-out sets: plain, n-gram, DFlash chain and DDTree
# The first call that needs the corpus carries .dflash (bench/device/prepare.sh dflash) with
# the GGUF's last part (.h200p3); the wheels and the other parts come as for every device
# script (setup.sh through env.sh; `check` needs no GGUF). DEVICE=cpu runs the
# same here with tiny settings (a check of the script, not a figure).
# Settings (environment): NAME (drafter: the folder under /tmp/dflash), INIT_FROM (a drafter
# folder, or none; default the shipped drafter on CUDA), MAX_PROMPTS (24000),
# RESPONSE (384), TEMPERATURE (the responses sampled at it, each prompt seeded from its tokens;
# 0: greedy), MINUTES (8: the training length, fixed on the first training call), GEN_BATCH
# (256), FILE_PROMPTS (32), BUDGETS (the eval's tree budgets, 16,32), EXTRA (more train flags),
# SDPA (profile: the block's attention kernels, auto/math/cudnn: dflash_step --sdpa),
# SPEC_EXTRA (more eval flags, e.g. --no-torch-compile), EVAL_TIMEOUT (the eval's limit, 420 s),
# DRAFTER (eval: this drafter folder instead of the one trained under /tmp/dflash, e.g. the shipped
# src/specscope/engine/weights/dflash-smollm2-135m, or a comma list of folders measured in one run;
# nothing is brought back then). A call stops
# training after 7 minutes by default (the held-out evaluation after the last step must fit the
# 10-minute call too).
set -u
source bench/device/env.sh
RUN=${RUN:-/tmp/dflash}
mkdir -p $RUN
[ -f .dflash/corpus.jsonl.gz ] && cp .dflash/corpus.jsonl.gz $RUN/corpus.jsonl.gz
# The drafter training goes on from (train --init-from): on CUDA the shipped one (the GPU
# preset's shape, 2 layers, block 16), or another carried once as .dflash_init (config.json,
# model.safetensors: bench/device/prepare.sh init DIR) and kept for the calls after;
# INIT_FROM=none trains from scratch (the decay study's drafters start alike)
[ -f .dflash_init/model.safetensors ] && mkdir -p $RUN/init && cp .dflash_init/* $RUN/init/
SHIPPED=src/specscope/engine/weights/dflash-smollm2-135m
if [ -f $RUN/init/model.safetensors ]; then DEFAULT_INIT=$RUN/init; else DEFAULT_INIT=$SHIPPED; fi
[ "$DEVICE" = cuda ] || DEFAULT_INIT=none  # the CPU check's tiny preset: another shape
INIT_FROM=${INIT_FROM:-$DEFAULT_INIT}
INIT=""; [ "$INIT_FROM" != none ] && INIT="--init-from $INIT_FROM"
HELD=bench/data/dflash/heldout_code.jsonl,bench/data/dflash/heldout_chat.jsonl
if [ "$DEVICE" = cuda ]; then
  TRAIN_FLAGS="--device cuda --preset gpu --max-prompts ${MAX_PROMPTS:-24000}
    --response-tokens ${RESPONSE:-384} --gen-batch ${GEN_BATCH:-256} --minutes ${MINUTES:-8}"
  SPEC_FLAGS="--device cuda --max-new-tokens 256 --file-prompts ${FILE_PROMPTS:-32} --dflash-depth 15"
  DEPTH=${DEPTH:-15}; DIAG_FLAGS=${DIAG_FLAGS:-"--concurrency 1 --repeat 8"}
  TRAIN_BENCH_FLAGS=""; STEP_RUNS=200
else  # a check of the script: a handful of prompts, a few steps
  TRAIN_FLAGS="--threads 1 --max-prompts ${MAX_PROMPTS:-6} --response-tokens ${RESPONSE:-24}
    --gen-batch 6 --steps 6 --eval-tokens 16 --eval-set-prompts 2"
  SPEC_FLAGS="--threads 1 --max-new-tokens 16 --file-prompts ${FILE_PROMPTS:-2} --repeats 1
    --dflash-depth 7"
  DEPTH=${DEPTH:-7}; DIAG_FLAGS=${DIAG_FLAGS:-"--quick --prompt-tokens 128"}
  TRAIN_BENCH_FLAGS="--steps 1"  # the trainer bench's CPU default: the tiny target
  STEP_RUNS=10  # SmolLM2's shape on one CPU: 200 steps a path would pass the call's timeout
fi
train() {
  local budget=$(( ${1:-7} * 60 + 90 ))
  [ $budget -gt 580 ] && budget=580  # a device call ends at 600 s
  timeout $budget $PY -m specscope.engine.train_dflash --target smollm2 \
    --corpus $RUN/corpus.jsonl.gz --eval-set $HELD $TRAIN_FLAGS $INIT ${EXTRA:-} \
    --response-temperature ${TEMPERATURE:-0} --cache-dir $RUN/cache --out $RUN/${NAME:-drafter} \
    --resume --stop-after-minutes ${1:-7}
}
decay() {  # serve drafter $1 (a folder under $RUN, or a path) with DDTree, diagnose long
  # free-form generations, stop the server
  local drafter=$RUN/$1; [[ $1 == */* ]] && drafter=$1
  local port=$((31000 + RANDOM % 2000)) dir=$OUT/decay_$(basename $1)
  mkdir -p $dir
  $PY -m specscope.cli serve --backend engine --device $DEVICE --drafter dflash:$drafter \
    --verify tree --num-draft-tokens $DEPTH --budget ${BUDGET:-32} --port $port \
    > $dir/serve.log 2>&1 &
  local server=$!
  $PY - "$port" <<'WAIT'
import sys, time, urllib.request
for _ in range(480):  # graph capture and torch.compile of target and drafter: ~1 min on CUDA
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v1/models", timeout=2)
        sys.exit(0)
    except OSError:
        time.sleep(0.5)
sys.exit("server did not answer within 240 s")
WAIT
  timeout ${DIAG_TIMEOUT:-420} $PY -m specscope.cli diagnose http://127.0.0.1:$port \
    --no-ignore-eos --workload ${WORKLOAD:-long-writing} --max-tokens ${MAX_TOKENS:-1500} $DIAG_FLAGS \
    --out $dir/run > $dir/diagnose.txt 2>&1
  echo "decay $1: diagnose rc=$?"; head -30 $dir/diagnose.txt
  kill $server; wait $server 2>/dev/null
}
profile_step() {  # the drafting step of the tree in $1 on path $2 under torch.profiler; $3:
  # the block's attention (dflash_step --attention), or "anchor" (the anchor's own default)
  local att="--attention $3" src=$PWD/src
  [ "$3" = anchor ] && att="" && src=$1/src
  (cd $1 && PYTHONPATH=$src:${PYTHONPATH:-} timeout 150 $PY bench/dflash_step.py --device $DEVICE \
    --random-weights --layers-block 2,16 --steps $STEP_RUNS --profile $2 --sdpa ${SDPA:-auto} \
    $att --json $OUT/profile_$3.json > $OUT/profile_$3.txt 2>&1)
  echo "profile $2 $3: rc=$?"; grep -A24 "^profile" $OUT/profile_$3.txt
}
D=${DRAFTER:-$RUN/${NAME:-drafter}}  # eval: DRAFTER, any drafter folder (e.g. the shipped one)
bring_back() {  # the drafter in parts of 15 MB with its card (bench/device/prepare.sh init joins them)
  split -b 15000000 -d $D/model.safetensors $OUT/model.safetensors.part
  tar czf $OUT/drafter_meta.tgz -C $D config.json card.json DATA_CARD.md
  ls -la $OUT
}
case "${1:-}" in
  check)
    for dt in float32 bfloat16; do
      timeout 200 $PY bench/dflash_step.py --device $DEVICE --random-weights --check --dtype $dt \
        --layers-block 2,16 > $OUT/check_$dt.txt 2>&1; echo "check $dt rc=$?"; tail -8 $OUT/check_$dt.txt
    done
    timeout 240 $PY bench/dflash_step.py --device $DEVICE --random-weights --steps $STEP_RUNS \
      --layers-block 2,16 --json $OUT/dflash_step.json > $OUT/dflash_step.txt 2>&1
    echo "step split, 2 layers, block 16: rc=$?"; tail -9 $OUT/dflash_step.txt
    # the trainer on a corpus's lengths (the first run: 118k label tokens/s against the
    # fixed-shape bench's 335k), with and without cuDNN's attention (--attention no-cudnn)
    timeout 240 $PY bench/dflash_train_throughput.py --device $DEVICE --ragged --prompt 226 \
      --response 384 --rounds 2 $TRAIN_BENCH_FLAGS --profile > $OUT/train_throughput.txt 2>&1
    echo "trainer, ragged: rc=$?"; grep -E "tokens/s|ratio" $OUT/train_throughput.txt
    ;;
  profile)
    path=graph+compile; [ "$DEVICE" = cuda ] || path=static+compile
    for att in ${ATTENTIONS:-sdpa grouped}; do profile_step . $path $att; done
    # the anchor (a call that ran `bash bench/device/anchor.sh build`): the earlier tree's step
    [ -d /tmp/anchor ] && profile_step /tmp/anchor $path anchor
    if [ "$DEVICE" = cuda ] && [ -n "${VERIFY:-}" ]; then  # the target's 17-node verify
      timeout 150 $PY bench/engine_step_profile.py --context 512 --nodes 17 --taps 1,8,14,20,27 \
        > $OUT/profile_verify.txt 2>&1
      echo "profile verify: rc=$?"; head -26 $OUT/profile_verify.txt
    fi
    ;;
  train)
    train "${2:-7}" > $OUT/train.log 2>&1
    rc=$?; echo "train rc=$rc (0 done, 3 stopped: run it again)"; tail -30 $OUT/train.log
    [ $rc = 0 ] && bring_back  # the drafter comes back with the call that made it
    ;;
  eval)
    for d in ${D//,/ }; do  # DRAFTER may list several (engine_spec --dflash A,B: one run, both)
      [ -f $d/model.safetensors ] || { echo "no trained drafter in $d: run train until rc=0"; exit 1; }
    done
    timeout ${EVAL_TIMEOUT:-420} $PY bench/engine_spec.py --model smollm2 --dflash $D --configs ngram,dflash \
      --skip-hf --skip-self --stop-at-eos --budgets ${BUDGETS:-16,32} --num-draft-tokens 8 \
      --ngram-min 1 --sets file:${HELD/,/,file:} $SPEC_FLAGS ${SPEC_EXTRA:-} --json $OUT/engine_spec.json \
      > $OUT/engine_spec.txt 2>&1
    echo "engine_spec rc=$?"; tail -24 $OUT/engine_spec.txt
    [ -n "${DRAFTER:-}" ] || bring_back  # a drafter trained here comes back with its figures
    ;;
  compare)  # ROUNDS rounds of the anchor's eval then this tree's, one process each, interleaved
    [ -d /tmp/anchor ] || { echo "no /tmp/anchor: bash bench/device/anchor.sh build"; exit 1; }
    here=$PWD
    # a warm-up eval first, not in the table: the seventh session's first eval on a fresh
    # machine read a verify 0.07-0.15 ms slower than every later run of the same tree
    mkdir -p $OUT/warmup
    OUT=$OUT/warmup DRAFTER=${DRAFTER:-$SHIPPED} FILE_PROMPTS=2 BUDGETS=16 \
      bash bench/device/dflash.sh eval > $OUT/warmup/eval.log 2>&1
    echo "warm-up: $(grep 'engine_spec rc' $OUT/warmup/eval.log)"
    rm -rf $OUT/warmup
    for i in $(seq ${ROUNDS:-2}); do
      for tree in anchor new; do
        mkdir -p $OUT/${tree}_$i
        if [ $tree = anchor ]; then cd /tmp/anchor; else cd $here; fi
        OUT=$OUT/${tree}_$i DRAFTER=${DRAFTER:-$SHIPPED} bash bench/device/dflash.sh eval \
          > $OUT/${tree}_$i/eval.log 2>&1
        echo "$tree round $i: $(grep 'engine_spec rc' $OUT/${tree}_$i/eval.log)"
      done
    done
    cd $here
    runs=$(cd $OUT && ls -d anchor_* new_*)
    tar czf $OUT/compare.tgz -C $OUT $runs && (cd $OUT && rm -rf $runs)
    $PY bench/engine_spec_table.py $OUT/compare.tgz | tee $OUT/compare.txt
    ;;
  decay)
    shift
    for name in "$@"; do decay "$name"; done
    tar czf $OUT/decay.tgz -C $OUT $(cd $OUT && ls -d decay_*) && ls -la $OUT
    ;;
  *) echo "usage: bench/device/dflash.sh check|profile|train [MINUTES]|eval|compare|decay NAME..."; exit 2 ;;
esac
