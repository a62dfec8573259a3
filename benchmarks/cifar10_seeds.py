"""Full CIFAR-10 trainings of examples/train_cifar10.py over several seeds: is the accuracy reproducible?

One run of a recipe says little: two seeds of the same 50-epoch recipe differed by 0.4% here. This
script trains the example once per seed (all with the same options), one training per GPU at a time
(two trainings on one GPU slow each other down more than 2x), keeps each run's log in
benchmarks/results/runs/, and writes a table of the final accuracies: the last weights and every
weight average (--ema), each with the mirror-image (flip) and the flip-and-translate test-time
augmentation, per seed and as mean, standard deviation and minimum.

    python benchmarks/cifar10_seeds.py --seeds 0 1 2 3 [--gpus 0 1 2 3] [--commit SHA]
                                       [--tag w96_70ep] [--out benchmarks/results/cifar10_seeds_<tag>.md]
                                       -- [options for train_cifar10.py, e.g. --epochs 50 --ema 0.98]

The data root is the example's: --data after the `--`, else $MINIDL_DATA, else ~/.cache/minidl. The
dataset is decoded once here first, so that the parallel runs all find its cache.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._report import git_commit, write_report  # noqa: E402

RUNS = ROOT / "benchmarks" / "results" / "runs"
ROW = re.compile(r"^(\S.*?)\s+(\d+\.\d+)%\s+(\d+\.\d+)%\s*$")


def parse_log(text: str) -> dict:
    """{"final": {(model, tta): accuracy %}, "train_seconds", "epochs"} of one log."""
    lines = text.splitlines()
    out = {"final": {}, "train_seconds": None, "epochs": 0}
    epoch_seconds = {}  # a resumed run appends to the log: each epoch counts once
    for line in lines:
        m = re.match(r"epoch (\d+): .*train time (\d+\.\d+) s", line)
        if m:
            out["epochs"] = int(m.group(1))
            epoch_seconds[int(m.group(1))] = float(m.group(2))
    if epoch_seconds:
        out["train_seconds"] = sum(epoch_seconds.values())
    if "final test accuracy" in text:
        header = next(i for i, line in enumerate(lines) if line.startswith("final test accuracy"))
        modes = lines[header].split()[3:]
        for line in lines[header + 1:]:
            m = ROW.match(line)
            if not m:
                break
            for mode, value in zip(modes, m.groups()[1:]):
                out["final"][(m.group(1), mode)] = float(value)
    return out



def _gpu_ids(given):
    if given:
        return given
    import cupy

    return list(range(cupy.cuda.runtime.getDeviceCount()))


def run_seeds(seeds, gpus, train_args, tag):
    """Start one training per free GPU until every seed has run; returns {seed: log path}."""
    pending, running, logs = list(seeds), {}, {}
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    while pending or running:
        for gpu in gpus:
            if pending and gpu not in running:
                seed = pending.pop(0)
                log = RUNS / f"cifar10_resnet9_{tag}_seed{seed}_gpu.log"
                cmd = [sys.executable, str(ROOT / "examples" / "train_cifar10.py"), "--device", "cuda",
                       "--seed", str(seed), "--no-progress",
                       "--checkpoint", f"/tmp/minidl_cifar10_seed{seed}.mdl", *train_args]
                print(f"GPU {gpu}: seed {seed} -> {log.relative_to(ROOT)}", flush=True)
                handle = open(log, "a" if "--resume" in train_args else "w")  # a resumed run continues its log
                proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT,
                                        env=dict(env, CUDA_VISIBLE_DEVICES=str(gpu)))
                running[gpu] = (seed, proc, handle)
                logs[seed] = log
        time.sleep(2)
        for gpu, (seed, proc, handle) in list(running.items()):
            if proc.poll() is not None:
                handle.close()
                print(f"GPU {gpu}: seed {seed} finished (exit {proc.returncode})", flush=True)
                del running[gpu]
    return logs


def report(results, train_args, args, gpu_name):
    seeds = sorted(results)
    keys = sorted({k for r in results.values() for k in r["final"]}, key=lambda k: (k[0] != "weights", k))
    lines = [
        "# CIFAR-10 (JPEG copy) ResNet-9: final test accuracy over seeds",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- commit: {git_commit(args.commit)}",
        f"- GPU: {gpu_name}, one training per GPU",
        f"- command: `python benchmarks/cifar10_seeds.py --seeds {' '.join(map(str, seeds))} --tag {args.tag} -- "
        f"{' '.join(train_args)}`",
        f"- logs: `benchmarks/results/runs/cifar10_resnet9_{args.tag}_seed<N>_gpu.log`",
        "",
        "Test accuracy (%) of the model after the last epoch: its last weights and each exponential moving",
        "average of the weights (EMA d: decay d per update), evaluated with the mirror-image (flip) and the",
        "flip-and-translate test-time augmentation. Training time: the sum of the epochs' training time.",
        "",
        "| seed | epochs | training time (s) | " + " | ".join(f"{m}, {t}" for m, t in keys) + " |",
        "| ---: | ---: | ---: | " + " | ".join("---:" for _ in keys) + " |",
    ]
    for seed in seeds:
        r = results[seed]
        cells = [f"{r['final'][k]:.2f}" if k in r["final"] else "-" for k in keys]
        seconds = f"{r['train_seconds']:.0f}" if r["train_seconds"] else "-"
        lines.append(f"| {seed} | {r['epochs']} | {seconds} | " + " | ".join(cells) + " |")
    for name, fn in (("mean", statistics.fmean), ("std", statistics.stdev), ("min", min)):
        cells = []
        for k in keys:
            values = [results[s]["final"][k] for s in seeds if k in results[s]["final"]]
            ok = len(values) == len(seeds) and (name != "std" or len(values) > 1)
            cells.append(f"{fn(values):.2f}" if ok else "-")
        lines.append(f"| {name} | | | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    train_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--gpus", type=int, nargs="*", default=None, help="GPU ids to use (default: all)")
    p.add_argument("--tag", default="seeds", help="names the logs: cifar10_resnet9_<tag>_seed<N>_gpu.log")
    p.add_argument("--commit", default=None)
    p.add_argument("--out", default=None, help="default benchmarks/results/cifar10_seeds_<tag>.md")
    p.add_argument("--note", action="append", default=[], help="a line to add under the table (repeatable)")
    p.add_argument("--report-only", action="store_true", help="only rebuild the table from existing logs")
    p.add_argument("--gpu-name", default=None, help="the GPU the logs come from (with --report-only)")
    args = p.parse_args(own)

    RUNS.mkdir(parents=True, exist_ok=True)
    gpu_name = args.gpu_name or "unknown"
    if not args.report_only:
        import minidl
        from minidl.data.datasets import CIFAR10

        gpu_name = minidl.cuda.get_device_name()
        data = train_args[train_args.index("--data") + 1] if "--data" in train_args else None
        for train in (True, False):  # decode (and cache) once, before the parallel runs read it
            CIFAR10(data, train=train, download=True)
        run_seeds(args.seeds, _gpu_ids(args.gpus), train_args, args.tag)
    results = {s: parse_log((RUNS / f"cifar10_resnet9_{args.tag}_seed{s}_gpu.log").read_text()) for s in args.seeds}
    text = report(results, train_args, args, gpu_name) + "".join(f"\n{line}\n" for line in args.note)
    write_report(text, args.out or ROOT / "benchmarks" / "results" / f"cifar10_seeds_{args.tag}.md")


if __name__ == "__main__":
    main()
