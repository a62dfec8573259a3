"""Why minidl's eager step time spreads wide and torch's does not (issue 23): per step, what the thread did.

bench_gpu_train_step.py sees minidl's MNIST / small CIFAR CNN steps spread over p10-p90 3.4-4.4 ms against torch's
2.6-2.8 (session 14): minidl's fast steps are within 1.3x of torch's, its median is not. This probe runs the same
steps (the same models, batches and optimizers), minidl and torch in alternating blocks, and records for every
step: the host time of the call, the thread's CPU time in it (time.thread_time: less than the host time when the
thread was descheduled or waited), its minor and major page faults, its voluntary and involuntary context switches
(getrusage(RUSAGE_THREAD)), and the garbage collector's runs and their time (gc.callbacks). The summary says which of
them go with the slow steps; the per-step rows go to $OUT/jitter_<model>.csv.

    python3 benchmarks/probe_step_jitter.py [--models 0,1] [--math fp32|tf32] [--blocks 4] [--steps 40] [--pin 3]
"""
from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks._report import pin_to_cpu  # noqa: E402

FIELDS = ("host_ms", "cpu_ms", "minflt", "majflt", "nvcsw", "nivcsw", "gc_runs", "gc_ms")


class _GCWatch:
    """Counts the collector's runs and their time between two reads (gc.callbacks)."""

    def __init__(self):
        self.runs, self.ms, self._t0 = 0, 0.0, 0.0
        gc.callbacks.append(self._cb)

    def _cb(self, phase, info):
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.runs += 1
            self.ms += (time.perf_counter() - self._t0) * 1e3


def _thread_usage():
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return r.ru_minflt, r.ru_majflt, r.ru_nvcsw, r.ru_nivcsw


def record_steps(step, batches, n, sync, watch):
    """n steps of `step`, a sync after each (as bench_gpu_train_step.py): one row of FIELDS per step."""
    rows = []
    for i in range(n):
        args = batches[i % len(batches)]
        u0, runs0, gms0 = _thread_usage(), watch.runs, watch.ms
        c0, t0 = time.thread_time(), time.perf_counter()
        step(*args)
        t1, c1 = time.perf_counter(), time.thread_time()
        u1 = _thread_usage()
        sync()
        rows.append(((t1 - t0) * 1e3, (c1 - c0) * 1e3, *(b - a for a, b in zip(u0, u1)), watch.runs - runs0,
                     watch.ms - gms0))
    return np.array(rows, dtype=np.float64)


def describe(name, rows):
    host, cpu = rows[:, 0], rows[:, 1]
    p10, p50, p90 = np.percentile(host, [10, 50, 90])
    slow = host > p50
    lines = [f"  {name:7s} host p10/p50/p90 {p10:.3f}/{p50:.3f}/{p90:.3f} ms; cpu p50 {np.median(cpu):.3f}; "
             f"host-cpu p50 {np.median(host - cpu):.3f} ms"]
    per = ", ".join(f"{f} {rows[:, k].mean():.2f}" for k, f in enumerate(FIELDS) if k >= 2)
    lines.append(f"          per step (mean): {per}")
    if slow.any() and (~slow).any():
        cmp = ", ".join(f"{f} {rows[slow, k].mean():.2f}/{rows[~slow, k].mean():.2f}"
                        for k, f in enumerate(FIELDS) if k >= 1)
        lines.append(f"          slow half / fast half: {cmp}")
    for k, f in enumerate(FIELDS):
        if k >= 1 and rows[:, k].std() > 0:
            lines.append(f"          corr(host, {f}) {np.corrcoef(host, rows[:, k])[0, 1]:+.2f}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="0,1")
    ap.add_argument("--math", choices=("fp32", "tf32"), default="fp32")
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--pin", type=int, default=None)
    ap.add_argument("--no-gc-freeze", action="store_true")
    args = ap.parse_args(argv)
    print(pin_to_cpu(args.pin), flush=True)
    import cupy
    import torch

    import minidl
    from benchmarks.bench_gpu_train_step import MODELS

    tf32 = args.math == "tf32"
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = tf32
    minidl.backends.cudnn.allow_tf32 = minidl.backends.cuda.matmul.allow_tf32 = tf32
    out_dir = os.environ.get("OUT", "/tmp")
    watch = _GCWatch()
    for index in [int(i) for i in args.models.split(",")]:
        name = list(MODELS)[index]
        build, make_batch, opt_name = MODELS[name]
        rng = np.random.default_rng(0)
        host_batches = [make_batch(rng) for _ in range(4)]
        torch.manual_seed(0)
        tmodel = build(torch.nn).cuda()
        model = build(minidl.nn)
        model.load_state_dict({k: v.detach().cpu().numpy() for k, v in tmodel.state_dict().items()})
        model = model.to("cuda")
        if opt_name == "sgd":
            opt = minidl.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            topt = torch.optim.SGD(tmodel.parameters(), lr=0.01, momentum=0.9)
        else:
            opt = minidl.optim.Adam(model.parameters(), lr=1e-3)
            topt = torch.optim.Adam(tmodel.parameters(), lr=1e-3)
        mb = [(minidl.tensor(x, device="cuda"), minidl.tensor(y, device="cuda")) for x, y in host_batches]
        tb = [(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()) for x, y in host_batches]

        def ours(x, y):
            opt.zero_grad()
            loss = minidl.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()

        def theirs(x, y):
            topt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(tmodel(x), y)
            loss.backward()
            topt.step()

        sync = cupy.cuda.Device().synchronize
        for fn, b in ((ours, mb), (theirs, tb)):
            for i in range(10):
                fn(*b[i % 4])
        sync()
        if not args.no_gc_freeze:
            gc.collect()
            gc.freeze()
        got = {"minidl": [], "torch": []}
        for _ in range(args.blocks):
            got["minidl"].append(record_steps(ours, mb, args.steps, sync, watch))
            got["torch"].append(record_steps(theirs, tb, args.steps, sync, watch))
        print(f"{name} ({args.math}), {args.blocks} alternating blocks of {args.steps} steps:")
        tag = name.split(",")[0].replace(" ", "_")
        for fw, blocks in got.items():
            rows = np.concatenate(blocks)
            print(describe(fw, rows))
            print("          block medians: " + " ".join(f"{np.median(b[:, 0]):.3f}" for b in blocks))
            np.savetxt(os.path.join(out_dir, f"jitter_{tag}_{args.math}_{fw}.csv"), rows, delimiter=",",
                       header=",".join(FIELDS), fmt="%.4f")
        print(flush=True)


if __name__ == "__main__":
    main()
