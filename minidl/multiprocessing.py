"""torch.multiprocessing's names over Python's multiprocessing, for `python -m minidl.run`.

A program started by the runner finds `torch` through an import hook that lives in its process. A child
made by the "spawn" or "forkserver" start methods starts a fresh interpreter that re-imports the program
without the hook, fails on `import torch`, and (in torch's patterns) leaves the parent waiting forever. So
here every context is a "fork" one (Linux's default): the child inherits the hook. CUDA cannot be used in
a forked child (as in torch); the CPU programs that use torch.multiprocessing (Hogwild training, data
workers) run as they are.
"""
from __future__ import annotations

import multiprocessing as _mp
from multiprocessing import *  # noqa: F401,F403

_FORK = _mp.get_context("fork")
Process, Queue, SimpleQueue, Pool, Manager, Event, Lock, Value, Array = (
    _FORK.Process, _FORK.Queue, _FORK.SimpleQueue, _FORK.Pool, _FORK.Manager, _FORK.Event, _FORK.Lock, _FORK.Value,
    _FORK.Array)


def get_context(method=None):
    return _FORK


def set_start_method(method=None, force=False):
    """Accepted and ignored: children are forked (see the module docstring)."""


def get_start_method(allow_none=False):
    return "fork"


def set_sharing_strategy(strategy):
    """Accepted (tensors reach children through fork's copy-on-write memory)."""


def get_all_sharing_strategies():
    return {"file_descriptor", "file_system"}


class ProcessRaisedException(Exception):
    pass


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """torch.multiprocessing.spawn: run fn(i, *args) in nprocs children (forked here); join waits for all
    and raises if one failed."""
    procs = [_FORK.Process(target=fn, args=(i,) + tuple(args), daemon=daemon) for i in range(nprocs)]
    for p in procs:
        p.start()
    if not join:
        return procs
    for p in procs:
        p.join()
    failed = [i for i, p in enumerate(procs) if p.exitcode != 0]
    if failed:
        raise ProcessRaisedException(f"torch.multiprocessing.spawn: process {failed[0]} exited with code "
                                     f"{procs[failed[0]].exitcode}")
    return None
