#!/usr/bin/env bash
# Regenerate the saved outputs of the given tutorials on the GPU machine, in full mode, with the data
# staged by scripts/stage_device_data.sh (carry ".data"). The notebooks come back through $OUT:
#   device: bash scripts/gpu_tutorials.sh 01 05        then here: cp <files_at>/*.ipynb tutorials/
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MINIDL_DATA=$PWD/.data MINIDL_TUTORIAL_MODE=full
OUT=${OUT:-/tmp/minidl_gpu_out}; mkdir -p "$OUT"
# One notebook at a time, each with a time limit (T_NB seconds, default 240), copied to $OUT as soon as it
# has run: a notebook that runs out of time leaves the others' results intact (and its own file unchanged).
T_NB=${T_NB:-240}
for prefix in "$@"; do
  for nb in tutorials/"$prefix"_*.ipynb; do
    start=$(date +%s)
    if timeout -s INT "$T_NB" python3 tutorials/run.py --update-committed --executor builtin "$nb" >> "$OUT/tutorials.log" 2>&1; then
      cp "$nb" "$OUT"/
      echo "$nb: ran in $(( $(date +%s) - start )) s"
    else
      echo "$nb: FAILED or out of time after $(( $(date +%s) - start )) s (see tutorials.log)"
    fi
  done
done
grep -v "^\[" "$OUT/tutorials.log" | tail -n 40
