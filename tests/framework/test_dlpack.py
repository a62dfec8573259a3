"""DLPack (minidl/utils/dlpack.py): zero-copy exchange with NumPy, PyTorch and (when installed) JAX, both
ways. Zero copy is checked by writing through one side and reading the other; layouts (channels_last
strides, 0-d, bool, int64) survive; what cannot travel is refused with the reason."""
import numpy as np
import pytest
import torch

import minidl


def test_numpy_both_ways_share_memory():
    x = minidl.randn(3, 4)
    a = np.from_dlpack(x)
    a[1, 2] = 42.0
    assert x.numpy()[1, 2] == 42.0
    b = np.arange(6, dtype=np.float64).reshape(2, 3)
    y = minidl.from_dlpack(b)
    b[0, 0] = -1.0
    assert y.dtype == np.float64 and y.numpy()[0, 0] == -1.0 and y.shape == (2, 3)
    assert x.__dlpack_device__() == (1, 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int64, torch.int32,
                                   torch.uint8, torch.bool])
def test_torch_both_ways_share_memory(dtype):
    t = (torch.arange(12) % 3).to(dtype).reshape(3, 4)
    x = minidl.from_dlpack(t)
    assert x.shape == (3, 4) and x.numpy().tolist() == t.tolist()
    t[2, 3] = 1
    assert x.numpy()[2, 3] == 1                       # the same memory
    back = torch.from_dlpack(x)
    assert back.dtype == dtype and back.data_ptr() == t.data_ptr()


def test_layouts_and_0d_survive():
    x = minidl.randn(2, 3, 4, 5).contiguous(memory_format=minidl.channels_last)
    t = torch.from_dlpack(x)
    assert t.stride() == x.stride() and t.is_contiguous(memory_format=torch.channels_last)
    assert np.array_equal(t.numpy(), x.numpy())
    view = minidl.from_dlpack(torch.randn(4, 6)[:, ::2])    # a strided view
    assert view.shape == (4, 3)
    scalar = minidl.from_dlpack(torch.tensor(2.5))
    assert scalar.shape == () and scalar.item() == 2.5
    assert torch.from_dlpack(minidl.tensor(1.5)).item() == 1.5


def test_a_minidl_tensor_from_dlpack_trains():
    w = minidl.from_dlpack(torch.randn(3, 2, dtype=torch.float64)).requires_grad_()
    (w * w).sum().backward()
    assert np.allclose(w.grad.numpy(), 2 * w.detach().numpy())


def test_what_cannot_travel_is_refused_with_the_reason():
    with pytest.raises(RuntimeError, match="requires grad"):
        torch.from_dlpack(minidl.randn(2, requires_grad=True))
    with pytest.raises(BufferError, match="bfloat16"):
        torch.from_dlpack(minidl.randn(2).to(minidl.bfloat16))
    with pytest.raises(BufferError, match="bfloat16"):
        minidl.from_dlpack(torch.ones(2, dtype=torch.bfloat16))
    with pytest.raises(BufferError, match="stream must be None"):
        minidl.randn(2).__dlpack__(stream=1)
    with pytest.raises(TypeError, match="__dlpack__"):
        minidl.from_dlpack([1.0, 2.0])
    with pytest.raises((TypeError, RuntimeError), match="capsule|CUDA|cupy|CuPy"):
        minidl.from_dlpack(torch.utils.dlpack.to_dlpack(torch.ones(2)))


def test_utils_names_as_torch():
    from minidl.utils import dlpack

    x = minidl.randn(2, 2)
    capsule = dlpack.to_dlpack(x)
    assert type(capsule).__name__ == "PyCapsule"
    assert torch.equal(torch.utils.dlpack.from_dlpack(capsule), torch.from_numpy(x.numpy()))
    assert dlpack.from_dlpack(x) is x


def test_jax_both_ways():
    jnp = pytest.importorskip("jax.numpy", reason="JAX is not installed")
    a = jnp.arange(6.0).reshape(2, 3)
    x = minidl.from_dlpack(a)   # (on a GPU machine JAX's arrays live on the GPU: so does x, zero copy)
    assert x.cpu().numpy().tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    import jax

    b = jax.dlpack.from_dlpack(minidl.ones(2, 2))
    assert b.shape == (2, 2)
