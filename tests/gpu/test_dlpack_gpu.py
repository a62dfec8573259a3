"""DLPack on the GPU: minidl <-> CuPy and minidl <-> torch (CUDA), zero copy, with the stream handshake:
a minidl kernel still running when torch takes the tensor must be finished before torch reads it."""
import numpy as np
import pytest

import minidl

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _cupy():
    pytest.importorskip("cupy")
    if not minidl.cuda.is_available():
        pytest.skip(minidl.cuda.unavailable_reason())


def test_cupy_both_ways_share_memory():
    import cupy

    x = minidl.randn(64, 33, device="cuda")
    c = cupy.from_dlpack(x)
    c[3, 4] = 9.0
    assert float(x[3, 4].item()) == 9.0
    assert x.__dlpack_device__()[0] == 2
    y = minidl.from_dlpack(cupy.arange(12, dtype=cupy.float32).reshape(3, 4))
    assert y.is_cuda and y.cpu().numpy()[2, 3] == 11.0


def test_torch_cuda_both_ways_and_streams():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    x = minidl.randn(2048, 2048, device="cuda")
    y = x @ x                                     # queued on minidl's (CuPy's) stream
    t = torch.from_dlpack(y)                      # torch's stream must wait for it
    assert t.device.type == "cuda" and t.data_ptr() == y._data.data.ptr
    ref = x.cpu().numpy().astype(np.float64) @ x.cpu().numpy().astype(np.float64)
    assert np.linalg.norm(t.cpu().numpy() - ref) / np.linalg.norm(ref) < 1e-3
    u = torch.randn(5, 7, device="cuda") * 3      # queued on torch's stream
    m = minidl.from_dlpack(u)
    assert np.allclose(m.cpu().numpy(), u.cpu().numpy())
    capsule = torch.utils.dlpack.to_dlpack(torch.ones(3, device="cuda"))
    assert minidl.from_dlpack(capsule).cpu().numpy().tolist() == [1.0, 1.0, 1.0]
