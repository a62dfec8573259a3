"""GradScaler: dynamic loss scaling for float16 training, with torch.amp.GradScaler's API.

float16 holds magnitudes from 6e-8 (subnormal) to 65504. Gradients of a float16 forward pass are
often smaller than that range's bottom and would flush to zero; multiplying the loss by a large
scale S (2**16 at first) moves every gradient up by S, and unscale_ divides the float32 gradients
by S again before the update. A scale that is too large makes some gradient overflow to inf: that
step is skipped and S is halved; after `growth_interval` steps without overflow S doubles. So S
finds the largest value that does not overflow. (bfloat16 has float32's range and needs no scaling;
a disabled GradScaler is then a no-op with the same code.)

No host read per step on the GPU: the scale, the growth tracker and found_inf are 0-d arrays on the
device; unscale_ and update() are device array math (update's growth/backoff is an `xp.where`).
The skip itself is where the host would have to look at found_inf. An optimizer that sets
`_step_supports_amp_scaling = True` takes `step(grad_scale=<0-d array>, found_inf=<0-d float32
array>)` and skips the whole update (parameters, moments, step count) on the device where
found_inf != 0, so nothing waits for the GPU. For any other optimizer, step() falls back to
torch's behaviour: one host read of found_inf, then optimizer.step() only if it is zero.
"""
from __future__ import annotations

import enum
import warnings

import numpy as np

from .. import _device
from .. import primitives as P
from .._dtypes import float16, float32


class OptState(enum.Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _per_optimizer_state():
    return {"stage": OptState.READY, "found_inf": None}


class GradScaler:
    """GradScaler(device="cuda", init_scale=2.**16, growth_factor=2.0, backoff_factor=0.5,
    growth_interval=2000, enabled=True), as torch.amp.GradScaler.

    A training step:  scaler.scale(loss).backward(); scaler.step(opt); scaler.update().
    To clip gradients, call scaler.unscale_(opt) before clipping, then step as usual.
    """

    def __init__(self, device: str = "cuda", init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        self._device = str(device)
        device_type = _device.Device(self._device).type
        self._enabled = bool(enabled)
        if self._enabled and device_type == "cuda" and _device.cuda_unavailable_reason() is not None:
            warnings.warn("GradScaler is enabled, but CUDA is not available; disabling it "
                          f"({_device.cuda_unavailable_reason()})", stacklevel=2)
            self._enabled = False
        if self._enabled:
            if growth_factor <= 1.0:
                raise ValueError(f"GradScaler: growth_factor should be > 1, got {growth_factor}")
            if not 0.0 < backoff_factor < 1.0:
                raise ValueError(f"GradScaler: backoff_factor should be in (0, 1), got {backoff_factor}")
            if int(growth_interval) <= 0:
                raise ValueError(f"GradScaler: growth_interval should be a positive int, got {growth_interval}")
        self._init_scale = float(init_scale)
        self._scale = None  # 0-d float32 array on the device of the first scaled output
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._init_growth_tracker = 0
        self._growth_tracker = None  # 0-d int32 array, beside the scale
        self._per_optimizer_states: dict = {}

    # ------------------------------------------------------------------------------------------
    # scale
    # ------------------------------------------------------------------------------------------
    def _lazy_init(self, xp):
        if self._scale is None:
            self._scale = xp.full((), self._init_scale, dtype=float32)
            self._growth_tracker = xp.full((), self._init_growth_tracker, dtype=np.int32)

    def _state(self, optimizer):
        return self._per_optimizer_states.setdefault(id(optimizer), _per_optimizer_state())

    def scale(self, outputs):
        """outputs * scale: a tensor, or a list/tuple (nested) of tensors. Unchanged when disabled."""
        from ..autograd.tensor import Tensor

        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            self._lazy_init(_device.get_array_module(outputs._data))
            scale = Tensor._make(_device.move_array(self._scale, outputs.device))
            return outputs * scale
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError(f"GradScaler.scale: outputs must be a Tensor or a list/tuple of them, got "
                         f"{type(outputs).__name__}")

    # ------------------------------------------------------------------------------------------
    # unscale_ and the inf/NaN check, on the device
    # ------------------------------------------------------------------------------------------
    def _grads(self, optimizer):
        return [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]

    def _check_and_unscale(self, optimizer, unscale: bool, allow_fp16: bool):
        """found_inf (0-d float32 on the device): 1.0 if any gradient holds inf or NaN, else 0.0.
        With unscale, every gradient is multiplied in place by float32(1 / float64(scale)) (as torch)."""
        grads = self._grads(optimizer)
        xp = _device.get_array_module(self._scale)
        found_inf = xp.zeros((), dtype=float32)
        if not allow_fp16 and any(g.dtype == float16 for g in grads):   # before any is touched: none half-unscaled
            raise ValueError("GradScaler: attempting to unscale float16 gradients: keep the parameters "
                             "in float32 and run the forward pass under minidl.autocast instead")
        arrays = [g._data for g in grads]
        if arrays and xp is not np and P.multi_tensor_supported(*arrays):   # one launch for the whole list
            P.multi_tensor_unscale(arrays, self._scale if unscale else None, found_inf)
            return found_inf
        inv_scale = (1.0 / self._scale.astype(np.float64)).astype(float32) if unscale else None
        for g in grads:
            arr = g._data
            found_inf = xp.maximum(found_inf, (~xp.isfinite(arr)).any().astype(float32))
            if inv_scale is not None:
                arr *= inv_scale.astype(arr.dtype)
        return found_inf

    def unscale_(self, optimizer):
        """Divide optimizer's gradients by the scale, in place, and record whether any is inf/NaN.
        Call it at most once per optimizer between update()s (e.g. before clipping gradients)."""
        if not self._enabled:
            return
        self._require_scale("unscale_")
        state = self._state(optimizer)
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        state["found_inf"] = self._check_and_unscale(optimizer, True, allow_fp16=False)
        state["stage"] = OptState.UNSCALED

    # ------------------------------------------------------------------------------------------
    # step and update
    # ------------------------------------------------------------------------------------------
    def step(self, optimizer, *args, **kwargs):
        """Unscale (if unscale_ was not called) and step the optimizer unless a gradient is inf/NaN.

        Optimizers with `_step_supports_amp_scaling = True` get step(grad_scale=..., found_inf=...)
        and skip on the device (no host read; grad_scale is None when the gradients are already
        unscaled). Other optimizers: one host read of found_inf here (torch's behaviour), then
        optimizer.step(*args, **kwargs) only if no inf/NaN was found. Returns what step returned.
        """
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._require_scale("step")
        state = self._state(optimizer)
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if getattr(optimizer, "_step_supports_amp_scaling", False):
            if state["stage"] is OptState.READY:
                state["found_inf"] = self._check_and_unscale(optimizer, False, allow_fp16=True)
            grad_scale = None if state["stage"] is OptState.UNSCALED else self._scale
            result = optimizer.step(*args, grad_scale=grad_scale, found_inf=state["found_inf"], **kwargs)
            state["stage"] = OptState.STEPPED
            return result
        if state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        result = None
        if not float(state["found_inf"]):  # the one host read of this path
            result = optimizer.step(*args, **kwargs)
        state["stage"] = OptState.STEPPED
        return result

    def update(self, new_scale=None):
        """Back off (scale *= backoff_factor) if any stepped optimizer found inf/NaN, else count a good
        step and grow (scale *= growth_factor) after growth_interval of them; all on the device.
        new_scale (a float or a 0-d tensor) sets the scale instead."""
        if not self._enabled:
            return
        self._require_scale("update")
        xp = _device.get_array_module(self._scale)
        if new_scale is not None:
            from ..autograd.tensor import Tensor

            if isinstance(new_scale, Tensor):
                if new_scale.numel() != 1:
                    raise ValueError(f"GradScaler.update: new_scale must hold one element, got shape {new_scale.shape}")
                self._scale[...] = _device.move_array(new_scale._data.reshape(()), _device.device_of(self._scale))
            else:
                self._scale[...] = float(new_scale)
        else:
            found = [s["found_inf"] for s in self._per_optimizer_states.values() if s["found_inf"] is not None]
            if not found:
                raise RuntimeError("GradScaler.update: no inf checks were recorded prior to update() "
                                   "(call scaler.step(optimizer) first)")
            found_inf = found[0]
            for f in found[1:]:
                found_inf = found_inf + f
            new_scale, new_tracker = _update_scale(
                xp, self._scale, self._growth_tracker, found_inf,
                self._growth_factor, self._backoff_factor, self._growth_interval)
            # In place: the two arrays keep their addresses (a captured CUDA graph, or a tensor made
            # by scale(), sees the new values).
            self._scale[...] = new_scale
            self._growth_tracker[...] = new_tracker
        self._per_optimizer_states = {}

    def _require_scale(self, op):
        if self._scale is None:
            raise RuntimeError(f"GradScaler.{op}: no scale yet; call scaler.scale(loss) (and backward) first")

    # ------------------------------------------------------------------------------------------
    # Getters, setters and checkpoints (these read the device: call them outside the hot loop)
    # ------------------------------------------------------------------------------------------
    def get_scale(self) -> float:
        """The current scale as a Python float (1.0 when disabled); reads the device."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale)

    def _get_scale_async(self):
        return self._scale

    def get_growth_factor(self):
        return self._growth_factor

    def set_growth_factor(self, new_factor):
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self):
        return self._backoff_factor

    def set_backoff_factor(self, new_factor):
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self):
        return self._growth_interval

    def set_growth_interval(self, new_interval):
        self._growth_interval = int(new_interval)

    def _get_growth_tracker(self) -> int:
        if not self._enabled:
            return 0
        return self._init_growth_tracker if self._growth_tracker is None else int(self._growth_tracker)

    def is_enabled(self) -> bool:
        return self._enabled

    def state_dict(self) -> dict:
        """{"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"} as torch;
        empty when disabled."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker()}

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a "
                               "disabled instance of GradScaler.")
        missing = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"} - set(state_dict)
        if missing:
            raise KeyError(f"GradScaler.load_state_dict: missing entries {sorted(missing)}")
        try:   # every value read before any is kept: a bad entry leaves the scaler as it was
            values = (float(state_dict["scale"]), float(state_dict["growth_factor"]),
                      float(state_dict["backoff_factor"]), int(state_dict["growth_interval"]),
                      int(state_dict["_growth_tracker"]))
        except (TypeError, ValueError) as e:
            raise TypeError(f"GradScaler.load_state_dict: an entry is not a number ({e})") from None
        (self._init_scale, self._growth_factor, self._backoff_factor, self._growth_interval,
         self._init_growth_tracker) = values
        if self._scale is not None:  # in place, on their device
            self._scale[...] = self._init_scale
            self._growth_tracker[...] = self._init_growth_tracker


def _update_scale(xp, scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    """torch._amp_update_scale_ as device array math: no branch on a device value.

    found_inf:  scale *= backoff_factor, tracker = 0.
    otherwise:  tracker += 1; when it reaches growth_interval, scale *= growth_factor (only if that
                stays finite) and tracker = 0.
    """
    overflow = found_inf > 0
    successful = growth_tracker + 1
    grow = xp.logical_and(~overflow, successful >= growth_interval)
    grown = scale * xp.float32(growth_factor)
    grown = xp.where(xp.isfinite(grown), grown, scale)
    new_scale = xp.where(overflow, scale * xp.float32(backoff_factor), xp.where(grow, grown, scale))
    new_tracker = xp.where(xp.logical_or(overflow, grow), 0, successful)
    return new_scale.astype(float32), new_tracker.astype(np.int32)
