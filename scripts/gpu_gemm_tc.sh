#!/usr/bin/env bash
# The tensor-core GEMM's whole GPU check in one go (for one device call): GPU tests, compute-sanitizer
# memcheck + racecheck over the kernel tests at small sizes, the benchmark, and ncu on one launch each.
# Logs go to $OUT (default benchmarks/results/runs). Usage: bash scripts/gpu_gemm_tc.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-benchmarks/results/runs}"
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gemm_tc_device.txt"
# The kernel's tests, then every GPU test whose code this work touched (GEMM, RNN, framework).
timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu/test_gemm_tc_gpu.py tests/gpu/test_gemm_gpu.py \
  tests/gpu/test_rnn_gpu.py tests/gpu/test_framework_gpu.py tests/framework/test_layers.py ${EXTRA_TESTS:-} \
  2>&1 | tee "$OUT/gemm_tc_tests.log" | tail -25
timeout 150 python3 benchmarks/bench_gpu_gemm_tc.py --out "$OUT/gpu_gemm_tc.md" 2>&1 | tail -45
SAN_K="partial_chunks or batched_and_broadcast or (matches_float64 and (7-5-3 or 129-131-9))"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -m gpu -q -p no:cacheprovider \
  tests/gpu/test_gemm_tc_gpu.py -k "$SAN_K" > "$OUT/gemm_tc_memcheck.log" 2>&1; echo "memcheck rc=$?"
tail -4 "$OUT/gemm_tc_memcheck.log"
timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m pytest -m gpu -q -p no:cacheprovider \
  tests/gpu/test_gemm_tc_gpu.py -k "partial_chunks or (matches_float64 and 129-131-9)" > "$OUT/gemm_tc_racecheck.log" 2>&1
echo "racecheck rc=$?"; tail -4 "$OUT/gemm_tc_racecheck.log"
timeout 90 ncu --clock-control none -k regex:gemm_tc --launch-skip 2 --launch-count 2 --section SpeedOfLight \
  --section ComputeWorkloadAnalysis --section WarpStateStats --section MemoryWorkloadAnalysis_Tables \
  --section Occupancy python3 benchmarks/profile_gemm_tc.py > "$OUT/gemm_tc_ncu.txt" 2>&1; echo "ncu rc=$?"
grep -E "gemm_tc|Duration|Compute \(SM\) Throughput|Memory Throughput|Tensor|Bank|Achieved Occupancy|Stall|Issue" \
  "$OUT/gemm_tc_ncu.txt" | head -40
# Tensor-pipe utilisation, shared-memory bank conflicts, stall reasons (cycles per issued instruction).
STALLS=$(for r in barrier long_scoreboard short_scoreboard math_pipe_throttle mio_throttle wait not_selected \
  dispatch_stall lg_throttle no_instruction; do printf "smsp__average_warps_issue_stalled_%s_per_issue_active.ratio," $r; done)
timeout 90 ncu --clock-control none -k regex:gemm_tc --launch-skip 2 --launch-count 2 --metrics \
  "${STALLS}sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active" \
  python3 benchmarks/profile_gemm_tc.py > "$OUT/gemm_tc_ncu_metrics.txt" 2>&1; echo "ncu metrics rc=$?"
grep -E "gemm_tc<|stalled|tensor|bank|inst_executed|warps_active|ERROR" "$OUT/gemm_tc_ncu_metrics.txt" | head -40
