#!/usr/bin/env bash
# One device call that proves a session's CUDA changes: the whole GPU test suite, then the benchmarks of
# the training step (issue 13) and of the tensor-core convolution (issue 12). Each step has a time
# limit (SIGINT, so pytest still prints its summary), so the call ends inside the device's 10 minutes.
# Logs and tables go to $OUT (the device tool brings them back) and to benchmarks/results/.
#   MINIDL_COMMIT=$(git rev-parse --short HEAD) OUT=/tmp/out bash scripts/gpu_session_check.sh
set -u
cd "$(dirname "$0")/.."
. scripts/_device_setup.sh   # PYTHONPATH, carried wheels and kernel cache, $OUT
T_TESTS=${T_TESTS:-270}; T_STEP=${T_STEP:-110}; T_CONV=${T_CONV:-60}; T_FIRST=${T_FIRST:-120}
# FIRST: the GPU tests of what changed since the last GPU run, run (and logged) before the whole suite,
# so that their result comes back even if the suite runs out of time.
FIRST=${FIRST:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
date -u +%FT%TZ | tee -a "$OUT/device.txt"
if [ -n "$FIRST" ]; then
  # shellcheck disable=SC2086
  timeout -s INT "$T_FIRST" python3 -m pytest -m gpu -q -p no:cacheprovider -rf $FIRST 2>&1 | tail -n 200 > "$OUT/gpu_first.log"
  tail -n 15 "$OUT/gpu_first.log"
fi
# A limit of 0 skips the step (timeout 0 would mean no limit at all).
if [ "$T_TESTS" -gt 0 ]; then
  timeout -s INT "$T_TESTS" python3 -m pytest -m gpu -q -p no:cacheprovider -rf --continue-on-collection-errors tests 2>&1 | tail -n 400 > "$OUT/gpu_tests.log"
  tail -n 30 "$OUT/gpu_tests.log"
fi
if [ "$T_STEP" -gt 0 ]; then
  timeout -s INT "$T_STEP" python3 benchmarks/bench_gpu_train_step.py --steps 30 --warmup 5 --no-policy-study \
    --out "$OUT/gpu_train_step.md" > "$OUT/train_step.log" 2>&1
  tail -n 25 "$OUT/train_step.log"
fi
if [ "$T_CONV" -gt 0 ]; then
  timeout -s INT "$T_CONV" python3 benchmarks/bench_gpu_conv_tc.py --repeats 15 --skip-fft --out "$OUT/gpu_conv_tc.md" \
    > "$OUT/conv_tc.log" 2>&1
  tail -n 25 "$OUT/conv_tc.log"
fi
ls -la "$OUT"
