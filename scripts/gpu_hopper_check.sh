#!/usr/bin/env bash
# One device call for the Hopper work (issue 29): the new GPU tests first (channels_last on CUDA, the wgmma
# convolution and GEMM), then the training step in TF32 and bf16 with channels_last on both sides, then the
# whole GPU suite and the convolution table, each with a time limit (SIGINT: pytest still prints its
# summary). Logs and tables go to $OUT. Carry ".whl" and ".cupy_cache" (see gpu_session_check.sh).
#   OUT=/tmp/out MINIDL_COMMIT=$(git rev-parse --short HEAD) bash scripts/gpu_hopper_check.sh
set -u
cd "$(dirname "$0")/.."
. scripts/_device_setup.sh   # PYTHONPATH, carried wheels and kernel cache, $OUT
C=${MINIDL_COMMIT:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"; date -u +%FT%TZ | tee -a "$OUT/device.txt"
timeout -s INT "${T_FIRST:-150}" python3 -m pytest -m gpu -q -p no:cacheprovider -rf tests/gpu/test_channels_last_gpu.py \
  tests/gpu/test_convolution_wgmma_gpu.py 2>&1 | tail -n 60 > "$OUT/gpu_first.log"; tail -n 6 "$OUT/gpu_first.log"
for m in bf16 tf32; do
  timeout -s INT "${T_STEP:-110}" python3 benchmarks/bench_gpu_train_step.py --math $m --channels-last --steps 20 --warmup 5 \
    --no-policy-study --commit "$C" --out "$OUT/gpu_train_step_${m}_cl.md" > "/tmp/train_step_$m.log" 2>&1
  grep "^|" "/tmp/train_step_$m.log" | cut -c1-150 | tail -n 18; grep -i "error\|failed" "/tmp/train_step_$m.log" | tail -n 3
done
timeout -s INT "${T_TESTS:-200}" python3 -m pytest -m gpu -q -p no:cacheprovider -rf tests 2>&1 | tail -n 200 > "$OUT/gpu_tests.log"
tail -n 12 "$OUT/gpu_tests.log"
timeout -s INT "${T_CONV:-90}" python3 benchmarks/bench_gpu_conv_tc.py --skip-fft --resnet9 --shapes --repeats 10 --commit "$C" \
  --out "$OUT/gpu_conv_tc_resnet9.md" > /tmp/conv_bench.log 2>&1
grep -A10 "^## bf16" "$OUT/gpu_conv_tc_resnet9.md" | cut -c1-160
ls "$OUT"   # at most 8 files come back: keep it to these six
