"""The files one steady-state Conv2d training step enters on the GPU, traced as tests/test_call_path.py traces the
CPU step, against the ```call-path conv2d_cuda_* blocks of docs/DESIGN.md. Two cases: float32 with TF32 tensor
cores (minidl.backends.cudnn.allow_tf32, the default: the tensor-core convolution on its NHWC twin plan) and
exact fp32 (the SIMT kernels)."""
import pytest

import minidl
import minidl.nn as nn

from tests.test_call_path import documented, entered_from_several, trace

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("case, tf32", [("conv2d_cuda_tf32", True), ("conv2d_cuda_fp32", False)])
def test_a_gpu_step_enters_the_documented_files(case, tf32):
    pytest.importorskip("cupy")
    minidl.manual_seed(0)
    conv = nn.Conv2d(32, 64, 3, padding=1).to("cuda")
    x = minidl.randn(8, 32, 16, 16).to("cuda")
    with minidl.backends.cudnn.flags(allow_tf32=tf32):
        step = lambda: conv(x).sum().backward()   # noqa: E731
        for _ in range(3):
            step()
        want, ceiling, one_caller = documented()[case]
        # The wgmma launchers find each TMA map by its array's address (MapRecipe.maps) and make one (cuda/tma.py)
        # for an address not seen before: in a steady loop CuPy's pool hands a step's buffers back at the same few
        # addresses, but in a fragmented pool (a whole test run before this one) the cycle can take a few more steps
        # to close. A steady step is one whose maps are all known: of up to five traced steps, the first that enters
        # the documented files (else the last) is the one checked.
        for _ in range(5):
            callers = {}
            files, reentries = trace(step, callers)
            if files == want:
                break
    assert files == want, (f"the {case} step now enters {files} (first-entry order, {reentries} re-entries); "
                           f"docs/DESIGN.md lists {want}")
    assert reentries <= ceiling, f"the {case} step re-enters files {reentries} times, more than {ceiling}"
    if one_caller:
        several = entered_from_several(callers)
        assert not several, f"the {case} step enters these files from more than one other file: {several}"
