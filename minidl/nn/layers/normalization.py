"""BatchNorm1d/2d/3d and LocalResponseNorm.

Batch norm normalises each channel with the batch's mean and variance while training and keeps an
exponential moving average of them (running_mean, running_var: buffers, updated in place by the
primitive) for evaluation. momentum=None makes the average cumulative (factor 1/num_batches_tracked).
"""
from __future__ import annotations

from ..._device import Device
from ..._dtypes import float32, float64
from ...ops.creation import full, ones, tensor, zeros
from ...autograd.function import no_grad
from .. import functional as F
from ..module import Module, Parameter


class _NormBase(Module):
    """What batch norm and instance norm share (torch's _NormBase): the affine weight and bias, the running
    statistics, their reset and the repr."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 device=None, dtype=None, *, bias=True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        factory = dict(dtype=dtype, device=None if device is None else Device(device))
        if affine:
            self.weight = Parameter(ones(num_features, **factory))
        else:
            self.register_parameter("weight", None)
        if affine and bias:  # bias=False (PyTorch 2.x): scale only
            self.bias = Parameter(zeros(num_features, **factory))
        else:
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, **factory))
            self.register_buffer("running_var", ones(num_features, **factory))
            self.register_buffer("num_batches_tracked", tensor(0, device=factory["device"]))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self):
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1.0)
                self.num_batches_tracked.zero_()

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class _BatchNorm(_NormBase):
    _valid_ranks = (4,)
    _fused_relu = False  # True in nn.utils.fusion.BatchNormReLU*d: relu(BN(x)) in fused kernels

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 device=None, dtype=None, *, bias=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)

    def forward(self, input):
        name = type(self).__name__
        if input.ndim not in self._valid_ranks:
            ranks = " or ".join(f"{r}D" for r in self._valid_ranks)
            raise ValueError(f"{name}: expected {ranks} input (got {input.ndim}D input of shape {input.shape})")
        if input.shape[1] != self.num_features:
            raise ValueError(
                f"{name}: input of shape {input.shape} has {input.shape[1]} channels, expected num_features={self.num_features}"
            )
        factor = 0.0 if self.momentum is None else self.momentum
        counts = self.training and self.track_running_stats
        if counts and self.momentum is None:
            factor = 1.0 / float(self.num_batches_tracked.item() + 1)
        # Batch statistics while training, or when there are no running statistics to use.
        use_batch_stats = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        norm = F.batch_norm_relu if self._fused_relu else F.batch_norm
        # the batch counts inside the call (with the statistics, in their kernel on the GPU), so a failed call
        # changes nothing
        return norm(input, self.running_mean if track else None, self.running_var if track else None,
                    self.weight, self.bias, use_batch_stats, factor, self.eps,
                    num_batches_tracked=self.num_batches_tracked if counts else None)


class BatchNorm1d(_BatchNorm):
    """(N, C) or (N, C, L)."""

    _valid_ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    """(N, C, H, W)."""

    _valid_ranks = (4,)


class BatchNorm3d(_BatchNorm):
    """(N, C, D, H, W)."""

    _valid_ranks = (5,)


class SyncBatchNorm(_BatchNorm):
    """Batch norm whose statistics are those of the whole global batch, across the processes of a
    data-parallel job (torch.nn.SyncBatchNorm). Each rank sums x and x*x per channel over its share, one
    differentiable all-reduce adds the sums (and counts) of every rank, and every rank normalises with the
    global mean and variance, so N ranks with batch B each compute what one process computes with batch N*B.
    Outside training, or without a process group of more than one rank, it is BatchNorm. Build it with
    SyncBatchNorm.convert_sync_batchnorm(model). minidl's runs on the CPU (MPI) too, not only on GPUs."""

    _valid_ranks = (2, 3, 4, 5)

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_group=None, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        if process_group is not None:
            raise NotImplementedError("SyncBatchNorm: minidl has one process group, the world; pass process_group=None")

    def forward(self, input):
        from ... import distributed as dist

        if not (self.training and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(input)
        if input.ndim not in self._valid_ranks or input.shape[1] != self.num_features:
            return super().forward(input)        # the parent raises the usual errors
        from ...ops import cat
        from ...distributed.nn.functional import all_reduce

        c = self.num_features
        dims = (0,) + tuple(range(2, input.ndim))
        x = input.float() if input.dtype != self._stat_dtype(input) else input
        count = full((1,), float(input.numel() // c), dtype=x.dtype, device=x.device)
        total = all_reduce(cat([x.sum(dims), (x * x).sum(dims), count]))
        n = total[2 * c]
        mean = total[:c] / n
        var = (total[c:2 * c] / n - mean * mean).clamp(min=0.0)     # biased: what normalises
        shape = (1, c) + (1,) * (input.ndim - 2)
        y = (x - mean.reshape(shape)) * (var + self.eps).rsqrt().reshape(shape)
        if self.weight is not None:
            y = y * self.weight.reshape(shape)
        if self.bias is not None:
            y = y + self.bias.reshape(shape)
        y = y.to(input.dtype)
        if self._fused_relu:
            y = F.relu(y)
        if self.track_running_stats:
            with no_grad():
                self.num_batches_tracked._data += 1
                factor = (1.0 / float(self.num_batches_tracked.item()) if self.momentum is None else self.momentum)
                count_all = float(n.item())
                unbiased = var.detach() * (count_all / max(count_all - 1.0, 1.0))
                self.running_mean.mul_(1 - factor).add_(mean.detach().to(self.running_mean.dtype) * factor)
                self.running_var.mul_(1 - factor).add_(unbiased.to(self.running_var.dtype) * factor)
        return y

    @staticmethod
    def _stat_dtype(input):
        return input.dtype if input.dtype in (float32, float64) else float32

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """The same model with every BatchNorm*d replaced by a SyncBatchNorm that shares its parameters and
        buffers (as torch's)."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            out = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats,
                      process_group)
            for name in ("weight", "bias"):
                if name in module._parameters:
                    out._parameters[name] = module._parameters[name]
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                out._buffers[name] = module._buffers.get(name)
            out._fused_relu = module._fused_relu
            out.training = module.training
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return out


class LocalResponseNorm(Module):
    def __init__(self, size, alpha=1e-4, beta=0.75, k=1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self):
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class _LastDimsNorm(Module):
    """What LayerNorm and RMSNorm share: `normalized_shape` (the last dims), eps, and an elementwise weight
    (ones) with, for LayerNorm, a bias (zeros); `bias=None` means the class has no bias at all (RMSNorm)."""

    def __init__(self, normalized_shape, eps, elementwise_affine, bias, device, dtype):
        super().__init__()
        self.normalized_shape = ((int(normalized_shape),) if isinstance(normalized_shape, int)
                                 else tuple(int(s) for s in normalized_shape))
        self.eps, self.elementwise_affine = eps, elementwise_affine
        factory = dict(dtype=dtype, device=None if device is None else Device(device))
        if elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape, **factory))
        else:
            self.register_parameter("weight", None)
        if bias is not None:
            if elementwise_affine and bias:
                self.bias = Parameter(zeros(self.normalized_shape, **factory))
            else:
                self.register_parameter("bias", None)

    def reset_parameters(self):
        with no_grad():
            if self.weight is not None:
                self.weight.fill_(1.0)
            if getattr(self, "bias", None) is not None:
                self.bias.zero_()

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class LayerNorm(_LastDimsNorm):
    """Normalise over the last dimensions `normalized_shape` (torch.nn.LayerNorm): weight (ones) and
    bias (zeros) of that shape when elementwise_affine; bias=False keeps the weight only."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
        super().__init__(normalized_shape, eps, elementwise_affine, bool(bias), device, dtype)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return super().extra_repr() + f", bias={self.bias is not None}"


class RMSNorm(_LastDimsNorm):
    """x / sqrt(mean(x^2) + eps) * weight over the last dimensions (torch.nn.RMSNorm); eps=None is the
    input dtype's machine epsilon."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__(normalized_shape, eps, elementwise_affine, None, device, dtype)

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)
