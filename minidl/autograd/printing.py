"""How a tensor prints: PyTorch's format (torch/_tensor_str.py), and torch.set_printoptions.

    set_printoptions(precision=4, threshold=1000, edgeitems=3, linewidth=80, profile=None, sci_mode=None)

precision: digits after the point; threshold: above this many elements a tensor is summarised (its first and last
edgeitems along each dimension, with `...`); linewidth: characters per line; sci_mode: True / False forces
scientific notation on or off, None chooses it from the values; profile: "default", "short" (precision 2,
edgeitems 2) or "full" (nothing summarised). Arguments left None keep their current value, as torch's.
"""
from __future__ import annotations

import math

import numpy as np

from .. import _dtypes

_PROFILES = {"default": dict(precision=4, threshold=1000, edgeitems=3, linewidth=80),
             "short": dict(precision=2, threshold=1000, edgeitems=2, linewidth=80),
             "full": dict(precision=4, threshold=math.inf, edgeitems=3, linewidth=80)}
PRINT_OPTIONS = dict(_PROFILES["default"], sci_mode=None)


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None):
    """torch.set_printoptions (see the module docstring)."""
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError(f"set_printoptions: profile must be 'default', 'short' or 'full', got {profile!r}")
        PRINT_OPTIONS.update(_PROFILES[profile])
    for name, value in (("precision", precision), ("threshold", threshold), ("edgeitems", edgeitems),
                        ("linewidth", linewidth)):
        if value is not None:
            PRINT_OPTIONS[name] = value
    PRINT_OPTIONS["sci_mode"] = sci_mode


def get_printoptions() -> dict:
    return dict(PRINT_OPTIONS)


def float_formatter(values):
    """PyTorch's way of printing floating tensors (_tensor_str.py's _Formatter): whole numbers as `1.`, others with
    `precision` decimals, scientific notation when the nonzero magnitudes span more than 1000x, exceed 1e8 or (not
    whole) go below 1e-4 (or as sci_mode says); every element padded to one width."""
    precision, forced = PRINT_OPTIONS["precision"], PRINT_OPTIONS["sci_mode"]
    finite = values[np.isfinite(values) & (values != 0)]
    whole = bool(np.all(np.ceil(finite) == finite))
    sci = False
    if finite.size:
        big, small = float(np.abs(finite).max()), float(np.abs(finite).min())
        sci = big / small > 1000.0 or big > 1e8 or (not whole and small < 1e-4)
    if forced is not None:
        sci = forced

    def text(v):
        if not np.isfinite(v):
            return "nan" if np.isnan(v) else ("inf" if v > 0 else "-inf")
        if sci:
            return f"{v:.{precision}e}"
        return f"{v:.0f}." if whole else f"{v:.{precision}f}"

    width = max((len(text(v)) for v in values.flat), default=0)
    return lambda v: text(v).rjust(width)


def body(host):
    """The values part of a tensor's repr, `[[1., 2.], ...]`, from its host array."""
    threshold = PRINT_OPTIONS["threshold"]
    edge = PRINT_OPTIONS["edgeitems"]
    options = dict(separator=", ", prefix="tensor(", threshold=int(min(threshold, 2 ** 62)), edgeitems=edge,
                   max_line_width=PRINT_OPTIONS["linewidth"])
    if _dtypes.is_floating(host.dtype):
        host = host.astype(np.float64) if host.dtype != np.float64 else host
        shown = host
        if host.size > threshold:   # as torch: the format is chosen from the printed items only
            for axis in range(host.ndim):
                if shown.shape[axis] > 2 * edge:
                    shown = np.concatenate([shown.take(range(edge), axis), shown.take(range(-edge, 0), axis)], axis)
        options["formatter"] = {"float_kind": float_formatter(shown)}
    return np.array2string(host, **options).replace(", ..., ", ",  ..., ")
