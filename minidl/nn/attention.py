"""torch.nn.attention: which backend scaled_dot_product_attention may use.

    with sdpa_kernel(SDPBackend.MATH):                  # the composite of matmul, softmax and dropout
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):   # fused only

minidl has two backends where torch has four: the fused attention primitive (kernels/attention.cu on the GPU, the
NumPy reference on the CPU), which stands for torch's flash, memory-efficient and cuDNN backends, and the
composite (torch's math backend). The flags are backends.cuda's (`sdp_kernel`, `enable_flash_sdp`, ...), which
apply on every device, as torch's do. When no allowed backend takes the inputs, the call raises, naming them.
"""
from __future__ import annotations

import contextlib
import enum

from .. import backends as _flags

__all__ = ["SDPBackend", "sdpa_kernel"]


class SDPBackend(enum.IntEnum):
    """torch.nn.attention.SDPBackend, with torch's values."""

    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


_FLAG = {SDPBackend.MATH: "math", SDPBackend.FLASH_ATTENTION: "flash", SDPBackend.EFFICIENT_ATTENTION: "mem_efficient",
         SDPBackend.CUDNN_ATTENTION: "cudnn"}


@contextlib.contextmanager
def sdpa_kernel(backends_=None, set_priority: bool = False, *, backends=None):
    """Allow only these backends (one SDPBackend or a list) inside the block (also as a decorator). set_priority
    is accepted and ignored: minidl tries its fused backend first whenever it is allowed."""
    chosen = backends_ if backends is None else backends
    if chosen is None:
        raise TypeError("sdpa_kernel: pass the backends to allow (an SDPBackend or a list of them)")
    chosen = [chosen] if isinstance(chosen, (SDPBackend, int)) else list(chosen)
    flags = {name: False for name in _FLAG.values()}
    for b in chosen:
        try:
            b = SDPBackend(b)
        except ValueError:
            raise ValueError(f"sdpa_kernel: {b!r} is not an SDPBackend") from None
        if b in _FLAG:
            flags[_FLAG[b]] = True
    sdp = _flags.cuda.sdp
    previous = dict(sdp)
    sdp.update(flags)
    try:
        yield
    finally:
        sdp.update(previous)

