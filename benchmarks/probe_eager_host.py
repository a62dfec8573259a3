"""Does anything in bench_gpu_train_step.py's sequence (the MNIST CNN's rows run before the CIFAR CNN's) slow minidl's
eager CIFAR step? Its host ms per step (median of 30, a sync after each, pinned to CPU 3) after each stage of the
MNIST rows: minidl's eager steps, torch.profiler's CUPTI count, minidl's graph capture, torch's graph capture; a
cProfile of 20 steps after each stage goes to $OUT/seq<stage>.prof.

    OUT=/tmp/probe python3 benchmarks/probe_eager_host.py

Session 14 (H200, 2026-11-27): no stage moved it; the same step read 5.1 ms at the start of one process and 2.8-3.7 ms
in others, with every function's own time 20-25% higher in the slow readings (the host's speed, not a code path).
Eager host times on these machines are bimodal: compare frameworks only within interleaved rounds
(bench_gpu_train_step.py --rounds)."""
import cProfile, gc, os, pstats, sys, time
import numpy as np
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
os.sched_setaffinity(0, {3})   # as bench_gpu_train_step.py --pin 3
import minidl, cupy, torch
from bench_gpu_train_step import MODELS, kernels_per_step
OUT = os.environ.get("OUT", "/tmp")
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
def batches(i):
    rng = np.random.default_rng(0); mk = MODELS[list(MODELS)[i]][1]
    hb = [mk(rng) for _ in range(4)]
    return ([(minidl.tensor(x, device="cuda"), minidl.tensor(y, device="cuda")) for x, y in hb],
            [(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()) for x, y in hb])
def ours(i):
    m = MODELS[list(MODELS)[i]][0](minidl.nn).to("cuda"); opt = minidl.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    def step(x, y):
        opt.zero_grad(); l = minidl.nn.functional.cross_entropy(m(x), y); l.backward(); opt.step(); return l
    return step, opt
def timeit(step, b, n=30, prof=None):
    for i in range(5): step(*b[i % 4])
    cupy.cuda.Device().synchronize()
    host = []
    for i in range(n):
        if prof: prof.enable()
        t0 = time.perf_counter(); step(*b[i % 4]); host.append((time.perf_counter() - t0) * 1e3)
        if prof: prof.disable()
        cupy.cuda.Device().synchronize()
    return np.median(host)
gc.freeze()
cb, _ = batches(1); mnb, mnt = batches(0)
cifar, _ = ours(1)
def report(label, k):
    p = cProfile.Profile()
    print(f"{label:55s} CIFAR minidl host {timeit(cifar, cb):.3f} {timeit(cifar, cb):.3f}", flush=True)
    timeit(cifar, cb, n=20, prof=p); p.dump_stats(f"{OUT}/seq{k}.prof")
report("0 start", 0)
mstep, _ = ours(0)
timeit(mstep, mnb)
report("1 after MNIST minidl eager", 1)
kernels_per_step(torch, mstep, mnb)
report("2 after CUPTI count", 2)
gs, gopt = ours(0)
graphed = minidl.cuda.CUDAGraphStep(gs, optimizers=gopt, warmup=3)
timeit(graphed, mnb)
report("3 after minidl MNIST graph capture + replays", 3)
tm = MODELS[list(MODELS)[0]][0](torch.nn).cuda(); topt = torch.optim.SGD(tm.parameters(), lr=0.01, momentum=0.9)
sx, sy = mnt[0][0].clone(), mnt[0][1].clone()
side = torch.cuda.Stream(); side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        topt.zero_grad(set_to_none=True); torch.nn.functional.cross_entropy(tm(sx), sy).backward(); topt.step()
torch.cuda.current_stream().wait_stream(side)
g = torch.cuda.CUDAGraph(); topt.zero_grad(set_to_none=True)
with torch.cuda.graph(g):
    l = torch.nn.functional.cross_entropy(tm(sx), sy); l.backward(); topt.step()
for _ in range(10): g.replay()
torch.cuda.synchronize()
report("4 after torch MNIST graph capture + replays", 4)
del graphed; gc.collect()
report("5 after deleting minidl's graph", 5)
