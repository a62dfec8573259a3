"""PyTorch's legacy constructors, still common in teaching code: `FloatTensor`, `LongTensor`, ...
and `autograd.Variable`.

`minidl.FloatTensor([1, 2])` and `minidl.FloatTensor(2, 3)` build tensors of that dtype (as
torch.FloatTensor), and `isinstance(t, minidl.FloatTensor)` checks the dtype (a float32 CPU or GPU
tensor: minidl has one Tensor class for both devices, unlike torch.cuda.FloatTensor).
"""
from __future__ import annotations

import numpy as np

from .tensor import Tensor


class _TypedTensorMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype == cls.dtype

    def __call__(cls, *data, device=None):
        if len(data) == 1 and isinstance(data[0], Tensor):
            return data[0].type(cls.dtype)
        return Tensor(*data, dtype=cls.dtype, device=device)


def _typed(name, dtype):
    return _TypedTensorMeta(name, (), {"dtype": np.dtype(dtype), "__doc__": f"A {np.dtype(dtype)} tensor (torch.{name})."})


FloatTensor = _typed("FloatTensor", np.float32)
DoubleTensor = _typed("DoubleTensor", np.float64)
HalfTensor = _typed("HalfTensor", np.float16)
LongTensor = _typed("LongTensor", np.int64)
IntTensor = _typed("IntTensor", np.int32)
ShortTensor = _typed("ShortTensor", np.int16)
CharTensor = _typed("CharTensor", np.int8)
ByteTensor = _typed("ByteTensor", np.uint8)
BoolTensor = _typed("BoolTensor", np.bool_)


def Variable(data, requires_grad=False, volatile=False):  # noqa: N802 - PyTorch's name
    """torch.autograd.Variable: since PyTorch 0.4 a Variable is a Tensor. Returns a tensor sharing
    data's array, outside any graph, that requires grad when asked (volatile is ignored, as torch)."""
    t = data.detach() if isinstance(data, Tensor) else Tensor(data)
    if requires_grad:
        t.requires_grad_(True)
    return t
