"""What every program here does first: parse --device/--out, join the process group, pick the GPU."""
import argparse
import os

import minidl
import minidl.distributed as dist


def setup(extra=None):
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--out", default=None)
    for name, kw in (extra or {}).items():
        p.add_argument(name, **kw)
    args = p.parse_args()
    if args.device == "cuda":
        minidl.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl")
        args.device = f"cuda:{minidl.cuda.current_device()}"
    else:
        dist.init_process_group("mpi")
    return args, dist.get_rank(), dist.get_world_size()
