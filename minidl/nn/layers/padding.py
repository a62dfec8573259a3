"""Padding layers (torch.nn's names): each is F.pad with a fixed padding and mode.

    ZeroPad{1,2,3}d, ConstantPad{1,2,3}d(padding, value), ReflectionPad{1,2,3}d, ReplicationPad{1,2,3}d,
    CircularPad{1,2,3}d

`padding` is an int (the same on every side) or a tuple of 2, 4 or 6 ints in F.pad's order (left, right,
top, bottom, front, back): the last dim's two sides first.
"""
from __future__ import annotations

from .. import functional as F
from ..module import Module


class _PadNd(Module):
    mode = "constant"
    dims = 1

    def __init__(self, padding, value: float = 0.0):
        super().__init__()
        if isinstance(padding, int):
            padding = (padding,) * (2 * self.dims)
        padding = tuple(int(p) for p in padding)
        if len(padding) != 2 * self.dims:
            raise ValueError(f"{type(self).__name__}: padding must be an int or {2 * self.dims} ints, got {padding}")
        self.padding, self.value = padding, value

    def forward(self, input):
        if self.mode == "constant":
            return F.pad(input, self.padding, mode="constant", value=self.value)
        return F.pad(input, self.padding, mode=self.mode)

    def extra_repr(self):
        return f"padding={self.padding}" + (f", value={self.value}" if self.mode == "constant" else "")


def _layer(name, mode, dims, doc):
    cls = type(name, (_PadNd,), {"mode": mode, "dims": dims, "__doc__": doc, "__module__": __name__})
    if mode == "constant" and name.startswith("Zero"):
        cls.__init__ = lambda self, padding: _PadNd.__init__(self, padding, 0.0)
    return cls


_DOCS = {"Zero": ("constant", "pads with zeros"), "Constant": ("constant", "pads with `value`"),
         "Reflection": ("reflect", "mirrors the input at its edges (edge not repeated)"),
         "Replication": ("replicate", "repeats the edge values"),
         "Circular": ("circular", "wraps around (periodic)")}

for _kind, (_mode, _what) in _DOCS.items():
    for _d in (1, 2, 3):
        _name = f"{_kind}Pad{_d}d"
        globals()[_name] = _layer(_name, _mode, _d, f"{_name}(padding): {_what} over the last {_d} dim(s) (F.pad).")

__all__ = [f"{k}Pad{d}d" for k in _DOCS for d in (1, 2, 3)]
