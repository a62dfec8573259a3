"""The embedding primitive's NumPy reference: the lookup and its gradient against torch's embedding (values and
the weight's gradient, repeated indices and padding_idx included), NaN rows and no gradient for out-of-range
indices, 16-bit gradients summed in float32, and the errors at the boundary."""
import ml_dtypes
import numpy as np
import pytest
import torch

from minidl import primitives as P


@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("padding_idx", [None, 3])
def test_lookup_and_gradient_equal_torchs(index_dtype, padding_idx):
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((7, 5))
    idx = rng.integers(0, 7, (4, 6)).astype(index_dtype)
    idx[0, :3] = 3            # the padding row, several times
    dout = rng.standard_normal((4, 6, 5))
    tw = torch.tensor(weight, requires_grad=True)
    ty = torch.nn.functional.embedding(torch.tensor(idx.astype(np.int64)), tw, padding_idx=padding_idx)
    ty.backward(torch.tensor(dout))
    out = P.embedding_forward(weight, idx, padding_idx=padding_idx)
    dw = P.embedding_backward(dout, idx, 7, padding_idx=padding_idx)
    np.testing.assert_array_equal(out, ty.detach().numpy())
    np.testing.assert_allclose(dw, tw.grad.numpy(), rtol=1e-13, atol=1e-13)
    assert out.dtype == weight.dtype and dw.shape == weight.shape
    if padding_idx is not None:
        assert (dw[padding_idx] == 0).all()


def test_out_of_range_indices_give_nan_rows_and_no_gradient():
    weight = np.arange(12, dtype=np.float32).reshape(4, 3)
    idx = np.array([[0, 4], [-1, 2]])
    out = P.embedding_forward(weight, idx)
    assert np.isnan(out[0, 1]).all() and np.isnan(out[1, 0]).all()
    np.testing.assert_array_equal(out[0, 0], weight[0])
    np.testing.assert_array_equal(out[1, 1], weight[2])
    dw = P.embedding_backward(np.ones((2, 2, 3), np.float32), idx, 4)
    np.testing.assert_array_equal(dw, [[1] * 3, [0] * 3, [1] * 3, [0] * 3])


def test_sixteen_bit_gradients_are_summed_in_float32():
    bf16 = ml_dtypes.bfloat16
    idx = np.zeros(300, dtype=np.int64)        # 300 additions of 1/256 into one row: bf16 sums would stall
    dout = np.full((300, 2), 1 / 256, dtype=bf16)
    dw = P.embedding_backward(dout, idx, 2)
    assert dw.dtype == bf16
    np.testing.assert_allclose(dw[0].astype(np.float32), 300 / 256, rtol=4e-3)
    out = P.embedding_forward(np.ones((3, 2), dtype=bf16), np.array([2, 0]))
    assert out.dtype == bf16 and out.shape == (2, 2)


def test_errors_name_the_op_and_the_shapes():
    w = np.zeros((4, 3), np.float32)
    with pytest.raises(TypeError, match="embedding_forward: indices must be integers, got dtype float32"):
        P.embedding_forward(w, np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"embedding_forward: weight must be 2-D .* got shape \(4, 3, 1\)"):
        P.embedding_forward(w[..., None], np.zeros(2, np.int64))
    with pytest.raises(TypeError, match="embedding_forward: weight must be float32 or float64, got int64"):
        P.embedding_forward(np.zeros((4, 3), np.int64), np.zeros(2, np.int64))
    with pytest.raises(ValueError, match=r"embedding_forward: padding_idx must be None or an int in \[0, 4\), got 4"):
        P.embedding_forward(w, np.zeros(2, np.int64), padding_idx=4)
    with pytest.raises(ValueError, match=r"embedding_backward: dout must have shape indices.shape \+ \(dim,\)"):
        P.embedding_backward(np.zeros((3, 3), np.float32), np.zeros(2, np.int64), 4)
    with pytest.raises(TypeError, match="embedding_forward: weight must be a numpy.ndarray or cupy.ndarray"):
        P.embedding_forward([[1.0]], np.zeros(1, np.int64))


def test_functional_embedding_over_the_primitive_equals_torchs_with_scale_grad_by_freq():
    """F.embedding's backward with scale_grad_by_freq divides each row by its index's count, then runs the
    primitive's sum: 2-D indices (the counts indexed with the indices' own shape)."""
    import minidl

    rng = np.random.default_rng(2)
    w0, ids = rng.standard_normal((9, 4)), rng.integers(0, 9, (5, 7))
    grads = []
    for lib in (minidl, torch):
        w = lib.tensor(w0, requires_grad=True)
        lib.nn.functional.embedding(lib.tensor(ids), w, padding_idx=1, scale_grad_by_freq=True).pow(2).sum().backward()
        grads.append(w.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("max_norm", [None, 0.9])
def test_nn_embedding_options_and_sparse_adam_equal_torchs(max_norm):
    """nn.Embedding over the primitive with torch's other options: max_norm (the looked-up rows renormalised in place
    first), padding_idx, and sparse=True trained by SparseAdam (minidl keeps a dense gradient with the sparse one's
    values): the weights after three steps equal torch's."""
    import minidl

    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((12, 5))
    batches = [rng.integers(0, 12, (4, 6)) for _ in range(3)]
    finals = []
    for lib in (minidl, torch):
        emb = lib.nn.Embedding(12, 5, padding_idx=2, max_norm=max_norm, sparse=True).double()
        with lib.no_grad():
            emb.weight.copy_(lib.tensor(w0))
        opt = lib.optim.SparseAdam(list(emb.parameters()), lr=0.1)
        for ids in batches:
            opt.zero_grad()
            (emb(lib.tensor(ids)) ** 2).sum().backward()
            opt.step()
        finals.append(emb.weight.detach().numpy().copy())
    np.testing.assert_allclose(finals[0], finals[1], rtol=1e-12, atol=1e-12)
