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


@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 5, 5), (5, 3), (3, 5)])
def test_lu_factor_and_lu_match_torch(shape):
    """Partial pivoting as LAPACK's (the same pivots), the factors to rounding, and for square matrices the gradient
    of P L U's factors (torch's linalg_lu_backward)."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal(shape)
    (LU, piv), (tLU, tpiv) = minidl.linalg.lu_factor(minidl.tensor(a)), torch.linalg.lu_factor(torch.tensor(a))
    np.testing.assert_array_equal(piv.numpy(), tpiv.numpy())
    assert piv.dtype == np.int32
    np.testing.assert_allclose(LU.numpy(), tLU.numpy(), rtol=1e-12, atol=1e-12)
    if shape[-1] == shape[-2]:
        _compare(lambda lib, x: tuple(lib.linalg.lu(x))[1:], [shape])
    else:
        for ours, theirs in zip(minidl.linalg.lu(minidl.tensor(a)), torch.linalg.lu(torch.tensor(a))):
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("left,adjoint", [(True, False), (True, True), (False, False), (False, True)])
def test_lu_solve_matches_torch_with_gradients(left, adjoint):
    shape_b = (3, 4, 2) if left else (3, 2, 4)
    _compare(lambda lib, a, b: lib.linalg.lu_solve(*lib.linalg.lu_factor(a), b, left=left, adjoint=adjoint),
             [(3, 4, 4), shape_b])


def test_lu_of_a_singular_matrix_reports_info_and_the_older_api():
    s = np.array([[1.0, 2, 3], [2, 4, 6], [1, 0, 1]])
    assert int(minidl.linalg.lu_factor_ex(minidl.tensor(s)).info) == int(torch.linalg.lu_factor_ex(torch.tensor(s)).info)
    with pytest.raises(RuntimeError, match="singular U"):
        minidl.linalg.lu_factor_ex(minidl.tensor(s), check_errors=True)
    a, b = np.random.default_rng(2).standard_normal((4, 4)), np.random.default_rng(3).standard_normal((4, 2))
    LU, piv = minidl.tensor(a).lu()
    np.testing.assert_allclose(minidl.lu_solve(minidl.tensor(b), LU, piv).numpy(), np.linalg.solve(a, b), rtol=1e-10)
    P, L, U = minidl.lu_unpack(LU, piv)
    np.testing.assert_allclose((P @ L @ U).numpy(), a, atol=1e-12)
    with pytest.raises(NotImplementedError, match="pivot=False"):
        minidl.linalg.lu_factor(minidl.tensor(a), pivot=False)


def test_eig_of_a_general_matrix_matches_torch():
    """Complex eigenvalues of a non-symmetric matrix; each eigenvector satisfies A v = w v (their phases are
    LAPACK's in both, but compared through the definition)."""
    a = np.random.default_rng(4).standard_normal((5, 5))
    w, v = minidl.linalg.eig(minidl.tensor(a))
    tw = torch.linalg.eigvals(torch.tensor(a))
    assert w.dtype == np.complex128
    np.testing.assert_allclose(np.sort_complex(w.numpy()), np.sort_complex(tw.numpy()), rtol=1e-10)
    np.testing.assert_allclose(a @ v.numpy(), v.numpy() * w.numpy()[None, :], atol=1e-10)
    with pytest.raises(NotImplementedError, match="use linalg.eigh"):
        x = minidl.tensor(a, requires_grad=True)
        minidl.linalg.eigvals(x).real.sum().backward()


@pytest.mark.parametrize("shape", [(4, 3), (2, 5, 5), (6, 2)])
def test_geqrf_and_householder_product_match_torch(shape):
    """geqrf's reflectors and tau (LAPACK's, through NumPy's qr(mode="raw")) and householder_product (orgqr) of them,
    with the gradient of the product in both arguments."""
    a = np.random.default_rng(2).standard_normal(shape)
    (h, tau), (th, ttau) = minidl.geqrf(minidl.tensor(a)), torch.geqrf(torch.tensor(a))
    np.testing.assert_allclose(h.numpy(), th.numpy(), atol=1e-12)
    np.testing.assert_allclose(tau.numpy(), ttau.numpy(), atol=1e-12)
    _compare(lambda lib, x, t: lib.linalg.householder_product(x, t), [shape, shape[:-2] + (shape[-1],)])
    q = minidl.orgqr(h, tau).numpy()
    np.testing.assert_allclose(q @ np.triu(h.numpy())[..., :shape[-1], :], a, atol=1e-12)   # Q R = A
