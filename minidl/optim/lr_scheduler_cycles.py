"""More of torch.optim.lr_scheduler (part of minidl.optim.lr_scheduler, PyTorch's names and formulas):

    ConstantLR        the base lr times `factor` until total_iters, then the base lr (a warm-up, often in SequentialLR)
    MultiplicativeLR  each step multiplies the lr by lr_lambda(epoch)
    PolynomialLR      the base lr times (1 - epoch / total_iters) ** power, then 0
    CyclicLR          Smith's cyclical learning rates (triangular, triangular2, exp_range), momentum cycled opposite
    ChainedScheduler  several schedulers stepped together, their factors multiplying

    sched = CyclicLR(opt, base_lr=1e-3, max_lr=6e-3, step_size_up=2000)   # stepped per batch
"""
from __future__ import annotations

import math
import numbers

from .lr_scheduler import LambdaLR, LRScheduler, _number, _per_group, _set_momentum
from .lr_scheduler_sequences import _load_schedulers_state, _schedulers_state


def _iters(cls, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{cls}: total_iters must be an integer >= 0, got {value!r}")
    return int(value)


class ConstantLR(LRScheduler):
    """lr = base lr * factor for the first total_iters epochs, then the base lr. Recursive, as PyTorch's."""

    def __init__(self, optimizer, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1):
        factor = _number("ConstantLR", "factor", factor)
        if not 0 <= factor <= 1:
            raise ValueError(f"ConstantLR: factor must be in [0, 1] (it multiplies the lr), got {factor}")
        self.factor, self.total_iters = factor, _iters("ConstantLR", total_iters)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        lrs = self._current_lrs()
        if self.last_epoch == 0:
            return [lr * self.factor for lr in lrs]
        if self.last_epoch != self.total_iters:
            return lrs
        return [lr * (1.0 / self.factor) for lr in lrs]

    def _closed_form(self):
        return [b * (self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor)) for b in self.base_lrs]


class MultiplicativeLR(LambdaLR):
    """lr(epoch) = lr(epoch - 1) * lr_lambda(epoch): one function, or one per parameter group (LambdaLR's checks and
    state dict; recursive where LambdaLR is not)."""

    def get_lr(self):
        lrs = self._current_lrs()
        if self.last_epoch > 0:
            return [lr * f(self.last_epoch) for lr, f in zip(lrs, self.lr_lambdas)]
        return lrs


class PolynomialLR(LRScheduler):
    """lr = base lr * (1 - epoch / total_iters) ** power until total_iters, then 0 (recursive, as PyTorch's)."""

    def __init__(self, optimizer, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1):
        self.total_iters = _iters("PolynomialLR", total_iters)
        self.power = _number("PolynomialLR", "power", power)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        lrs, t, n = self._current_lrs(), self.last_epoch, self.total_iters
        if t == 0 or t > n:
            return lrs
        factor = ((1.0 - t / n) / (1.0 - (t - 1) / n)) ** self.power
        return [lr * factor for lr in lrs]

    def _closed_form(self):
        return [b * (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters) ** self.power
                for b in self.base_lrs]


class CyclicLR(LRScheduler):
    """Smith, "Cyclical Learning Rates for Training Neural Networks" (2017): the lr climbs from base_lr to max_lr
    over step_size_up steps (batches) and back over step_size_down, the height of each cycle scaled by mode
    (triangular: 1; triangular2: halved each cycle; exp_range: gamma ** step) or a scale_fn; with cycle_momentum the
    momentum (or Adam's beta1) moves the other way, from max_momentum to base_momentum."""

    def __init__(self, optimizer, base_lr, max_lr, step_size_up=2000, step_size_down=None, mode="triangular",
                 gamma=1.0, scale_fn=None, scale_mode="cycle", cycle_momentum=True, base_momentum=0.8,
                 max_momentum=0.9, last_epoch=-1):
        groups = optimizer.param_groups
        base_lrs, self.max_lrs = _per_group("base_lr", base_lr, groups, "CyclicLR"), _per_group("max_lr", max_lr, groups,
                                                                                                "CyclicLR")
        if last_epoch == -1:
            for lr, group in zip(base_lrs, groups):
                group["lr"] = lr
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        if up <= 0 or down <= 0:
            raise ValueError(f"CyclicLR: step_size_up and step_size_down must be positive, got {up}, {down}")
        self.total_size, self.step_ratio = up + down, up / (up + down)
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError(f"CyclicLR: mode must be 'triangular', 'triangular2' or 'exp_range' (or give scale_fn), "
                             f"got {mode!r}")
        self.mode, self.gamma = mode, gamma
        if scale_fn is None:
            self.scale_mode = "iterations" if mode == "exp_range" else "cycle"
        else:
            self.scale_mode = scale_mode
        self._scale_fn_custom = scale_fn
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError("CyclicLR: optimizer must support momentum or beta1 with `cycle_momentum` enabled")
            self.use_beta1 = "betas" in optimizer.defaults
            self.base_momentums = _per_group("base_momentum", base_momentum, groups, "CyclicLR")
            self.max_momentums = _per_group("max_momentum", max_momentum, groups, "CyclicLR")
            if last_epoch == -1:
                for m, group in zip(self.max_momentums, groups):
                    _set_momentum(group, m, self.use_beta1)
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def scale_fn(self, x):
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma ** x

    def get_lr(self):
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        scale = x / self.step_ratio if x <= self.step_ratio else (x - 1) / (self.step_ratio - 1)
        where = cycle if self.scale_mode == "cycle" else self.last_epoch
        lrs = [b + (m - b) * scale * self.scale_fn(where) for b, m in zip(self.base_lrs, self.max_lrs)]
        if self.cycle_momentum:
            for group, b, m in zip(self.optimizer.param_groups, self.base_momentums, self.max_momentums):
                _set_momentum(group, m - (m - b) * scale * self.scale_fn(where), self.use_beta1)
        return lrs

    def state_dict(self):
        state = super().state_dict()
        state.pop("_scale_fn_custom", None)   # (a function: torch leaves it out too)
        return state

    def load_state_dict(self, state_dict):
        custom = self._scale_fn_custom
        super().load_state_dict(state_dict)
        self._scale_fn_custom = custom


class ChainedScheduler(LRScheduler):
    """Several schedulers of one optimizer stepped together at each step(), each from the lr the one before it set
    (so their factors multiply)."""

    def __init__(self, schedulers, optimizer=None):
        schedulers = list(schedulers)
        if not schedulers:
            raise ValueError("ChainedScheduler: expects at least one scheduler")
        optimizer = optimizer or schedulers[0].optimizer
        for i, scheduler in enumerate(schedulers):
            if getattr(scheduler, "optimizer", None) is not optimizer:
                raise ValueError(f"ChainedScheduler: schedulers[{i}] drives another optimizer than schedulers[0]")
        self.optimizer, self._schedulers = optimizer, schedulers
        self._last_lr = [group["lr"] for group in optimizer.param_groups]

    def step(self, epoch=None):
        for scheduler in self._schedulers:
            scheduler.step()
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self):
        return _schedulers_state(self)

    def load_state_dict(self, state_dict):
        _load_schedulers_state(self, state_dict)
