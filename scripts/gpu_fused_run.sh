#!/usr/bin/env bash
# The GPU checks of the fused kernels, multi-tensor optimizers and profiler in one go (one device call):
# tests, compute-sanitizer memcheck + racecheck over the new kernels' tests, the fused benchmark table.
# Logs go to $OUT (default: benchmarks/results/runs/). Each stage has its own time limit.
set -uo pipefail
PYTHON=${PYTHON:-python3}
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/runs}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MINIDL_FUSED_REPORT=$OUT/fused_bitequal.log
NEW_TESTS="tests/gpu/test_multi_tensor_gpu.py tests/gpu/test_fused_gpu.py"
rm -f "$MINIDL_FUSED_REPORT"
timeout ${T_TESTS:-70} $PYTHON -m pytest -m gpu -q -p no:cacheprovider $NEW_TESTS tests/gpu/test_batch_norm_gpu.py \
  tests/gpu/test_framework_gpu.py 2>&1 | tail -40 > "$OUT/fused_tests.log"
echo "tests rc=${PIPESTATUS[0]}" >> "$OUT/fused_tests.log"
unset MINIDL_FUSED_REPORT
# The sanitizers run the small cases (the tools slow kernels 10-100x).
SAN_K="(sgd_nesterov or adam_wd_amsgrad or zero_grad or primitives_equal or shape0 or shape1 or shape3 or case0 or case1) and not fuse_modules and not profiler"
for tool in memcheck racecheck; do
  timeout ${T_SAN:-35} compute-sanitizer --tool $tool --print-limit 20 $PYTHON -m pytest -m gpu -q -x -p no:cacheprovider \
    $NEW_TESTS -k "$SAN_K" > "$OUT/fused_sanitizer_$tool.log" 2>&1
  echo "$tool rc=$?" >> "$OUT/fused_sanitizer_$tool.log"
done
timeout ${T_BENCH:-45} $PYTHON benchmarks/bench_gpu_primitives.py --fused-only --quick --commit "${MINIDL_COMMIT:-unknown}" \
  --fused-out "$OUT/gpu_fused.md" > "$OUT/fused_bench.log" 2>&1
echo "bench rc=$?" >> "$OUT/fused_bench.log"
tail -n 5 "$OUT"/fused_tests.log; tail -n 3 "$OUT"/fused_sanitizer_*.log; echo "bit-equal comparisons: $(grep -c bit-equal "$OUT/fused_bitequal.log" 2>/dev/null), others:"; grep -v bit-equal "$OUT/fused_bitequal.log" 2>/dev/null | head -20
cat "$OUT/gpu_fused.md" 2>/dev/null
