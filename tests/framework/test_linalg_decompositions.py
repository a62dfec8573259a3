"""linalg.eigh / eigvalsh, qr, svd / svdvals and the singular-value matrix norms against torch in float64: the
values and the gradient of a weighted sum of the outputs. Eigen- and singular vectors are defined up to sign, so
where the two libraries may pick different signs the checked outputs are sign-free (V diag(L) V^T, U U^T, squares);
QR follows LAPACK's Householder signs in both."""
import numpy as np
import pytest
import torch

import minidl


def _compare(fn, shapes, symmetric=False):
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s) for s in shapes]
    if symmetric:
        xs = [x + np.swapaxes(x, -1, -2) for x in xs]
    got = []
    for lib in (minidl, torch):
        ts = [lib.tensor(x, requires_grad=True) for x in xs]
        outs = fn(lib, *ts)
        outs = outs if isinstance(outs, tuple) else (outs,)
        loss = 0
        for i, o in enumerate(outs):
            loss = loss + (o * lib.tensor(np.random.default_rng(i + 10).standard_normal(tuple(o.shape)))).sum()
        loss.backward()
        got.append([o.detach().numpy() for o in outs] + [t.grad.numpy() for t in ts])
    for ours, theirs in zip(*got):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-9)


def _sign_free_eigh(lib, a):
    L, V = lib.linalg.eigh(a)
    return L, (V * L[..., None, :]) @ V.mT, V ** 2


def _sign_free_svd(lib, a):
    U, S, Vh = lib.linalg.svd(a, full_matrices=False)
    return S, (U * S[..., None, :]) @ Vh, U @ U.mT, Vh.mT @ Vh, U ** 2, Vh ** 2


@pytest.mark.parametrize("shape", [(4, 4), (2, 5, 5)])
def test_eigh_matches_torch(shape):
    _compare(_sign_free_eigh, [shape], symmetric=True)
    _compare(lambda lib, a: lib.linalg.eigvalsh(a, UPLO="U"), [shape], symmetric=True)


@pytest.mark.parametrize("shape,mode", [((6, 4), "reduced"), ((2, 4, 4), "reduced"), ((4, 4), "complete")])
def test_qr_matches_torch(shape, mode):
    _compare(lambda lib, a: tuple(lib.linalg.qr(a, mode=mode)), [shape])


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 5, 4)])
def test_svd_matches_torch(shape):
    _compare(_sign_free_svd, [shape])
    _compare(lambda lib, a: lib.linalg.svdvals(a), [shape])


def test_singular_value_norms_match_torch():
    _compare(lambda lib, a: tuple(lib.linalg.matrix_norm(a, o) for o in ("nuc", 2, -2)), [(3, 4, 5)])


def test_decomposition_messages():
    with pytest.raises(NotImplementedError, match="m < n"):
        q, r = minidl.linalg.qr(minidl.randn(3, 5, dtype=minidl.float64, requires_grad=True))
        (q.sum() + r.sum()).backward()
    with pytest.raises(NotImplementedError, match="full_matrices=False"):
        u, s, vh = minidl.linalg.svd(minidl.randn(5, 3, dtype=minidl.float64, requires_grad=True))
        u.sum().backward()
    with pytest.raises(RuntimeError, match="square matrices"):
        minidl.linalg.eigh(minidl.randn(3, 4))


def test_older_top_level_svd_and_qr():
    a = np.random.default_rng(1).standard_normal((5, 3))
    U, S, V = minidl.svd(minidl.tensor(a))
    assert U.shape == (5, 3) and V.shape == (3, 3)
    np.testing.assert_allclose((U.numpy() * S.numpy()) @ V.numpy().T, a, atol=1e-12)
    Q, R = minidl.qr(minidl.tensor(a), some=False)
    assert Q.shape == (5, 5) and R.shape == (5, 3)
    np.testing.assert_allclose(Q.numpy() @ R.numpy(), a, atol=1e-12)
