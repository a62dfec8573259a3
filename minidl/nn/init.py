"""Weight initialisation, with PyTorch's names and formulas (`torch.nn.init`).

Why the scale matters: a layer's output variance is fan_in * Var(w) * Var(x) (for zero-mean w and x).
Choosing Var(w) = gain^2 / fan keeps activations (fan_in) or gradients (fan_out) at a steady size
through many layers: Glorot/Xavier averages fan_in and fan_out, He/Kaiming uses one of them and a gain
that makes up for what the nonlinearity removes (ReLU zeroes half the inputs: gain sqrt(2)).

Every function fills the tensor in place, without recording a gradient, and returns it.
"""
from __future__ import annotations

import math

import numpy as np

from .. import random
from .._device import get_array_module
from ..autograd.function import no_grad

__all__ = [
    "calculate_gain", "uniform_", "normal_", "constant_", "zeros_", "ones_", "eye_", "xavier_uniform_",
    "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "trunc_normal_",
]


def calculate_gain(nonlinearity: str, param=None) -> float:
    """The gain to multiply a unit-variance init by, so that `nonlinearity` keeps the variance steady."""
    linear_fns = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
    if nonlinearity in linear_fns or nonlinearity == "sigmoid":
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"calculate_gain: negative_slope {param!r} is not a valid number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def _calculate_fan_in_and_fan_out(tensor):
    """fan_in = in_features * receptive field, fan_out = out_features * receptive field.

    Weights are (out, in, *kernel) as in PyTorch, so the receptive field is the product of the kernel dims.
    """
    if tensor.ndim < 2:
        raise ValueError(
            f"_calculate_fan_in_and_fan_out: fan in and fan out need a tensor with at least 2 dims, got shape {tensor.shape}"
        )
    receptive_field = int(np.prod(tensor.shape[2:])) if tensor.ndim > 2 else 1
    return tensor.shape[1] * receptive_field, tensor.shape[0] * receptive_field


def _calculate_correct_fan(tensor, mode: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"kaiming init: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def _write(tensor, array):
    with no_grad():
        tensor._data[...] = array
    return tensor


def uniform_(tensor, a: float = 0.0, b: float = 1.0):
    """Fill with U(a, b)."""
    return _write(tensor, random.uniform_array(tensor.shape, a, b, tensor.dtype, tensor.device))


def normal_(tensor, mean: float = 0.0, std: float = 1.0):
    """Fill with N(mean, std^2)."""
    return _write(tensor, random.normal_array(tensor.shape, mean, std, tensor.dtype, tensor.device))


def trunc_normal_(tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0):
    """N(mean, std^2) restricted to [a, b], by redrawing the samples that fall outside."""
    values = random.normal_array(tensor.shape, mean, std, np.float64, "cpu")
    bad = (values < a) | (values > b)
    while bad.any():
        values[bad] = random.normal_array((int(bad.sum()),), mean, std, np.float64, "cpu")
        bad = (values < a) | (values > b)
    xp = get_array_module(tensor._data)
    return _write(tensor, xp.asarray(values.astype(tensor.dtype)))


def constant_(tensor, val: float):
    return _write(tensor, val)


def zeros_(tensor):
    return _write(tensor, 0)


def ones_(tensor):
    return _write(tensor, 1)


def eye_(tensor):
    if tensor.ndim != 2:
        raise ValueError(f"eye_: needs a 2-D tensor, got shape {tensor.shape}")
    xp = get_array_module(tensor._data)
    return _write(tensor, xp.eye(*tensor.shape, dtype=tensor.dtype))


def dirac_(tensor, groups: int = 1):
    """A convolution weight (out, in/groups, *kernel) that passes its input through: 1 at the kernel's
    centre where out channel == in channel (within each of `groups` groups), 0 elsewhere (torch's dirac_)."""
    if tensor.ndim not in (3, 4, 5):
        raise ValueError(f"dirac_: only tensors with 3, 4, or 5 dimensions are supported, got shape {tensor.shape}")
    out_ch = tensor.shape[0]
    if out_ch % groups:
        raise ValueError(f"dirac_: dim 0 ({out_ch}) must be divisible by groups ({groups})")
    per_group = out_ch // groups
    n = min(per_group, tensor.shape[1])
    array = np.zeros(tensor.shape, dtype=np.float64)
    centre = tuple(k // 2 for k in tensor.shape[2:])
    for g in range(groups):
        for d in range(n):
            array[(g * per_group + d, d) + centre] = 1.0
    xp = get_array_module(tensor._data)
    return _write(tensor, xp.asarray(array.astype(tensor.dtype)))


def xavier_uniform_(tensor, gain: float = 1.0):
    """Glorot: U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    bound = math.sqrt(3.0) * std  # U(-a, a) has variance a^2 / 3
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor, gain: float = 1.0):
    """Glorot: N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)))


def _zero_elements(tensor) -> bool:
    """torch's rule for the fan-based initialisers: a tensor with no elements (a 0-wide layer) is left as it is,
    with a warning, instead of dividing by a zero fan."""
    if tensor.numel() == 0:
        import warnings

        warnings.warn("Initializing zero-element tensors is a no-op", UserWarning, stacklevel=3)
        return True
    return False


def kaiming_uniform_(tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"):
    """He: U(-bound, bound) with bound = gain * sqrt(3 / fan); `a` is the leaky-ReLU slope for the gain."""
    if _zero_elements(tensor):
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"):
    """He: N(0, std^2) with std = gain / sqrt(fan)."""
    if _zero_elements(tensor):
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan))


def orthogonal_(tensor, gain: float = 1.0):
    """A (semi-)orthogonal matrix (Saxe et al. 2013): the Q of a QR decomposition of a Gaussian matrix,
    with the signs fixed so the distribution is uniform. Dims after the first are flattened."""
    if tensor.ndim < 2:
        raise ValueError(f"orthogonal_: needs a tensor with at least 2 dims, got shape {tensor.shape}")
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = random.normal_array((rows, cols), 0.0, 1.0, np.float64, "cpu")
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q *= np.sign(np.diag(r))  # without this, QR's sign convention biases the distribution
    if rows < cols:
        q = q.T
    xp = get_array_module(tensor._data)
    return _write(tensor, xp.asarray((gain * q).reshape(tensor.shape).astype(tensor.dtype)))


def sparse_(tensor, sparsity, std=0.01, generator=None):
    """A 2-D tensor from N(0, std), with a fraction `sparsity` of each column set to zero (torch's sparse_)."""
    import math as _math

    import numpy as _np

    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = tensor.shape
    zeros = int(_math.ceil(sparsity * rows))
    normal_(tensor, 0.0, std)                        # minidl's generator, as every init here
    values = _np.array(tensor.detach().cpu().numpy())
    order = _np.argsort(random.uniform_array((rows, cols), 0.0, 1.0, _np.float64, "cpu"), axis=0)
    for c in range(cols):                            # a random `zeros` rows of each column
        values[order[:zeros, c], c] = 0
    return _write(tensor, values)


def _deprecated(new):
    """torch's old names without the trailing underscore (nn.init.xavier_uniform): they warn, then call the new one."""
    def old(*args, **kwargs):
        import warnings

        warnings.warn(f"nn.init.{new.__name__[:-1]} is now deprecated in favor of nn.init.{new.__name__}.",
                      FutureWarning, stacklevel=2)
        return new(*args, **kwargs)
    old.__name__ = new.__name__[:-1]
    old.__doc__ = f"Deprecated (as in torch): use nn.init.{new.__name__}."
    return old


uniform, normal, constant, eye, dirac = (_deprecated(f) for f in (uniform_, normal_, constant_, eye_, dirac_))
xavier_uniform, xavier_normal = _deprecated(xavier_uniform_), _deprecated(xavier_normal_)
kaiming_uniform, kaiming_normal = _deprecated(kaiming_uniform_), _deprecated(kaiming_normal_)
orthogonal, sparse = _deprecated(orthogonal_), _deprecated(sparse_)
