#!/usr/bin/env bash
# The whole GPU test suite, in two device calls (on a fresh machine one call does not fit the device's
# 10 minutes: part 1 took 486 s at bf5437a, part 2 140 s; at 245fe58, with no carried kernel cache, part 1 had run 55%
# of its tests after 480 s, nearly all of it NVRTC compiling ~600 kernel variants, and 159 s once they were cached). Logs to $OUT; the kernels the call compiled come
# back as $OUT/cupy_cache_suite<PART>.tgz (copy it into .cupy_cache/ for the next call).
#   MINIDL_COMMIT=$(git rev-parse --short HEAD) PART=1 bash scripts/gpu_whole_suite.sh   # all but the OpInfo tests
#   MINIDL_COMMIT=$(git rev-parse --short HEAD) PART=2 bash scripts/gpu_whole_suite.sh   # tests/test_opinfo.py
# Record the two summaries in benchmarks/results/gpu_tests.md with the date, the commit and the device.
set -u
cd "$(dirname "$0")/.."
. scripts/_device_setup.sh   # PYTHONPATH, carried wheels and kernel cache, $OUT
PART=${PART:-1}; LIMIT=${LIMIT:-540}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
echo "commit ${MINIDL_COMMIT:-unknown, set MINIDL_COMMIT (the git of the device copy is stale)}" | tee -a "$OUT/device.txt"
if [ "$PART" = 1 ]; then
  targets=(--ignore=tests/test_opinfo.py tests)
else
  targets=(tests/test_opinfo.py)
fi
timeout -s INT "$LIMIT" python3 -m pytest -m gpu -q -p no:cacheprovider -rf "${targets[@]}" 2>&1 | tail -n 200 \
  > "$OUT/gpu_suite$PART.log"
tail -n 15 "$OUT/gpu_suite$PART.log"
. scripts/_device_cache_out.sh "suite$PART"
