"""Sparse COO tensors (minidl/ops/sparse.py, minidl.sparse) against torch in float64: construction with repeated
indices, coalesce, to_sparse / to_dense, the sparse-dense products in both orders with their gradients (to the dense
operand and to the entries), sums, and mixing with dense tensors; then the errors."""
import numpy as np
import pytest
import torch

import minidl

# torch's note that it does not check sparse invariants (it warns once per process)
pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")


def _case(rng, M=5, N=4, nnz=9):
    """indices with a repeated coordinate (uncoalesced), values, and the size."""
    rows = rng.integers(0, M, nnz)
    cols = rng.integers(0, N, nnz)
    rows[-1], cols[-1] = rows[0], cols[0]   # one coordinate twice: the entries add up
    return np.stack([rows, cols]), rng.standard_normal(nnz), (M, N)


def _both(indices, values, size):
    return [lib.sparse_coo_tensor(lib.tensor(indices), lib.tensor(values), size) for lib in (minidl, torch)]


def test_construction_coalesce_and_to_dense_match_torch():
    indices, values, size = _case(np.random.default_rng(0))
    ours, theirs = _both(indices, values, size)
    assert ours.is_sparse and ours.layout == minidl.sparse_coo and not ours.is_coalesced()
    assert ours._nnz() == theirs._nnz() == 9 and tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(ours.to_dense().numpy(), theirs.to_dense().numpy(), rtol=1e-12)
    ours_c, theirs_c = ours.coalesce(), theirs.coalesce()
    assert ours_c.is_coalesced() and ours_c._nnz() == theirs_c._nnz() < 9
    np.testing.assert_array_equal(ours_c.indices().numpy(), theirs_c.indices().numpy())
    np.testing.assert_allclose(ours_c.values().numpy(), theirs_c.values().numpy(), rtol=1e-12)
    with pytest.raises(RuntimeError, match="uncoalesced"):
        ours.indices()
    # size inferred from the largest indices, and a dtype asked for (an int64 adjacency from float ones)
    a = minidl.sparse_coo_tensor(indices, minidl.ones(9), dtype=minidl.int64)
    b = torch.sparse_coo_tensor(torch.tensor(indices), torch.ones(9), dtype=torch.int64)
    assert a.dtype == minidl.int64 and tuple(a.shape) == tuple(b.shape)
    np.testing.assert_array_equal(a.to_dense().numpy(), b.to_dense().numpy())


def test_to_sparse_keeps_the_nonzeros_and_their_gradient():
    x = np.random.default_rng(1).standard_normal((4, 6))
    x[x < 0.3] = 0
    got = []
    for lib in (minidl, torch):
        t = lib.tensor(x, requires_grad=True)
        s = t.to_sparse()
        assert s.is_sparse and not t.is_sparse and t.layout == lib.strided
        w = lib.tensor(np.arange(s._nnz(), dtype=np.float64))
        (s.values() * w).sum().backward()
        got.append((s.indices().numpy(), s.values().detach().numpy(), t.grad.numpy()))
    for ours, theirs in zip(*got):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    assert minidl.tensor(x).to_dense() is not None


@pytest.mark.parametrize("order", ["sparse @ dense", "dense @ sparse", "sparse.mm", "spmm", "matmul vector"])
def test_sparse_dense_products_and_gradients_match_torch(order):
    rng = np.random.default_rng(2)
    indices, values, size = _case(rng)
    left = rng.standard_normal((3, 5))    # for dense @ sparse (3 x 5) @ (5 x 4)
    right = rng.standard_normal((4, 2))   # for sparse @ dense (5 x 4) @ (4 x 2)
    vector = rng.standard_normal(4)
    got = []
    for lib in (minidl, torch):
        entries = lib.tensor(values, requires_grad=True)
        s = lib.sparse_coo_tensor(lib.tensor(indices), entries, size)
        dense = lib.tensor(left if order == "dense @ sparse" else vector if order == "matmul vector" else right,
                           requires_grad=True)
        out = {"sparse @ dense": lambda: s @ dense, "dense @ sparse": lambda: dense @ s,
               "sparse.mm": lambda: lib.sparse.mm(s, dense), "spmm": lambda: lib.spmm(s, dense),
               "matmul vector": lambda: lib.matmul(s, dense)}[order]()
        assert not out.is_sparse
        w = lib.tensor(np.random.default_rng(3).standard_normal(tuple(out.shape)))
        (out * w).sum().backward()
        got.append((out.detach().numpy(), dense.grad.numpy(), entries.grad.numpy()))
    for ours, theirs in zip(*got):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def test_mixing_with_dense_tensors_matches_torch():
    rng = np.random.default_rng(4)
    indices, values, size = _case(rng)
    dense = rng.standard_normal(size)
    ours, theirs = _both(indices, values, size)
    for f in (lambda lib, s, d: d + s, lambda lib, s, d: (s + s).to_dense(),
              lambda lib, s, d: (s * 2.5).to_dense(), lambda lib, s, d: (-s).to_dense(),
              lambda lib, s, d: d - s, lambda lib, s, d: lib.eye(5, 4, dtype=lib.float64) + s,
              lambda lib, s, d: lib.sparse.sum(s), lambda lib, s, d: s.t().to_dense(),
              lambda lib, s, d: lib.mm(s, d.t())):
        a = f(minidl, ours, minidl.tensor(dense))
        b = f(torch, theirs, torch.tensor(dense))
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)


def test_an_int64_adjacency_normalised_as_graph_networks_do():
    """pytorch/examples gcn: eye + a sparse int64 adjacency, degrees, D^-1/2 A D^-1/2 with a sparse diagonal."""
    rng = np.random.default_rng(5)
    edges = rng.integers(0, 6, (10, 2))
    results = []
    for lib in (minidl, torch):
        adj = lib.sparse_coo_tensor(lib.tensor(edges.T), lib.ones(10), (6, 6), dtype=lib.int64)
        adj = lib.eye(6) + adj
        degree = lib.sqrt(1 / lib.sum(adj, dim=1))
        degree = lib.diag(degree).to_sparse()
        results.append((degree @ adj @ degree).numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


def test_bad_sparse_input_says_what_is_wrong():
    with pytest.raises(ValueError, match="out of bounds"):
        minidl.sparse_coo_tensor([[0, 5], [1, 1]], [1.0, 2.0], (3, 3))
    with pytest.raises(ValueError, match="non-negative"):
        minidl.sparse_coo_tensor([[0, -1], [1, 1]], [1.0, 2.0], (3, 3))
    with pytest.raises(ValueError, match="hybrid"):
        minidl.sparse_coo_tensor([[0, 1], [1, 1]], minidl.ones(2, 3), (3, 3))
    s = minidl.sparse_coo_tensor([[0, 1], [1, 1]], [1.0, 2.0], (3, 3))
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        s @ minidl.ones(4, 2)
    with pytest.raises(NotImplementedError, match="hybrid"):
        minidl.ones(2, 3).to_sparse(1)


def test_python_values_take_the_default_dtype_and_a_0d_tensor_converts():
    a = minidl.sparse_coo_tensor([[0, 0], [1, 1]], [1.0, 2.0], (2, 2))
    b = torch.sparse_coo_tensor([[0, 0], [1, 1]], [1.0, 2.0], (2, 2))
    assert str(a.dtype) == str(b.dtype).replace("torch.", "")
    np.testing.assert_array_equal(a.coalesce().values().numpy(), b.coalesce().values().numpy())
    s = minidl.tensor(3.0).to_sparse()
    assert s._nnz() == 1 and s.coalesce()._nnz() == 1 and float(s.to_dense()) == 3.0
