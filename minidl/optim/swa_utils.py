"""Weight averaging: an exponential moving average (EMA) or an equal-weight average (SWA) of a model.

Training ends with weights that still jitter from step to step; an average of the weights seen over
the last few hundred steps usually generalises a little better than the last ones (Polyak averaging;
Izmailov et al. 2018, "Averaging Weights Leads to Wider Optima and Better Generalization"). PyTorch's
`torch.optim.swa_utils` API:

    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999), use_buffers=True)
    for x, y in loader:
        loss_fn(model(x), y).backward(); optimizer.step(); optimizer.zero_grad()
        ema.update_parameters(model)        # ema_w = decay * ema_w + (1 - decay) * w
    evaluate(ema)                           # ema(x) runs the averaged copy

    swa = AveragedModel(model)              # no avg_fn: the plain mean of every model it was given
    ...; update_bn(loader, swa)             # then recompute batch-norm statistics for the mean weights

The first `update_parameters` copies the model; later ones average into the copy. With
use_buffers=True the buffers (batch norm's running mean and variance) are averaged too, so the
averaged model can be evaluated at once; without it they are copied from the model, and `update_bn`
recomputes them with one pass over the data.

One difference from PyTorch: the number of models averaged so far is also kept as a Python int, so
an update never waits for the GPU (PyTorch reads `n_averaged` back from the device at every update);
averaging functions receive that int as `num_averaged`.
"""
from __future__ import annotations

import copy
import math

import numpy as np

from .._dtypes import is_floating
from .._device import Device
from ..ops.creation import tensor
from ..autograd.function import no_grad
from ..nn.module import Module
from .lr_scheduler import LRScheduler


def _check_decay(decay):
    if not 0.0 <= float(decay) <= 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in [0,1] range.")
    return float(decay)


def _lerp_(averaged, current, weight):
    """averaged += weight * (current - averaged), in place on the raw floating-point arrays."""
    a = averaged._data
    a += a.dtype.type(weight) * (current._data - a)


def _average_integer_(averaged, current, keep):
    """An integer buffer (batch norm's num_batches_tracked): keep * avg + (1 - keep) * model in float32,
    truncated toward zero, as PyTorch's copy_ of that float result into the integer tensor does."""
    a, c = averaged._data, current._data
    f32 = np.float32
    a[...] = (a.astype(f32) * f32(keep) + c.astype(f32) * f32(1.0 - keep)).astype(a.dtype)


def _average_(averaged, current, keep):
    if is_floating(averaged._data.dtype) or averaged._data.dtype.kind == "c":
        _lerp_(averaged, current, 1.0 - keep)
    else:
        _average_integer_(averaged, current, keep)


def get_ema_multi_avg_fn(decay=0.999):
    """f(ema_list, model_list, num_averaged): ema = decay * ema + (1 - decay) * model, in place."""
    decay = _check_decay(decay)

    def ema_update(ema_param_list, current_param_list, num_averaged):
        with no_grad():
            for p_ema, p_model in zip(ema_param_list, current_param_list, strict=True):
                _average_(p_ema, p_model, decay)

    return ema_update


def get_swa_multi_avg_fn():
    """f(avg_list, model_list, num_averaged): avg += (model - avg) / (num_averaged + 1), in place."""

    def swa_update(averaged_param_list, current_param_list, num_averaged):
        with no_grad():
            n = int(num_averaged)
            for p_avg, p_model in zip(averaged_param_list, current_param_list, strict=True):
                _average_(p_avg, p_model, n / (n + 1.0))

    return swa_update


def get_ema_avg_fn(decay=0.999):
    """f(ema, model, num_averaged) -> decay * ema + (1 - decay) * model (one tensor, returns a new one)."""
    decay = _check_decay(decay)

    def ema_update(ema_param, current_param, num_averaged):
        return decay * ema_param + (1 - decay) * current_param

    return ema_update


def get_swa_avg_fn():
    """f(avg, model, num_averaged) -> avg + (model - avg) / (num_averaged + 1)."""

    def swa_update(averaged_param, current_param, num_averaged):
        return averaged_param + (current_param - averaged_param) / (num_averaged + 1)

    return swa_update


class AveragedModel(Module):
    """A copy of `model` whose parameters (and, with use_buffers, buffers) are a running average.

    avg_fn(avg, model, num_averaged) -> new value, per tensor; or multi_avg_fn(avg_list, model_list,
    num_averaged), in place over lists; neither: the equal-weight (SWA) mean. device: where the copy
    lives (default: where the model is). Calling it runs the averaged copy: `ema(x)`.
    state_dict() holds `module.*` (the averaged weights) and `n_averaged`; the averaging function is
    not saved.
    """

    def __init__(self, model, device=None, avg_fn=None, multi_avg_fn=None, use_buffers=False):
        super().__init__()
        if not isinstance(model, Module):
            raise TypeError(f"AveragedModel: model must be a minidl.nn.Module, got {type(model).__name__}")
        if avg_fn is not None and multi_avg_fn is not None:
            raise ValueError("AveragedModel: give avg_fn or multi_avg_fn, not both")
        self.module = copy.deepcopy(model)
        if device is not None:
            self.module.to(device)
        where = Device(device) if device is not None else _model_device(self.module)
        self.register_buffer("n_averaged", tensor(0, dtype=np.int64, device=where))
        self._count = 0  # == n_averaged, kept on the host so that updates never read the GPU
        self.avg_fn = avg_fn
        self.multi_avg_fn = multi_avg_fn
        self.use_buffers = bool(use_buffers)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _averaged_pairs(self, model):
        """(averaged tensor, model tensor) pairs, parameters then (with use_buffers) buffers."""
        def tensors(m):
            out = list(m.parameters())
            return out + [b for b in m.buffers()] if self.use_buffers else out

        mine, theirs = tensors(self.module), tensors(model)
        if len(mine) != len(theirs):
            raise ValueError(
                f"AveragedModel.update_parameters: the model has {len(theirs)} parameters"
                f"{' and buffers' if self.use_buffers else ''}, the averaged copy {len(mine)}: "
                f"pass the model this AveragedModel was made from")
        for a, m in zip(mine, theirs):
            if a.shape != m.shape:
                raise ValueError(f"AveragedModel.update_parameters: shape {m.shape} in the model where the "
                                 f"averaged copy has {a.shape}: pass the model this AveragedModel was made from")
        return mine, theirs

    def update_parameters(self, model) -> None:
        """Average `model`'s current weights into this copy (the first call copies them)."""
        mine, theirs = self._averaged_pairs(model)
        with no_grad():
            if self._count == 0:
                for a, m in zip(mine, theirs):
                    a.copy_(m.detach())
            elif self.multi_avg_fn is not None:
                self.multi_avg_fn(mine, [m.detach() for m in theirs], self._count)
            elif self.avg_fn is not None:
                for a, m in zip(mine, theirs):
                    a.copy_(self.avg_fn(a.detach(), m.detach(), self._count))
            else:
                get_swa_multi_avg_fn()(mine, [m.detach() for m in theirs], self._count)
            if not self.use_buffers:  # the buffers follow the model (update_bn can recompute them)
                for b_avg, b_model in zip(self.module.buffers(), model.buffers(), strict=True):
                    b_avg.copy_(b_model.detach())
            self.n_averaged._data += 1
        self._count += 1

    def load_state_dict(self, state_dict, strict: bool = True):
        result = super().load_state_dict(state_dict, strict)
        self._count = int(self.n_averaged.item())  # one read, when a checkpoint is loaded
        return result


def _model_device(model):
    for t in list(model.parameters()) + list(model.buffers()):
        return t.device
    return Device("cpu")


def update_bn(loader, model, device=None) -> None:
    """Recompute every batch norm's running mean and variance with one pass over `loader`.

    The statistics become the plain mean over the batches (momentum None while it runs). A batch is
    a tensor or a tuple/list whose first element is the input. Needed after SWA without use_buffers:
    the running statistics of the last model do not fit the averaged weights.
    """
    from ..nn import BatchNorm1d, BatchNorm2d, BatchNorm3d, SyncBatchNorm  # every batch norm there is

    momenta = {}
    for module in model.modules():
        if isinstance(module, (BatchNorm1d, BatchNorm2d, BatchNorm3d, SyncBatchNorm)) and module.track_running_stats:
            module.reset_running_stats()
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None
    try:
        with no_grad():
            for batch in loader:
                if isinstance(batch, (list, tuple)):
                    batch = batch[0]
                if device is not None:
                    batch = batch.to(device)
                model(batch)
    finally:
        for module, momentum in momenta.items():
            module.momentum = momentum
        model.train(was_training)


class SWALR(LRScheduler):
    """The learning rate of the SWA phase (torch.optim.swa_utils.SWALR): each group's lr moves from where it is to
    swa_lr over anneal_epochs steps, along a cosine ("cos") or a straight line ("linear"), then stays at swa_lr:

        lr_t = swa_lr * alpha_t + lr_0 * (1 - alpha_t),   alpha_t = anneal(min(1, t / anneal_epochs))

    computed step to step from the previous lr as torch does, so it follows whatever lr the optimizer had when the
    scheduler was made. swa_lr: one value, or one per parameter group."""

    def __init__(self, optimizer, swa_lr, anneal_epochs=10, anneal_strategy="cos", last_epoch=-1):
        groups = optimizer.param_groups
        swa_lrs = list(swa_lr) if isinstance(swa_lr, (list, tuple)) else [swa_lr] * len(groups)
        if len(swa_lrs) != len(groups):
            raise ValueError(f"swa_lr must have the same length as optimizer.param_groups: swa_lr has "
                             f"{len(swa_lrs)}, optimizer.param_groups has {len(groups)}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must by one of 'cos' or 'linear', instead got {anneal_strategy}")
        if isinstance(anneal_epochs, bool) or not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        for lr, group in zip(swa_lrs, groups):
            group["swa_lr"] = float(lr)
        self.anneal_strategy, self.anneal_epochs = anneal_strategy, anneal_epochs
        super().__init__(optimizer, last_epoch)

    def anneal_func(self, t: float) -> float:
        return t if self.anneal_strategy == "linear" else (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr, swa_lr, alpha):
        return swa_lr if alpha == 1 else (lr - alpha * swa_lr) / (1 - alpha)

    def get_lr(self):
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_alpha = self.anneal_func(max(0.0, min(1.0, (step - 1) / max(1, self.anneal_epochs))))
        prev_lrs = [self._get_initial_lr(g["lr"], g["swa_lr"], prev_alpha) for g in self.optimizer.param_groups]
        alpha = self.anneal_func(max(0.0, min(1.0, step / max(1, self.anneal_epochs))))
        return [g["swa_lr"] * alpha + lr * (1 - alpha) for g, lr in zip(self.optimizer.param_groups, prev_lrs)]
