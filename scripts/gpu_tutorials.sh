#!/usr/bin/env bash
# Regenerate the saved outputs of the given tutorials on the GPU machine, in full mode, with the data
# staged by scripts/stage_device_data.sh (carry ".data"). The notebooks come back through $OUT:
#   device: bash scripts/gpu_tutorials.sh 01 05        then here: cp <files_at>/*.ipynb tutorials/
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MINIDL_DATA=$PWD/.data MINIDL_TUTORIAL_MODE=full
OUT=${OUT:-/tmp/minidl_gpu_out}; mkdir -p "$OUT"
nbs=()
for prefix in "$@"; do nbs+=(tutorials/"$prefix"_*.ipynb); done
python3 tutorials/run.py --update-committed --executor builtin "${nbs[@]}" 2>&1 | tee "$OUT/tutorials.log" | grep -v "^\[" 
cp "${nbs[@]}" "$OUT"/
