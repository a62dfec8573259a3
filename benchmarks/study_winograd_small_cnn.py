"""Should the small CNNs leave Winograd out? Its forward and backward-data run 4 launches each (filter, input and
output transforms around a batched GEMM) where implicit_precomp_gemm runs 1: fewer GPU operations and less host
time per eager step, against Winograd's 2.25x fewer multiplies. This runs the small CIFAR and MNIST CNNs of
bench_gpu_train_step.py in fp32 (TF32 off), eager and graphed, with the heuristic as it is and with Winograd moved
to the end of its order, alternating, and prints the algorithms each picks and the GPU ms per step (median of 20
steps, per round).

    python3 benchmarks/study_winograd_small_cnn.py [--rounds 3]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import cupy
    import numpy as np

    import minidl
    from bench_gpu_train_step import _image_batch, cifar_cnn, conv_algorithms, mnist_cnn, sgd_cnn, summary, \
        time_steps
    from minidl.primitives.cuda import convolution as cuda_convolution

    heuristic = cuda_convolution.heuristic_order

    def winograd_last(direction, problem):
        return tuple(a for a in heuristic(direction, problem) if a != "winograd") + ("winograd",)

    minidl.backends.cudnn.allow_tf32 = False
    minidl.backends.cuda.matmul.allow_tf32 = False
    print(f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}, fp32 (TF32 off), batch 128")
    for name, build, shape in (("small CIFAR CNN", cifar_cnn, (3, 32, 32)), ("MNIST CNN", mnist_cnn, (1, 28, 28))):
        x, y = _image_batch(np.random.default_rng(0), 128, shape)
        x, y = minidl.tensor(x, device="cuda"), minidl.tensor(y, device="cuda")
        times = {}
        try:
            for rnd in range(args.rounds):
                for label, order in (("heuristic", heuristic), ("winograd last", winograd_last)):
                    cuda_convolution.heuristic_order = order
                    for graphed in (False, True):
                        model, opt, step = sgd_cnn(build)
                        run = minidl.cuda.CUDAGraphStep(step, optimizers=opt, warmup=3) if graphed else step
                        gpu, _ = time_steps(run, [(x, y)], 6, 20, cupy)
                        times.setdefault((label, graphed), []).append(summary(gpu)[0])
                        if rnd == 0 and not graphed:
                            print(f"{name}, {label}: {conv_algorithms(model)}")
        finally:
            cuda_convolution.heuristic_order = heuristic
        for (label, graphed), values in times.items():
            print(f"{name}, {label}, {'graphed' if graphed else 'eager'}: "
                  f"{' '.join(f'{v:.3f}' for v in values)} ms (median {np.median(values):.3f})")


if __name__ == "__main__":
    main()
