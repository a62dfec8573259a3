"""The two engines under minidl.distributed: NCCL for GPU arrays, MPI for CPU arrays.

Each backend works on raw arrays (NumPy for MPI, CuPy for NCCL) in place, and returns a Work: the handle of
a collective in flight. The functions in minidl.distributed check the tensors and pick the backend by device.

- MPI runs through mpi4py. Each collective is issued non-blocking (MPI_Iallreduce, ...), so that DDP can
  go on with the backward pass while a bucket is reduced, and so that Work.wait can give up after the
  process group's timeout with an error that names the rank and the op, instead of hanging.
- NCCL runs through CuPy's binding of NCCL, on a CUDA stream. Like torch's, its Work.wait makes the
  current stream wait for the collective (the host does not block), so that a whole step, NCCL calls
  included, can be captured in a CUDA graph. A watchdog thread stops the process if a collective has not
  finished after the timeout (torch's NCCL watchdog does the same): the launcher then stops the others.
"""
from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np

from .. import _dtypes


class DistBackendError(RuntimeError):
    """A collective failed or did not finish in time (torch.distributed.DistBackendError)."""


class ReduceOp:
    """The reductions of all_reduce and reduce_scatter (torch.distributed.ReduceOp)."""
    SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR = "sum", "product", "min", "max", "avg", "band", "bor", "bxor"

    class RedOpType:   # torch.distributed.ReduceOp.RedOpType.SUM, ... (the same values)
        SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR = "sum", "product", "min", "max", "avg", "band", "bor", "bxor"


_OPS = ("sum", "product", "min", "max", "avg", "band", "bor", "bxor")


def _describe(op, arrays):
    a = arrays[0]
    return f"{op} of {a.size} {a.dtype} element(s)"


class Work:
    """A collective in flight (torch.distributed.Work): wait(), is_completed()."""

    def __init__(self, backend, what, finish=None):
        self._backend, self._what, self._finish, self._done = backend, what, finish, False

    def is_completed(self) -> bool:
        return self._done or self._poll()

    def wait(self, timeout=None) -> bool:
        if not self._done:
            self._wait(timeout)
            self._done = True
            if self._finish is not None:
                self._finish()
        return True

    def _poll(self):
        return True

    def _wait(self, timeout):
        pass


# ------------------------------------------------------------------------------------------------------------
# MPI
# ------------------------------------------------------------------------------------------------------------


class _MPIWork(Work):
    def __init__(self, backend, what, request, finish=None):
        super().__init__(backend, what, finish)
        self._request = request

    def _poll(self):
        return bool(self._request.Test())

    def _wait(self, timeout):
        timeout = self._backend.timeout if timeout is None else float(getattr(timeout, "total_seconds", lambda: timeout)())
        deadline, pause = time.monotonic() + timeout, 0.0
        while not self._request.Test():           # MPI progresses inside Test
            if time.monotonic() > deadline:
                raise DistBackendError(
                    f"minidl.distributed: rank {self._backend.rank}: {self._what} over mpi did not finish within "
                    f"{timeout:.0f} s. Another rank has stopped, or is not calling the same collective in the "
                    "same order (every rank must make the same collective calls)."
                )
            if pause:
                time.sleep(pause)
            pause = min(1e-3, pause * 2 or 1e-6)


class MPIBackend:
    """Collectives on NumPy arrays through MPI (mpi4py). The processes must be started by mpiexec (the
    launcher does that when mpi4py is installed)."""

    name = "mpi"

    def __init__(self, timeout: float):
        try:
            from mpi4py import MPI
        except ImportError as exc:
            raise RuntimeError(
                "minidl.distributed: the CPU backend runs on MPI, and mpi4py is not installed. "
                "pip install 'minidl[distributed]' (mpi4py and the mpich wheel), then start the processes with "
                "python -m minidl.distributed.run --nproc-per-node N script.py"
            ) from exc
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD.Dup()
        self.rank, self.size, self.timeout = self.comm.Get_rank(), self.comm.Get_size(), float(timeout)
        self._ops = {"sum": MPI.SUM, "avg": MPI.SUM, "product": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX,
                     "band": MPI.BAND, "bor": MPI.BOR, "bxor": MPI.BXOR}

    # Half floats: MPI has no 16-bit float type; they travel as float32 and come back rounded.
    @staticmethod
    def _wire(a):
        return a.astype(np.float32) if a.dtype in _dtypes.HALF_DTYPES else a

    def all_reduce(self, a, op):
        buf = self._wire(a)
        req = self.comm.Iallreduce(self.MPI.IN_PLACE, buf, op=self._ops[op])

        def finish():
            if op == "avg":
                np.divide(buf, self.size, out=buf, casting="unsafe")
            if buf is not a:
                a[...] = buf
        return _MPIWork(self, f"all_reduce ({_describe(op, [a])})", req, finish)

    def broadcast(self, a, src):
        buf = self._wire(a)
        req = self.comm.Ibcast(buf, root=src)

        def finish():
            if buf is not a:
                a[...] = buf
        return _MPIWork(self, f"broadcast from rank {src} ({_describe('copy', [a])})", req, finish)

    def all_gather(self, out, a):
        send, recv = self._wire(a), self._wire(out)
        req = self.comm.Iallgather(send, recv)

        def finish():
            if recv is not out:
                out[...] = recv
        return _MPIWork(self, f"all_gather ({_describe('copy', [a])} from each rank)", req, finish)

    def reduce_scatter(self, out, a, op):
        send, recv = self._wire(a), self._wire(out)
        req = self.comm.Ireduce_scatter_block(send, recv, op=self._ops[op])

        def finish():
            if op == "avg":
                np.divide(recv, self.size, out=recv, casting="unsafe")
            if recv is not out:
                out[...] = recv
        return _MPIWork(self, f"reduce_scatter ({_describe(op, [a])})", req, finish)

    def barrier(self):
        return _MPIWork(self, "barrier", self.comm.Ibarrier())

    def close(self):
        self.comm.Free()


# ------------------------------------------------------------------------------------------------------------
# NCCL
# ------------------------------------------------------------------------------------------------------------

# ncclDataType_t and ncclRedOp_t, from nccl.h
_NCCL_DTYPES = {np.dtype(np.int8): 0, np.dtype(np.uint8): 1, np.dtype(np.int32): 2, np.dtype(np.uint32): 3,
                np.dtype(np.int64): 4, np.dtype(np.uint64): 5, np.dtype(np.float16): 6, np.dtype(np.float32): 7,
                np.dtype(np.float64): 8, _dtypes.bfloat16: 9, np.dtype(np.bool_): 1}
_NCCL_OPS = {"sum": 0, "product": 1, "max": 2, "min": 3, "avg": 4}


class _NCCLWork(Work):
    def __init__(self, backend, what, event, finish=None):
        super().__init__(backend, what, finish)
        self._event = event

    def _poll(self):
        return self._event.done

    def _wait(self, timeout):
        import cupy
        cupy.cuda.get_current_stream().wait_event(self._event)   # the GPU waits; the host goes on, as torch


class NCCLBackend:
    """Collectives on CuPy arrays through NCCL, one GPU per process (the current device)."""

    name = "nccl"

    def __init__(self, rank: int, size: int, store, timeout: float):
        import cupy
        from cupy.cuda import nccl

        self.cupy, self.nccl = cupy, nccl
        self.rank, self.size, self.timeout = rank, size, float(timeout)
        if rank == 0:
            uid = nccl.get_unique_id()
            store.set("nccl_unique_id", uid)
        else:
            uid = store.get("nccl_unique_id")
        self.device = cupy.cuda.Device().id
        self.comm = nccl.NcclCommunicator(size, uid, rank)
        self._inflight: list = []            # (event, what, started) for the watchdog
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, daemon=True, name="minidl-nccl-watchdog")
        self._watchdog.start()
        _abort_on_uncaught_exception(self)

    # Each collective runs on `stream` (the current one unless DDP passes its side stream), and records an
    # event there that Work.wait and the watchdog use.
    def _launch(self, what, stream, call, finish=None):
        from .. import _device

        stream = stream or self.cupy.cuda.get_current_stream()
        call(stream.ptr)
        event = self.cupy.cuda.Event(disable_timing=True)
        event.record(stream)
        if not _device.is_capturing():       # inside a capture there is nothing to watch: it runs at replay
            with self._lock:
                self._inflight.append((event, what, time.monotonic()))
        return _NCCLWork(self, what, event, finish)

    @staticmethod
    def _dtype(a, op):
        try:
            return _NCCL_DTYPES[np.dtype(a.dtype)]
        except KeyError:
            raise TypeError(f"minidl.distributed: {op}: NCCL cannot carry {a.dtype} arrays") from None

    def all_reduce(self, a, op, stream=None):
        if op not in _NCCL_OPS:
            raise ValueError(f"all_reduce: ReduceOp {op.upper()} is not supported by NCCL (use SUM, PRODUCT, MIN, MAX or AVG)")
        dt = self._dtype(a, "all_reduce")
        return self._launch(f"all_reduce ({_describe(op, [a])})", stream,
                            lambda s: self.comm.allReduce(a.data.ptr, a.data.ptr, a.size, dt, _NCCL_OPS[op], s))

    def broadcast(self, a, src, stream=None):
        dt = self._dtype(a, "broadcast")
        return self._launch(f"broadcast from rank {src} ({_describe('copy', [a])})", stream,
                            lambda s: self.comm.broadcast(a.data.ptr, a.data.ptr, a.size, dt, src, s))

    def all_gather(self, out, a, stream=None):
        dt = self._dtype(a, "all_gather")
        return self._launch(f"all_gather ({_describe('copy', [a])} from each rank)", stream,
                            lambda s: self.comm.allGather(a.data.ptr, out.data.ptr, a.size, dt, s))

    def reduce_scatter(self, out, a, op, stream=None):
        if op not in _NCCL_OPS:
            raise ValueError(f"reduce_scatter: ReduceOp {op.upper()} is not supported by NCCL")
        dt = self._dtype(a, "reduce_scatter")
        return self._launch(f"reduce_scatter ({_describe(op, [a])})", stream,
                            lambda s: self.comm.reduceScatter(a.data.ptr, out.data.ptr, out.size, dt, _NCCL_OPS[op], s))

    def barrier(self):
        one = self.cupy.ones(1, dtype=self.cupy.float32)
        work = self.all_reduce(one, "sum")
        self.cupy.cuda.get_current_stream().synchronize()
        return work

    def _watch(self):
        while not self._stop.wait(0.5):
            with self._lock:
                self._inflight = [w for w in self._inflight if not w[0].done]
                late = [w for w in self._inflight if time.monotonic() - w[2] > self.timeout]
            if late:
                _, what, started = late[0]
                sys.stderr.write(
                    f"minidl.distributed: rank {self.rank}: {what} over nccl did not finish within {self.timeout:.0f} s. "
                    "Another rank has stopped, or is not calling the same collective in the same order. "
                    "Aborting the communicator and stopping this process (as torch's NCCL watchdog does).\n")
                sys.stderr.flush()
                try:
                    self.comm.abort()
                finally:
                    os._exit(1)

    def close(self):
        self._stop.set()
        self.cupy.cuda.get_current_stream().synchronize()
        self.comm.destroy()


def _abort_on_uncaught_exception(backend):
    """A rank that dies of an exception must not hang at exit: destroying an NCCL communicator waits for the
    other ranks, which wait for this one. So an uncaught exception prints its traceback, aborts the
    communicator and ends the process at once (exit code 1); the launcher then stops the others."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        sys.stderr.write(f"minidl.distributed: rank {backend.rank} stopped by {kind.__name__}; aborting its NCCL "
                         "communicator so that the other ranks are stopped rather than left waiting\n")
        sys.stderr.flush()
        try:
            backend.comm.abort()
        finally:
            os._exit(1)

    sys.excepthook = hook
