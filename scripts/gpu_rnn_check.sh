#!/usr/bin/env bash
# One device call for issue 24's persistent RNN kernels: their GPU tests (and the standard algorithm's, whose
# cell code they share), then the RNN benchmark against cuDNN. Logs and tables go to $OUT; the CuPy kernel
# cache comes back as $OUT/cupy_cache_rnn.tgz, only what it compiled (copy it to .cupy_cache/ to carry it to the next call).
#   MINIDL_COMMIT=$(git rev-parse --short HEAD) OUT=/tmp/out bash scripts/gpu_rnn_check.sh
# T_TESTS / T_BENCH: time limits in seconds (0 skips); TESTS: the test files; BENCH_ARGS: e.g. --repeats 20.
set -u
cd "$(dirname "$0")/.."
. scripts/_device_setup.sh
T_TESTS=${T_TESTS:-240}; T_BENCH=${T_BENCH:-240}
TESTS=${TESTS:-"tests/gpu/test_rnn_persistent_gpu.py tests/gpu/test_rnn_gpu.py"}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
date -u +%FT%TZ | tee -a "$OUT/device.txt"
if [ "$T_TESTS" -gt 0 ]; then
  # shellcheck disable=SC2086
  timeout -s INT "$T_TESTS" python3 -m pytest -m gpu -q -p no:cacheprovider -rf $TESTS 2>&1 | tail -n 300 > "$OUT/gpu_rnn_tests.log"
  tail -n 40 "$OUT/gpu_rnn_tests.log"
fi
if [ "$T_BENCH" -gt 0 ]; then
  # shellcheck disable=SC2086
  timeout -s INT "$T_BENCH" python3 benchmarks/bench_gpu_rnn.py --out "$OUT/gpu_rnn.md" --commit "${MINIDL_COMMIT:-unknown}" \
    ${BENCH_ARGS:-} > "$OUT/bench_rnn.log" 2>&1
  tail -n 40 "$OUT/bench_rnn.log"
fi
. scripts/_device_cache_out.sh rnn   # the kernels this call compiled
ls -la "$OUT"
