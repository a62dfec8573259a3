"""Schedules of warm-up and restarts (part of minidl.optim.lr_scheduler, PyTorch's names and formulas):

    LinearLR                     lr scaled linearly from start_factor to end_factor over total_iters steps (warm-up)
    SequentialLR                 one scheduler after another, switching at the milestones (warm-up, then cosine)
    CosineAnnealingWarmRestarts  SGDR: a cosine from the base lr down to eta_min over T_i epochs, then again from the
                                 top, T_i growing by T_mult; step(epoch) takes fractional epochs (per batch)

    warmup = LinearLR(opt, start_factor=0.01, total_iters=5)
    cosine = CosineAnnealingLR(opt, T_max=95)
    sched = SequentialLR(opt, [warmup, cosine], milestones=[5])
"""
from __future__ import annotations

import bisect
import math
import numbers

from .lr_scheduler import LRScheduler, _number


class LinearLR(LRScheduler):
    """Multiply each group's base lr by a factor that moves linearly from start_factor (epoch 0) to end_factor
    (epoch total_iters) and stays there. Recursive, as PyTorch's (each step scales the current lr)."""

    def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0, total_iters: int = 5,
                 last_epoch: int = -1):
        start_factor = _number("LinearLR", "start_factor", start_factor)
        end_factor = _number("LinearLR", "end_factor", end_factor)
        if not 0 < start_factor <= 1:
            raise ValueError(f"LinearLR: start_factor must be in (0, 1] (it multiplies the lr at epoch 0), got "
                             f"{start_factor}")
        if not 0 <= end_factor <= 1:
            raise ValueError(f"LinearLR: end_factor must be in [0, 1], got {end_factor}")
        if isinstance(total_iters, bool) or not isinstance(total_iters, numbers.Integral) or total_iters < 1:
            raise ValueError(f"LinearLR: total_iters must be a positive integer, got {total_iters!r}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, int(total_iters)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        lrs = self._current_lrs()
        t, start, end = self.last_epoch, self.start_factor, self.end_factor
        if t == 0:
            return [lr * start for lr in lrs]
        if t > self.total_iters:
            return lrs
        return [lr * (1.0 + (end - start) / (self.total_iters * start + (t - 1) * (end - start))) for lr in lrs]

    def _closed_form(self):
        t = min(self.total_iters, self.last_epoch)
        factor = self.start_factor + (self.end_factor - self.start_factor) * t / self.total_iters
        return [b * factor for b in self.base_lrs]


class SequentialLR(LRScheduler):
    """schedulers[0] until milestones[0], then schedulers[1] (started afresh, at its epoch 0) until milestones[1], ...
    Each scheduler must drive this optimizer. Built as PyTorch builds it: the lrs go back to the groups'
    initial_lr, every scheduler's constructor step is undone, and only the first takes its step 0."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1):
        schedulers, milestones = list(schedulers), list(milestones)
        if not schedulers:
            raise ValueError("SequentialLR: expects at least one scheduler")
        for i, scheduler in enumerate(schedulers):
            if not hasattr(scheduler, "optimizer") or isinstance(scheduler, SequentialLR):
                raise TypeError(f"SequentialLR: schedulers[{i}] is a {type(scheduler).__name__}, not a scheduler "
                                "(nor may it be a SequentialLR)")
            if scheduler.optimizer is not optimizer:
                raise ValueError(f"SequentialLR: schedulers[{i}] drives another optimizer than the one given")
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"SequentialLR: expects {len(schedulers) - 1} milestones (one fewer than the "
                             f"{len(schedulers)} schedulers), got {len(milestones)}")
        self.optimizer = optimizer
        self._schedulers, self._milestones = schedulers, milestones
        self.last_epoch = last_epoch + 1
        for group in optimizer.param_groups:   # back to the start: each constructor above took its step 0
            group["lr"] = group["initial_lr"]
        for scheduler in schedulers:
            scheduler.last_epoch -= 1
        schedulers[0]._initial_step()
        self._last_lr = schedulers[0].get_last_lr()

    def step(self, epoch=None):
        if epoch is not None:
            raise TypeError("SequentialLR.step takes no epoch (PyTorch's neither)")
        self.last_epoch += 1
        index = bisect.bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[index]
        if index > 0 and self._milestones[index - 1] == self.last_epoch:
            scheduler.step(0)   # the next scheduler starts at its own epoch 0
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()

    def state_dict(self):
        return _schedulers_state(self)

    def load_state_dict(self, state_dict):
        _load_schedulers_state(self, state_dict)


def _schedulers_state(owner):
    """The state of a scheduler made of schedulers (SequentialLR, ChainedScheduler): its own, and theirs."""
    state = {key: value for key, value in owner.__dict__.items() if key not in ("optimizer", "_schedulers")}
    state["_schedulers"] = [scheduler.state_dict() for scheduler in owner._schedulers]
    return state


def _load_schedulers_state(owner, state_dict):
    state = dict(state_dict)
    saved = state.pop("_schedulers", None)
    if saved is None or len(saved) != len(owner._schedulers):
        raise ValueError(f"{type(owner).__name__}.load_state_dict: expected the states of {len(owner._schedulers)} "
                         "schedulers under '_schedulers'")
    owner.__dict__.update(state)
    for scheduler, sub in zip(owner._schedulers, saved):
        scheduler.load_state_dict(sub)


class CosineAnnealingWarmRestarts(LRScheduler):
    """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * T_cur / T_i)) / 2, T_cur the epochs since the last
    restart; a restart every T_i epochs, T_i = T_0, T_0 * T_mult, ... (Loshchilov & Hutter, SGDR). step() counts
    one epoch; step(epoch) jumps there, fractional epochs included (stepping per batch: epoch + i / iters)."""

    def __init__(self, optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0, last_epoch: int = -1):
        if isinstance(T_0, bool) or not isinstance(T_0, numbers.Integral) or T_0 <= 0:
            raise ValueError(f"CosineAnnealingWarmRestarts: T_0 must be a positive integer, got {T_0!r}")
        if isinstance(T_mult, bool) or not isinstance(T_mult, numbers.Integral) or T_mult < 1:
            raise ValueError(f"CosineAnnealingWarmRestarts: T_mult must be an integer >= 1, got {T_mult!r}")
        self.T_0, self.T_i, self.T_mult = int(T_0), int(T_0), int(T_mult)
        self.eta_min = _number("CosineAnnealingWarmRestarts", "eta_min", eta_min)
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [self.eta_min + (b - self.eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
                for b in self.base_lrs]

    def step(self, epoch=None):
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:
                self.T_cur -= self.T_i
                self.T_i *= self.T_mult
        else:
            if epoch < 0:
                raise ValueError(f"CosineAnnealingWarmRestarts: epoch must be >= 0, got {epoch}")
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult ** n
            else:
                self.T_i, self.T_cur = self.T_0, epoch
        self.last_epoch = math.floor(epoch)
        self._step_count += 1
        for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]
