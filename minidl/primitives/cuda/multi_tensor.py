"""CuPy launchers of kernels/multi_tensor.cu: one launch over a list of tensors (apex's
multi_tensor_apply). Arguments were validated by minidl/primitives/multi_tensor.py.

The tensor list is a device table (see the kernel's header) built on the host and uploaded once;
it is cached by the tuple of pointers, sizes and flags, so a training loop whose gradients keep
their addresses (zero_grad(set_to_none=False), or a memory pool that hands back the same blocks)
uploads nothing per step. The upload (cupy.asarray of a small NumPy array) goes through a pinned
staging buffer and does not wait for the GPU. A CUDA graph must be captured after a warm-up step,
so that the table already exists (the capture then holds its address). Should a table be built
during a capture all the same (new gradient arrays), its upload is a memcpy node of the graph that
re-reads the host buffer at every replay: that buffer is then pinned memory owned by the cache entry,
never changed, and the entry is never evicted. That upload calls cudaMemcpyAsync itself: CUDA captures
a copy from pinned memory, but CuPy's MemoryPointer.copy_from_host_async refuses any host-to-device
copy while the stream captures ("H2D transfers are disallowed", CuPy 14.2, seen at 4b8d734).
"""
from __future__ import annotations

import collections
import operator

import cupy
import numpy as np

from ._compile import get_kernel
from ._launch import HALF_KINDS, THREADS, null_pointer, sm_count

TABLE_COLS = 8   # kernels/multi_tensor.cu
CHUNK = 8192
BLOCKS_PER_SM = 4
_TABLE_CACHE_SIZE = 64
_tables: "collections.OrderedDict[tuple, tuple]" = collections.OrderedDict()
_captured_tables: dict = {}   # built during a stream capture: kept for the life of the process


def _capturing() -> bool:
    stream = cupy.cuda.get_current_stream()
    is_capturing = getattr(stream, "is_capturing", None)
    return bool(is_capturing()) if is_capturing is not None else False


def _pointers(column, n):
    """The data pointers of a column (0 for a None, and for an absent column): one C-level map over the arrays
    (an attrgetter), the per-element loop only where the column holds Nones."""
    if column is None:
        return [0] * n
    try:
        return list(map(_POINTER, column))
    except AttributeError:   # Nones among the arrays
        return [0 if a is None else a.data.ptr for a in column]


def _sizes(columns, n):
    """Each row's size: its first array's (the arrays of a row share one shape)."""
    for column in columns:
        if column is not None:
            try:
                return list(map(_SIZE, column))
            except AttributeError:   # Nones in this column: row by row
                break
    sizes = []
    for t in range(n):
        for column in columns:
            if column is not None and column[t] is not None:
                sizes.append(int(column[t].size))
                break
        else:
            sizes.append(0)
    return sizes


_POINTER = operator.attrgetter("data.ptr")
_SIZE = operator.attrgetter("size")


def tensor_table(columns, aux=None):
    """(device table, n_tensors, total_chunks) for the lists in `columns` = (params, grads, buf0,
    buf1, buf2), each a list of CuPy arrays or Nones of equal length (sizes from the first non-None
    array of each row); aux: a list of ints (column 6).

    This runs two or three times a training step over every parameter, gradient and state (char_gpt: 76 rows of
    5 columns), and its table misses whenever the gradients were allocated anew (zero_grad's set_to_none, torch's
    default, every step): the pointers are read by C-level maps and a missing table is built by NumPy, not by
    Python loops over the rows (issue 25: session 19's probe timed the loops' version at ~0.4 ms a call, three calls a
    step, on a slow host)."""
    n = len(next((c for c in columns if c is not None), ()))
    columns = tuple(columns) + (None,) * (5 - len(columns))
    ptrs = []
    for column in columns:
        ptrs += _pointers(column, n)
    sizes = _sizes(columns, n)
    aux = [0] * n if aux is None else list(aux)
    key = (cupy.cuda.runtime.getDevice(), *ptrs, *sizes, *aux)
    hit = _tables.get(key) or _captured_tables.get(key)
    if hit is not None:
        if key in _tables:
            _tables.move_to_end(key)
        return hit[:3]
    host_rows = np.empty((n, TABLE_COLS), dtype=np.int64)
    chunks = -(-np.asarray(sizes, dtype=np.int64) // CHUNK)
    if n:
        host_rows[:, :5] = np.asarray(ptrs, dtype=np.uint64).view(np.int64).reshape(5, n).T
        host_rows[:, 5] = sizes
        host_rows[:, 6] = aux
        host_rows[:, 7] = np.cumsum(chunks) - chunks   # each row's first chunk
    first = int(chunks.sum())
    if _capturing():
        pinned = cupy.cuda.alloc_pinned_memory(max(host_rows.nbytes, 1))
        np.frombuffer(pinned, np.int64, host_rows.size)[...] = host_rows.ravel()
        table = cupy.ndarray((n, TABLE_COLS), dtype=cupy.int64)
        if n:
            runtime = cupy.cuda.runtime
            runtime.memcpyAsync(table.data.ptr, pinned.ptr, host_rows.nbytes, runtime.memcpyHostToDevice,
                                cupy.cuda.get_current_stream().ptr)
        _captured_tables[key] = (table, n, first, pinned)
        return table, n, first
    table = cupy.asarray(host_rows)
    entry = (table, n, first)
    _tables[key] = entry
    if len(_tables) > _TABLE_CACHE_SIZE:
        _tables.popitem(last=False)
    return entry


def _grid(total_chunks):
    return (max(1, min(int(total_chunks), BLOCKS_PER_SM * sm_count())),), (THREADS,)


def _optional(a):
    """A device pointer for an optional 0-d float32 scalar (grad_scale, found_inf, clip_coef); a host
    number or NumPy scalar is copied to the device first (asynchronously)."""
    if a is None:
        return null_pointer()
    return cupy.asarray(a, dtype=cupy.float32)


def _hparams(hparams, count, op):
    hp = cupy.asarray(hparams, dtype=cupy.float64)
    if hp.shape != (count,):
        raise ValueError(f"{op}: hparams must hold {count} values, got shape {tuple(hp.shape)}")
    return hp


def multi_tensor_sgd(params, grads, momentum_buffers, first_step, hparams, *, nesterov, maximize, grad_scale=None,
                     found_inf=None):
    """In place over the lists: SGD's update (minidl/optim/sgd.py), one launch. hparams: float64 device
    array (lr, momentum, dampening, weight_decay); momentum_buffers: list of arrays (or None when
    momentum == 0); first_step: per tensor, 1 where the buffer starts at g."""
    table, n, chunks = tensor_table((params, grads, momentum_buffers), aux=first_step)
    if n == 0:
        return
    hp = _hparams(hparams, 4, "multi_tensor_sgd")
    grid, block = _grid(chunks)
    get_kernel("multi_tensor", "multi_tensor_sgd")(
        grid, block, (table, np.int32(n), np.int64(chunks), hp, np.int32(bool(nesterov)), np.int32(bool(maximize)),
                      _optional(grad_scale), _optional(found_inf)))


def multi_tensor_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, step_slots, steps, hparams, *, decoupled,
                      maximize, grad_scale=None, found_inf=None):
    """In place over the lists: Adam's (AdamW's with decoupled=True) update, two launches: the step
    counts steps[step_slots[t]] += 1, then the update. hparams: float64 device array (lr, beta1,
    beta2, eps, weight_decay); steps: float32 1-D (CuPy)."""
    table, n, chunks = tensor_table((params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs), aux=step_slots)
    if n == 0:
        return
    hp = _hparams(hparams, 5, "multi_tensor_adam")
    if steps.dtype != cupy.float32 or not steps.flags.c_contiguous:
        raise TypeError(f"multi_tensor_adam: steps must be a contiguous float32 CuPy array, got {steps.dtype}")
    get_kernel("multi_tensor", "multi_tensor_increment_steps")(
        (-(-n // THREADS),), (THREADS,), (table, np.int32(n), steps, _optional(found_inf)))
    grid, block = _grid(chunks)
    get_kernel("multi_tensor", "multi_tensor_adam")(
        grid, block, (table, np.int32(n), np.int64(chunks), hp, steps, np.int32(bool(decoupled)),
                      np.int32(bool(maximize)), _optional(grad_scale), _optional(found_inf)))


def multi_tensor_rmsprop(params, grads, square_avgs, momentum_buffers, grad_avgs, step_slots, steps, hparams, *,
                         maximize, grad_scale=None, found_inf=None):
    """In place over the lists: RMSprop's update (minidl/optim/rmsprop.py), two launches (the step
    counts, then the update). hparams: float64 device array (lr, alpha, eps, weight_decay, momentum);
    momentum_buffers / grad_avgs: lists, or None when unused."""
    table, n, chunks = tensor_table((params, grads, square_avgs, momentum_buffers, grad_avgs), aux=step_slots)
    if n == 0:
        return
    hp = _hparams(hparams, 5, "multi_tensor_rmsprop")
    get_kernel("multi_tensor", "multi_tensor_increment_steps")(
        (-(-n // THREADS),), (THREADS,), (table, np.int32(n), steps, _optional(found_inf)))
    grid, block = _grid(chunks)
    get_kernel("multi_tensor", "multi_tensor_rmsprop")(
        grid, block, (table, np.int32(n), np.int64(chunks), hp, np.int32(bool(maximize)), _optional(grad_scale),
                      _optional(found_inf)))


def multi_tensor_zero(tensors):
    """Every array of the list set to 0, one launch."""
    table, n, chunks = tensor_table((None, tensors))
    if n == 0:
        return
    grid, block = _grid(chunks)
    get_kernel("multi_tensor", "multi_tensor_zero")(grid, block, (table, np.int32(n), np.int64(chunks)))


def multi_tensor_l2norm(tensors, max_norm=None):
    """(total_norm, clip_coef): the 2-norm of the concatenated list (0-d float32) and, when max_norm is
    given, min(1, max_norm / (norm + 1e-6)) (0-d float32, else None). Two launches."""
    table, n, chunks = tensor_table((None, tensors))
    total_norm = cupy.zeros((), dtype=cupy.float32)
    clip_coef = None if max_norm is None else cupy.ones((), dtype=cupy.float32)
    if n == 0:
        return total_norm, clip_coef
    grid, block = _grid(chunks)
    partial = cupy.ndarray(grid[0], dtype=cupy.float32)
    get_kernel("multi_tensor", "multi_tensor_l2norm_partial")(grid, block, (table, np.int32(n), np.int64(chunks), partial))
    get_kernel("multi_tensor", "multi_tensor_l2norm_finalize")(
        (1,), (THREADS,), (partial, np.int32(grid[0]), np.float32(0.0 if max_norm is None else max_norm), total_norm,
                           _optional(clip_coef)))
    return total_norm, clip_coef


def multi_tensor_scale(tensors, coef):
    """Every array of the list multiplied in place by the device scalar coef (0-d float32), one launch."""
    table, n, chunks = tensor_table((None, tensors))
    if n == 0:
        return
    grid, block = _grid(chunks)
    get_kernel("multi_tensor", "multi_tensor_scale")(grid, block, (table, np.int32(n), np.int64(chunks), _optional(coef)))


def multi_tensor_unscale(tensors, scale, found_inf):
    """In place over the list: found_inf (0-d float32, on the device) set to 1 where any element is inf or
    NaN, and, when scale (0-d float32) is given, every element multiplied by float32(1 / float64(scale)).
    One launch; found_inf is only ever set, never cleared (the caller zeroes it)."""
    table, n, chunks = tensor_table((None, tensors))
    if n == 0:
        return
    grid, block = _grid(chunks)
    get_kernel("multi_tensor", "multi_tensor_unscale")(
        grid, block, (table, np.int32(n), np.int64(chunks), _optional(scale), found_inf))


_ALIGN = 256   # bytes: each cast array starts where a pool allocation would (TMA and vector loads read them)


def multi_tensor_cast(tensors, dtype):
    """Each float32 array of the list in dtype (float16 / bfloat16), one launch, into one allocation: the arrays
    are 256-byte-aligned pieces of it (the same allocation size each call, so the pool tends to hand back the same
    block and the pointer table is found in the cache)."""
    offsets, total = [], 0
    for a in tensors:
        offsets.append(total)
        total += -(-a.size * dtype.itemsize // _ALIGN) * _ALIGN
    slab = cupy.ndarray(max(total, 1), dtype=cupy.uint8)
    base = slab.data
    out = [cupy.ndarray(a.shape, dtype=dtype, memptr=base + off) for a, off in zip(tensors, offsets)]
    table, n, chunks = tensor_table((tensors, None, out))
    if n == 0 or chunks == 0:
        return out
    grid, block = _grid(chunks)
    get_kernel("multi_tensor", "multi_tensor_cast")(grid, block, (table, np.int32(n), np.int64(chunks),
                                                                  np.int32(HALF_KINDS[dtype])))
    return out
