#!/usr/bin/env bash
# One device call that proves the Hopper GEMM (kernels/gemm_wgmma.cu): the probe (every kind x transpose x
# tile width against float64, TF32 rounding, 4096^3 timings beside mma.sync and cuBLAS), the SASS's
# instruction mix, the GEMM GPU tests, then as much of the whole GPU suite as time allows; brings back
# CuPy's kernel cache (carry it as .cupy_cache next time) and every log.
#   OUT=/tmp/out T_PROBE=270 T_GEMM=90 T_SUITE=150 bash scripts/gpu_wgmma_check.sh
set -u
cd "$(dirname "$0")/.."
. scripts/_device_setup.sh   # PYTHONPATH, carried wheels and kernel cache, $OUT
T_PROBE=${T_PROBE:-270}; T_GEMM=${T_GEMM:-90}; T_SUITE=${T_SUITE:-150}
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/device.txt"
date -u +%FT%TZ | tee -a "$OUT/device.txt"
# SASS: the main loop must be HGMMA (not HMMA), fed by UTMALDG, waiting on SYNCS (mbarriers)
nvcc -gencode=arch=compute_90a,code=sm_90a --std=c++17 -I kernels -cubin -o /tmp/gw.cubin kernels/gemm_wgmma.cu \
  && cuobjdump --dump-sass /tmp/gw.cubin > "$OUT/gemm_wgmma.sass" \
  && grep -oE "HGMMA[.A-Z0-9x]*|UTMALDG[.A-Z0-9]*|SYNCS[.A-Z0-9]*|USETMAXREG[.A-Z0-9]*" "$OUT/gemm_wgmma.sass" | sort | uniq -c | head -20
timeout -s INT "$T_PROBE" python3 benchmarks/probe_wgmma.py ${PROBE_ARGS:-} > "$OUT/probe.log" 2>&1
echo "probe exit $?"; grep -v "^ok " "$OUT/probe.log" | tail -n 60
if [ "$T_GEMM" -gt 0 ]; then
  timeout -s INT "$T_GEMM" python3 -m pytest -m gpu -q -p no:cacheprovider -rf -x tests/gpu/test_gemm_tc_gpu.py \
    tests/gpu/test_gemm_gpu.py 2>&1 | tail -n 60 > "$OUT/gpu_gemm_tests.log"; tail -n 12 "$OUT/gpu_gemm_tests.log"
fi
if [ "$T_SUITE" -gt 0 ]; then
  timeout -s INT "$T_SUITE" python3 -m pytest -m gpu -q -p no:cacheprovider -rf tests 2>&1 | tail -n 300 \
    > "$OUT/gpu_tests.log"; tail -n 25 "$OUT/gpu_tests.log"
fi
. scripts/_device_cache_out.sh wgmma   # the kernels this call compiled
ls -la "$OUT"
