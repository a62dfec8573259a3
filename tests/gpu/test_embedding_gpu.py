"""The embedding primitive on the GPU (kernels/embedding.cu) against its NumPy reference: the lookup bit for bit
(float32 / float16 / bfloat16, int64 and int32 indices, rows copied 16 bytes at a time or element by element), NaN
rows for out-of-range indices, the gradient (atomic fp32 sums: equal to the reference's up to the order of the
additions; 16-bit gradients rounded once), padding_idx, float64 through CuPy; and nn.Embedding on the GPU against
torch's on its GPU, forward and backward, inside a training step that never reads back."""
import ml_dtypes
import numpy as np
import pytest
import torch

import minidl
from minidl import primitives as P

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32], ids=["int64", "int32"])
@pytest.mark.parametrize("dim", [384, 5, 24])     # 16-byte rows (384, 24 in 32-bit and 16-bit), and not (5)
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_lookup_and_gradient_equal_the_reference(dtype, index_dtype, dim, padding_idx):
    rng = np.random.default_rng(0)
    num = 11
    weight = rng.standard_normal((num, dim)).astype(dtype)
    idx = rng.integers(-2, num + 2, (3, 57)).astype(index_dtype)     # some out of range at each end
    idx[0, :8] = 2
    dout = rng.standard_normal((3, 57, dim)).astype(dtype)
    want = P.embedding_forward(weight, idx, padding_idx=padding_idx)
    got = cupy.asnumpy(P.embedding_forward(cupy.asarray(weight), cupy.asarray(idx), padding_idx=padding_idx))
    assert got.dtype == np.dtype(dtype) and got.shape == (3, 57, dim)
    nan = np.isnan(want.astype(np.float64))
    assert nan.any() and (np.isnan(got.astype(np.float64)) == nan).all()
    np.testing.assert_array_equal(got[~nan], want[~nan])
    want_dw = P.embedding_backward(dout, idx, num, padding_idx=padding_idx)
    got_dw = cupy.asnumpy(P.embedding_backward(cupy.asarray(dout), cupy.asarray(idx), num, padding_idx=padding_idx))
    assert got_dw.dtype == np.dtype(dtype) and got_dw.shape == (num, dim)
    tol = {np.dtype(np.float16): 2e-3, np.dtype(ml_dtypes.bfloat16): 1e-2}.get(np.dtype(dtype), 1e-5)
    np.testing.assert_allclose(got_dw.astype(np.float64), want_dw.astype(np.float64), rtol=tol, atol=tol)
    if padding_idx is not None:
        assert (got_dw[padding_idx].astype(np.float64) == 0).all()


def test_empty_and_scalar_indices():
    w = cupy.asarray(np.arange(6, dtype=np.float32).reshape(3, 2))
    assert P.embedding_forward(w, cupy.zeros((0, 4), cupy.int64)).shape == (0, 4, 2)
    np.testing.assert_array_equal(cupy.asnumpy(P.embedding_forward(w, cupy.asarray(np.int64(2)))), [4, 5])
    dw = P.embedding_backward(cupy.zeros((0, 2), cupy.float32), cupy.zeros(0, cupy.int64), 3)
    assert dw.shape == (3, 2) and not cupy.asnumpy(dw).any()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_nn_embedding_on_the_gpu_equals_torchs(dtype):
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((65, 384)).astype(np.float32)
    ids = rng.integers(0, 65, (8, 33))
    res = []
    for lib in (minidl, torch):
        emb = lib.nn.Embedding(65, 384, padding_idx=0).to("cuda")
        with lib.no_grad():
            emb.weight.copy_(lib.tensor(w0, device="cuda"))
        emb = emb.to(getattr(lib, dtype))
        y = emb(lib.tensor(ids, device="cuda"))
        (y.float() * lib.tensor(np.linspace(-1, 1, 384, dtype=np.float32), device="cuda")).sum().backward()
        res.append((y.float().detach().cpu().numpy(), emb.weight.grad.float().cpu().numpy()))
    np.testing.assert_array_equal(res[0][0], res[1][0])
    tol = 1e-5 if dtype == "float32" else 2e-2
    np.testing.assert_allclose(res[0][1], res[1][1], rtol=tol, atol=tol)
    assert (res[0][1][0] == 0).all()


def test_scale_grad_by_freq_on_the_gpu_equals_torchs():
    rng = np.random.default_rng(2)
    w0, ids = rng.standard_normal((9, 4)), rng.integers(0, 9, (5, 7))
    grads = []
    for lib in (minidl, torch):
        w = lib.tensor(w0, device="cuda", requires_grad=True)
        lib.nn.functional.embedding(lib.tensor(ids, device="cuda"), w, scale_grad_by_freq=True).pow(2).sum().backward()
        grads.append(w.grad.cpu().numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12)
