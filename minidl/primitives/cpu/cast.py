"""NumPy reference of the cast primitive: x in another floating-point dtype, rounded to nearest even;
float16 overflows to inf (silently, as PyTorch's casts: GradScaler looks for exactly that)."""
from __future__ import annotations

import numpy as np


def cast(x, dtype):
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(dtype)
