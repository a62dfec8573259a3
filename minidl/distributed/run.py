"""python -m minidl.distributed.run --nproc-per-node N script.py [args]: start N processes of a script, as torchrun.

Each process gets torchrun's environment: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
MASTER_ADDR, MASTER_PORT (and OMP_NUM_THREADS=1 unless set, as torchrun). The script calls
minidl.distributed.init_process_group() and, on GPUs, minidl.cuda.set_device(int(os.environ["LOCAL_RANK"])).

How the processes are started:
- with mpiexec (MPICH's, from the mpich wheel) when mpi4py is installed, so that the CPU backend (MPI) can
  connect them; each process runs the script under minidl.distributed._worker, which turns an exception or
  a non-zero exit into MPI_Abort, and mpiexec then stops the others;
- otherwise (or with --start spawn) as plain child processes; the GPU backend (NCCL) needs nothing more.
Either way, when one process fails the others are stopped, and the launcher exits with the failed process's
code after saying which rank it was. One machine only (--nnodes 1).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid

NVLS_OFF = {"NCCL_NVLS_ENABLE": "0"}   # NVLink multicast stays off (it can put shared GPUs out of service)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mpiexec():
    """MPICH's mpiexec beside this Python (the mpich wheel puts it there), or on PATH; None without mpi4py."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return None
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else shutil.which("mpiexec")


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m minidl.distributed.run", allow_abbrev=False,
        description="Start N processes of a training script for data-parallel training (torchrun's contract).",
        epilog="Example: python -m minidl.distributed.run --nproc-per-node 2 examples/train_cifar10.py --epochs 4")
    p.add_argument("--nproc-per-node", "--nproc_per_node", dest="nproc", default="1",
                   help="processes to start: a number, 'gpu' (one per GPU) or 'cpu' (one per core); default 1")
    p.add_argument("--nnodes", default="1", help="machines taking part; minidl runs on one (1)")
    p.add_argument("--node-rank", "--node_rank", type=int, default=0, help="must be 0 (one machine)")
    p.add_argument("--master-addr", "--master_addr", default="127.0.0.1", help="address of rank 0's store")
    p.add_argument("--master-port", "--master_port", type=int, default=None,
                   help="port of rank 0's store (default: a free port)")
    p.add_argument("--standalone", action="store_true", help="accepted for torchrun's command lines (one machine)")
    p.add_argument("--start", choices=("auto", "mpiexec", "spawn"), default="auto",
                   help="how to start the processes: mpiexec (needed by the CPU backend), spawn, or auto (mpiexec "
                        "when mpi4py is installed); default auto")
    p.add_argument("-m", "--module", action="store_true", help="run the target as a module (python -m)")
    p.add_argument("--no-python", "--no_python", action="store_true", help="run the target as a program, not through Python")
    p.add_argument("script", help="the training script (or module with -m)")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    args = p.parse_args(argv)
    if str(args.nnodes) not in ("1", "1:1"):
        p.error(f"--nnodes {args.nnodes}: minidl.distributed runs on one machine (--nnodes 1)")
    if args.node_rank != 0:
        p.error("--node-rank must be 0: minidl.distributed runs on one machine")
    args.nproc = _nproc(p, args.nproc)
    return args


def _nproc(p, value):
    if value == "cpu":
        return os.cpu_count() or 1
    if value in ("gpu", "auto"):
        from .. import cuda
        n = cuda.device_count()
        if n == 0 and value == "gpu":
            p.error("--nproc-per-node gpu: no GPU is visible")
        return n or os.cpu_count() or 1
    try:
        n = int(value)
    except ValueError:
        p.error(f"--nproc-per-node must be a number, 'gpu' or 'cpu', got {value!r}")
    if n < 1:
        p.error(f"--nproc-per-node must be at least 1, got {n}")
    return n


def _environment(args, rank):
    env = dict(os.environ)
    env.update(NVLS_OFF)
    env.update(RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0", ROLE_RANK=str(rank),
               WORLD_SIZE=str(args.nproc), LOCAL_WORLD_SIZE=str(args.nproc), ROLE_WORLD_SIZE=str(args.nproc),
               MASTER_ADDR=args.master_addr, MASTER_PORT=str(args.master_port), TORCHELASTIC_RUN_ID=args.run_id)
    if args.nproc > 1 and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = "1"       # as torchrun: N processes must not each take every core
    return env


def _target(args, wrapped):
    if args.no_python:
        return [args.script, *args.script_args]
    head = [sys.executable, "-u"]
    if wrapped:
        head += ["-m", "minidl.distributed._worker"]
    return head + (["-m", args.script] if args.module else [args.script]) + list(args.script_args)


def main(argv=None) -> int:
    args = parse_args(argv)
    args.master_port = args.master_port or _free_port()
    args.run_id = uuid.uuid4().hex[:12]
    mpiexec = _mpiexec() if args.start in ("auto", "mpiexec") else None
    if args.start == "mpiexec" and mpiexec is None:
        print("minidl.distributed.run: --start mpiexec needs mpi4py and MPICH's mpiexec "
              "(pip install 'minidl[distributed]')", file=sys.stderr)
        return 2
    if mpiexec is not None and not args.no_python:
        return _run_mpiexec(args, mpiexec)
    return _run_spawn(args)


def _run_mpiexec(args, mpiexec):
    # MPMD form, one block per rank, so that each process gets its own RANK/LOCAL_RANK (MPI's rank i is block i).
    cmd = [mpiexec]
    for rank in range(args.nproc):
        if rank:
            cmd.append(":")
        cmd += ["-n", "1"]
        for k, v in _environment(args, rank).items():
            if k not in os.environ or os.environ[k] != v:
                cmd += ["-env", k, v]
        cmd += _target(args, wrapped=True)
    env = dict(os.environ, **NVLS_OFF)
    proc = subprocess.Popen(cmd, env=env)
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        code = proc.wait()
    if code != 0:
        print(f"minidl.distributed.run: a process failed (exit code {code}); mpiexec stopped the others "
              "(its report above names the rank)", file=sys.stderr)
    return code


def _run_spawn(args):
    procs = [subprocess.Popen(_target(args, wrapped=False), env=_environment(args, r)) for r in range(args.nproc)]
    failed = None
    try:
        while failed is None and any(p.poll() is None for p in procs):
            for rank, p in enumerate(procs):
                if p.poll() not in (None, 0):
                    failed = (rank, p.returncode)
                    break
            time.sleep(0.05)
        if failed is None:
            failed = next(((r, p.returncode) for r, p in enumerate(procs) if p.returncode), None)
    except KeyboardInterrupt:
        failed = (None, 130)
    running = [p for p in procs if p.poll() is None]
    for p in running:
        p.terminate()
    deadline = time.monotonic() + 10
    for p in running:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
    if failed is None:
        return 0
    rank, code = failed
    code = code if code > 0 else 128 - code        # killed by a signal: the shell's convention
    who = "interrupted" if rank is None else f"rank {rank} (local rank {rank}) exited with code {code}"
    print(f"minidl.distributed.run: {who}; stopped the other {len(running)} process(es)", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
