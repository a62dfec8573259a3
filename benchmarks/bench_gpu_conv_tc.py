"""Benchmark: minidl's tensor-core convolution (implicit_gemm_tc) and FFT convolution against cuDNN.

For the 8 convolution shapes of docs/GPU.md, forward + backward (data + filter), GPU time:
  * TF32: ours (implicit_gemm_tc, math="tf32") in NCHW (transposes to NHWC inside) and NHWC, and the
    best of ours under math="tf32" (tensor cores or the fp32 algorithms the heuristic picks), against
    cuDNN with TF32 on (torch.backends.cudnn.allow_tf32 = True), NCHW and channels_last;
  * fp16: ours NHWC against cuDNN fp16 channels_last;
  * ratios ours / cuDNN (> 1 is slower) and their geometric means.
FFT: on large-filter shapes, ours "fft" against our other fp32 algorithms, our TF32 tensor cores,
cuDNN fp32 (TF32 off) and cuDNN TF32, per direction.

Timing as bench_gpu_conv.py: CUDA events after warm-up, a spin kernel queued first so the events
time the device's work, median of --repeats. Same process, same inputs for ours and cuDNN.

    python3 benchmarks/bench_gpu_conv_tc.py [--out benchmarks/results/gpu_conv_tc.md] [--repeats 30]
"""
from __future__ import annotations

import argparse
import datetime
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import git_commit, write_report  # noqa: E402
from benchmarks.bench_gpu_conv import SHAPES, time_ms  # noqa: E402

# (label, N, C, K, H=W, kernel, padding): stride 1, for the FFT comparison
FFT_SHAPES = [
    ("5x5 N64 C64->64 32x32", 64, 64, 64, 32, 5, 2),
    ("7x7 N32 C64->64 56x56", 32, 64, 64, 56, 7, 3),
    ("9x9 N16 C32->32 64x64", 16, 32, 32, 64, 9, 4),
    ("11x11 N16 C16->32 64x64", 16, 16, 32, 64, 11, 5),
    ("7x7 N8 C128->128 28x28", 8, 128, 128, 28, 7, 3),
    ("11x11 N8 C64->64 128x128", 8, 64, 64, 128, 11, 5),
]
# ResNet-9 (examples/train_cifar10.py, width 64, batch 512): its 3x3 stride-1 convolutions
RESNET9_SHAPES = [
    ("ResNet-9 prep 3x3 N512 C3->64 32x32", 512, 3, 64, 32, 3, 1, 1),
    ("ResNet-9 layer1 3x3 N512 C64->128 32x32", 512, 64, 128, 32, 3, 1, 1),
    ("ResNet-9 res1 3x3 N512 C128->128 16x16", 512, 128, 128, 16, 3, 1, 1),
    ("ResNet-9 layer2 3x3 N512 C128->256 16x16", 512, 128, 256, 16, 3, 1, 1),
    ("ResNet-9 layer3 3x3 N512 C256->512 8x8", 512, 256, 512, 8, 3, 1, 1),
    ("ResNet-9 res3 3x3 N512 C512->512 4x4", 512, 512, 512, 4, 3, 1, 1),
]
FP32_ALGOS = ("implicit_precomp_gemm", "implicit_gemm", "im2col_gemm", "winograd")
DIRECTIONS = ("forward", "backward_data", "backward_filter")


def _arrays(N, C, K, HW, k, stride, pad, layout, dtype):
    import cupy

    from minidl.primitives import convolution as conv

    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, C, HW, HW)).astype(np.float32)
    w = (rng.standard_normal((K, C, k, k)) / math.sqrt(C * k * k)).astype(np.float32)
    desc = conv.ConvolutionDescriptor(padding=pad, stride=stride)
    y_shape = conv.convolution_output_shape(x.shape, w.shape, desc)
    dy = rng.standard_normal(y_shape).astype(np.float32)
    if layout == "NHWC":
        x, w, dy = (np.ascontiguousarray(np.moveaxis(a, 1, -1)) for a in (x, w, dy))
    return desc, *(cupy.asarray(a).astype(dtype) for a in (x, w, dy))


def _ours(desc, x, w, dy, layout, algos, math_mode, repeats):
    """{direction: (ms, algo)}: the fastest of `algos` that applies, per direction."""
    from minidl.primitives import convolution as conv
    from minidl.primitives.cuda import convolution as impl

    problem = conv._make_problem("bench", x.shape, w.shape, desc, layout, x.dtype, math_mode)
    calls = {
        "forward": lambda a: conv.convolution_forward(x, w, desc, algo=a, layout=layout, math=math_mode),
        "backward_data": lambda a: conv.convolution_backward_data(w, dy, desc, x.shape, algo=a, layout=layout,
                                                                  math=math_mode),
        "backward_filter": lambda a: conv.convolution_backward_filter(x, dy, desc, w.shape, algo=a, layout=layout,
                                                                      math=math_mode),
    }
    best = {}
    for d, call in calls.items():
        for a in algos:
            if not impl.is_supported(a, d, problem)[0]:
                continue
            t = time_ms(lambda: call(a), repeats)
            if d not in best or t < best[d][0]:
                best[d] = (t, a)
    return best


def _heuristic_algos(desc, x, w, layout):
    """The fp32 algorithm the heuristic picks per direction (math="fp32")."""
    from minidl.primitives import convolution as conv

    return {d: conv.get_convolution_algorithm(x.shape, w.shape, desc, direction=d, device="cuda", layout=layout,
                                              policy="heuristic") for d in DIRECTIONS}


def _cudnn(x, w, dy, stride, pad, channels_last, repeats):
    """(fwd ms, bwd ms) of cuDNN through torch on these arrays (NCHW views of NHWC data when channels_last)."""
    import torch

    def as_torch(a):   # bfloat16 through its bits: torch does not read CuPy's bfloat16 typestr
        if a.dtype.itemsize == 2 and a.dtype.name == "bfloat16":
            return torch.as_tensor(a.view("int16"), device="cuda").view(torch.bfloat16)
        return torch.as_tensor(a, device="cuda")

    tx, tw, tdy = (as_torch(a) for a in (x, w, dy))
    if channels_last:  # our NHWC arrays -> torch's channels_last NCHW views (no copy)
        tx, tw, tdy = (t.permute(0, 3, 1, 2) for t in (tx, tw, tdy))
    else:
        tx, tw, tdy = (t.contiguous() for t in (tx, tw, tdy))
    f = lambda: torch.nn.functional.conv2d(tx, tw, None, stride, pad)  # noqa: E731
    b = lambda: torch.ops.aten.convolution_backward(tdy, tx, tw, None, [stride] * 2, [pad] * 2, [1, 1],  # noqa: E731
                                                    False, [0, 0], 1, [True, True, False])
    with torch.no_grad():
        return time_ms(f, repeats), time_ms(b, repeats)


def bench_shape(shape, repeats):
    import cupy
    import torch

    label, N, C, K, HW, k, stride, pad = shape
    r = {"label": label}
    torch.backends.cudnn.allow_tf32 = True
    # TF32, NCHW
    desc, x, w, dy = _arrays(N, C, K, HW, k, stride, pad, "NCHW", cupy.float32)
    r["tc_nchw"] = _ours(desc, x, w, dy, "NCHW", ("implicit_gemm_tc",), "tf32", repeats)
    heur = _heuristic_algos(desc, x, w, "NCHW")
    fp32 = {d: _ours(desc, x, w, dy, "NCHW", (heur[d],), "fp32", repeats)[d] for d in DIRECTIONS}
    r["best_tf32_nchw"] = {d: min(r["tc_nchw"][d], fp32[d]) for d in DIRECTIONS}
    r["cudnn_tf32_nchw"] = _cudnn(x, w, dy, stride, pad, False, repeats)
    # TF32, NHWC
    desc, x, w, dy = _arrays(N, C, K, HW, k, stride, pad, "NHWC", cupy.float32)
    r["tc_nhwc"] = _ours(desc, x, w, dy, "NHWC", ("implicit_gemm_tc",), "tf32", repeats)
    r["cudnn_tf32_nhwc"] = _cudnn(x, w, dy, stride, pad, True, repeats)
    # fp16, NHWC
    desc, x, w, dy = _arrays(N, C, K, HW, k, stride, pad, "NHWC", cupy.float16)
    r["fp16_nhwc"] = _ours(desc, x, w, dy, "NHWC", ("implicit_gemm_tc",), "fp32", repeats)
    r["cudnn_fp16_nhwc"] = _cudnn(x, w, dy, stride, pad, True, repeats)
    # bf16, NHWC
    desc, x, w, dy = _arrays(N, C, K, HW, k, stride, pad, "NHWC", np.dtype(__import__("ml_dtypes").bfloat16))
    r["bf16_nhwc"] = _ours(desc, x, w, dy, "NHWC", ("implicit_gemm_tc",), "fp32", repeats)
    r["cudnn_bf16_nhwc"] = _cudnn(x, w, dy, stride, pad, True, repeats)
    r["tflop_fwd"] = 2.0 * N * K * dy.shape[1] * dy.shape[2] * C * k * k / 1e12
    return r


def bench_fft(shape, repeats):
    import cupy
    import torch

    label, N, C, K, HW, k, pad = shape
    desc, x, w, dy = _arrays(N, C, K, HW, k, 1, pad, "NCHW", cupy.float32)
    r = {"label": label}
    r["fft"] = _ours(desc, x, w, dy, "NCHW", ("fft",), "fp32", repeats)
    r["fp32"] = _ours(desc, x, w, dy, "NCHW", FP32_ALGOS, "fp32", repeats)
    r["tc"] = _ours(desc, x, w, dy, "NCHW", ("implicit_gemm_tc",), "tf32", repeats)
    torch.backends.cudnn.allow_tf32 = False
    r["cudnn_fp32"] = _cudnn(x, w, dy, 1, pad, False, repeats)
    torch.backends.cudnn.allow_tf32 = True
    r["cudnn_tf32"] = _cudnn(x, w, dy, 1, pad, False, repeats)
    cupy.get_default_memory_pool().free_all_blocks()
    return r


def _total(best):
    return sum(best[d][0] for d in DIRECTIONS)


def _geo(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/gpu_conv_tc.md")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--commit", default=None)
    parser.add_argument("--skip-fft", action="store_true")
    parser.add_argument("--shapes", type=int, nargs="*", help="indices into SHAPES (default: all)")
    parser.add_argument("--resnet9", action="store_true", help="also ResNet-9's layers (batch 512)")
    parser.add_argument("--kernel", choices=("auto", "wgmma", "mma_sync"), default="auto",
                        help="our tensor-core kernels (minidl.primitives.set_tensor_core_gemm)")
    args = parser.parse_args()

    import cupy
    import torch

    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    device = device.decode() if isinstance(device, bytes) else device

    from minidl.primitives import set_tensor_core_gemm

    set_tensor_core_gemm(args.kernel)
    results = []
    shapes = [SHAPES[i] for i in args.shapes] if args.shapes is not None else SHAPES
    if args.resnet9:
        shapes = shapes + RESNET9_SHAPES
    for shape in shapes:
        try:
            r = bench_shape(shape, args.repeats)
        except Exception as e:  # report what ran; name what did not
            print(f"  {shape[0]}: failed: {type(e).__name__}: {e}", flush=True)
            continue
        results.append(r)
        per_dir = lambda b: " / ".join(f"{b[d][0]:.3f}" for d in DIRECTIONS)  # noqa: E731
        print(f"  {r['label']}: TF32 NCHW {_total(r['tc_nchw']):.3f} ({per_dir(r['tc_nchw'])}) / cuDNN "
              f"{sum(r['cudnn_tf32_nchw']):.3f} ms, NHWC {_total(r['tc_nhwc']):.3f} ({per_dir(r['tc_nhwc'])}) / "
              f"{sum(r['cudnn_tf32_nhwc']):.3f}, fp16 NHWC {_total(r['fp16_nhwc']):.3f} ({per_dir(r['fp16_nhwc'])}) / "
              f"{sum(r['cudnn_fp16_nhwc']):.3f} (cuDNN fwd / bwd {r['cudnn_fp16_nhwc'][0]:.3f} / "
              f"{r['cudnn_fp16_nhwc'][1]:.3f}), bf16 NHWC {_total(r['bf16_nhwc']):.3f} "
              f"({per_dir(r['bf16_nhwc'])}) / {sum(r['cudnn_bf16_nhwc']):.3f}", flush=True)
    fft_results = []
    if not args.skip_fft:
        for shape in FFT_SHAPES:
            try:
                fr = bench_fft(shape, max(10, args.repeats // 3))
            except Exception as e:  # e.g. out of memory on the largest spectra: say so in the table
                print(f"  FFT {shape[0]}: failed: {type(e).__name__}: {e}", flush=True)
                continue
            fft_results.append(fr)
            print(f"  FFT {fr['label']}: fft {_total(fr['fft']):.3f}, fp32 best {_total(fr['fp32']):.3f}, "
                  f"tf32 tc {_total(fr['tc']):.3f}, cuDNN fp32 {sum(fr['cudnn_fp32']):.3f}, "
                  f"cuDNN tf32 {sum(fr['cudnn_tf32']):.3f} ms", flush=True)

    lines = [
        "# minidl tensor-core convolution (TF32, fp16) and FFT convolution vs cuDNN",
        "",
        f"date {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, commit {git_commit(args.commit)}, device {device}, "
        f"torch {torch.__version__} (cuDNN {torch.backends.cudnn.version()}), CuPy {cupy.__version__}; "
        f"median of {args.repeats} CUDA-event timings (GPU time) after warm-up; cuDNN benchmark mode.",
        "Command: `python3 benchmarks/bench_gpu_conv_tc.py`. fwd+bwd = forward + backward data + backward "
        "filter (cuDNN: conv2d + aten.convolution_backward for both gradients).",
        "",
        "## TF32 (TF32 on both sides), forward + backward, ms",
        "",
        "| shape | ours TC NCHW (fwd / dgrad / wgrad) | ours best under tf32, NCHW | cuDNN TF32 NCHW | ratio NCHW "
        "| ours TC NHWC | cuDNN TF32 channels_last | ratio NHWC | NCHW transposes cost |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    ratios = {"nchw": [], "nhwc": [], "fp16": [], "best": []}
    if not results:
        lines += ["(no shape completed)", ""]
    for r in results:
        tc, tcl = r["tc_nchw"], r["tc_nhwc"]
        c_nchw, c_nhwc = sum(r["cudnn_tf32_nchw"]), sum(r["cudnn_tf32_nhwc"])
        best = _total(r["best_tf32_nchw"])
        ratios["nchw"].append(_total(tc) / c_nchw)
        ratios["best"].append(best / c_nchw)
        ratios["nhwc"].append(_total(tcl) / c_nhwc)
        picks = ", ".join(r["best_tf32_nchw"][d][1] for d in DIRECTIONS)
        lines.append(
            f"| {r['label']} | {_total(tc):.3f} ({' / '.join(f'{tc[d][0]:.3f}' for d in DIRECTIONS)}) | {best:.3f} "
            f"({picks}) | {c_nchw:.3f} | {_total(tc) / c_nchw:.2f} | {_total(tcl):.3f} "
            f"({' / '.join(f'{tcl[d][0]:.3f}' for d in DIRECTIONS)}) | {c_nhwc:.3f} | {_total(tcl) / c_nhwc:.2f} | "
            f"{_total(tc) - _total(tcl):+.3f} |")
    lines += [
        "",
        f"Geometric means (ours / cuDNN TF32): TC NCHW {_geo(ratios['nchw']):.2f}, best-under-tf32 NCHW "
        f"{_geo(ratios['best']):.2f}, TC NHWC vs channels_last {_geo(ratios['nhwc']):.2f}.",
        "",
        "## fp16 (NHWC / channels_last, fp32 accumulation both), forward + backward, ms",
        "",
        "| shape | ours fp16 NHWC (fwd / dgrad / wgrad) | cuDNN fp16 channels_last (fwd / bwd) | ratio | ours fwd TFLOP/s |",
        "| --- | --- | --- | ---: | ---: |",
    ]
    for r in results:
        h = r["fp16_nhwc"]
        c = r["cudnn_fp16_nhwc"]
        ratios["fp16"].append(_total(h) / sum(c))
        lines.append(f"| {r['label']} | {_total(h):.3f} ({' / '.join(f'{h[d][0]:.3f}' for d in DIRECTIONS)}) | "
                     f"{sum(c):.3f} ({c[0]:.3f} / {c[1]:.3f}) | {_total(h) / sum(c):.2f} | "
                     f"{r['tflop_fwd'] / (h['forward'][0] / 1e3):.1f} |")
    lines += ["", f"Geometric mean (ours fp16 / cuDNN fp16): {_geo(ratios['fp16']):.2f}.", "",
              "## bf16 (NHWC / channels_last, fp32 accumulation both), forward + backward, ms", "",
              "| shape | ours bf16 NHWC (fwd / dgrad / wgrad) | cuDNN bf16 channels_last (fwd / bwd) | ratio |",
              "| --- | --- | --- | ---: |"]
    ratios["bf16"] = []
    for r in results:
        h, c = r["bf16_nhwc"], r["cudnn_bf16_nhwc"]
        ratios["bf16"].append(_total(h) / sum(c))
        lines.append(f"| {r['label']} | {_total(h):.3f} ({' / '.join(f'{h[d][0]:.3f}' for d in DIRECTIONS)}) | "
                     f"{sum(c):.3f} ({c[0]:.3f} / {c[1]:.3f}) | {_total(h) / sum(c):.2f} |")
    lines += ["", f"Geometric mean (ours bf16 / cuDNN bf16): {_geo(ratios['bf16']):.2f}; worst "
              f"{max(ratios['bf16'], default=float('nan')):.2f}. Our kernels: set_tensor_core_gemm("
              f"{args.kernel!r}).", ""]
    if fft_results:
        lines += [
            "## FFT convolution (stride 1, NCHW, float32): per direction, ms (fwd / dgrad / wgrad; total)",
            "",
            "| shape | ours fft | ours best fp32 algorithm | ours TF32 TC | cuDNN fp32 | cuDNN TF32 |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for fr in fft_results:
            cell = lambda b: f"{' / '.join(f'{b[d][0]:.3f}' for d in DIRECTIONS)}; {_total(b):.3f}"  # noqa: E731
            fp32_algos = ", ".join(fr["fp32"][d][1] for d in DIRECTIONS)
            lines.append(f"| {fr['label']} | {cell(fr['fft'])} | {cell(fr['fp32'])} ({fp32_algos}) | {cell(fr['tc'])} | "
                         f"{fr['cudnn_fp32'][0]:.3f} / {fr['cudnn_fp32'][1]:.3f}; {sum(fr['cudnn_fp32']):.3f} | "
                         f"{fr['cudnn_tf32'][0]:.3f} / {fr['cudnn_tf32'][1]:.3f}; {sum(fr['cudnn_tf32']):.3f} |")
        lines.append("")
    write_report("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
