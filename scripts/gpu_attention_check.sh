#!/usr/bin/env bash
# One device call for issue 25's kernels: the GPU tests of attention and layer norm (and of the files whose
# shared code they moved: dropout's Philox, the mma.sync helpers of gemm_tc), then the attention / layer
# norm benchmark against torch. Logs and tables go to $OUT; the CuPy kernel cache comes back as
# $OUT/cupy_cache_attention.tgz, only what it compiled (copy it to .cupy_cache/ to carry it to the next call).
#   MINIDL_COMMIT=$(git rev-parse --short HEAD) OUT=/tmp/out bash scripts/gpu_attention_check.sh
# T_TESTS / T_BENCH / T_GPT: time limits in seconds (0 skips); TESTS: the test files; BENCH_ARGS: e.g. --quick.
set -u
cd "$(dirname "$0")/.."
. scripts/_device_setup.sh
T_TESTS=${T_TESTS:-240}; T_BENCH=${T_BENCH:-200}; T_GPT=${T_GPT:-120}
TESTS=${TESTS:-"tests/gpu/test_attention_kernel_gpu.py tests/gpu/test_attention_gpu.py tests/gpu/test_dropout_gpu.py tests/gpu/test_gemm_tc_gpu.py"}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
date -u +%FT%TZ | tee -a "$OUT/device.txt"
if [ "$T_TESTS" -gt 0 ]; then
  # shellcheck disable=SC2086
  timeout -s INT "$T_TESTS" python3 -m pytest -m gpu -q -p no:cacheprovider -rf -x $TESTS 2>&1 | tail -n 300 > "$OUT/gpu_attention_tests.log"
  tail -n 40 "$OUT/gpu_attention_tests.log"
fi
if [ "$T_BENCH" -gt 0 ]; then
  # shellcheck disable=SC2086
  timeout -s INT "$T_BENCH" python3 benchmarks/bench_attention.py --out "$OUT/gpu_attention.md" ${BENCH_ARGS:-} \
    > "$OUT/bench_attention.log" 2>&1
  tail -n 30 "$OUT/bench_attention.log"
fi
if [ "$T_GPT" -gt 0 ]; then
  timeout -s INT "$T_GPT" python3 benchmarks/bench_gpt_step.py --out "$OUT/gpu_gpt_step.md" > "$OUT/bench_gpt_step.log" 2>&1
  tail -n 8 "$OUT/bench_gpt_step.log"
fi
. scripts/_device_cache_out.sh attention   # the kernels this call compiled
ls -la "$OUT"
