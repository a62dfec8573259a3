"""DLPack: hand a tensor to another library, or take one from it, without copying.

DLPack (https://dmlc.github.io/dlpack/latest/) is the common in-memory tensor description that NumPy,
CuPy, PyTorch, JAX and others exchange: a pointer, a shape, strides, a dtype and a device. Nothing is
copied: after `t = torch.from_dlpack(x)` the torch tensor and the minidl tensor share one buffer, and
a write through either is seen by both. (That is the point, and also the danger.)

minidl holds a NumPy array (CPU) or a CuPy array (GPU) inside every tensor, and both already speak
DLPack, so minidl's part is small and readable:

    Tensor.__dlpack__(stream=None, ...)   the producer side: the array's own __dlpack__, after minidl's
                                          checks (a tensor that requires grad is refused, as torch does)
    Tensor.__dlpack_device__()            (device type, device id): (1, 0) CPU, (2, n) CUDA GPU n
    minidl.from_dlpack(obj)               the consumer side: NumPy reads CPU tensors, CuPy GPU ones

Streams (GPU). The consumer names the stream it will use; the producer makes that stream wait for
the work already queued on its own stream before handing the pointer over (the DLPack protocol's
`stream` argument). CuPy implements both sides; minidl queues its kernels on CuPy's current stream,
so `torch.from_dlpack(x)` of a minidl tensor whose kernels are still running is safe, and so is
`minidl.from_dlpack(t)` of a torch tensor (CuPy passes its current stream to torch).

Limits: bfloat16 cannot travel through NumPy's DLPack (NumPy has no bfloat16 in its DLPack dtype
table): convert, or reinterpret the bits as int16 and back. Legacy DLPack capsules (torch.utils.dlpack.
to_dlpack) are read on the GPU through CuPy; on the CPU, pass the tensor itself (it has __dlpack__).
"""
from __future__ import annotations

import numpy as np

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
_DEVICE_NAMES = {1: "CPU", 2: "CUDA", 3: "CUDA host (pinned)", 4: "OpenCL", 7: "Vulkan", 8: "Metal",
                 9: "VPI", 10: "ROCm", 11: "ROCm host", 13: "CUDA managed", 14: "oneAPI"}


def _is_capsule(obj) -> bool:
    return type(obj).__name__ == "PyCapsule"


def check_exportable(tensor, op: str = "__dlpack__") -> None:
    """What minidl refuses to export (the producer's checks)."""
    if tensor.requires_grad:
        raise RuntimeError(f"{op}: can't export a tensor that requires grad (DLPack carries no autograd "
                           "history); use tensor.detach()")
    from .._dtypes import bfloat16

    if tensor.dtype == bfloat16 and not tensor.is_cuda:
        raise BufferError(f"{op}: NumPy's DLPack cannot carry bfloat16 (shape {tuple(tensor.shape)}); convert "
                          "it (tensor.float()) or reinterpret the bits (tensor.view(minidl.int16)) and back")


def from_dlpack(ext_tensor):
    """A minidl Tensor sharing ext_tensor's memory (no copy): any object with __dlpack__ and
    __dlpack_device__ (a torch, CuPy, NumPy or JAX array, or a minidl Tensor), or a legacy DLPack capsule."""
    from ..autograd.tensor import Tensor

    if isinstance(ext_tensor, Tensor):
        return ext_tensor
    if _is_capsule(ext_tensor):
        try:
            import cupy
        except ImportError:
            raise TypeError("from_dlpack: a legacy DLPack capsule can only be read on the GPU (through CuPy); "
                            "on the CPU pass the tensor itself (torch/NumPy/JAX arrays have __dlpack__)") from None
        return Tensor._make(cupy.from_dlpack(ext_tensor))
    if not hasattr(ext_tensor, "__dlpack__") or not hasattr(ext_tensor, "__dlpack_device__"):
        raise TypeError(f"from_dlpack: expected an object with __dlpack__ and __dlpack_device__ (a torch, CuPy, "
                        f"NumPy or JAX array), got {type(ext_tensor).__name__}")
    device_type, device_id = (int(v) for v in ext_tensor.__dlpack_device__())
    if device_type in (KDL_CPU, KDL_CUDA_HOST):
        try:
            array = np.from_dlpack(ext_tensor)
        except (BufferError, TypeError, RuntimeError) as e:
            raise BufferError(f"from_dlpack: NumPy cannot take this {type(ext_tensor).__name__} ({e}); a bfloat16 "
                              "tensor must be converted first (e.g. t.float())") from None
    elif device_type in (KDL_CUDA, KDL_CUDA_MANAGED):
        from .. import cuda as _cuda

        if not _cuda.is_available():
            raise RuntimeError(f"from_dlpack: the tensor is on CUDA device {device_id}, but "
                               f"{_cuda.unavailable_reason()}")
        import cupy

        with cupy.cuda.Device(device_id):
            array = cupy.from_dlpack(ext_tensor)   # CuPy hands its current stream to the producer
    else:
        name = _DEVICE_NAMES.get(device_type, f"device type {device_type}")
        raise BufferError(f"from_dlpack: minidl holds CPU and CUDA tensors; this one is on {name} "
                          f"(DLPack device {device_type}, {device_id})")
    return Tensor._make(array)


def to_dlpack(tensor):
    """A DLPack capsule of the tensor (torch.utils.dlpack.to_dlpack): the older, one-shot form.
    Prefer passing the tensor itself to the consumer's from_dlpack, which negotiates the stream."""
    return tensor.__dlpack__()
