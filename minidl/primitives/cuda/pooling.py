"""CuPy launchers of kernels/pooling.cu: max / average pooling (1-D, 2-D, 3-D, ceil mode, dilated max)
and adaptive average pooling, forward and backward, NCHW or NHWC; max pooling with indices and max
unpooling.

Every problem runs as 3-D: 1-D and 2-D inputs get unit leading spatial dims. pooling_forward and
pooling_backward take float16 / bfloat16 data as it is (their kernels are templates of the storage KIND,
STORAGE_KINDS; no blending into an `out` there); the rest is float32. Arguments were validated by
minidl/primitives/pooling.py.
"""
from __future__ import annotations

from .._common import pooling_output_shape

import math

import cupy
import numpy as np

from ._compile import get_kernel, get_template_kernel
from ._launch import HALF_KINDS, STORAGE_KINDS, THREADS, Plans, as_kernel_input, as_storage_input, finish, \
    grid_stride_blocks, is_aligned, kernel_output, on_host

MODES = {"max": 0, "avg_include_pad": 1, "avg_exclude_pad": 2}

# The 2x2 / stride 2 fast path (pooling_forward_k2s2, pooling_backward_k2s2); False sends every
# problem to the generic kernels (the tests compare the two, bit for bit).
USE_K2S2 = True


def _split_shape(shape, layout):
    """(N, C, spatial) of an array shape in the given layout."""
    shape = tuple(int(s) for s in shape)
    if layout == "NCHW":
        return shape[0], shape[1], shape[2:]
    return shape[0], shape[-1], shape[1:-1]


def _as_3d(values, fill):
    """Pad a per-spatial-dim tuple to 3 entries at the front (1-D/2-D run as 3-D)."""
    values = tuple(int(v) for v in values)
    return (fill,) * (3 - len(values)) + values


def _shape_args(x_shape, y_shape, kernel, stride, padding, layout, dilation=None):
    n, c, spatial = _split_shape(x_shape, layout)
    _, _, out_spatial = _split_shape(y_shape, layout)
    dilation = (1,) * len(spatial) if dilation is None else dilation
    args = (n, c) + _as_3d(spatial, 1) + _as_3d(out_spatial, 1) + _as_3d(kernel, 1) + _as_3d(stride, 1) \
        + _as_3d(padding, 0) + (int(layout == "NHWC"),) + _as_3d(dilation, 1)
    return tuple(np.int32(a) for a in args)


# The kernels templated on the data's storage (the others are float32 only)
_STORAGE_TEMPLATES = frozenset(("pooling_forward", "pooling_backward", "pooling_forward_k2s2", "pooling_backward_k2s2"))


def _kernel(name, data):
    """Kernel `name`, instantiated for the data's storage where it is a template."""
    if name in _STORAGE_TEMPLATES:
        return get_template_kernel("pooling", f"{name}<{STORAGE_KINDS[data.dtype]}>")
    return get_kernel("pooling", name)


def _data_and_output(op, x, out, shape, beta, *inputs):
    """(x, target, original): 16-bit data as it is with a new output of its dtype (the primitive sends 16-bit
    calls with `out` through float32 copies); float32 through as_kernel_input and kernel_output."""
    if x.dtype in HALF_KINDS and out is None:
        return as_storage_input(op, x), cupy.ndarray(shape, dtype=x.dtype), None
    x = as_kernel_input(op, x)
    return (x,) + kernel_output(op, out, shape, beta, x, *inputs)


def _launch(name, arrays, target, shape_args, extra, work):
    if work == 0:
        return
    kernel = _kernel(name, target)
    kernel((grid_stride_blocks(work),), (THREADS,), (*arrays, target, *shape_args, *extra))


def uses_k2s2(x_shape, y_shape, desc, layout, backward=False, arrays=()) -> bool:
    """Whether the 2x2 / stride 2 fast path runs: 2-D NCHW, window 2x2, stride 2, no padding, W a
    multiple of 4, every window inside the input (and for the backward every input cell inside a
    window: H = 2 OH), arrays 16-byte aligned (float4 loads)."""
    if not USE_K2S2 or layout != "NCHW" or len(x_shape) != 4:
        return False
    if tuple(desc.kernel_size) != (2, 2) or tuple(desc.stride) != (2, 2) or tuple(desc.padding) != (0, 0):
        return False
    if tuple(desc.dilation) != (1, 1):
        return False
    h, w, oh, ow = x_shape[2], x_shape[3], y_shape[2], y_shape[3]
    rows_ok = h == 2 * oh if backward else oh == h // 2
    return w % 4 == 0 and ow * 2 == w and rows_ok and is_aligned(*arrays)


# Launch plans (issue 23: a layer pools the same shapes every step): per (direction, x's shape and dtype, descriptor,
# layout, USE_K2S2, device) the output's shape, whether the 2x2 fast path takes the shapes (the arrays' alignment is
# checked per call), its kernel, grid and shape arguments, and the generic kernel's.
_plans = Plans()


def _plan(direction, x, desc, layout):
    key = (direction, x.shape, x.dtype, desc, layout, USE_K2S2, cupy.cuda.runtime.getDevice())
    plan = _plans.get(key)
    if plan is None:
        y_shape = pooling_output_shape(x.shape, desc, layout)
        backward = direction == "backward"
        if uses_k2s2(x.shape, y_shape, desc, layout, backward=backward):
            pairs = math.prod(y_shape) // 2
            fast = (_kernel("pooling_backward_k2s2" if backward else "pooling_forward_k2s2", x),
                    (grid_stride_blocks(max(pairs, 1)),),
                    (np.int32(x.shape[2]), np.int32(x.shape[3]), np.int32(y_shape[2]), np.int32(MODES[desc.mode])),
                    (np.int64(pairs), np.int64(math.prod(x.shape))), pairs)
        else:
            fast = None
        work = math.prod(x.shape if backward else y_shape)
        generic = (_kernel("pooling_backward" if backward else "pooling_forward", x),
                   (grid_stride_blocks(max(work, 1)),),
                   _shape_args(x.shape, y_shape, desc.kernel_size, desc.stride, desc.padding, layout, desc.dilation)
                   + (np.int32(MODES[desc.mode]),), work)
        plan = _plans.keep(key, (y_shape, fast, generic))
    return plan


def _run(plan, arrays, target, alpha, beta):
    """Launch a direction's plan (fast: whether the arrays are aligned for the 2x2 path's float4 loads)."""
    _, fast, generic = plan
    if fast is not None and is_aligned(*arrays, target):
        kernel, grid, head, tail, pairs = fast
        if pairs:
            kernel(grid, (THREADS,), (*arrays, target, *head, np.float32(alpha), np.float32(beta), *tail))
        return
    kernel, grid, shape_args, work = generic
    if work:
        kernel(grid, (THREADS,), (*arrays, target, *shape_args, np.float32(alpha), np.float32(beta)))


def pooling_forward(x, desc, *, layout="NCHW", alpha=1.0, beta=0.0, out=None):
    """y (pooling_output_shape) from x (N, C, *spatial) or (N, *spatial, C)."""
    op = "pooling_forward"
    if x.dtype == np.float64:   # no float64 kernel: the NumPy reference on host copies
        from ..cpu import pooling as reference
        return on_host(reference.pooling_forward, x, desc, layout=layout, alpha=alpha, beta=beta, out=out)
    plan = _plan("forward", x, desc, layout)
    x, target, original = _data_and_output(op, x, out, plan[0], beta)
    _run(plan, (x,), target, alpha, beta)
    return finish(target, original)


def pooling_backward(x, y, dy, desc, *, layout="NCHW", alpha=1.0, beta=0.0, out=None):
    """dx (x's shape). Max pooling recomputes each window's first argmax from x; y is not read."""
    op = "pooling_backward"
    if dy.dtype != x.dtype:
        raise TypeError(f"{op}: dy is {dy.dtype} but x is {x.dtype}")
    if x.dtype == np.float64:
        from ..cpu import pooling as reference
        return on_host(reference.pooling_backward, x, y, dy, desc, layout=layout, alpha=alpha, beta=beta, out=out)
    plan = _plan("backward", x, desc, layout)
    dy = as_storage_input(op, dy) if dy.dtype in HALF_KINDS and out is None else as_kernel_input(op, dy)
    x, target, original = _data_and_output(op, x, out, x.shape, beta, dy)
    _run(plan, (x, dy), target, alpha, beta)
    return finish(target, original)


def _adaptive_y_shape(x_shape, output_size, layout):
    n, c, _ = _split_shape(x_shape, layout)
    output_size = tuple(int(o) for o in output_size)
    return (n, c) + output_size if layout == "NCHW" else (n,) + output_size + (c,)


def adaptive_avg_pooling_forward(x, output_size, *, layout="NCHW", alpha=1.0, beta=0.0, out=None):
    """Average-pool x to spatial size output_size (a tuple, one int per spatial dim)."""
    op = "adaptive_avg_pooling_forward"
    x = as_kernel_input(op, x)
    y_shape = _adaptive_y_shape(x.shape, output_size, layout)
    target, original = kernel_output(op, out, y_shape, beta, x)
    dims = x.ndim - 2
    # The kernel/stride/padding slots of the shape arguments are unused by the adaptive kernels.
    shape_args = _shape_args(x.shape, y_shape, (1,) * dims, (1,) * dims, (0,) * dims, layout)
    _launch("adaptive_avg_pooling_forward", (x,), target, shape_args, (np.float32(alpha), np.float32(beta)),
            target.size)
    return finish(target, original)


def adaptive_avg_pooling_backward(dy, x_shape, output_size, *, layout="NCHW", alpha=1.0, beta=0.0, out=None):
    """dx of shape x_shape from dy of the adaptive output's shape."""
    op = "adaptive_avg_pooling_backward"
    dy = as_kernel_input(op, dy)
    x_shape = tuple(int(s) for s in x_shape)
    target, original = kernel_output(op, out, x_shape, beta, dy)
    dims = len(x_shape) - 2
    shape_args = _shape_args(x_shape, dy.shape, (1,) * dims, (1,) * dims, (0,) * dims, layout)
    _launch("adaptive_avg_pooling_backward", (dy,), target, shape_args, (np.float32(alpha), np.float32(beta)),
            target.size)
    return finish(target, original)


def max_pooling_forward_with_indices(x, desc, *, layout="NCHW"):
    """(y, indices int64): max pooling and each maximum's flat position within its (n, c) plane."""
    op = "max_pooling_forward_with_indices"
    x = as_kernel_input(op, x)
    y_shape = pooling_output_shape(x.shape, desc, layout)
    y = cupy.ndarray(y_shape, dtype=cupy.float32)
    indices = cupy.ndarray(y_shape, dtype=cupy.int64)
    shape_args = _shape_args(x.shape, y_shape, desc.kernel_size, desc.stride, desc.padding, layout, desc.dilation)
    if y.size:
        kernel = get_kernel("pooling", "max_pooling_forward_with_indices")
        kernel((grid_stride_blocks(y.size),), (THREADS,), (x, y, indices, *shape_args))
    return y, indices


def _unpool_args(pooled_shape, unpooled_spatial, layout):
    n, c, spatial = _split_shape(pooled_shape, layout)
    in_plane = int(np.prod(spatial, dtype=np.int64))
    out_plane = int(np.prod(unpooled_spatial, dtype=np.int64))
    return np.int32(c), np.int64(in_plane), np.int64(out_plane), np.int32(layout == "NHWC")


def max_unpooling_forward(y, indices, x_spatial, *, layout="NCHW"):
    """x (zeros except at the indices) of spatial size x_spatial from y and its indices."""
    import cupy

    op = "max_unpooling_forward"
    y = as_kernel_input(op, y)
    indices = cupy.ascontiguousarray(indices, dtype=cupy.int64)
    n, c, _ = _split_shape(y.shape, layout)
    x_shape = (n, c) + tuple(x_spatial) if layout == "NCHW" else (n,) + tuple(x_spatial) + (c,)
    x = cupy.zeros(x_shape, dtype=cupy.float32)
    if y.size:
        kernel = get_kernel("pooling", "max_unpooling_forward")
        kernel((grid_stride_blocks(y.size),), (THREADS,),
               (y, indices, x, np.int64(y.size), *_unpool_args(y.shape, x_spatial, layout)))
    return x


def max_unpooling_backward(dx, indices, *, layout="NCHW"):
    """dy (indices' shape): dx gathered at the indices."""
    import cupy

    op = "max_unpooling_backward"
    dx = as_kernel_input(op, dx)
    indices = cupy.ascontiguousarray(indices, dtype=cupy.int64)
    dy = cupy.ndarray(indices.shape, dtype=cupy.float32)
    _, _, x_spatial = _split_shape(dx.shape, layout)
    if dy.size:
        kernel = get_kernel("pooling", "max_unpooling_backward")
        kernel((grid_stride_blocks(dy.size),), (THREADS,),
               (dx, indices, dy, np.int64(dy.size), *_unpool_args(indices.shape, x_spatial, layout)))
    return dy
