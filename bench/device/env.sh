# Sourced by the device scripts: where they run and with which Python. DEVICE=cuda (default):
# bench/device/setup.sh (wheels, GGUF parts; its log in $OUT/setup.log), the repo's src and the
# wheels on PYTHONPATH, python3, the GPU's line. DEVICE=cpu: this machine's .venv (a check of a
# script, not a figure).
DEVICE=${DEVICE:-cuda}
if [ "$DEVICE" = cuda ]; then
  bash bench/device/setup.sh > $OUT/setup.log 2>&1 || { cat $OUT/setup.log; exit 1; }
  tail -1 $OUT/setup.log
  export PYTHONPATH=$PWD/src:/tmp/site
  PY=python3
  nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
else
  PY=${PY:-$PWD/.venv/bin/python}
fi
export PYTHONUNBUFFERED=1
