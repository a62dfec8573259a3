"""One training step of the four models of issue 13 on the GPU: minidl eager, minidl with the whole
step in a CUDA graph (minidl.cuda.CUDAGraphStep), PyTorch eager and PyTorch with CUDA graphs.

Models (defined here once, built from minidl.nn and from torch.nn by the same code, same initial
weights, same batches): the MNIST CNN (2 x conv-BN-ReLU-pool, dropout, 2 linear; batch 128, SGD
momentum), the small CIFAR CNN (3 x conv3x3-BN-ReLU-maxpool 64/128/256 + linear; batch 128, SGD
momentum), ResNet-9 width 64 (batch 512, SGD momentum) and a 2 x 512 LSTM language model (vocab 10k,
T 35, B 32, Adam). --math fp32 (default): TF32 off in torch and in minidl; tf32: TF32 on for
convolutions and matmuls on both sides; bf16: torch.autocast / minidl.autocast("cuda", bfloat16) around
the forward pass and loss on both sides (no loss scaling: bfloat16 needs none). --channels-last: the CNNs
and their batches in channels_last memory on both sides (Module.to(memory_format=...)).

Timing: per step, CUDA events around the step (the step time: GPU time including the gaps while the
GPU waits for the host) and perf_counter around the Python call (host time: how long the host takes
to queue the step); after each step the host waits for the GPU, so steps do not overlap. Median,
p10 and p90 over --steps steps after --warmup steps (which include every compile, algorithm choice
and the capture). The policy is the heuristic one unless --benchmark (prefer_fastest / cudnn.benchmark).

Python's cyclic garbage collector: after the imports the process holds ~300,000 GC-tracked objects, most of them
torch's; minidl's tape is Python objects (torch's is C++), so minidl's steps set off full collections that scan
all of them (~170 ms each on an H100, measured for bench_gpt_step.py). Before timing, the objects that exist
then are frozen (gc.freeze(), as bench_gpt_step.py does), so each framework's steps pay for their own garbage
only; --no-gc-freeze measures without it. --rounds R: the eager rows get R - 1 more rounds (minidl, torch,
minidl, ...), all steps pooled, since an eager step's time is host time and the host moves during a run.

    python3 benchmarks/bench_gpu_train_step.py --out benchmarks/results/gpu_train_step.md
"""
from __future__ import annotations

import argparse
import datetime
import gc
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root
import minidl  # noqa: E402
from benchmarks._report import git_commit, pin_to_cpu, write_report  # noqa: E402


# ------------------------------------------------------------------------------------------------
# The models: one definition, two frameworks (minidl.nn follows torch.nn's names)
# ------------------------------------------------------------------------------------------------


def mnist_cnn(nn):
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.25), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))


def cifar_cnn(nn):
    def block(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2)]

    return nn.Sequential(*block(3, 64), *block(64, 128), *block(128, 256), nn.Flatten(), nn.Linear(256 * 4 * 4, 10))


def resnet9(nn, width=64):
    def cbr(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

    class Residual(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.body = nn.Sequential(cbr(c, c), cbr(c, c))

        def forward(self, x):
            return x + self.body(x)

    w1, w2, w3, w4 = width, 2 * width, 4 * width, 8 * width
    return nn.Sequential(cbr(3, w1), cbr(w1, w2), nn.MaxPool2d(2), Residual(w2), cbr(w2, w3), nn.MaxPool2d(2),
                         cbr(w3, w4), nn.MaxPool2d(2), Residual(w4), nn.MaxPool2d(4), nn.Flatten(),
                         nn.Linear(w4, 10, bias=False))


def lstm_lm(nn, vocab=10000, hidden=512):
    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.rnn = nn.LSTM(hidden, hidden, num_layers=2)
            self.out = nn.Linear(hidden, vocab)

        def forward(self, ids):
            y, _ = self.rnn(self.embed(ids))
            return self.out(y.reshape(-1, y.shape[-1]))

    return LM()


def _image_batch(rng, n, shape, classes=10):
    return rng.standard_normal((n,) + shape).astype(np.float32), rng.integers(0, classes, n).astype(np.int64)


def _text_batch(rng, T=35, B=32, vocab=10000):
    ids = rng.integers(0, vocab, (T + 1, B)).astype(np.int64)
    return ids[:-1], ids[1:].reshape(-1)


MODELS = {
    "MNIST CNN, batch 128": (mnist_cnn, lambda rng: _image_batch(rng, 128, (1, 28, 28)), "sgd"),
    "small CIFAR CNN, batch 128": (cifar_cnn, lambda rng: _image_batch(rng, 128, (3, 32, 32)), "sgd"),
    "ResNet-9 w64, batch 512": (resnet9, lambda rng: _image_batch(rng, 512, (3, 32, 32)), "sgd"),
    "2x512 LSTM LM, T35 B32, vocab 10k": (lstm_lm, lambda rng: _text_batch(rng), "adam"),
}


# ------------------------------------------------------------------------------------------------
# Timing
# ------------------------------------------------------------------------------------------------


def time_steps(step, batches, warmup, steps, cupy):
    """(gpu_ms, host_ms) lists over `steps` steps after `warmup`; batches cycle."""
    for i in range(warmup):
        step(*batches[i % len(batches)])
    cupy.cuda.Device().synchronize()
    gpu, host = [], []
    for i in range(steps):
        args = batches[(warmup + i) % len(batches)]
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        t0 = time.perf_counter()
        step(*args)
        t1 = time.perf_counter()
        end.record()
        end.synchronize()
        gpu.append(cupy.cuda.get_elapsed_time(start, end))
        host.append((t1 - t0) * 1e3)
    return gpu, host


def kernels_per_step(torch, step, batches, steps=3):
    """GPU operations (kernels, memsets, copies) per step of `step`, counted by torch.profiler: its CUPTI
    tracing sees every kernel of the process, CuPy's and ours as well as torch's, so the two frameworks
    are counted the same way. A string saying why when the profiler cannot count here."""
    try:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(steps):
                step(*batches[i % len(batches)])
            torch.cuda.synchronize()
        count = sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA)
        return f"{count / steps:.0f}"
    except Exception as e:  # noqa: BLE001 - a column must not lose the table
        return f"n/a ({type(e).__name__})"


def summary(values):
    v = np.asarray(values)
    return float(np.median(v)), float(np.percentile(v, 10)), float(np.percentile(v, 90))


def _dropout_eval(model, flag):
    for m in model.modules():
        if type(m).__name__ == "Dropout":
            m.train(flag)


def run_model(name, args, torch, cupy):
    build, make_batch, opt_name = MODELS[name]
    rng = np.random.default_rng(0)
    host_batches = [make_batch(rng) for _ in range(4)]
    torch.manual_seed(0)
    tmodel = build(torch.nn).cuda()
    state = {k: v.detach().cpu().numpy().copy() for k, v in tmodel.state_dict().items()}

    def make_minidl():
        model = build(minidl.nn)
        model.load_state_dict(state)
        return model.to("cuda")

    def minidl_opt(model):
        if opt_name == "sgd":
            return minidl.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        return minidl.optim.Adam(model.parameters(), lr=1e-3)

    def torch_opt(model, capturable=False):
        if opt_name == "sgd":
            return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        return torch.optim.Adam(model.parameters(), lr=1e-3, capturable=capturable)

    cl = args.channels_last and host_batches[0][0].ndim == 4
    if cl:
        tmodel = tmodel.to(memory_format=torch.channels_last)
        base_make = make_minidl

        def make_minidl():
            return base_make().to(memory_format=minidl.channels_last)

    mb = [(minidl.tensor(x, device="cuda"), minidl.tensor(y, device="cuda")) for x, y in host_batches]
    tb = [(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()) for x, y in host_batches]
    if cl:
        mb = [(x.to(memory_format=minidl.channels_last), y) for x, y in mb]
        tb = [(x.to(memory_format=torch.channels_last), y) for x, y in tb]
    Fm, Ft = minidl.nn.functional, torch.nn.functional
    bf16 = args.math == "bf16"

    def ours_loss(model, x, y):
        if bf16:
            with minidl.autocast("cuda", dtype=minidl.bfloat16):
                return Fm.cross_entropy(model(x), y)
        return Fm.cross_entropy(model(x), y)

    def torch_loss(model, x, y, graphs=False):
        if bf16:
            with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=not graphs):
                return Ft.cross_entropy(model(x), y)
        return Ft.cross_entropy(model(x), y)

    # the same program? initial loss with dropout off (its masks differ between the frameworks)
    model = make_minidl()
    _dropout_eval(model, False)
    _dropout_eval(tmodel, False)
    l_ours = float(ours_loss(model, *mb[0]).item())
    l_torch = float(torch_loss(tmodel, *tb[0]).item())
    _dropout_eval(model, True)
    _dropout_eval(tmodel, True)
    tol = {"fp32": 1e-3, "tf32": 1e-2, "bf16": 5e-2}[args.math]  # reduced precision: same program, looser match
    if abs(l_ours - l_torch) > tol * max(1.0, abs(l_torch)):
        raise SystemExit(f"{name}: losses differ: minidl {l_ours} vs torch {l_torch}: not benchmarking a wrong program")

    rows = {}

    def minidl_step_fn(model, opt):
        def step(x, y):
            opt.zero_grad()
            loss = ours_loss(model, x, y)
            loss.backward()
            opt.step()
            return loss
        return step

    opt = minidl_opt(model)
    ours_eager = minidl_step_fn(model, opt)
    rows["minidl eager"] = time_steps(ours_eager, mb, args.warmup, args.steps, cupy)
    kernels = {"minidl eager": kernels_per_step(torch, minidl_step_fn(model, opt), mb)}

    model = make_minidl()
    opt = minidl_opt(model)
    graphed = minidl.cuda.CUDAGraphStep(minidl_step_fn(model, opt), optimizers=opt, warmup=3)
    try:
        rows["minidl graphed"] = time_steps(graphed, mb, args.warmup, args.steps, cupy)
    except Exception as e:  # an op that cannot be captured: the row says which
        cupy.cuda.Device().synchronize()
        rows["minidl graphed"] = f"not capturable: {type(e).__name__}: {str(e).split(':')[0]}"

    def torch_step_fn(model, opt, graphs=False):
        def step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = torch_loss(model, x, y, graphs)
            loss.backward()
            opt.step()
            return loss
        return step

    topt = torch_opt(tmodel)
    theirs_eager = torch_step_fn(tmodel, topt)
    rows["torch eager"] = time_steps(theirs_eager, tb, args.warmup, args.steps, cupy)
    kernels["torch eager"] = kernels_per_step(torch, torch_step_fn(tmodel, topt), tb)

    # torch with CUDA graphs: the documented whole-network recipe (warm-up on a side stream, capture once)
    torch.manual_seed(0)
    gmodel = build(torch.nn).cuda()
    gmodel.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    if cl:
        gmodel = gmodel.to(memory_format=torch.channels_last)
    gopt = torch_opt(gmodel, capturable=True)
    gstep = torch_step_fn(gmodel, gopt, graphs=True)
    sx, sy = tb[0][0].clone(), tb[0][1].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            gstep(sx, sy)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    gopt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        sloss = torch_loss(gmodel, sx, sy, graphs=True)
        sloss.backward()
        gopt.step()

    def torch_graphed(x, y):
        sx.copy_(x)
        sy.copy_(y)
        g.replay()
        return sloss

    rows["torch graphed"] = time_steps(torch_graphed, tb, args.warmup, args.steps, cupy)
    # --rounds: more rounds of the two eager steps, alternating, their steps pooled with the first round's (an
    # eager step's time is its host time, which moves between the moments of one run on these machines)
    for _ in range(args.rounds - 1):
        for path, fn, batches in (("minidl eager", ours_eager, mb), ("torch eager", theirs_eager, tb)):
            gpu, host = time_steps(fn, batches, 2, args.steps, cupy)
            rows[path][0].extend(gpu)
            rows[path][1].extend(host)
    return rows, l_ours, l_torch, kernels


def policy_study(args, torch, cupy):
    """Why prefer_fastest was slower than the heuristic: the algorithms each policy picks for the
    small CIFAR CNN, and the step's GPU and host time under each, eager and graphed."""
    rng = np.random.default_rng(0)
    x, y = _image_batch(rng, 128, (3, 32, 32))
    x, y = minidl.tensor(x, device="cuda"), minidl.tensor(y, device="cuda")
    lines = ["| policy | path | step median (ms) | p10-p90 | host median (ms) | algorithms (fwd / bwd data / bwd filter per conv) |",
             "| --- | --- | ---: | --- | ---: | --- |"]
    for bench_flag in (False, True):
        for graphed in (False, True):
            model, opt, step = sgd_cnn(cifar_cnn)
            with minidl.backends.cudnn.flags(benchmark=bench_flag, deterministic=False):
                run = minidl.cuda.CUDAGraphStep(step, optimizers=opt, warmup=3) if graphed else step
                gpu, host = time_steps(run, [(x, y)], args.warmup, args.steps, cupy)
            g50, g10, g90 = summary(gpu)
            lines.append(f"| {'prefer_fastest' if bench_flag else 'heuristic'} | {'graphed' if graphed else 'eager'} | "
                         f"{g50:.3f} | {g10:.3f}-{g90:.3f} | {summary(host)[0]:.3f} | {conv_algorithms(model)} |")
    return lines


def sgd_cnn(build):
    """A fresh CNN (seed 0) on the GPU with SGD (momentum 0.9): (model, optimizer, step(x, y))."""
    minidl.manual_seed(0)
    model = build(minidl.nn).to("cuda")
    opt = minidl.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(a, b):
        opt.zero_grad()
        loss = minidl.nn.functional.cross_entropy(model(a), b)
        loss.backward()
        opt.step()
        return loss

    return model, opt, step


def conv_algorithms(model) -> str:
    """The algorithms each Conv2d's plans chose, "forward/backward_data/backward_filter" per plan, "; "-joined."""
    return "; ".join("/".join(plan.algos.get(d, "-") for d in ("forward", "backward_data", "backward_filter"))
                     for m in model.modules() if isinstance(m, minidl.nn.Conv2d) for plan in m._conv_plans.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--no-gc-freeze", action="store_true", help="leave the imports' objects to the collector")
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds of the eager steps (minidl, torch, minidl, ...), all their steps pooled")
    ap.add_argument("--models", default="all", help="comma-separated indices into the model list, or 'all'")
    ap.add_argument("--no-policy-study", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--commit", default=None, help="commit to record (default: $MINIDL_COMMIT, else git)")
    ap.add_argument("--math", choices=("fp32", "tf32", "bf16"), default="fp32")
    ap.add_argument("--channels-last", action="store_true", help="CNNs and batches in channels_last on both sides")
    ap.add_argument("--rnn-wavefront", choices=("auto", "off"), default="auto",
                    help="the persistent RNN's wavefront (rnn_persistent.WAVEFRONT): its policy, or never (an A/B)")
    ap.add_argument("--pin", type=int, default=None, help="run on this one CPU (both frameworks): see _report.pin_to_cpu")
    args = ap.parse_args()
    pinned = pin_to_cpu(args.pin)

    import cupy
    import torch

    from minidl.primitives.cuda import rnn_persistent
    rnn_persistent.WAVEFRONT = "auto" if args.rnn_wavefront == "auto" else False

    tf32 = args.math == "tf32"
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    minidl.backends.cudnn.allow_tf32 = tf32
    minidl.backends.cuda.matmul.allow_tf32 = tf32
    minidl.cuda.precompile()
    if not args.no_gc_freeze:
        gc.collect()
        gc.freeze()

    names = list(MODELS) if args.models == "all" else [list(MODELS)[int(i)] for i in args.models.split(",")]
    table = ["| model | path | step median (ms) | p10-p90 (ms) | host median (ms) | ratio to torch eager | ratio to torch graphed "
             "| GPU ops / step |",
             "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    losses = []
    for name in names:
        try:
            rows, l_ours, l_torch, kernels = run_model(name, args, torch, cupy)
        except Exception as e:  # one model failing must not lose the others' rows
            table.append(f"| {name} | failed: {type(e).__name__}: {e} | | | | | | |")
            print(table[-1], flush=True)
            continue
        losses.append(f"{name}: minidl {l_ours:.6f}, torch {l_torch:.6f}")
        ref_eager = summary(rows["torch eager"][0])[0]
        ref_graph = summary(rows["torch graphed"][0])[0]
        for path, value in rows.items():
            if isinstance(value, str):
                table.append(f"| {name} | {path} | {value} | | | | | |")
                continue
            g50, g10, g90 = summary(value[0])
            table.append(f"| {name} | {path} | {g50:.3f} | {g10:.3f}-{g90:.3f} | {summary(value[1])[0]:.3f} | "
                         f"{g50 / ref_eager:.2f}x | {g50 / ref_graph:.2f}x | {kernels.get(path, '')} |")
        print("\n".join(table[-len(rows):]), flush=True)

    policy = [] if args.no_policy_study else policy_study(args, torch, cupy)
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = [
        "# GPU training step: minidl eager and CUDA-graphed against PyTorch eager and graphed",
        "",
        f"- date: {date}", f"- commit: {git_commit(args.commit)}",
        f"- device: {name}; torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, CuPy {cupy.__version__}",
        {"fp32": "- fp32 everywhere (TF32 off in torch and in minidl)",
         "tf32": "- TF32 on for convolutions and matmuls in torch and in minidl",
         "bf16": "- bfloat16 autocast around forward and loss on both sides"}[args.math]
        + ("; channels_last CNNs and batches on both sides" if args.channels_last else "")
        + "; torch cudnn.benchmark on; minidl heuristic algorithm policy",
        f"- step time: CUDA events around one step, the host waiting for the GPU after each; host time: perf_counter "
        f"around the Python call; median and p10-p90 of {args.steps} steps after {args.warmup} warm-up steps"
        + (f"; the eager rows: {args.rounds} alternating rounds (minidl, torch, ...) of {args.steps} steps, pooled"
           if args.rounds > 1 else ""),
        f"- command: `python3 benchmarks/bench_gpu_train_step.py --math {args.math}"
        + (" --channels-last" if args.channels_last else "") + (f" --rounds {args.rounds}" if args.rounds > 1 else "")
        + (" --no-gc-freeze" if args.no_gc_freeze else "") + ("" if args.pin is None else f" --pin {args.pin}") + "`"
        + f"; {pinned}"
        + ("" if args.no_gc_freeze else "; the objects that exist after the imports gc.freeze()d (see the script)"),
        "- GPU ops / step (eager rows): kernels, memsets and copies of one step as torch.profiler's CUPTI tracing "
        "counts them (it sees CuPy's and our kernels too), mean of 3 steps; a graphed step runs the same "
        "kernels from one graph launch",
        "- initial losses (dropout off): " + "; ".join(losses),
        "",
        *table,
    ]
    if policy:
        text += ["", "## Algorithm policy on the small CIFAR CNN (batch 128): heuristic vs prefer_fastest", "", *policy]
    write_report("\n".join(text), args.out)


if __name__ == "__main__":
    main()
