"""The GPU side of the optimizers: parameter groups whose learning rate lives on the device, and the
multi-tensor update path (one or two kernel launches per group, kernels/multi_tensor.cu).

With `fused=True` on the CPU the same path runs the NumPy reference of the multi-tensor primitives
(minidl/primitives/cpu/multi_tensor.py), with the "device" arrays in host memory: the CPU tests
exercise this bookkeeping, and torch also accepts fused=True for CPU optimizers.

ParamGroup is a dict, so `group["lr"]` reads and writes like a float for users, schedulers and
torch-compatible state dicts. Once the group has run on the GPU it also owns a 0-d float64 CuPy
array with the same value: `group["lr"] = v` writes it at once (a one-element fill queued on the
stream, no host sync), and the update kernel reads it. So a CUDA graph that captured the optimizer
step sees the rate the scheduler sets between replays.
"""
from __future__ import annotations

from .. import _device


class ParamGroup(dict):
    """A parameter group (a dict: "params" plus hyper-parameters) whose "lr" is mirrored on the device."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._device_lr = None      # 0-d float64 CuPy array, created by the first GPU step
        self._steps = None          # Adam: float32 CuPy array, one step count per parameter

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        if key == "lr" and self._device_lr is not None:
            self._device_lr.fill(float(value))

    def __reduce_ex__(self, protocol):  # copy/deepcopy: a plain dict of the same items
        return (dict, (dict(self),))

    def device_lr(self, like=None):
        """The 0-d float64 array holding group["lr"], on the device of the array `like` (default: the
        group's first parameter), created on the first call."""
        if self._device_lr is None:
            like = self["params"][0]._data if like is None else like
            xp = _device.get_array_module(like)
            self._device_lr = xp.full((), float(self["lr"]), dtype=xp.float64)
        return self._device_lr


def address(a) -> int:
    """Where an array's data starts (CuPy or NumPy)."""
    return int(a.data.ptr) if _device.is_cuda_array(a) else int(a.__array_interface__["data"][0])


def as_param_group(group) -> ParamGroup:
    return group if isinstance(group, ParamGroup) else ParamGroup(group)
