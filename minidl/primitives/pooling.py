"""Max and average pooling over 1, 2 or 3 spatial dims, and adaptive average pooling.

Pooling slides a window of `kernel_size` over the (zero- or -inf-padded) input with step `stride`
and reduces each window to one number:
    max               the largest element (backward: the gradient goes to the first maximum, in
                      window order, as PyTorch; the argmax is recomputed from x, never stored)
    avg_include_pad   sum / (window size, padding included)          PyTorch count_include_pad=True
    avg_exclude_pad   sum / (number of real, non-padding elements)   PyTorch count_include_pad=False

Max pooling may be dilated (dilation d: the window's taps are d apart, as in PyTorch's max_pool), so
its extent is e = d (k - 1) + 1; average pooling has d = 1.

Output length per spatial dim, L_in input, k kernel, s stride, p padding, e = d (k - 1) + 1:
    L_out = floor((L_in + 2p - e) / s) + 1                (ceil_mode=False)
    L_out = ceil((L_in + 2p - e) / s) + 1, minus 1 if the last window would start past the input
            and its left padding, i.e. if (L_out - 1) * s >= L_in + p        (ceil_mode=True)
As in PyTorch, padding is at most half the kernel size, so every undilated window holds at least
one real element (a dilated one may step over all of them: its maximum is then -inf).

max_pooling_forward_with_indices also returns, per output, the position of its maximum in the
input's flattened spatial dims (PyTorch's return_indices=True); max_unpooling_forward scatters values
back to those positions (PyTorch's max_unpool), and max_unpooling_backward gathers from them.

Adaptive average pooling picks the windows from the sizes instead: output index i of a dim with
In inputs and Out outputs averages inputs [floor(i In / Out), ceil((i + 1) In / Out)). Global
average pooling is adaptive pooling to output size 1.
"""
from __future__ import annotations

from dataclasses import dataclass

from ._common import (  # pooling_output_shape: here for the public API, in _common for the backends
    pooling_output_shape,
    Checked, as_tuple, backend, check_arrays, check_blend_out, check_float, check_float_or_half, check_same_device,
    computes_half_in_float32, gpu_half_data, is_cuda_array, normalize_layout, shape_str,
)

__all__ = [
    "PoolingDescriptor",
    "pooling_output_shape",
    "pooling_forward",
    "pooling_backward",
    "adaptive_avg_pooling_forward",
    "adaptive_avg_pooling_backward",
    "global_avg_pooling_forward",
    "global_avg_pooling_backward",
    "max_pooling_forward_with_indices",
    "max_unpooling_forward",
    "max_unpooling_backward",
    "POOLING_MODES",
]

POOLING_MODES = ("max", "avg_include_pad", "avg_exclude_pad")


@dataclass(frozen=True)
class PoolingDescriptor:
    """Pooling parameters, one entry per spatial dim. Frozen (hashable).

    kernel_size, stride, padding, dilation: an int (the same for every dim) or a tuple of spatial_dims
    ints; stride=None means stride = kernel_size (PyTorch's default); dilation (max mode only) spaces
    the window's taps. spatial_dims=None takes the length of the first tuple given, else 2. After
    construction every field is a tuple of ints.
    """

    mode: str = "max"
    kernel_size: tuple = 2
    stride: tuple | None = None
    padding: tuple = 0
    ceil_mode: bool = False
    spatial_dims: int | None = None
    dilation: tuple = 1

    def __post_init__(self):
        op = "PoolingDescriptor"
        if self.mode not in POOLING_MODES:
            raise ValueError(f"{op}: unknown mode {self.mode!r}; choose one of {POOLING_MODES}")
        dims = self.spatial_dims
        if dims is None:
            dims = next((len(v) for v in (self.kernel_size, self.stride, self.padding)
                         if v is not None and not isinstance(v, int)), 2)
        if dims not in (1, 2, 3):
            raise ValueError(f"{op}: spatial_dims must be 1, 2 or 3, got {dims}")
        kernel = as_tuple(op, "kernel_size", self.kernel_size, dims, minimum=1)
        stride = kernel if self.stride is None else as_tuple(op, "stride", self.stride, dims, minimum=1)
        padding = as_tuple(op, "padding", self.padding, dims, minimum=0)
        dilation = as_tuple(op, "dilation", self.dilation, dims, minimum=1)
        if self.mode != "max" and dilation != (1,) * dims:
            raise ValueError(f"{op}: dilation {dilation} is only defined for max pooling, not {self.mode!r}")
        for k, p in zip(kernel, padding):
            if 2 * p > k:  # PyTorch's rule, for dilated windows too (it compares with the kernel size)
                raise ValueError(
                    f"{op}: padding {padding} must be at most half the kernel {kernel} "
                    "(a window made only of padding has nothing to pool)"
                )
        object.__setattr__(self, "kernel_size", kernel)
        object.__setattr__(self, "dilation", dilation)
        object.__setattr__(self, "stride", stride)
        object.__setattr__(self, "padding", padding)
        object.__setattr__(self, "ceil_mode", bool(self.ceil_mode))
        object.__setattr__(self, "spatial_dims", dims)


def _check_input(op: str, x, spatial_dims: int, name: str = "x") -> None:
    if x.ndim != spatial_dims + 2:
        raise ValueError(
            f"{op}: {name} must have {spatial_dims + 2} dims (N, C and {spatial_dims} spatial) "
            f"for a {spatial_dims}-D pooling, got shape {shape_str(x.shape)}"
        )


def _checked_output_shape(op: str, x_shape, desc, layout) -> tuple:
    y_shape = pooling_output_shape(x_shape, desc, layout)
    spatial = y_shape[2:] if layout == "NCHW" else y_shape[1:-1]
    if any(s < 1 for s in spatial):
        raise ValueError(
            f"{op}: input {shape_str(x_shape)} ({layout}) is too small for kernel {desc.kernel_size}, "
            f"stride {desc.stride}, padding {desc.padding}: output would be {shape_str(y_shape)}"
        )
    return y_shape


# The usual calls' signatures (no blending) whose checks passed, with the layout they normalised to (issue 23: a
# layer pools the same shapes every step).
_forward_checked, _backward_checked = Checked(), Checked()


@computes_half_in_float32(native=gpu_half_data(1, blends=False))
def pooling_forward(x, desc: PoolingDescriptor, *, layout="NCHW", alpha=1.0, beta=0.0, out=None):
    """Pool x (N, C, *spatial) or (N, *spatial, C); y has pooling_output_shape(x.shape, desc, layout)."""
    usual = out is None and alpha == 1.0 and beta == 0.0 and type(desc) is PoolingDescriptor
    if usual:   # (a signature checked before: straight to the backend, with the layout it normalised to)
        key = Checked.key((x,), desc, layout)
        checked_layout = _forward_checked.get(key)
        if checked_layout is not None:
            return backend("pooling", x).pooling_forward(x, desc, layout=checked_layout)
    op = "pooling_forward"
    check_arrays(op, x=x, out=out)
    if not isinstance(desc, PoolingDescriptor):
        raise TypeError(f"{op}: desc must be a PoolingDescriptor, got {type(desc).__name__}")
    layout = normalize_layout(op, layout)
    _check_input(op, x, desc.spatial_dims)
    check_same_device(op, x=x, out=out)
    dtype = check_float_or_half(op, x=x)
    y_shape = _checked_output_shape(op, x.shape, desc, layout)
    check_blend_out(op, out, y_shape, dtype, beta)
    if usual:
        _forward_checked.add(key, layout)
    return backend("pooling", x).pooling_forward(x, desc, layout=layout, alpha=alpha, beta=beta, out=out)


@computes_half_in_float32(native=gpu_half_data(3, blends=False))
def pooling_backward(x, y, dy, desc: PoolingDescriptor, *, layout="NCHW", alpha=1.0, beta=0.0, out=None):
    """dx (x's shape) from x, the forward output y and dy (both of y's shape).

    Max pooling recomputes each window's argmax from x (first maximum wins); y is accepted, as in
    cuDNN, and checked for shape. Average pooling reads only dy and the shapes.
    """
    usual = out is None and alpha == 1.0 and beta == 0.0 and type(desc) is PoolingDescriptor
    if usual:
        key = Checked.key((x, y, dy), desc, layout)
        checked_layout = _backward_checked.get(key)
        if checked_layout is not None:
            return backend("pooling", x).pooling_backward(x, y, dy, desc, layout=checked_layout)
    op = "pooling_backward"
    check_arrays(op, x=x, y=y, dy=dy, out=out)
    if not isinstance(desc, PoolingDescriptor):
        raise TypeError(f"{op}: desc must be a PoolingDescriptor, got {type(desc).__name__}")
    layout = normalize_layout(op, layout)
    _check_input(op, x, desc.spatial_dims)
    if dy is None:
        raise ValueError(f"{op}: dy is required")
    check_same_device(op, x=x, y=y, dy=dy, out=out)
    dtype = check_float_or_half(op, x=x, y=y, dy=dy)
    y_shape = _checked_output_shape(op, x.shape, desc, layout)
    for name, a in (("y", y), ("dy", dy)):
        if a is not None and tuple(a.shape) != y_shape:
            raise ValueError(
                f"{op}: {name} has shape {shape_str(a.shape)}, but pooling x {shape_str(x.shape)} "
                f"gives {shape_str(y_shape)}"
            )
    check_blend_out(op, out, x.shape, dtype, beta)
    if usual:
        _backward_checked.add(key, layout)
    return backend("pooling", x).pooling_backward(x, y, dy, desc, layout=layout, alpha=alpha, beta=beta, out=out)


# ----------------------------------------------------------------------------------------------
# Adaptive (and global) average pooling
# ----------------------------------------------------------------------------------------------


def _adaptive_shapes(op: str, x_shape, output_size, layout: str):
    """Validate and return (output_size tuple, y_shape)."""
    x_shape = tuple(int(s) for s in x_shape)
    if len(x_shape) not in (3, 4, 5):
        raise ValueError(
            f"{op}: input must have 3, 4 or 5 dims (N, C and 1-3 spatial), got shape {shape_str(x_shape)}"
        )
    dims = len(x_shape) - 2
    output_size = as_tuple(op, "output_size", output_size, dims, minimum=1)
    spatial = x_shape[2:] if layout == "NCHW" else x_shape[1:-1]
    if any(s < 1 for s in spatial):
        raise ValueError(f"{op}: input {shape_str(x_shape)} ({layout}) has an empty spatial dim")
    n = x_shape[0]
    c = x_shape[1] if layout == "NCHW" else x_shape[-1]
    y_shape = (n, c) + output_size if layout == "NCHW" else (n,) + output_size + (c,)
    return output_size, y_shape


@computes_half_in_float32()
def adaptive_avg_pooling_forward(x, output_size, *, layout="NCHW", alpha=1.0, beta=0.0, out=None):
    """Average-pool x (N, C, *spatial) to spatial size output_size (an int or one int per dim)."""
    op = "adaptive_avg_pooling_forward"
    check_arrays(op, x=x, out=out)
    layout = normalize_layout(op, layout)
    output_size, y_shape = _adaptive_shapes(op, x.shape, output_size, layout)
    check_same_device(op, x=x, out=out)
    dtype = check_float(op, x=x)
    check_blend_out(op, out, y_shape, dtype, beta)
    return backend("pooling", x).adaptive_avg_pooling_forward(x, output_size, layout=layout, alpha=alpha, beta=beta, out=out)


@computes_half_in_float32()
def adaptive_avg_pooling_backward(dy, x_shape, output_size, *, layout="NCHW", alpha=1.0, beta=0.0, out=None):
    """dx of shape x_shape from dy of the adaptive output's shape."""
    op = "adaptive_avg_pooling_backward"
    check_arrays(op, dy=dy, out=out)
    layout = normalize_layout(op, layout)
    output_size, y_shape = _adaptive_shapes(op, x_shape, output_size, layout)
    if tuple(dy.shape) != y_shape:
        raise ValueError(
            f"{op}: dy has shape {shape_str(dy.shape)}, but pooling {shape_str(x_shape)} to "
            f"{output_size} gives {shape_str(y_shape)}"
        )
    check_same_device(op, dy=dy, out=out)
    dtype = check_float(op, dy=dy)
    check_blend_out(op, out, tuple(int(s) for s in x_shape), dtype, beta)
    return backend("pooling", dy).adaptive_avg_pooling_backward(
        dy, tuple(int(s) for s in x_shape), output_size, layout=layout, alpha=alpha, beta=beta, out=out
    )


def global_avg_pooling_forward(x, *, layout="NCHW", alpha=1.0, beta=0.0, out=None):
    """Mean over all spatial dims, keeping them as size 1: (N, C, *spatial) -> (N, C, 1, ..., 1)."""
    return adaptive_avg_pooling_forward(x, 1, layout=layout, alpha=alpha, beta=beta, out=out)


def global_avg_pooling_backward(dy, x_shape, *, layout="NCHW", alpha=1.0, beta=0.0, out=None):
    """dx of shape x_shape: each input gets dy / (number of spatial positions)."""
    return adaptive_avg_pooling_backward(dy, x_shape, 1, layout=layout, alpha=alpha, beta=beta, out=out)


# ----------------------------------------------------------------------------------------------
# Max pooling with indices, and its inverse (max unpooling)
# ----------------------------------------------------------------------------------------------


@computes_half_in_float32(out_dtypes=("x", None))
def max_pooling_forward_with_indices(x, desc: PoolingDescriptor, *, layout="NCHW"):
    """(y, indices): max pooling of x and, for each output, the flat position of its maximum within
    its (n, c) plane of x's spatial dims (h * W + w in 2-D; first maximum in window order, the last
    NaN if any, as PyTorch). indices is int64, of y's shape. The gradient needs no indices:
    pooling_backward recomputes the same argmax from x."""
    op = "max_pooling_forward_with_indices"
    check_arrays(op, x=x)
    if not isinstance(desc, PoolingDescriptor):
        raise TypeError(f"{op}: desc must be a PoolingDescriptor, got {type(desc).__name__}")
    if desc.mode != "max":
        raise ValueError(f"{op}: desc.mode must be 'max', got {desc.mode!r}")
    layout = normalize_layout(op, layout)
    _check_input(op, x, desc.spatial_dims)
    check_float(op, x=x)
    _checked_output_shape(op, x.shape, desc, layout)
    return backend("pooling", x).max_pooling_forward_with_indices(x, desc, layout=layout)


def _check_unpool(op, a, indices, x_spatial, layout):
    check_arrays(op, **{"y" if op.endswith("forward") else "dy": a, "indices": indices})
    layout = normalize_layout(op, layout)
    if a.ndim not in (3, 4, 5):
        raise ValueError(f"{op}: input must have 3, 4 or 5 dims (N, C and 1-3 spatial), got {shape_str(a.shape)}")
    if tuple(indices.shape) != tuple(a.shape):
        raise ValueError(f"{op}: indices {shape_str(indices.shape)} must have the shape of the input {shape_str(a.shape)}")
    if indices.dtype.kind not in "iu":
        raise TypeError(f"{op}: indices must be an integer array, got {indices.dtype}")
    check_same_device(op, a=a, indices=indices)
    x_spatial = tuple(int(s) for s in x_spatial)
    if len(x_spatial) != a.ndim - 2 or any(s < 0 for s in x_spatial):
        raise ValueError(f"{op}: output spatial size {x_spatial} must have {a.ndim - 2} sizes >= 0")
    return layout, x_spatial


@computes_half_in_float32()
def max_unpooling_forward(y, indices, x_spatial, *, layout="NCHW"):
    """x of spatial size x_spatial, zero except x[n, c, indices[n, c, i]] = y[n, c, i] (PyTorch's
    max_unpool: a later write to the same position wins). Indices outside [0, prod(x_spatial)) raise
    ValueError on the CPU; the GPU kernel skips them."""
    op = "max_unpooling_forward"
    layout, x_spatial = _check_unpool(op, y, indices, x_spatial, layout)
    check_float(op, y=y)
    return backend("pooling", y).max_unpooling_forward(y, indices, x_spatial, layout=layout)


@computes_half_in_float32()
def max_unpooling_backward(dx, indices, *, layout="NCHW"):
    """dy[n, c, i] = dx[n, c, indices[n, c, i]]: the gradient of max_unpooling_forward (a gather)."""
    op = "max_unpooling_backward"
    check_arrays(op, dx=dx, indices=indices)
    layout = normalize_layout(op, layout)
    if dx.ndim not in (3, 4, 5) or indices.ndim != dx.ndim:
        raise ValueError(f"{op}: dx {shape_str(dx.shape)} and indices {shape_str(indices.shape)} must be 3-5-D alike")
    if indices.dtype.kind not in "iu":
        raise TypeError(f"{op}: indices must be an integer array, got {indices.dtype}")
    check_same_device(op, dx=dx, indices=indices)
    check_float(op, dx=dx)
    return backend("pooling", dx).max_unpooling_backward(dx, indices, layout=layout)
