"""GPU tests compare float32 results with float64 references or torch at 1e-4, which TF32 (minidl's
and PyTorch's default for convolutions, backends.cudnn.allow_tf32 = True) does not meet. So every
GPU test runs with TF32 off on both sides; the tests of the TF32 paths ask for it explicitly
(math="tf32" on the primitives, or `with minidl.backends.cudnn.flags(allow_tf32=True)`)."""
import pytest


@pytest.fixture(autouse=True)
def tf32_off():
    import minidl

    torch_flags = None
    try:
        import torch

        torch_flags = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    except ImportError:
        pass
    with minidl.backends.cudnn.flags(allow_tf32=False):
        yield
    if torch_flags is not None:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = torch_flags
