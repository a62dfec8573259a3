"""Argument checks shared by the functional families (raised at the framework boundary, naming the op),
the reduction of the losses, and the unbatched-input rule of the spatial ops."""
from __future__ import annotations

from ...ops import check_float_tensor as _check_float_tensor, check_tensor as _check_tensor  # noqa: F401 (re-exported)


def _check_same_device(op, **tensors):
    kinds = {k: ("cuda" if t.is_cuda else "cpu") for k, t in tensors.items() if t is not None}
    if len(set(kinds.values())) > 1:
        raise RuntimeError(f"{op}: all tensors must be on one device, got " + ", ".join(f"{k} on {v}" for k, v in kinds.items()))


def _check_same_dtype(op, **tensors):
    dtypes = {k: t.dtype for k, t in tensors.items() if t is not None}
    if len(set(dtypes.values())) > 1:
        raise TypeError(f"{op}: all tensors must have one dtype, got " + ", ".join(f"{k}={v}" for k, v in dtypes.items()))


def _check_reduction(op, reduction):
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _batched(op, input, spatial_dims):
    """(input with a batch dim, whether one was added). Accepts (N, C, *spatial) or (C, *spatial)."""
    _check_float_tensor(op, "input", input)
    if input.ndim == spatial_dims + 2:
        return input, False
    if input.ndim == spatial_dims + 1:
        return input.unsqueeze(0), True
    raise ValueError(
        f"{op}: expected a {spatial_dims + 2}-D input (N, C, {spatial_dims} spatial dims) or a "
        f"{spatial_dims + 1}-D unbatched one, got shape {input.shape}"
    )
