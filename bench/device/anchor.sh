#!/bin/bash
# An earlier tree beside this one on the device, so that one call times both on one machine
# (a figure is a ratio against an anchor measured in the same run; timings from another card
# or another day do not compare).
#   here:  bash bench/device/anchor.sh make REV   REV's src/specscope/engine and bench/*.py into
#                                                 .devcarry/anchor.tar (weights and data left
#                                                 out: the anchor uses this tree's)
#   there: bash bench/device/anchor.sh build      (a call carrying .devcarry) /tmp/anchor: a copy
#                                                 of this tree with REV's files over it; run a
#                                                 bench from /tmp/anchor to time REV
set -eu
case "${1:-}" in
  make)
    rev=${2:?usage: bench/device/anchor.sh make REV}
    mkdir -p .devcarry
    git archive --format=tar "$rev" src/specscope/engine bench \
      | tar --delete --wildcards 'src/specscope/engine/weights/*' 'bench/data/*' 'bench/results/*' \
      > .devcarry/anchor.tar
    echo "$rev" > .devcarry/anchor.rev
    ls -la .devcarry
    ;;
  build)
    [ -f .devcarry/anchor.tar ] || { echo "no .devcarry/anchor.tar: carry .devcarry"; exit 1; }
    rm -rf /tmp/anchor && mkdir -p /tmp/anchor
    cp -r src bench /tmp/anchor/
    tar -xf .devcarry/anchor.tar -C /tmp/anchor
    echo "anchor $(cat .devcarry/anchor.rev) in /tmp/anchor"
    ;;
  *) echo "usage: bench/device/anchor.sh make REV | build"; exit 2 ;;
esac
