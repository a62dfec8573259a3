"""torch.nn.functional's long tail, written as compositions of minidl's differentiable ops (so each one's
backward is the chain of its parts' backwards; none has a kernel of its own yet):

    activations    silu, mish, selu, celu, hardtanh, hardsigmoid, hardswish, logsigmoid, softsign, tanhshrink,
                   softshrink, hardshrink, threshold, glu, prelu, softmin
    normalization  normalize, group_norm, instance_norm
    distances      cosine_similarity, pairwise_distance
    losses         kl_div, huber_loss, soft_margin_loss, margin_ranking_loss, hinge_embedding_loss,
                   poisson_nll_loss, gaussian_nll_loss, cosine_embedding_loss, triplet_margin_loss,
                   multilabel_soft_margin_loss
    vision         pixel_shuffle, pixel_unshuffle, interpolate (nearest, linear, bilinear), upsample*

Each is checked against torch by PyTorch's OpInfo samples (tests/test_opinfo.py), values and gradients.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from ... import _dtypes
from ...autograd.tensor import Tensor
from ...ops import where
from ._checks import _check_float_tensor, _reduce
from .activations import elu, sigmoid, softmax, softplus, tanh

# ------------------------------------------------------------------------------------------------ activations


def silu(input, inplace=False):
    return input * sigmoid(input)


def mish(input, inplace=False):
    return input * tanh(softplus(input))


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def selu(input, inplace=False):
    return elu(input, _SELU_ALPHA) * _SELU_SCALE


def celu(input, alpha=1.0, inplace=False):
    if alpha == 0:
        raise ValueError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return input.clamp(min=0) + ((input / alpha).exp() - 1).clamp(max=0) * alpha


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return input.clamp(min_val, max_val)


def hardsigmoid(input, inplace=False):
    return (input + 3).clamp(0.0, 6.0) / 6       # torch's formula (relu6(x + 3) / 6), rounding included


def hardswish(input, inplace=False):
    return input * hardsigmoid(input)


def logsigmoid(input):
    return -softplus(-input)


def softsign(input):
    return input / (1 + input.abs())


def tanhshrink(input):
    return input - tanh(input)


def softshrink(input, lambd=0.5):
    if lambd < 0:
        raise RuntimeError(f"lambda must be greater or equal to 0, but found to be {lambd}.")
    zero = input.new_zeros(())
    return where(input > lambd, input - lambd, where(input < -lambd, input + lambd, zero))


def hardshrink(input, lambd=0.5):
    return where(input.abs() > lambd, input, input.new_zeros(()))


def threshold(input, threshold, value, inplace=False):
    return where(input > threshold, input, input.new_full((), value))


def glu(input, dim=-1):
    n = input.shape[dim]
    if n % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim} is size {n}")
    a, b = input.narrow(dim, 0, n // 2), input.narrow(dim, n // 2, n // 2)
    return a * sigmoid(b)


def prelu(input, weight):
    if weight.ndim > 1:
        raise RuntimeError(f"prelu: weight must be 0-D or 1-D, got {weight.ndim}-D")
    w = weight
    if weight.numel() > 1:
        if input.ndim < 2 or input.shape[1] != weight.numel():
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found parameter numbers = "
                               f"{weight.numel()} and channel size = {input.shape[1] if input.ndim > 1 else 1}.")
        w = weight.reshape((1, -1) + (1,) * (input.ndim - 2))
    elif weight.ndim == 1:
        w = weight.reshape(())
    return where(input >= 0, input, w * input)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    return softmax(-input, dim, dtype=dtype)


# ------------------------------------------------------------------------------------------------ normalization
def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """input / max(||input||_p along dim, eps)."""
    norm = input.norm(p, dim, keepdim=True)
    return input / norm.clamp(min=eps).expand_as(input)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    _check_float_tensor("group_norm", "input", input)
    if input.ndim < 2:
        raise RuntimeError(f"group_norm: expected at least 2 dimensions, got input of shape {tuple(input.shape)}")
    n, c = input.shape[0], input.shape[1]
    if c % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {list(input.shape)} and num_groups={num_groups}")
    if input.numel() == 0:
        y = input * 1
        shape = (1, c) + (1,) * (input.ndim - 2)
        return y * (weight.reshape(shape) if weight is not None else 1) + (bias.reshape(shape) if bias is not None else 0)
    x = input.reshape(n, num_groups, input.numel() // (n * num_groups))
    xf = x.float() if x.dtype in _dtypes.HALF_DTYPES else x
    mean = xf.mean(-1, keepdim=True)
    var = ((xf - mean) ** 2).mean(-1, keepdim=True)
    y = ((xf - mean) / (var + eps).sqrt()).type(input.dtype).reshape(tuple(input.shape))
    shape = (1, c) + (1,) * (input.ndim - 2)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    """Each (sample, channel) normalised over its own spatial positions (torch.nn.functional.instance_norm)."""
    _check_float_tensor("instance_norm", "input", input)
    if input.ndim < 3:
        raise ValueError(f"instance_norm: expected an input with at least 3 dimensions (N, C, ...), got {tuple(input.shape)}")
    n, c = input.shape[0], input.shape[1]
    dims = tuple(range(2, input.ndim))
    shape = (1, c) + (1,) * (input.ndim - 2)
    xf = input.float() if input.dtype in _dtypes.HALF_DTYPES else input
    if use_input_stats:
        mean = xf.mean(dims, keepdim=True)
        var = ((xf - mean) ** 2).mean(dims, keepdim=True)
        if running_mean is not None or running_var is not None:
            from ...autograd.function import no_grad

            count = xf.numel() // (n * c)
            with no_grad():
                if running_mean is not None:
                    running_mean.mul_(1 - momentum).add_(mean.detach().reshape(n, c).mean(0).type(running_mean.dtype) * momentum)
                if running_var is not None:
                    unbiased = var.detach().reshape(n, c).mean(0) * (count / max(count - 1, 1))
                    running_var.mul_(1 - momentum).add_(unbiased.type(running_var.dtype) * momentum)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("instance_norm: use_input_stats=False needs running_mean and running_var")
        mean, var = running_mean.reshape(shape), running_var.reshape(shape)
    y = ((xf - mean) / (var + eps).sqrt()).type(input.dtype)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


# ------------------------------------------------------------------------------------------------ distances
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """x1 . x2 / max(||x1|| ||x2||, eps) along dim (torch.nn.functional.cosine_similarity)."""
    x1, x2 = _broadcast_pair(x1, x2)
    if x1.dtype in _dtypes.HALF_DTYPES:          # the products overflow float16: in float32, rounded once
        return cosine_similarity(x1.float(), x2.float(), dim, eps).type(x1.dtype)
    dot = (x1 * x2).sum(dim)
    n1 = (x1 * x1).sum(dim)
    n2 = (x2 * x2).sum(dim)
    return dot / (n1 * n2).clamp(min=eps * eps).sqrt()


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    d = x1 - x2 + eps
    dim = -1 if d.ndim > 0 else 0
    if d.ndim == 0:
        return d.abs()
    return d.norm(p, dim, keepdim=keepdim)


def _broadcast_pair(a, b):
    shape = tuple(np.broadcast_shapes(tuple(a.shape), tuple(b.shape)))
    return (a if tuple(a.shape) == shape else a.expand(*shape)), (b if tuple(b.shape) == shape else b.expand(*shape))


# ------------------------------------------------------------------------------------------------ losses
def _check_reduction(op, reduction, allowed=("none", "mean", "sum")):
    if reduction not in allowed:
        raise ValueError(f"{op}: {reduction} is not a valid value for reduction")


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """sum target * (log target - input): input holds log-probabilities (and target too with log_target)."""
    _check_reduction("kl_div", reduction, ("none", "mean", "sum", "batchmean"))
    if log_target:
        loss = target.exp() * (target - input)
    else:
        loss = target.xlogy(target) - target * input
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim > 0 else 1)
    return _reduce(loss, reduction)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    _check_reduction("huber_loss", reduction)
    d = (input - target).abs()
    loss = where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    _check_reduction("soft_margin_loss", reduction)
    # torch's formula, log1p(exp(-y x)), overflow to inf included (a softplus would not overflow)
    return _reduce((-target * input).exp().log1p(), reduction)


def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"):
    _check_reduction("margin_ranking_loss", reduction)
    return _reduce((-target * (input1 - input2) + margin).clamp(min=0), reduction)


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"):
    _check_reduction("hinge_embedding_loss", reduction)
    if input.dtype in _dtypes.HALF_DTYPES:      # margin - input in float32, rounded once
        return hinge_embedding_loss(input.float(), target.float(), margin, reduction=reduction).type(input.dtype)
    zero = input.new_zeros(())
    # torch's rule, which also covers targets other than 1 and -1: both terms where neither excludes them
    own = where(target != -1, input, zero)
    hinge = where(target != 1, (margin - input).clamp(min=0), zero)
    return _reduce(own + hinge, reduction)


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                     reduction="mean"):
    _check_reduction("poisson_nll_loss", reduction)
    loss = input.exp() - target * input if log_input else input - target * (input + eps).log()
    if full:
        stirling = target * target.log() - target + 0.5 * (2 * math.pi * target).log()
        loss = loss + where(target > 1, stirling, target.new_zeros(()))
    return _reduce(loss, reduction)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    _check_reduction("gaussian_nll_loss", reduction)
    if var.ndim == input.ndim - 1 or (var.shape != input.shape and var.ndim == input.ndim and var.shape[-1] == 1):
        var = var.unsqueeze(-1) if var.ndim == input.ndim - 1 else var
    if bool((var < 0).any()):
        raise ValueError("var has negative entry/entries")
    from ...autograd.function import no_grad

    with no_grad():
        floor = var.clamp(min=eps)
    var = var + (floor - var).detach()            # clamped in value, the gradient of var itself (as torch)
    loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def cosine_embedding_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"):
    _check_reduction("cosine_embedding_loss", reduction)
    eps = 1e-12
    dim = input1.ndim - 1
    dot = (input1 * input2).sum(dim)
    mag = ((input1 * input1).sum(dim) + eps) * ((input2 * input2).sum(dim) + eps)
    cos = dot / mag.sqrt()
    zero = cos.new_zeros(())
    loss = where(target == 1, 1 - cos, where(target == -1, (cos - margin).clamp(min=0), zero))
    return _reduce(loss, reduction)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False, size_average=None,
                        reduce=None, reduction="mean"):
    _check_reduction("triplet_margin_loss", reduction)
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = d_neg.minimum(pairwise_distance(positive, negative, p, eps))
    return _reduce((margin + d_pos - d_neg).clamp(min=0), reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    _check_reduction("multilabel_soft_margin_loss", reduction)
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    loss = loss.mean(-1) if input.ndim > 0 else loss
    return _reduce(loss, reduction)


# ------------------------------------------------------------------------------------------------ vision
def pixel_shuffle(input, upscale_factor):
    """(*, C r², H, W) -> (*, C, H r, W r)."""
    r = int(upscale_factor)
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of "
                           f"upscale_factor, but input.size(-3)={c} is not divisible by {r * r}")
    oc = c // (r * r)
    x = input.reshape(tuple(lead) + (oc, r, r, h, w))
    k = len(lead)
    x = x.permute(*range(k), k, k + 3, k + 1, k + 4, k + 2)
    return x.reshape(tuple(lead) + (oc, h * r, w * r))


def pixel_unshuffle(input, downscale_factor):
    """(*, C, H r, W r) -> (*, C r², H, W)."""
    r = int(downscale_factor)
    *lead, c, h, w = input.shape
    if h % r or w % r:
        raise RuntimeError(f"pixel_unshuffle expects height and width to be divisible by downscale_factor, got "
                           f"{h}x{w} and {r}")
    x = input.reshape(tuple(lead) + (c, h // r, r, w // r, r))
    k = len(lead)
    x = x.permute(*range(k), k, k + 2, k + 4, k + 1, k + 3)
    return x.reshape(tuple(lead) + (c * r * r, h // r, w // r))


FUNCTIONS = [
    "silu", "mish", "selu", "celu", "hardtanh", "hardsigmoid", "hardswish", "logsigmoid", "softsign", "tanhshrink",
    "softshrink", "hardshrink", "threshold", "glu", "prelu", "softmin", "normalize", "group_norm", "instance_norm",
    "cosine_similarity", "pairwise_distance", "kl_div", "huber_loss", "soft_margin_loss", "margin_ranking_loss",
    "hinge_embedding_loss", "poisson_nll_loss", "gaussian_nll_loss", "cosine_embedding_loss", "triplet_margin_loss",
    "multilabel_soft_margin_loss", "pixel_shuffle", "pixel_unshuffle",
]


# ------------------------------------------------------------------------------------------------ adaptive max pooling
def _adaptive_max_pool(op, input, output_size, return_indices, spatial):
    """Each output cell the max of its window [floor(i L / out), ceil((i + 1) L / out)) per spatial dim (torch's
    windows), written as one amax per cell: fine for the small outputs these layers have (1x1, 7x7)."""
    from ...ops import stack

    _check_float_tensor(op, "input", input)
    if input.ndim not in (spatial + 1, spatial + 2):
        raise ValueError(f"{op}: expected a {spatial + 1}-D or {spatial + 2}-D input, got {tuple(input.shape)}")
    batched = input.ndim == spatial + 2
    x = input if batched else input.unsqueeze(0)
    sizes = tuple(x.shape[2:])
    out = (output_size,) * spatial if isinstance(output_size, numbers.Integral) else tuple(output_size)
    out = tuple(s if o is None else int(o) for o, s in zip(out, sizes))
    if any(s == 0 for s in sizes) or any(o <= 0 for o in out):
        raise ValueError(f"{op}: input {tuple(input.shape)} and output_size {output_size} must be non-empty")
    bounds = [[(i * n // o, -(-(i + 1) * n // o)) for i in range(o)] for n, o in zip(sizes, out)]
    flat_cells, index_cells = [], []
    for cell in np.ndindex(*out):
        ranges = [bounds[k][c] for k, c in enumerate(cell)]
        window = x
        for k, (a, b) in enumerate(ranges):
            window = window.narrow(2 + k, a, b - a)
        w = window.reshape(x.shape[0], x.shape[1], -1)
        flat_cells.append(w.amax(-1))
        if return_indices:
            local = w.detach().argmax(-1)                       # position inside the window -> in the input
            shape = [b - a for a, b in ranges]
            coords = np.unravel_index(np.arange(int(np.prod(shape))), shape)
            flat = np.zeros(int(np.prod(shape)), dtype=np.int64)
            stride = 1
            for k in reversed(range(spatial)):
                flat += (coords[k] + ranges[k][0]) * stride
                stride *= sizes[k]
            index_cells.append(Tensor(flat, device=x.device)[local])
    y = stack(flat_cells, -1).reshape(tuple(x.shape[:2]) + out)
    if not batched:
        y = y.squeeze(0)
    if not return_indices:
        return y
    idx = stack(index_cells, -1).reshape(tuple(x.shape[:2]) + out)
    return y, (idx if batched else idx.squeeze(0))


def adaptive_max_pool1d(input, output_size, return_indices=False):
    return _adaptive_max_pool("adaptive_max_pool1d", input, output_size, return_indices, 1)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    return _adaptive_max_pool("adaptive_max_pool2d", input, output_size, return_indices, 2)


def adaptive_max_pool3d(input, output_size, return_indices=False):
    return _adaptive_max_pool("adaptive_max_pool3d", input, output_size, return_indices, 3)


FUNCTIONS += ["adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d"]


# ------------------------------------------------------------------------------------------------ embedding_bag
def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False, mode="mean",
                  sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """The sum, mean or max of each bag of embeddings (torch.nn.functional.embedding_bag). A 2-D input is one bag
    per row; a 1-D input is cut into bags at `offsets`. Entries equal to padding_idx are left out of their bag
    (an empty bag gives zeros). Composed of F.embedding and a bag-by-entry matrix product, so it has gradients."""
    from ...ops import stack
    from .sparse import embedding

    op = "embedding_bag"
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"{op}: mode has to be one of sum, mean or max, got {mode!r}")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                  f"supported for mode='sum' (got mode='{mode}'). Please open a feature request on "
                                  "GitHub.")
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated is a mini-batch of "
                             "fixed length sequences.")
        n_bags, length = input.shape
        starts = np.arange(n_bags) * length
        flat = input.reshape(-1)
        ends = starts + length
        if per_sample_weights is not None:
            per_sample_weights = per_sample_weights.reshape(-1)
    elif input.ndim == 1:
        if offsets is None or offsets.ndim != 1:
            raise ValueError("offsets has to be a 1D Tensor but got None" if offsets is None else
                             f"offsets has to be a 1D Tensor, got {offsets.ndim}-D")
        flat = input
        offs = np.asarray(offsets.cpu().numpy() if hasattr(offsets, "cpu") else offsets, dtype=np.int64)
        if include_last_offset:
            starts, ends = offs[:-1], offs[1:]
        else:
            starts, ends = offs, np.append(offs[1:], flat.shape[0])
        n_bags = len(starts)
    else:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.ndim}")
    n = flat.shape[0]
    rows = embedding(flat, weight, max_norm=max_norm, norm_type=norm_type, scale_grad_by_freq=scale_grad_by_freq)
    ids = np.asarray(flat.cpu().numpy(), dtype=np.int64)
    keep = np.ones(n, dtype=bool) if padding_idx is None else ids != (padding_idx % weight.shape[0])
    member = np.zeros((n_bags, n), dtype=np.float64)
    for b, (a, e) in enumerate(zip(starts, ends)):
        member[b, a:e] = keep[a:e]
    if mode == "max":
        d = weight.shape[1]
        out = []
        for b in range(n_bags):
            sel = np.nonzero(member[b])[0]
            out.append(rows.index_select(0, Tensor(sel, device=weight.device)).amax(0) if sel.size
                       else weight.new_zeros((d,)))
        return stack(out, 0) if out else weight.new_zeros((0, d))
    m = Tensor(member, dtype=weight.dtype, device=weight.device)
    if per_sample_weights is not None:
        m = m * per_sample_weights.reshape(1, -1)
    if mode == "mean":
        counts = np.maximum(member.sum(1, keepdims=True), 1)
        m = m / Tensor(counts, dtype=weight.dtype, device=weight.device)
    return m @ rows


FUNCTIONS += ["embedding_bag"]


# ------------------------------------------------------------------------------------------------ spatial transformers
def affine_grid(theta, size, align_corners=None):
    """The sampling grid (N, H, W, 2) of the 2-D affine maps theta (N, 2, 3), in [-1, 1] coordinates
    (x first, as torch), for an output of size (N, C, H, W). Differentiable in theta."""
    if align_corners is None:
        align_corners = False
    if len(size) != 4:
        raise NotImplementedError(f"affine_grid: only 2-D grids (size (N, C, H, W)) are supported in minidl, got {size}")
    n, _, h, w = size
    if tuple(theta.shape) != (n, 2, 3):
        raise ValueError(f"Expected a batch of 2D affine matrices of shape Nx2x3 for size {list(size)}. Got "
                         f"{list(theta.shape)}.")

    def axis(k):
        if k == 1:
            return np.zeros(1)
        lin = np.linspace(-1.0, 1.0, k)
        return lin if align_corners else lin * (k - 1) / k
    xs, ys = np.meshgrid(axis(w), axis(h))
    base = np.stack([xs, ys, np.ones_like(xs)], -1).reshape(1, h * w, 3)        # (1, H W, 3)
    b = Tensor(base, dtype=theta.dtype, device=theta.device)
    return (b @ theta.transpose(1, 2)).reshape(n, h, w, 2)


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """Sample input (N, C, H, W) at the points of grid (N, Ho, Wo, 2) in [-1, 1] coordinates (x, y): bilinear or
    nearest, zero or border padding (torch.nn.functional.grid_sample, 2-D). Built from gathers and weighted
    sums: differentiable in the input and in the grid."""
    if align_corners is None:
        align_corners = False
    if input.ndim != 4 or grid.ndim != 4 or grid.shape[-1] != 2:
        raise NotImplementedError(f"grid_sample: 2-D sampling only in minidl (input (N, C, H, W), grid (N, Ho, Wo, 2)); "
                                  f"got input {tuple(input.shape)} and grid {tuple(grid.shape)}")
    if mode not in ("bilinear", "nearest"):
        raise NotImplementedError(f"grid_sample: mode {mode!r} is not supported in minidl (bilinear, nearest)")
    if padding_mode not in ("zeros", "border"):
        raise NotImplementedError(f"grid_sample: padding_mode {padding_mode!r} is not supported in minidl "
                                  "(zeros, border)")
    n, c, h, w = input.shape
    ho, wo = grid.shape[1], grid.shape[2]
    gx, gy = grid[..., 0], grid[..., 1]

    def unnormalize(coord, size):
        return (coord + 1) / 2 * (size - 1) if align_corners else ((coord + 1) * size - 1) / 2
    x, y = unnormalize(gx, w), unnormalize(gy, h)
    if padding_mode == "border":
        x, y = x.clamp(0, w - 1), y.clamp(0, h - 1)
    flat = input.reshape(n, c, h * w)

    def corner(yi, xi):
        """input at integer points (yi, xi) (N, Ho, Wo), zero outside: (N, C, Ho, Wo)."""
        valid = ((xi >= 0) & (xi <= w - 1) & (yi >= 0) & (yi <= h - 1)).type(input.dtype)
        index = (yi.clamp(0, h - 1) * w + xi.clamp(0, w - 1)).long().reshape(n, 1, ho * wo)
        values = flat.gather(2, index.expand(n, c, ho * wo)).reshape(n, c, ho, wo)
        return values * valid.unsqueeze(1)

    if mode == "nearest":
        xr = x.detach()
        yr = y.detach()
        # round half to even, as torch's nearbyint; the grid gets a zero gradient, as in torch
        zero = ((x - x.detach()) + (y - y.detach())).unsqueeze(1) * 0
        return corner(yr.round(), xr.round()) + zero
    x0, y0 = x.detach().floor(), y.detach().floor()
    x1, y1 = x0 + 1, y0 + 1
    wx1, wy1 = (x - x0).unsqueeze(1), (y - y0).unsqueeze(1)
    wx0, wy0 = 1 - wx1, 1 - wy1
    return (corner(y0, x0) * wy0 * wx0 + corner(y0, x1) * wy0 * wx1 +
            corner(y1, x0) * wy1 * wx0 + corner(y1, x1) * wy1 * wx1)


FUNCTIONS += ["affine_grid", "grid_sample"]


# ------------------------------------------------------------------------------------------------ gumbel_softmax
def gumbel_softmax(logits, tau=1.0, hard=False, eps=1e-10, dim=-1):
    """softmax((logits + g) / tau) along dim, g Gumbel(0, 1) noise (torch.nn.functional.gumbel_softmax). hard: the
    one-hot of the argmax in the forward pass, the soft sample's gradient in the backward (straight-through)."""
    from ...ops.creation import rand_like

    if not isinstance(logits, Tensor) or not logits.dtype.kind == "f":
        raise TypeError(f"gumbel_softmax: logits must be a floating-point tensor, got {getattr(logits, 'dtype', logits)}")
    u = rand_like(logits).clamp(min=np.finfo(logits.dtype).tiny)   # (0, 1): -log(-log(u)) is Gumbel(0, 1)
    gumbels = -(-u.log()).log()
    y_soft = softmax((logits + gumbels) / tau, dim)
    if not hard:
        return y_soft
    index = y_soft.argmax(dim, keepdim=True)
    y_hard = (y_soft.detach() * 0).scatter_(dim, index, 1.0)
    return y_hard - y_soft.detach() + y_soft


FUNCTIONS += ["gumbel_softmax"]
