"""minidl.distributed: several processes training one model, with torch.distributed's names.

One process per GPU (or per CPU worker), started by the launcher:

    python -m minidl.distributed.run --nproc-per-node 2 train.py

Each process calls init_process_group(), which reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from
the environment the launcher set (torchrun's contract), and then the collectives:

    all_reduce(t, op=ReduceOp.SUM)    every rank ends with the sum of every rank's t
    broadcast(t, src=0)               every rank ends with rank 0's t
    all_gather(list, t)               every rank ends with every rank's t
    reduce_scatter(out, list)         rank r ends with the sum of every rank's list[r]
    barrier()                         no rank goes on before every rank got here

The engines underneath are real libraries: NCCL (through CuPy) for GPU tensors, MPI (through mpi4py) for
CPU tensors. The backend follows the tensor's device, as torch's default does; 'gloo', torch's CPU backend,
is accepted as a name for minidl's CPU backend, so that torch programs run unmodified.

nn.parallel.DistributedDataParallel and data.distributed.DistributedSampler build on this; tutorial 10 shows
how an all-reduce works inside (a ring, simulated in NumPy).
"""
from __future__ import annotations

import datetime
import os

import numpy as np

from .. import _device, _layout
from ._backends import DistBackendError, MPIBackend, NCCLBackend, ReduceOp, Work, _OPS

__all__ = [
    "ReduceOp", "Work", "DistBackendError", "init_process_group", "destroy_process_group", "is_available",
    "is_initialized", "is_mpi_available", "is_nccl_available", "is_gloo_available", "is_torchelastic_launched",
    "get_rank", "get_world_size", "get_backend", "barrier", "all_reduce", "broadcast", "all_gather",
    "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "new_group", "GroupMember", "group",
]

DEFAULT_TIMEOUT = datetime.timedelta(minutes=10)   # torch's default for NCCL is 10 minutes too


class _World:
    def __init__(self, rank, size, backend_name, backends, store, timeout):
        self.rank, self.size, self.backend_name = rank, size, backend_name
        self.backends, self.store, self.timeout = backends, store, timeout


_world: _World | None = None


class GroupMember:
    """torch.distributed.GroupMember: WORLD names the default group (the only one minidl has)."""
    WORLD = "WORLD"
    NON_GROUP_MEMBER = "NON_GROUP_MEMBER"


class group:  # noqa: N801 (torch's name)
    WORLD = GroupMember.WORLD


def is_available() -> bool:
    return True


def is_mpi_available() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


def is_gloo_available() -> bool:
    """minidl has no Gloo: 'gloo' is served by the MPI backend, so this answers whether that one is there."""
    return is_mpi_available()


def is_nccl_available() -> bool:
    if _device.cuda_unavailable_reason() is not None:
        return False
    try:
        from cupy.cuda import nccl
    except ImportError:
        return False
    return bool(getattr(nccl, "available", True))


def is_torchelastic_launched() -> bool:
    """True in a process started by the launcher (python -m minidl.distributed.run), as torch's for torchrun."""
    return "TORCHELASTIC_RUN_ID" in os.environ


def is_initialized() -> bool:
    return _world is not None


def _require(op):
    if _world is None:
        raise ValueError(
            f"{op}: the default process group has not been initialized; call "
            "minidl.distributed.init_process_group() first (in a process started by "
            "python -m minidl.distributed.run --nproc-per-node N script.py)")
    return _world


def _check_group(op, grp):
    if grp not in (None, GroupMember.WORLD):
        raise NotImplementedError(f"{op}: minidl has one process group, the world; pass group=None")


def _env_int(name, op):
    value = os.environ.get(name)
    if value is None:
        raise ValueError(
            f"{op}: environment variable {name} expected, but not set. Start the processes with the launcher, "
            "python -m minidl.distributed.run --nproc-per-node N script.py, which sets RANK, WORLD_SIZE, "
            "MASTER_ADDR and MASTER_PORT (or pass rank= and world_size= and set MASTER_ADDR/MASTER_PORT yourself)")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{op}: environment variable {name} must be an integer, got {value!r}") from None


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", pg_options=None, device_id=None):
    """Join the process group. backend: 'nccl' (GPU tensors), 'mpi' (CPU tensors; 'gloo' is accepted for it),
    'cpu:gloo,cuda:nccl' or None (both, each where it can run: the backend follows the tensor's device).
    init_method 'env://' (the default) reads the launcher's variables. timeout: how long a collective may
    wait for the other ranks before it raises (a datetime.timedelta; 10 minutes by default)."""
    global _world
    op = "init_process_group"
    if _world is not None:
        raise RuntimeError(f"{op}: trying to initialize the default process group twice")
    if init_method not in (None, "env://"):
        raise NotImplementedError(f"{op}: init_method={init_method!r}: minidl reads the environment only (env://)")
    if timeout is None:
        timeout = DEFAULT_TIMEOUT
    if not isinstance(timeout, datetime.timedelta):
        raise TypeError(f"{op}: timeout must be a datetime.timedelta, got {type(timeout).__name__}")
    seconds = timeout.total_seconds()
    wanted = _parse_backend(op, backend)

    mpi = None
    if "cpu" in wanted and (wanted["cpu"] or is_mpi_available()):
        mpi = MPIBackend(seconds)       # raises, naming the fix, when backend='mpi'/'gloo' and mpi4py is missing
    if rank < 0:
        rank = _env_int("RANK", op) if ("RANK" in os.environ or mpi is None) else mpi.rank
    if world_size < 0:
        world_size = _env_int("WORLD_SIZE", op) if ("WORLD_SIZE" in os.environ or mpi is None) else mpi.size
    if not 0 <= rank < world_size:
        raise ValueError(f"{op}: rank {rank} is outside 0..{world_size - 1} (world_size={world_size})")
    if mpi is not None and (mpi.size, mpi.rank) != (world_size, rank):
        if wanted["cpu"]:
            raise RuntimeError(
                f"{op}(backend='mpi'): this is rank {rank} of {world_size}, but MPI sees rank {mpi.rank} of "
                f"{mpi.size}: the processes were not started by mpiexec. Use the launcher, python -m "
                "minidl.distributed.run --nproc-per-node N script.py (without --start spawn), which starts them "
                "through mpiexec when mpi4py is installed")
        mpi.close()
        mpi = None                        # backend=None: no CPU collectives in this world; said when one is used

    backends, tcp = {}, None
    if mpi is not None:
        backends["cpu"] = mpi
    if "cuda" in wanted and (wanted["cuda"] or is_nccl_available()):
        if not is_nccl_available():
            raise RuntimeError(f"{op}(backend='nccl'): NCCL needs a GPU and CuPy: {_device.cuda_unavailable_reason() or 'cupy.cuda.nccl is missing'}")
        from ._store import TCPStore

        addr = os.environ.get("MASTER_ADDR")
        if addr is None:
            raise ValueError(f"{op}: environment variable MASTER_ADDR expected, but not set (the launcher sets it)")
        if device_id is not None:
            _device.require_cuda(op).cuda.Device(_device.Device(device_id).index).use()
        tcp = store if store is not None else TCPStore(addr, _env_int("MASTER_PORT", op), rank == 0, seconds)
        backends["cuda"] = NCCLBackend(rank, world_size, tcp, seconds)
    name = backend if isinstance(backend, str) else ",".join(f"{d}:{b.name}" for d, b in backends.items())
    _world = _World(rank, world_size, name, backends, tcp, seconds)


def _parse_backend(op, backend):
    """{'cpu': True/False, 'cuda': True/False}: which devices get a backend, True where the user named it."""
    if backend is None:
        return {"cpu": False, "cuda": False}
    if not isinstance(backend, str):
        raise TypeError(f"{op}: backend must be a string such as 'nccl' or 'mpi', got {backend!r}")
    wanted = {}
    for part in backend.lower().split(","):
        device, _, name = part.rpartition(":")
        if name in ("mpi", "gloo"):
            wanted["cpu"] = True
        elif name == "nccl":
            wanted["cuda"] = True
        else:
            raise ValueError(f"{op}: unknown backend {name!r}: minidl has 'nccl' (GPU) and 'mpi' (CPU; 'gloo' names it too)")
        if device and device not in ("cpu", "cuda"):
            raise ValueError(f"{op}: unknown device {device!r} in backend {backend!r}")
    return wanted


def destroy_process_group(group=None):
    global _world
    _check_group("destroy_process_group", group)
    world = _require("destroy_process_group")
    for b in world.backends.values():
        b.close()
    if world.store is not None:
        world.store.close()
    _world = None


def get_rank(group=None) -> int:
    _check_group("get_rank", group)
    return _require("get_rank").rank


def get_world_size(group=None) -> int:
    _check_group("get_world_size", group)
    return _require("get_world_size").size


def get_backend(group=None) -> str:
    _check_group("get_backend", group)
    return _require("get_backend").backend_name


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False):
    raise NotImplementedError("new_group: minidl.distributed has one process group, the world (no subgroups yet)")


def _backend_for(op, *tensors):
    world = _require(op)
    from ..autograd.tensor import Tensor

    device = None
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}: expected a Tensor, got {type(t).__name__}")
        if device is None:
            device = t.device.type
        elif t.device.type != device:
            raise ValueError(f"{op}: all tensors must be on one device, got {device} and {t.device.type}")
    if device == "cuda" and tensors[0].device.index != _device.require_cuda(op).cuda.Device().id:
        raise ValueError(
            f"{op}: the tensor is on {tensors[0].device} but this process's current GPU is "
            f"cuda:{_device.require_cuda(op).cuda.Device().id}; call minidl.cuda.set_device(local_rank) first")
    backend = world.backends.get(device)
    if backend is None:
        have = ", ".join(f"{d} ({b.name})" for d, b in world.backends.items()) or "none"
        fix = ("init_process_group('nccl') on a GPU, with the tensor moved there" if device == "cuda" else
               "pip install mpi4py mpich, start with python -m minidl.distributed.run, and init_process_group() "
               "without backend= or with backend='mpi'")
        raise RuntimeError(f"{op}: the process group has no backend for {device} tensors (it has: {have}). Fix: {fix}")
    return backend


def _op_name(op, fn):
    name = getattr(op, "value", op)
    name = str(name).lower().rpartition(".")[2]
    if name not in _OPS:
        raise ValueError(f"{fn}: unknown ReduceOp {op!r}")
    return name


class _InPlace:
    """The array a collective writes into, for a tensor that may not be contiguous: a contiguous copy that
    is written back (and the tensor's version bumped, as an in-place op) when the collective finishes."""

    def __init__(self, tensor):
        self.tensor = tensor
        data = tensor._data
        self.array = data if data.flags.c_contiguous else _layout.copy_as(data, False)

    def finish(self):
        if self.array is not self.tensor._data:
            self.tensor._data[...] = self.array
        self.tensor._version += 1


def _run(work, finish, async_op):
    if finish is not None:
        prev = work._finish
        work._finish = (lambda: (prev and prev(), finish())) if prev else finish
    if async_op:
        return work
    work.wait()
    return None


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Every rank's tensor becomes the reduction (SUM by default) of all ranks' tensors, in place."""
    _check_group("all_reduce", group)
    backend = _backend_for("all_reduce", tensor)
    buf = _InPlace(tensor)
    return _run(backend.all_reduce(buf.array, _op_name(op, "all_reduce")), buf.finish, async_op)


def broadcast(tensor, src=0, group=None, async_op=False, group_src=None):
    """Every rank's tensor becomes rank src's, in place."""
    _check_group("broadcast", group)
    world = _require("broadcast")
    src = src if group_src is None else group_src
    if not 0 <= src < world.size:
        raise ValueError(f"broadcast: src={src} is not a rank of this world (0..{world.size - 1})")
    backend = _backend_for("broadcast", tensor)
    buf = _InPlace(tensor)
    return _run(backend.broadcast(buf.array, src), buf.finish, async_op)


def _check_same(op, what, tensors, like):
    for i, t in enumerate(tensors):
        if tuple(t.shape) != tuple(like.shape) or t.dtype != like.dtype:
            raise ValueError(f"{op}: {what}[{i}] is {t.dtype} {tuple(t.shape)}, expected {like.dtype} {tuple(like.shape)} "
                             "(as the input)")


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """tensor_list[r] becomes rank r's tensor, on every rank. len(tensor_list) must be the world size."""
    world, backend = _one_per_rank("all_gather", group, "tensor_list", tensor_list, tensor)
    xp = _device.get_array_module(tensor._data)
    out = xp.empty((world.size,) + tuple(tensor.shape), dtype=tensor._data.dtype)
    work = backend.all_gather(out, xp.ascontiguousarray(tensor._data))

    def finish():
        for r, t in enumerate(tensor_list):
            t._data[...] = out[r]
            t._version += 1
    return _run(work, finish, async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """output_tensor (world_size * n elements, the ranks' inputs one after another) from every rank's input."""
    _check_blocks("all_gather_into_tensor", group, output_tensor, "output", input_tensor, "copies of the input")
    backend = _backend_for("all_gather_into_tensor", output_tensor, input_tensor)
    buf = _InPlace(output_tensor)
    return _run(backend.all_gather(buf.array.reshape(-1), _flat(input_tensor)), buf.finish, async_op)


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """output on rank r becomes the reduction over ranks of input_list[r]."""
    _, backend = _one_per_rank("reduce_scatter", group, "input_list", input_list, output)
    xp = _device.get_array_module(output._data)
    send = xp.stack([xp.ascontiguousarray(t._data) for t in input_list])
    buf = _InPlace(output)
    return _run(backend.reduce_scatter(buf.array.reshape(-1), send.reshape(-1), _op_name(op, "reduce_scatter")),
                buf.finish, async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """output (n elements) on rank r becomes the reduction over ranks of input's r-th block of n."""
    _check_blocks("reduce_scatter_tensor", group, input, "input", output, "blocks of the output")
    backend = _backend_for("reduce_scatter_tensor", output, input)
    buf = _InPlace(output)
    return _run(backend.reduce_scatter(buf.array.reshape(-1), _flat(input), _op_name(op, "reduce_scatter_tensor")),
                buf.finish, async_op)


def _one_per_rank(op, group, name, tensors, tensor):
    """(world, backend) of a collective over a list of one tensor per rank (`tensors`, the argument `name`) beside
    `tensor`, after the checks: the default group, a joined world, as many tensors as ranks, all like `tensor`."""
    _check_group(op, group)
    world = _require(op)
    if len(tensors) != world.size:
        raise ValueError(f"{op}: {name} has {len(tensors)} tensors, expected world_size={world.size}")
    _check_same(op, name, tensors, tensor)
    return world, _backend_for(op, tensor, *tensors)


def _check_blocks(op, group, whole, whole_name, part, part_words):
    """The checks of a collective whose `whole` tensor holds world_size blocks the size of `part` (one per rank)."""
    _check_group(op, group)
    world = _require(op)
    if whole.numel() != world.size * part.numel() or whole.dtype != part.dtype:
        raise ValueError(f"{op}: {whole_name} {whole.dtype} {tuple(whole.shape)} must hold world_size={world.size} "
                         f"{part_words} {part.dtype} {tuple(part.shape)}")


def _flat(t):
    """A tensor's values as one contiguous 1-D array (a collective's send buffer)."""
    return _device.get_array_module(t._data).ascontiguousarray(t._data).reshape(-1)


def barrier(group=None, async_op=False, device_ids=None):
    """Wait until every rank has called barrier()."""
    _check_group("barrier", group)
    world = _require("barrier")
    backend = world.backends.get("cpu") or world.backends.get("cuda")
    if backend is None:
        raise RuntimeError("barrier: the process group has no backend")
    return _run(backend.barrier(), None, async_op)

