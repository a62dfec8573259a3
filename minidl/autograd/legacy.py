"""PyTorch's legacy constructors, still common in teaching code: `FloatTensor`, `LongTensor`, ...
and `autograd.Variable`.

`minidl.FloatTensor([1, 2])` and `minidl.FloatTensor(2, 3)` build tensors of that dtype (as
torch.FloatTensor), and `isinstance(t, minidl.FloatTensor)` checks the dtype and the device, as torch's: a float32
CPU tensor. `minidl.cuda.FloatTensor` and the other cuda forms build and check GPU tensors, so the older programs'
`Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor` and `x.type(Tensor)` work (minidl has one
Tensor class for both devices; these are names for a (dtype, device) pair).
"""
from __future__ import annotations

import numpy as np

from .tensor import Tensor


class _TypedTensorMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype == cls.dtype and obj.is_cuda == cls.is_cuda

    def __call__(cls, *data, device=None):
        if len(data) == 1 and isinstance(data[0], Tensor):
            return data[0].type(cls)
        return Tensor(*data, dtype=cls.dtype, device=device if device is not None else cls.device)

    def __repr__(cls):
        return f"<class '{cls.legacy_name}'>"


def _typed(name, dtype, device="cpu"):
    prefix = "torch.cuda." if device == "cuda" else "torch."
    return _TypedTensorMeta(name, (), {"dtype": np.dtype(dtype), "device": device, "is_cuda": device == "cuda",
                                       "legacy_name": prefix + name,
                                       "__doc__": f"A {np.dtype(dtype)} {device} tensor ({prefix}{name})."})


def cuda_typed(name):
    """torch.cuda.<name>: the GPU form of a legacy type (minidl.cuda's FloatTensor, LongTensor, ...)."""
    return _typed(name, _DTYPES[name], "cuda")


FloatTensor = _typed("FloatTensor", np.float32)
DoubleTensor = _typed("DoubleTensor", np.float64)
HalfTensor = _typed("HalfTensor", np.float16)
LongTensor = _typed("LongTensor", np.int64)
IntTensor = _typed("IntTensor", np.int32)
ShortTensor = _typed("ShortTensor", np.int16)
CharTensor = _typed("CharTensor", np.int8)
ByteTensor = _typed("ByteTensor", np.uint8)
BoolTensor = _typed("BoolTensor", np.bool_)


def _bfloat16():
    from .. import _dtypes

    return _dtypes.bfloat16


BFloat16Tensor = _typed("BFloat16Tensor", _bfloat16())
_DTYPES = {"FloatTensor": np.float32, "DoubleTensor": np.float64, "HalfTensor": np.float16, "LongTensor": np.int64,
           "IntTensor": np.int32, "ShortTensor": np.int16, "CharTensor": np.int8, "ByteTensor": np.uint8,
           "BoolTensor": np.bool_, "BFloat16Tensor": _bfloat16()}


def Variable(data, requires_grad=False, volatile=False):  # noqa: N802 - PyTorch's name
    """torch.autograd.Variable: since PyTorch 0.4 a Variable is a Tensor. Returns a tensor sharing
    data's array, outside any graph, that requires grad when asked (volatile is ignored, as torch)."""
    t = data.detach() if isinstance(data, Tensor) else Tensor(data)
    if requires_grad:
        t.requires_grad_(True)
    return t
