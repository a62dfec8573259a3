"""Host cost of one kernel launch: CuPy's RawKernel call against minidl's _launch.Kernel (the arguments packed
by one struct.pack_into into the layout the driver reports, one cuLaunchKernel), on the argument lists real
launchers pass, in the same process, rounds interleaved. Tiny grids: the GPU keeps up, and what is timed is
the host's work per launch (a sync after each round of --launches).

    python3 benchmarks/bench_launch.py [--rounds 9] [--launches 400] [--out F]
"""
from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import git_commit, write_report  # noqa: E402


def cases():
    """(name, kernel, grid, block, args): the cast launcher's five arguments, the wgmma GEMM's planned launch
    (three 128-byte tensor maps, its 64-byte record, two pointers), and a 12-scalar elementwise-style launch."""
    import cupy

    from minidl.primitives.cuda._compile import get_kernel
    from minidl.primitives.cuda._launch import Kernel

    x = cupy.zeros(256, dtype=cupy.float32)
    y = cupy.zeros(256, dtype=cupy.float16)
    cast = get_kernel("cast", "cast")
    yield "cast (2 arrays, 3 scalars)", cast, (1,), (256,), (x, y, np.int64(256), np.int32(0), np.int32(1))
    source = r"""
    struct Maps { unsigned char b[128]; };
    struct alignas(8) Rec { int v[16]; };
    extern "C" __global__ void records(const __grid_constant__ Maps a, const __grid_constant__ Maps b,
                                       const __grid_constant__ Maps c, Rec r, unsigned long long p,
                                       unsigned long long q) {}
    extern "C" __global__ void scalars(float* out, const float* a, const float* b, int n0, int n1, int n2, int n3,
                                       long long s0, long long s1, long long s2, float alpha, float beta,
                                       int k0, int k1, int k2) {}
    """
    module = cupy.RawModule(code=source, options=("--std=c++17",))
    maps = [np.zeros(1, dtype=np.dtype((np.void, 128))) for _ in range(3)]
    rec = np.zeros(1, dtype=np.dtype((np.void, 64)))
    yield ("wgmma GEMM plan (3 maps, record, 2 pointers)", Kernel(module.get_function("records")), (1,), (128,),
           (*maps, rec, np.uint64(x.data.ptr), np.uint64(0)))
    i32, i64, f32 = np.int32, np.int64, np.float32
    yield ("15 arguments (3 arrays, 12 NumPy scalars)", Kernel(module.get_function("scalars")), (1,), (128,),
           (x, x, x, i32(1), i32(2), i32(3), i32(4), i64(5), i64(6), i64(7), f32(1), f32(0), i32(1), i32(2), i32(3)))


def time_launches(fn, launches: int) -> float:
    import cupy

    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(launches):
        fn()
    cupy.cuda.Device().synchronize()
    return (time.perf_counter() - start) / launches * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--launches", type=int, default=400)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import cupy

    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rows = []
    for name, kernel, grid, block, kargs in cases():
        ours = lambda: kernel(grid, block, kargs)             # noqa: E731
        theirs = lambda: kernel.kernel(grid, block, kargs)    # noqa: E731
        ours(), theirs()
        times = {"cupy": [], "minidl": []}
        for _ in range(args.rounds):
            times["cupy"].append(time_launches(theirs, args.launches))
            times["minidl"].append(time_launches(ours, args.launches))
        c, m = statistics.median(times["cupy"]), statistics.median(times["minidl"])
        rows.append(f"| {name} | {c:.2f} | {m:.2f} | {m / c:.2f}x |")
    lines = [f"# Kernel launch host cost: CuPy's RawKernel call against minidl's _launch.Kernel ({device})", "",
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {git_commit()}, CuPy "
             f"{cupy.__version__}; median of {args.rounds} interleaved rounds of {args.launches} launches, us per "
             f"launch. Produced by `python3 benchmarks/bench_launch.py`.", "",
             "| launch | CuPy us | minidl us | ratio |", "| --- | ---: | ---: | ---: |", *rows]
    write_report("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
