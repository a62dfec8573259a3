"""Data-parallel on several GPUs: minidl.distributed (NCCL through CuPy) beside torch.distributed (NCCL), same
machine, same process layout (one process per GPU, started by minidl's launcher for both frameworks).

1. all-reduce bus bandwidth, float32, 1 MB to 256 MB: busbw = bytes / time * 2 (N - 1) / N (NCCL's own
   definition; it is what each link carries), the median of --iters all-reduces after warm-up, CUDA events;
2. weak scaling of a DDP training step, fixed batch per GPU: ResNet-9 w64 (batch 512 per GPU, SGD momentum)
   and the 2x512 LSTM LM (T35, B32 per GPU, Adam), bf16 autocast, eager, on 1 GPU and on N GPUs; images
   or tokens per second summed over the GPUs, and the scaling efficiency rate(N) / (N * rate(1)). Step time
   from CUDA events (the slowest rank's median), host time (perf_counter around the Python call) beside it.
   --minidl-variants adds minidl rows: graphed (the whole step, NCCL included, in a CUDA graph) and
   no-buffer-sync (broadcast_buffers=False, the batch-norm buffers not broadcast each forward).

    python3 benchmarks/bench_distributed.py --out benchmarks/results/gpu_distributed.md

Run on a machine with several GPUs; with one it measures the 1-GPU column only (and a communicator of one).
This file is both the driver (no RANK in the environment) and the per-rank worker (under the launcher).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SIZES_MB = [1, 16, 64, 256]


# ------------------------------------------------------------------------------------------------ workers
def worker_allreduce(args):
    import cupy
    n_iter, warm = args.iters, 5
    results = []
    if args.impl == "torch":
        import torch
        import torch.distributed as dist
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl")
        world = dist.get_world_size()
        for mb in SIZES_MB:
            x = torch.ones(mb * 1024 * 1024 // 4, device="cuda")
            for _ in range(warm):
                dist.all_reduce(x)
            times = []
            for _ in range(n_iter):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record(); dist.all_reduce(x); e.record(); e.synchronize()
                times.append(s.elapsed_time(e))
            results.append((mb, statistics.median(times)))
        rank = dist.get_rank()
        dist.destroy_process_group()
    else:
        import minidl
        import minidl.distributed as dist
        minidl.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl")
        world = dist.get_world_size()
        for mb in SIZES_MB:
            x = minidl.ones(mb * 1024 * 1024 // 4, device="cuda")
            for _ in range(warm):
                dist.all_reduce(x)
            times = []
            for _ in range(n_iter):
                s, e = cupy.cuda.Event(), cupy.cuda.Event()
                s.record(); dist.all_reduce(x); e.record(); e.synchronize()
                times.append(cupy.cuda.get_elapsed_time(s, e))
            expect = float(world) ** (warm + n_iter)
            got = float(x[:1].item())
            assert abs(got - expect) <= 1e-3 * expect, f"all_reduce gave {got}, expected {expect}"
            results.append((mb, statistics.median(times)))
        rank = dist.get_rank()
        dist.destroy_process_group()
    if rank == 0:
        print("RESULT " + json.dumps({"task": "allreduce", "impl": args.impl, "world": world, "rows": results}))


def worker_train(args):
    import faulthandler
    faulthandler.dump_traceback_later(args.hang_after, exit=True)   # a hang prints every thread's stack, then ends
    from benchmarks.bench_gpu_train_step import lstm_lm, resnet9
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    rng = np.random.default_rng(rank)
    if args.model == "resnet9":
        build, opt_name, per_gpu = resnet9, "sgd", 512
        batches = [(rng.standard_normal((per_gpu, 3, 32, 32)).astype(np.float32),
                    rng.integers(0, 10, per_gpu).astype(np.int64)) for _ in range(4)]
    else:
        build, opt_name, per_gpu = lstm_lm, "adam", 32 * 35
        batches = []
        for _ in range(4):
            ids = rng.integers(0, 10000, (36, 32)).astype(np.int64)
            batches.append((ids[:-1], ids[1:].reshape(-1)))
    if args.impl == "torch":
        import torch
        import torch.distributed as dist
        torch.cuda.set_device(local)
        dist.init_process_group("nccl")
        torch.manual_seed(0)
        model = build(torch.nn).cuda()
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
        opt = (torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9) if opt_name == "sgd"
               else torch.optim.Adam(ddp.parameters(), lr=1e-3))
        dev_batches = [(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()) for x, y in batches]
        F = torch.nn.functional

        def step(x, y):
            opt.zero_grad()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(ddp(x), y)
            loss.backward()
            opt.step()
        sync = torch.cuda.synchronize
        event = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
        elapsed = lambda s, e: s.elapsed_time(e)  # noqa: E731
    else:
        import cupy
        import minidl
        import minidl.distributed as dist
        minidl.cuda.set_device(local)
        dist.init_process_group("nccl")
        minidl.manual_seed(0)
        model = build(minidl.nn).to("cuda")
        ddp = minidl.nn.parallel.DistributedDataParallel(model, broadcast_buffers=args.variant != "no-buffer-sync")
        opt = (minidl.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9) if opt_name == "sgd"
               else minidl.optim.Adam(ddp.parameters(), lr=1e-3))
        dev_batches = [(minidl.tensor(x, device="cuda"), minidl.tensor(y, device="cuda")) for x, y in batches]
        F = minidl.nn.functional

        def step(x, y):
            opt.zero_grad()
            with minidl.autocast("cuda", dtype=minidl.bfloat16):
                loss = F.cross_entropy(ddp(x), y)
            loss.backward()
            opt.step()
            return loss
        if args.variant == "graphed":    # the whole step, NCCL calls included, in one CUDA graph
            step = minidl.cuda.CUDAGraphStep(step, optimizers=opt)
        sync = minidl.cuda.synchronize
        event = cupy.cuda.Event
        elapsed = cupy.cuda.get_elapsed_time
    for i in range(args.warmup):
        step(*dev_batches[i % 4])
    sync()
    times, host = [], []
    for i in range(args.steps):
        s, e = event(), event()
        s.record()
        t0 = time.perf_counter()
        step(*dev_batches[i % 4])
        host.append((time.perf_counter() - t0) * 1e3)
        e.record()
        e.synchronize()
        times.append(elapsed(s, e))
    # every rank's median; the slowest rank sets the pace
    import json as _json
    med = statistics.median(times)
    path = os.path.join(args.tmp, f"{args.impl}_{args.model}_{world}_{rank}.json")
    with open(path, "w") as f:
        _json.dump({"median_ms": med, "host_ms": statistics.median(host)}, f)
    dist.barrier()
    if rank == 0:
        meds, hosts = [], []
        for r in range(world):
            with open(os.path.join(args.tmp, f"{args.impl}_{args.model}_{world}_{r}.json")) as f:
                d = _json.load(f)
                meds.append(d["median_ms"])
                hosts.append(d["host_ms"])
        print("RESULT " + json.dumps({"task": "train", "impl": args.impl, "model": args.model, "world": world,
                                      "step_ms": max(meds), "host_ms": max(hosts), "per_gpu": per_gpu}))
    dist.destroy_process_group()


# ------------------------------------------------------------------------------------------------ driver
def launch(nproc, argv, timeout=600):
    cmd = [sys.executable, "-m", "minidl.distributed.run", "--start", "spawn", "--nproc-per-node", str(nproc),
           os.path.abspath(__file__), *argv]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default=None, help=argparse.SUPPRESS)
    p.add_argument("--impl", default="minidl", help=argparse.SUPPRESS)
    p.add_argument("--model", default="resnet9", help=argparse.SUPPRESS)
    p.add_argument("--tmp", default="/tmp", help=argparse.SUPPRESS)
    p.add_argument("--variant", default="eager", help=argparse.SUPPRESS)
    p.add_argument("--hang-after", type=float, default=240, help="seconds after which a worker prints its stacks and ends")
    p.add_argument("--models", default="resnet9,lstm", help="which DDP models to time (resnet9, lstm)")
    p.add_argument("--minidl-variants", default="eager",
                   help="minidl rows besides torch's: eager, graphed (the step in a CUDA graph), no-buffer-sync "
                        "(broadcast_buffers=False); comma-separated")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--only", default="allreduce,train", help="which parts to run (allreduce, train)")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if args.task == "allreduce":
        return worker_allreduce(args)
    if args.task == "train":
        return worker_train(args)

    import cupy
    from benchmarks._report import git_commit, write_report
    n = cupy.cuda.runtime.getDeviceCount()
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    common = ["--iters", str(args.iters), "--warmup", str(args.warmup), "--steps", str(args.steps), "--tmp", "/tmp",
              "--hang-after", str(args.hang_after)]
    lines = [f"# Data-parallel on {n} x {name}: minidl.distributed vs torch.distributed (both NCCL)", "",
             f"{datetime.date.today()}, commit {git_commit()}, `python3 benchmarks/bench_distributed.py`. "
             "One process per GPU for both frameworks, started by minidl's launcher.", ""]
    if "allreduce" in args.only:
        lines += ["## All-reduce, float32, bus bandwidth (GB/s)", "",
                  "| size | minidl ms | torch ms | minidl busbw | torch busbw | minidl / torch |", "|---|---:|---:|---:|---:|---:|"]
        res = {impl: launch(n, ["--task", "allreduce", "--impl", impl] + common) for impl in ("minidl", "torch")}
        for (mb, t_m), (_, t_t) in zip(res["minidl"]["rows"], res["torch"]["rows"]):
            factor = 2 * (n - 1) / n
            bw = lambda t: mb * 1024 * 1024 / (t * 1e-3) / 1e9 * factor  # noqa: E731
            lines.append(f"| {mb} MB | {t_m:.3f} | {t_t:.3f} | {bw(t_m):.1f} | {bw(t_t):.1f} | "
                         f"{(bw(t_m) / bw(t_t) if t_t and n > 1 else float('nan')):.2f} |")
            print(lines[-1], flush=True)
        lines.append("")
    if "train" in args.only:
        lines += ["## DDP training step, bf16 autocast, eager, fixed batch per GPU (weak scaling)", "",
                  "| model | framework | 1 GPU step ms (host ms) | N GPU step ms (host ms) | rate at 1 GPU | "
                  "rate at N GPUs | efficiency |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        units = {"resnet9": "img/s", "lstm": "tok/s"}
        for model in args.models.split(","):
            unit = units[model]
            runs = [("minidl", v) for v in args.minidl_variants.split(",")] + [("torch", "eager")]
            for impl, variant in runs:
                cmd = ["--task", "train", "--impl", impl, "--model", model, "--variant", variant] + common
                try:
                    one = launch(1, cmd)
                    many = launch(n, cmd) if n > 1 else one
                except RuntimeError as exc:          # say which run failed, keep the others
                    print(exc, file=sys.stderr, flush=True)
                    lines.append(f"| {model} | {impl} {variant} | failed: see the log | | | | |")
                    continue
                r1 = one["per_gpu"] / (one["step_ms"] * 1e-3)
                rn = n * many["per_gpu"] / (many["step_ms"] * 1e-3)
                label = impl if variant == "eager" else f"{impl} {variant}"
                lines.append(f"| {model} | {label} | {one['step_ms']:.2f} ({one['host_ms']:.1f}) | "
                             f"{many['step_ms']:.2f} ({many['host_ms']:.1f}) | {r1:,.0f} {unit} | "
                             f"{rn:,.0f} {unit} | {rn / (n * r1):.2f} |")
                print(lines[-1], flush=True)
        lines.append(f"\nN = {n}. Efficiency = rate(N) / (N x rate(1)); the target is >= 0.9 and at least torch's.")
    write_report("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
