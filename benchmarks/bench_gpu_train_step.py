"""One training step of the small CIFAR CNN on the GPU: minidl (our kernels) against PyTorch eager (cuDNN).

The network is issue 3's benchmark network (3 x conv3x3-BN-ReLU-maxpool of 64/128/256 channels, then
a linear layer), batch 128, cross-entropy, SGD with momentum. Both run in this process on the same
inputs and the same initial weights; torch with TF32 off (fp32 everywhere) and cudnn.benchmark on;
minidl with `minidl.backends.cudnn.benchmark = True` (prefer_fastest). Times with CUDA events, after a
warm-up that includes every compile and algorithm search; median of --steps steps.

    python3 benchmarks/bench_gpu_train_step.py --out benchmarks/results/gpu_train_step.md --commit SHA
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root
import minidl  # noqa: E402
import minidl.nn.functional as F  # noqa: E402
from bench_cpu_cnn import minidl_model, torch_model  # noqa: E402
from benchmarks._report import git_commit, write_report  # noqa: E402


def cuda_time_ms(step, warmup, steps, cupy):
    for _ in range(warmup):
        step()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(steps):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--out", default=None)
    ap.add_argument("--commit", default=None, help="commit to record (default: $MINIDL_COMMIT, else git)")
    args = ap.parse_args()

    import cupy
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    minidl.backends.cudnn.benchmark = True
    minidl.cuda.precompile()

    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((args.batch, 3, 32, 32)).astype(np.float32)
    y_np = rng.integers(0, 10, args.batch).astype(np.int64)

    tmodel = torch_model(torch).cuda()
    model = minidl_model()
    model.load_state_dict({k: v.detach().cpu().numpy().copy() for k, v in tmodel.state_dict().items()})
    model.to("cuda")
    opt = minidl.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    topt = torch.optim.SGD(tmodel.parameters(), lr=0.01, momentum=0.9)
    x, y = minidl.tensor(x_np, device="cuda"), minidl.tensor(y_np, device="cuda")
    tx, ty = torch.from_numpy(x_np).cuda(), torch.from_numpy(y_np).cuda()

    l_ours = F.cross_entropy(model(x), y).item()
    l_torch = torch.nn.functional.cross_entropy(tmodel(tx), ty).item()
    if abs(l_ours - l_torch) > 1e-3 * max(1.0, abs(l_torch)):
        raise SystemExit(f"losses differ: minidl {l_ours} vs torch {l_torch}: not benchmarking a wrong program")

    def step_minidl():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    def step_torch():
        loss = torch.nn.functional.cross_entropy(tmodel(tx), ty)
        topt.zero_grad()
        loss.backward()
        topt.step()

    ours = cuda_time_ms(step_minidl, args.warmup, args.steps, cupy)
    ref = cuda_time_ms(step_torch, args.warmup, args.steps, cupy)
    ratio = ours / ref
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    table = "\n".join([
        "# GPU training step: small CIFAR CNN, minidl vs PyTorch eager (cuDNN)",
        "",
        f"- date: {date}", f"- commit: {git_commit(args.commit)}",
        f"- device: {name}; torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, CuPy {cupy.__version__}",
        f"- network: 3 x (conv3x3-BN-ReLU-maxpool) 64/128/256 + linear, batch {args.batch}, SGD momentum; fp32, TF32 off in torch",
        f"- initial loss: minidl {l_ours:.6f}, torch {l_torch:.6f}; median of {args.steps} steps (CUDA events) after {args.warmup} warm-up",
        "",
        "| path | step time (ms) | ratio to torch |",
        "| --- | ---: | ---: |",
        f"| minidl (our kernels, prefer_fastest) | {ours:.3f} | {ratio:.2f}x |",
        f"| PyTorch eager (cuDNN) | {ref:.3f} | 1.00x |",
        "",
        f"Target: within 1.5x of torch eager -> {'met' if ratio <= 1.5 else 'missed'} ({ratio:.2f}x).",
    ])
    write_report(table, args.out)


if __name__ == "__main__":
    main()
