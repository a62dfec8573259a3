"""One launch each of our TF32 and float16 tensor-core GEMM at 4096^3, for ncu (after a warm-up outside
the profiled range, so that the NVRTC compile is not in it):

    ncu --clock-control none -k regex:gemm_tc --launch-skip 2 --launch-count 2 --section SpeedOfLight \\
        --section ComputeWorkloadAnalysis --section WarpStateStats --section MemoryWorkloadAnalysis_Tables \\
        python3 benchmarks/profile_gemm_tc.py
"""
import sys
from pathlib import Path

import cupy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minidl.primitives.gemm import gemm  # noqa: E402

n = 4096
for dtype in (cupy.float32, cupy.float16):
    a = cupy.random.standard_normal((n, n), dtype=cupy.float32).astype(dtype)
    b = cupy.random.standard_normal((n, n), dtype=cupy.float32).astype(dtype)
    gemm(a, b, math="tf32")  # warm-up: compile (launches 1 and 3)
cupy.cuda.Device().synchronize()
for dtype in (cupy.float32, cupy.float16):
    a = cupy.random.standard_normal((n, n), dtype=cupy.float32).astype(dtype)
    b = cupy.random.standard_normal((n, n), dtype=cupy.float32).astype(dtype)
    gemm(a, b, math="tf32")  # the profiled launches
cupy.cuda.Device().synchronize()
