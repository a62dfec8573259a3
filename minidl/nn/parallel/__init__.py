"""torch.nn.parallel's names. DataParallel on one device is the module itself (PyTorch's DataParallel with
one GPU runs the module unchanged); DistributedDataParallel (one process per device, over
minidl.distributed) is in distributed.py."""
from __future__ import annotations

from ..module import Module


class DataParallel(Module):
    """DataParallel(module, device_ids=None, output_device=None, dim=0): minidl runs on one GPU, so this is
    `module` behind a `.module` attribute (as torch's with one device): state dicts keep the "module."
    prefix, as torch's do."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        if device_ids is not None and len(list(device_ids)) > 1:
            import warnings

            warnings.warn("DataParallel: minidl uses one device; the module runs on it whole", stacklevel=2)
        self.module = module

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


from .distributed import DistributedDataParallel  # noqa: E402,F401
