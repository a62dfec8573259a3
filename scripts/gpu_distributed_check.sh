#!/usr/bin/env bash
# One device call on a multi-GPU machine (kind nvidia-h100-x2 or larger) for minidl.distributed: the GPU
# tests of tests/gpu/test_distributed_gpu.py (one process per GPU, NCCL), then benchmarks/bench_distributed.py
# (all-reduce bandwidth and DDP weak scaling against torch.distributed). Logs and tables go to $OUT.
#   MINIDL_COMMIT=$(git rev-parse --short HEAD) OUT=/tmp/out bash scripts/gpu_distributed_check.sh
set -u
cd "$(dirname "$0")/.."
. scripts/_device_setup.sh   # PYTHONPATH, carried wheels and kernel cache, $OUT
# NVLink multicast stays off on shared machines (KINDS.md): in NCCL, PyTorch and NVSHMEM.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T_TESTS=${T_TESTS:-240}; T_BENCH=${T_BENCH:-300}; BENCH_ARGS=${BENCH_ARGS:-}
{ nvidia-smi -L; date -u +%FT%TZ; nvidia-smi topo -m; } 2>&1 | tee "$OUT/device.txt"
python3 -c "from cupy.cuda import nccl; print('NCCL through CuPy', nccl.get_version())" 2>&1 | tee -a "$OUT/device.txt"
if [ "$T_TESTS" -gt 0 ]; then
  timeout -s INT "$T_TESTS" python3 -m pytest -m gpu -q -p no:cacheprovider -rf tests/gpu/test_distributed_gpu.py \
    2>&1 | tail -n 300 > "$OUT/gpu_distributed_tests.log"
  tail -n 40 "$OUT/gpu_distributed_tests.log"
fi
if [ "$T_BENCH" -gt 0 ]; then
  # shellcheck disable=SC2086
  timeout -s INT "$T_BENCH" python3 benchmarks/bench_distributed.py $BENCH_ARGS --out "$OUT/gpu_distributed.md" \
    > "$OUT/bench_distributed.log" 2>&1
  tail -n 30 "$OUT/bench_distributed.log"
fi
