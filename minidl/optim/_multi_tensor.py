"""The GPU side of the optimizers: parameter groups whose learning rate lives on the device, and the
multi-tensor update path (one or two kernel launches per group, kernels/multi_tensor.cu).

With `fused=True` on the CPU the same path runs the NumPy reference of the multi-tensor primitives
(minidl/primitives/cpu/multi_tensor.py), with the "device" arrays in host memory: the CPU tests
exercise this bookkeeping, and torch also accepts fused=True for CPU optimizers.

ParamGroup is a dict, so `group["lr"]` reads and writes like a float for users, schedulers and
torch-compatible state dicts. Once the group has run on the GPU it also owns a small float64 CuPy
array with its scalar hyper-parameters (lr, momentum, betas, eps, weight decay...): `group[k] = v`
writes the slot at once (a one-element write queued on the stream, no host sync), and the update
kernel reads the array. So a CUDA graph that captured the optimizer step sees the learning rate and
momentum (or beta1) that a scheduler such as OneCycleLR sets between replays.
"""
from __future__ import annotations

from .. import _device


class ParamGroup(dict):
    """A parameter group (a dict: "params" plus hyper-parameters) whose scalar hyper-parameters are
    mirrored in a device array once the multi-tensor path has run."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._device_hp = None      # float64 array (CuPy on the GPU) of the values of _hp_keys
        self._hp_keys = ()
        self._steps = None          # Adam / RMSprop: float32 array, one step count per parameter

    def _hp_value(self, key) -> float:
        if key in ("beta1", "beta2"):
            return float(self["betas"][0 if key == "beta1" else 1])
        return float(self[key])

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        if self._device_hp is not None:
            for i, k in enumerate(self._hp_keys):
                if k == key or (key == "betas" and k in ("beta1", "beta2")):
                    self._device_hp[i] = self._hp_value(k)   # a one-element write queued on the stream

    def __reduce_ex__(self, protocol):  # copy/deepcopy: a plain dict of the same items
        return (dict, (dict(self),))

    def device_hparams(self, keys, like=None):
        """The float64 array holding group[k] for k in keys ("beta1"/"beta2" are the two betas), on
        the device of the array `like` (default: the group's first parameter); created on the first
        call, then kept up to date by every group[key] = value."""
        keys = tuple(keys)
        like = self["params"][0]._data if like is None else like
        xp = _device.get_array_module(like)
        if self._device_hp is None or self._hp_keys != keys or _device.get_array_module(self._device_hp) is not xp:
            self._hp_keys = keys
            self._device_hp = xp.asarray([self._hp_value(k) for k in keys], dtype=xp.float64)
        return self._device_hp

    def device_lr(self):
        """The group's learning rate as the 0-d device array the kernels read (a view of hparams[0])."""
        if self._device_hp is None:
            self.device_hparams(("lr",))
        return self._device_hp[0:1].reshape(())


def address(a) -> int:
    """Where an array's data starts (CuPy or NumPy)."""
    return int(a.data.ptr) if _device.is_cuda_array(a) else int(a.__array_interface__["data"][0])


def as_param_group(group) -> ParamGroup:
    return group if isinstance(group, ParamGroup) else ParamGroup(group)
