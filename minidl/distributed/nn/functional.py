"""Differentiable collectives (torch.distributed.nn.functional).

all_reduce(t) returns, on every rank, the sum of every rank's t, and its backward is again an all-reduce:
rank r's output depends on every rank's input, so the gradient of the total loss with respect to rank r's
input is the sum of every rank's output gradient. SyncBatchNorm is built on it.
"""
from __future__ import annotations

from ...autograd.function import Function
from .. import _backend_for, _op_name, ReduceOp


class AllReduceSum(Function):
    saves_inputs = False

    def forward(self, a, backend=None):
        self.backend = backend
        out = a.copy()                 # a new, C-contiguous array: the input stays as it was
        backend.all_reduce(out, "sum").wait()
        return out

    def backward(self, g):
        g = g.copy()
        self.backend.all_reduce(g, "sum").wait()
        return g


def all_reduce(tensor, op=ReduceOp.SUM, group=None):
    """A new tensor: the sum over ranks of `tensor`, with a gradient (only SUM, as torch's autograd all_reduce)."""
    if group is not None:
        raise NotImplementedError("all_reduce: minidl has one process group, the world; pass group=None")
    if _op_name(op, "all_reduce") != "sum":
        raise NotImplementedError("distributed.nn.functional.all_reduce: only ReduceOp.SUM has a gradient here")
    return AllReduceSum.apply(tensor, backend=_backend_for("all_reduce", tensor))
