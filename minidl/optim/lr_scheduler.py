"""Learning-rate schedules: rules that set each parameter group's "lr" as training goes on.

A scheduler is stepped once per epoch (or per batch, for OneCycleLR), after `optimizer.step()`:

    sched = StepLR(opt, step_size=30, gamma=0.1)
    for epoch in range(90):
        train_one_epoch(); sched.step()

It counts steps in `last_epoch` (-1 before the first; the constructor takes step 0) and writes the new
rates into `optimizer.param_groups[i]["lr"]`. Most schedules here are written, as in PyTorch, in
*recursive* form: the next lr is computed from the current group["lr"], which is what makes them match
torch step for step (and lets two schedulers be chained on one optimizer).
"""
from __future__ import annotations

import math
import numbers
import types
from collections import Counter

from .optimizer import Optimizer


def _number(cls: str, name: str, value) -> float:
    """A real number (not a bool, not a string): TypeError naming the scheduler and the argument."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{cls}: {name} must be a number, got {type(value).__name__} {value!r}")
    return value


def _positive_int(cls: str, name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or int(value) != value:
        raise TypeError(f"{cls}: {name} must be an integer, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{cls}: {name} must be a positive integer, got {value!r}")
    return int(value)


class LRScheduler:
    """Base class: subclasses implement `get_lr()` -> the new lr of each group at `self.last_epoch`."""

    def __init__(self, optimizer, last_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__}: {type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        f"{type(self).__name__}: param_groups[{i}] has no 'initial_lr', needed to resume with "
                        f"last_epoch={last_epoch}; load the optimizer's state dict first"
                    )
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self) -> None:
        """The constructor's first step (epoch 0), which sets the starting lr (also SequentialLR's restart of its
        first scheduler)."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list[float]:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} does not implement get_lr")

    def step(self, epoch=None) -> None:
        """Advance one epoch and set each group's lr. All or nothing: if get_lr fails (a OneCycleLR
        stepped past total_steps), the scheduler and the optimizer stay as they were. epoch (PyTorch's deprecated
        argument, what SequentialLR passes at a milestone): jump to that epoch, by the schedule's closed form where
        it has one."""
        previous = self.last_epoch
        self.last_epoch = previous + 1 if epoch is None else epoch
        self._step_count += 1
        try:
            closed_form = getattr(self, "_closed_form", None)
            values = list(closed_form() if epoch is not None and closed_form is not None else self.get_lr())
            if len(values) != len(self.optimizer.param_groups):
                raise ValueError(
                    f"{type(self).__name__}: get_lr gave {len(values)} values for {len(self.optimizer.param_groups)} groups"
                )
        except BaseException:
            self.last_epoch = previous
            self._step_count -= 1
            raise
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
        """The learning rates the last step() set, one per parameter group."""
        return list(self._last_lr)

    def state_dict(self) -> dict:
        """Everything but the optimizer (PyTorch's layout: the scheduler's attributes)."""
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore what state_dict() returned. It is checked first (a dict with this scheduler's keys,
        an integer last_epoch, one finite base lr per group); nothing changes if not."""
        self.__dict__.update(self._checked_state(state_dict))

    def _checked_state(self, state_dict) -> dict:
        name = type(self).__name__
        if not isinstance(state_dict, dict):
            raise TypeError(f"{name}.load_state_dict: expected a dict, got {type(state_dict).__name__}")
        mine = self.state_dict()
        unknown = sorted(str(k) for k in state_dict if k not in mine)
        if unknown:
            raise ValueError(
                f"{name}.load_state_dict: unexpected keys {unknown} (a state dict of another scheduler class?)"
            )
        last_epoch = state_dict.get("last_epoch", self.last_epoch)
        if isinstance(last_epoch, bool) or not isinstance(last_epoch, numbers.Integral) or last_epoch < -1:
            raise ValueError(f"{name}.load_state_dict: last_epoch must be an integer >= -1, got {last_epoch!r}")
        for key in ("base_lrs", "_last_lr"):
            if key in state_dict:
                values = state_dict[key]
                if not isinstance(values, (list, tuple)) or len(values) != len(self.optimizer.param_groups):
                    raise ValueError(
                        f"{name}.load_state_dict: {key} must hold one value per parameter group "
                        f"({len(self.optimizer.param_groups)}), got {values!r}"
                    )
                for v in values:
                    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
                        raise ValueError(f"{name}.load_state_dict: {key} must hold finite numbers, got {v!r}")
        return dict(state_dict)

    def _current_lrs(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]


_LRScheduler = LRScheduler   # (the base class's older name, which custom schedulers still subclass)


class LambdaLR(LRScheduler):
    """lr = initial_lr * lr_lambda(epoch); one function, or one per group."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        for fn in (lr_lambda if isinstance(lr_lambda, (list, tuple)) else [lr_lambda]):
            if not callable(fn):
                raise TypeError(f"LambdaLR: lr_lambda must be a function of the epoch (or a list of them, one per "
                                f"group), got {type(fn).__name__} {fn!r}")
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != len(optimizer.param_groups):
                raise ValueError(
                    f"LambdaLR: expected {len(optimizer.param_groups)} lr_lambdas (one per group), got {len(lr_lambda)}"
                )
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * len(optimizer.param_groups)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base_lr * fn(self.last_epoch) for fn, base_lr in zip(self.lr_lambdas, self.base_lrs)]

    def state_dict(self):
        """Functions and lambdas are not saved (they are code); a callable object's attributes are."""
        state = {key: value for key, value in self.__dict__.items() if key not in ("optimizer", "lr_lambdas")}
        state["lr_lambdas"] = [
            None if isinstance(fn, types.FunctionType) else dict(fn.__dict__) for fn in self.lr_lambdas
        ]
        return state

    def load_state_dict(self, state_dict):
        state = self._checked_state(state_dict)
        saved_lambdas = state.pop("lr_lambdas", [None] * len(self.lr_lambdas))
        self.__dict__.update(state)
        for fn, saved in zip(self.lr_lambdas, saved_lambdas):
            if saved is not None:
                fn.__dict__.update(saved)


class StepLR(LRScheduler):
    """Multiply the lr by gamma every step_size epochs."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size = _positive_int("StepLR", "step_size", step_size)
        self.gamma = _number("StepLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._current_lrs()
        return [lr * self.gamma for lr in self._current_lrs()]

    def _closed_form(self):
        return [b * self.gamma ** (self.last_epoch // self.step_size) for b in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply the lr by gamma at each milestone epoch (by gamma^k if a milestone is listed k times)."""

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        if isinstance(milestones, (str, bytes)) or not hasattr(milestones, "__iter__"):
            raise TypeError(f"MultiStepLR: milestones must be a list of epochs, got {type(milestones).__name__} "
                            f"{milestones!r}")
        self.milestones = Counter(_positive_int("MultiStepLR", "a milestone", m) for m in milestones)
        self.gamma = _number("MultiStepLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch not in self.milestones:
            return self._current_lrs()
        return [lr * self.gamma ** self.milestones[self.last_epoch] for lr in self._current_lrs()]

    def state_dict(self):
        # A Counter is a dict keyed by ints; store it as a plain dict so save() can write it.
        state = super().state_dict()
        state["milestones"] = dict(self.milestones)
        return state

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        self.milestones = Counter({int(k): v for k, v in dict(self.milestones).items()})


class ExponentialLR(LRScheduler):
    """Multiply the lr by gamma every epoch."""

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = _number("ExponentialLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial:
            return self._current_lrs()
        return [lr * self.gamma for lr in self._current_lrs()]

    def _closed_form(self):
        return [b * self.gamma ** self.last_epoch for b in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """lr_t = eta_min + (base_lr - eta_min) * (1 + cos(pi * t / T_max)) / 2 (SGDR without restarts).

    Computed recursively from the current lr, as PyTorch does: the ratio of two consecutive cosine
    factors scales (lr - eta_min). Past T_max the schedule keeps following the cosine back up.
    """

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        if isinstance(T_max, bool) or not isinstance(T_max, numbers.Real):
            raise TypeError(f"CosineAnnealingLR: T_max must be a number of epochs, got {type(T_max).__name__} {T_max!r}")
        if T_max <= 0:
            raise ValueError(f"CosineAnnealingLR: T_max must be positive, got {T_max}")
        self.T_max = T_max
        self.eta_min = _number("CosineAnnealingLR", "eta_min", eta_min)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        lrs = self._current_lrs()
        t, T = self.last_epoch, self.T_max
        if self._is_initial:
            return lrs
        if self._step_count == 1 and t > 0:  # resumed at epoch t: jump to the closed form
            return [self.eta_min + (b - self.eta_min) * (1 + math.cos(t * math.pi / T)) / 2 for b in self.base_lrs]
        if (t - 1 - T) % (2 * T) == 0:  # at the cosine's minimum the ratio below would divide by zero
            return [lr + (b - self.eta_min) * (1 - math.cos(math.pi / T)) / 2 for lr, b in zip(lrs, self.base_lrs)]
        ratio = (1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T))
        return [ratio * (lr - self.eta_min) + self.eta_min for lr in lrs]

    def _closed_form(self):
        t, T = self.last_epoch, self.T_max
        return [self.eta_min + (b - self.eta_min) * (1 + math.cos(math.pi * t / T)) / 2 for b in self.base_lrs]


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin): warm the lr up from max_lr/div_factor to max_lr over the first
    pct_start of the steps, then anneal it down to initial_lr/final_div_factor. Momentum (SGD's
    momentum or Adam's beta1) moves the opposite way, between max_momentum and base_momentum.
    three_phase: up, back down to initial_lr symmetrically, then the final anneal.
    Step it after every batch; total_steps = epochs * steps_per_epoch.
    """

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None, pct_start=0.3,
                 anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85, max_momentum=0.95,
                 div_factor=25.0, final_div_factor=1e4, three_phase=False, last_epoch=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"OneCycleLR: {type(optimizer).__name__} is not an Optimizer")
        if total_steps is not None:
            if not isinstance(total_steps, int) or total_steps <= 0:
                raise ValueError(f"OneCycleLR: expected a positive integer total_steps, got {total_steps}")
            self.total_steps = total_steps
        elif epochs is not None and steps_per_epoch is not None:
            if not isinstance(epochs, int) or epochs <= 0:
                raise ValueError(f"OneCycleLR: expected a positive integer epochs, got {epochs}")
            if not isinstance(steps_per_epoch, int) or steps_per_epoch <= 0:
                raise ValueError(f"OneCycleLR: expected a positive integer steps_per_epoch, got {steps_per_epoch}")
            self.total_steps = epochs * steps_per_epoch
        else:
            raise ValueError("OneCycleLR: give either total_steps or both epochs and steps_per_epoch")
        if not isinstance(pct_start, float) or not 0 <= pct_start <= 1:
            raise ValueError(f"OneCycleLR: pct_start must be a float in [0, 1], got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        self.anneal_strategy = anneal_strategy

        # Each phase anneals from one group key to another, ending at step end_step.
        up_end = float(pct_start * self.total_steps) - 1
        if three_phase:
            self._schedule_phases = [
                dict(end_step=up_end, start_lr="initial_lr", end_lr="max_lr",
                     start_momentum="max_momentum", end_momentum="base_momentum"),
                dict(end_step=float(2 * pct_start * self.total_steps) - 2, start_lr="max_lr", end_lr="initial_lr",
                     start_momentum="base_momentum", end_momentum="max_momentum"),
                dict(end_step=self.total_steps - 1, start_lr="initial_lr", end_lr="min_lr",
                     start_momentum="max_momentum", end_momentum="max_momentum"),
            ]
        else:
            self._schedule_phases = [
                dict(end_step=up_end, start_lr="initial_lr", end_lr="max_lr",
                     start_momentum="max_momentum", end_momentum="base_momentum"),
                dict(end_step=self.total_steps - 1, start_lr="max_lr", end_lr="min_lr",
                     start_momentum="base_momentum", end_momentum="max_momentum"),
            ]

        start = 0.0
        for i, phase in enumerate(self._schedule_phases):
            if phase["end_step"] == start:  # get_lr would divide by this phase's length, 0
                raise ValueError(
                    f"OneCycleLR: total_steps={self.total_steps} with pct_start={pct_start} makes phase {i + 1} of "
                    f"the schedule zero steps long (PyTorch fails here with a ZeroDivisionError); use more steps "
                    f"or another pct_start")
            start = phase["end_step"]

        groups = optimizer.param_groups
        max_lrs = _per_group("max_lr", max_lr, groups)
        if last_epoch == -1:
            for group, top in zip(groups, max_lrs):
                group["initial_lr"] = top / div_factor
                group["max_lr"] = top
                group["min_lr"] = group["initial_lr"] / final_div_factor

        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError(
                    f"OneCycleLR: cycle_momentum=True needs an optimizer with momentum or betas, "
                    f"{type(optimizer).__name__} has neither"
                )
            self.use_beta1 = "betas" in optimizer.defaults
            max_moms = _per_group("max_momentum", max_momentum, groups)
            base_moms = _per_group("base_momentum", base_momentum, groups)
            if last_epoch == -1:
                for group, top, low in zip(groups, max_moms, base_moms):
                    _set_momentum(group, top, self.use_beta1)
                    group["max_momentum"] = top
                    group["base_momentum"] = low
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start, end, pct):
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self):
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"OneCycleLR: tried to step {step} times; total_steps is {self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start_step = 0.0
            for i, phase in enumerate(self._schedule_phases):
                end_step = phase["end_step"]
                if step <= end_step or i == len(self._schedule_phases) - 1:
                    pct = (step - start_step) / (end_step - start_step)
                    lr = self._anneal(group[phase["start_lr"]], group[phase["end_lr"]], pct)
                    if self.cycle_momentum:
                        momentum = self._anneal(group[phase["start_momentum"]], group[phase["end_momentum"]], pct)
                    break
                start_step = end_step
            lrs.append(lr)
            if self.cycle_momentum:
                _set_momentum(group, momentum, self.use_beta1)
        return lrs


def _per_group(name, value, groups, cls="OneCycleLR"):
    """One value per parameter group: a list of the right length, or a scalar repeated."""
    if isinstance(value, (list, tuple)):
        if len(value) != len(groups):
            raise ValueError(f"{cls}: expected {len(groups)} values for {name} (one per group), got {len(value)}")
        return list(value)
    return [value] * len(groups)


def _set_momentum(group, momentum, use_beta1):
    """A group's momentum, or Adam's beta1 (the cycling schedules move it opposite to the lr)."""
    if use_beta1:
        group["betas"] = (momentum, *group["betas"][1:])
    else:
        group["momentum"] = momentum


class ReduceLROnPlateau:
    """Divide the lr by 1/factor when a metric has stopped improving for `patience` epochs
    (torch.optim.lr_scheduler.ReduceLROnPlateau). Step it with the metric: `sched.step(val_loss)`.

    mode "min" (a loss) or "max" (an accuracy); an epoch improves on the best when the metric beats it by
    more than `threshold` (relative: best * (1 -/+ threshold); absolute: best -/+ threshold). After a
    reduction, `cooldown` epochs pass before bad epochs count again. No group goes below its min_lr, and a
    change smaller than eps is skipped.
    """

    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4, threshold_mode="rel",
                 cooldown=0, min_lr=0, eps=1e-8):
        name = "ReduceLROnPlateau"
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{name}: {type(optimizer).__name__} is not an Optimizer")
        if mode not in ("min", "max"):
            raise ValueError(f"{name}: mode {mode!r} is unknown; use 'min' or 'max'")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"{name}: threshold_mode {threshold_mode!r} is unknown; use 'rel' or 'abs'")
        if _number(name, "factor", factor) >= 1.0:
            raise ValueError(f"{name}: factor should be < 1.0, got {factor}")
        for arg, value in (("patience", patience), ("cooldown", cooldown)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                raise ValueError(f"{name}: {arg} must be an integer >= 0, got {value!r}")
        groups = optimizer.param_groups
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != len(groups):
                raise ValueError(f"{name}: expected {len(groups)} min_lrs (one per group), got {len(min_lr)}")
            self.min_lrs = [float(_number(name, "min_lr", v)) for v in min_lr]
        else:
            self.min_lrs = [float(_number(name, "min_lr", min_lr))] * len(groups)
        self.optimizer = optimizer
        self.mode, self.factor, self.patience = mode, float(factor), int(patience)
        self.threshold, self.threshold_mode = float(_number(name, "threshold", threshold)), threshold_mode
        self.cooldown, self.eps = int(cooldown), float(_number(name, "eps", eps))
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = self.cooldown_counter = 0
        self.last_epoch = 0
        self._last_lr = [group["lr"] for group in groups]

    def is_better(self, a, best) -> bool:
        if self.mode == "min":
            return a < (best * (1.0 - self.threshold) if self.threshold_mode == "rel" else best - self.threshold)
        return a > (best * (1.0 + self.threshold) if self.threshold_mode == "rel" else best + self.threshold)

    def step(self, metrics) -> None:
        value = getattr(metrics, "item", lambda: metrics)()   # a 0-d tensor, or a number
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"ReduceLROnPlateau.step: expected the metric (a number or a one-element tensor), "
                            f"got {type(metrics).__name__}")
        current = float(value)
        self.last_epoch += 1
        if self.is_better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for group, floor in zip(self.optimizer.param_groups, self.min_lrs):
                old = float(group["lr"])
                new = max(old * self.factor, floor)
                if old - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    @property
    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def state_dict(self) -> dict:
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict: dict) -> None:
        if not isinstance(state_dict, dict):
            raise TypeError(f"ReduceLROnPlateau.load_state_dict: expected a dict, got {type(state_dict).__name__}")
        unknown = sorted(str(k) for k in state_dict if k not in self.state_dict())
        if unknown:
            raise ValueError(f"ReduceLROnPlateau.load_state_dict: unexpected keys {unknown}")
        self.__dict__.update(state_dict)


# LinearLR, SequentialLR and CosineAnnealingWarmRestarts live in lr_scheduler_sequences.py, ConstantLR,
# MultiplicativeLR, PolynomialLR, CyclicLR and ChainedScheduler in lr_scheduler_cycles.py (this file's size).
from .lr_scheduler_sequences import CosineAnnealingWarmRestarts, LinearLR, SequentialLR  # noqa: E402,F401
from .lr_scheduler_cycles import (  # noqa: E402,F401
    ChainedScheduler, ConstantLR, CyclicLR, MultiplicativeLR, PolynomialLR,
)
