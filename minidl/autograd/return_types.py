"""PyTorch's small result types: `Size` (what `shape` and `size()` return) and the named tuples that
max/min/sort/topk/kthvalue/mode/median return (`values`, `indices`), as `torch.return_types`."""
from __future__ import annotations

from collections import namedtuple


class Size(tuple):
    """A tensor's shape: a tuple of ints that also has numel() (torch.Size)."""

    def numel(self) -> int:
        n = 1
        for s in self:
            n *= s
        return n

    def __getitem__(self, key):
        out = tuple.__getitem__(self, key)
        return Size(out) if isinstance(key, slice) else out

    def __add__(self, other):
        return Size(tuple.__add__(self, tuple(other)))

    # Under `python -m minidl.run` (a PyTorch program's output compared with torch's), "torch": both forms read
    # torch.Size([2, 5]) as PyTorch prints them.
    spelling = "minidl"

    def __repr__(self):
        return f"{Size.spelling}.Size({list(self)})"

    def __str__(self):
        # str() (and f-strings) keep the plain tuple form, so error messages read "shape (2, 5)";
        # repr() is torch's form. (PyTorch prints torch.Size([2, 5]) for both.)
        return self.__repr__() if Size.spelling == "torch" else tuple.__repr__(self)

    def __reduce__(self):
        return (Size, (tuple(self),))


def _values_indices(name):
    cls = namedtuple(name, ["values", "indices"])
    cls.__module__ = __name__
    cls.__doc__ = f"What {name}() returns: the tensors `values` and `indices` (a named tuple, as torch.return_types.{name})."
    return cls


max = _values_indices("max")  # noqa: A001
min = _values_indices("min")  # noqa: A001
sort = _values_indices("sort")
topk = _values_indices("topk")
kthvalue = _values_indices("kthvalue")
mode = _values_indices("mode")
median = _values_indices("median")
cummax = _values_indices("cummax")
cummin = _values_indices("cummin")

aminmax = namedtuple("aminmax", ["min", "max"])
aminmax.__module__ = __name__
aminmax.__doc__ = "What aminmax() returns: the tensors `min` and `max` (a named tuple, as torch.return_types.aminmax)."
