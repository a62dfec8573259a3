"""Worker processes for DataLoader(num_workers=N), as torch.utils.data does it.

Each worker is a process holding the dataset and the collate function. The main process sends it
(epoch, batch number, sample indices) on its own task queue, round-robin over the workers, keeping
at most `prefetch_factor` batches per worker in flight; the worker sends back (epoch, batch number,
collated arrays or the error) on one shared result queue, and the main process yields the batches
in batch order. So the batches are exactly those of num_workers=0 (the same sample order), and
only the time they take changes.

Each worker seeds minidl's generator, NumPy's global one and Python's `random` with
base_seed + worker_id (base_seed drawn once per epoch, or per loader with persistent_workers), so
random per-sample transforms differ between workers and are reproducible under a seeded loader.
"""
from __future__ import annotations

import multiprocessing
import pickle
import queue
import random as _pyrandom
import traceback
from collections import namedtuple

import numpy as np

WorkerInfo = namedtuple("WorkerInfo", ["id", "num_workers", "seed", "dataset"])
_worker_info = None


def get_worker_info():
    """Inside a DataLoader worker: WorkerInfo(id, num_workers, seed, dataset); in the main process: None."""
    return _worker_info


def _worker_loop(dataset, collate, tasks, results, worker_id, num_workers, seed, worker_init_fn):
    global _worker_info
    from .. import random as minidl_random

    # The CPU streams only: a worker is a forked process, and CUDA cannot be touched in the child of a process that
    # initialised it (seeding CuPy's generator there fails with cudaErrorInitializationError; torch's worker seeding
    # leaves CUDA alone in a forked child as well)
    minidl_random.default_generator.manual_seed(seed)
    np.random.seed(seed % 2**32)
    _pyrandom.seed(seed)
    _worker_info = WorkerInfo(worker_id, num_workers, seed, dataset)
    try:
        if worker_init_fn is not None:
            worker_init_fn(worker_id)
    except Exception:  # noqa: BLE001 - reported to the main process with its traceback
        results.put((None, None, None, f"worker_init_fn failed in worker {worker_id}:\n{traceback.format_exc()}"))
        return
    while True:
        task = tasks.get()
        if task is None:
            return
        epoch, number, indices = task
        try:
            # Pickled here, not by the queue's feeder thread: a batch that cannot be pickled becomes
            # an error message for the main process instead of a batch that never arrives.
            payload = pickle.dumps(collate([dataset[i] for i in indices]), protocol=pickle.HIGHEST_PROTOCOL)
            results.put((epoch, number, payload, None))
        except Exception:  # noqa: BLE001
            results.put((epoch, number, None, f"DataLoader worker {worker_id} failed on batch {number} "
                                              f"(indices {list(indices)[:8]}...):\n{traceback.format_exc()}"))


def check_picklable(dataset, collate_fn, worker_init_fn, context_name):
    """With the spawn/forkserver start methods the dataset travels to each worker by pickle: say
    clearly which object cannot, before any process starts."""
    for what, obj in (("dataset", dataset), ("collate_fn", collate_fn), ("worker_init_fn", worker_init_fn)):
        try:
            pickle.dumps(obj)
        except Exception as e:  # noqa: BLE001 - PicklingError, AttributeError, TypeError ...
            raise TypeError(
                f"DataLoader(num_workers>0, multiprocessing_context={context_name!r}): the {what} "
                f"({type(obj).__name__}) cannot be pickled to send it to the worker processes: {e}. "
                "Define its functions at module level (not lambdas or local functions), use the 'fork' "
                "context (Linux), or num_workers=0."
            ) from None


class WorkerPool:
    """num_workers processes serving batches for one loader (one epoch, or all with persistent_workers)."""

    def __init__(self, dataset, collate, num_workers, base_seed, worker_init_fn, prefetch_factor, context, timeout):
        ctx_name = context if isinstance(context, str) else getattr(context, "_name", None)
        if context is None:
            ctx_name = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        ctx = multiprocessing.get_context(ctx_name) if isinstance(context, (str, type(None))) else context
        if ctx_name != "fork":
            check_picklable(dataset, collate, worker_init_fn, ctx_name)
        self.num_workers, self.prefetch, self.timeout = num_workers, max(1, int(prefetch_factor)), timeout
        self.results = ctx.Queue()
        self.tasks = [ctx.Queue() for _ in range(num_workers)]
        self.procs = []
        for wid in range(num_workers):
            p = ctx.Process(target=_worker_loop, daemon=True,
                            args=(dataset, collate, self.tasks[wid], self.results, wid, num_workers,
                                  base_seed + wid, worker_init_fn))
            p.start()
            self.procs.append(p)
        self.epoch = 0

    def run_epoch(self, batches):
        """Yield the collated batches of `batches` (index lists, taken from the iterable only as the prefetch needs
        them: a sampler may be endless), in order."""
        self.epoch += 1
        epoch, pending = self.epoch, iter(batches)
        sent, buffered, next_out = 0, {}, 0

        def send():   # the next batch to a worker; False when there is none left
            nonlocal sent
            indices = next(pending, None)
            if indices is None:
                return False
            self.tasks[sent % self.num_workers].put((epoch, sent, indices))
            sent += 1
            return True

        more = True
        while more and sent < self.prefetch * self.num_workers:
            more = send()
        while next_out < sent:
            while next_out not in buffered:
                try:
                    got_epoch, number, batch, error = self.results.get(timeout=self.timeout or 5.0)
                except queue.Empty:
                    if not self.procs:   # shut down (after an error): nobody will ever answer
                        raise RuntimeError("DataLoader: the worker processes were shut down") from None
                    dead = [i for i, p in enumerate(self.procs) if not p.is_alive()]
                    if dead or self.timeout:
                        self.shutdown()
                        raise RuntimeError(f"DataLoader: worker(s) {dead} exited unexpectedly" if dead
                                           else f"DataLoader: timed out after {self.timeout} s waiting for a batch") from None
                    continue
                if error is not None:
                    self.shutdown()
                    raise RuntimeError(error)
                if got_epoch == epoch:  # results of an abandoned earlier epoch are dropped
                    buffered[number] = pickle.loads(batch)
            yield buffered.pop(next_out)
            next_out += 1
            if more:
                more = send()

    def shutdown(self):
        for q in self.tasks:
            try:
                q.put(None)
            except (OSError, ValueError):
                pass
        for p in self.procs:
            p.join(timeout=1.0)
            if p.is_alive():
                p.terminate()
        self.procs = []

    def __del__(self):
        if getattr(self, "procs", None):
            self.shutdown()
