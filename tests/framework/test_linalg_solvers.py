"""linalg.cholesky / cholesky_ex, solve_triangular, cholesky_solve, pinv, lstsq, matrix_rank, matrix_power,
matrix_exp, multi_dot, cond, vecdot, and the older top-level names (torch.cholesky, cholesky_inverse, pinverse,
triangular_solve, matrix_power, matrix_exp; as Tensor methods too), against torch in float64: values and the
gradients of a weighted sum of the outputs (tests/framework/test_linalg_decompositions.py's _compare)."""
import numpy as np
import pytest
import torch

import minidl
from tests.framework.test_linalg_decompositions import _compare


def _spd(lib, a):
    """A symmetric positive-definite matrix made from a (so that a's gradient covers the whole input)."""
    n = a.shape[-1]
    return a @ a.mT + n * lib.eye(n, dtype=a.dtype)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_matches_torch(upper):
    _compare(lambda lib, a: lib.linalg.cholesky(_spd(lib, a), upper=upper), [(2, 4, 4)])
    _compare(lambda lib, a: lib.linalg.cholesky_ex(_spd(lib, a)).L, [(3, 3)])


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unitriangular", [False, True])
def test_solve_triangular_matches_torch(upper, left, unitriangular):
    def fn(lib, a, b):
        a = a + 4 * lib.eye(4, dtype=a.dtype)      # well conditioned
        return lib.linalg.solve_triangular(a, b if left else b.mT, upper=upper, left=left, unitriangular=unitriangular)

    _compare(fn, [(2, 4, 4), (2, 4, 3)])


def test_cholesky_solve_inverse_and_triangular_solve_match_torch():
    def factor(lib, a):
        return lib.linalg.cholesky(_spd(lib, a))

    _compare(lambda lib, a, b: lib.cholesky_solve(b, factor(lib, a)), [(4, 4), (4, 2)])
    _compare(lambda lib, a, b: lib.cholesky_solve(b, factor(lib, a).mT, upper=True), [(4, 4), (4, 2)])
    _compare(lambda lib, a: lib.cholesky_inverse(factor(lib, a)), [(3, 3)])
    _compare(lambda lib, a, b: lib.triangular_solve(b, factor(lib, a), upper=False).solution, [(4, 4), (4, 2)])
    _compare(lambda lib, a, b: lib.triangular_solve(b, factor(lib, a), upper=False, transpose=True).solution,
             [(4, 4), (4, 2)])
    _compare(lambda lib, a: _spd(lib, a).cholesky(), [(3, 3)])


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
def test_pinv_matches_torch(shape):
    _compare(lambda lib, a: lib.linalg.pinv(a), [shape])
    _compare(lambda lib, a: a.pinverse(), [shape])


def test_pinv_of_a_rank_deficient_matrix_matches_torch():
    a = np.random.default_rng(2).standard_normal((5, 3))
    a[:, 2] = a[:, 0] - a[:, 1]
    ours, theirs = minidl.linalg.pinv(minidl.tensor(a)), torch.linalg.pinv(torch.tensor(a))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), atol=1e-12)
    assert int(minidl.linalg.matrix_rank(minidl.tensor(a))) == int(torch.linalg.matrix_rank(torch.tensor(a))) == 2
    assert minidl.linalg.matrix_rank(minidl.tensor(a), atol=10.0).item() == torch.linalg.matrix_rank(
        torch.tensor(a), atol=10.0).item()


@pytest.mark.parametrize("driver", [None, "gels", "gelsd"])
def test_lstsq_matches_torch(driver):
    _compare(lambda lib, a, b: lib.linalg.lstsq(a, b, driver=driver).solution, [(6, 3), (6, 2)])
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((6, 3)), rng.standard_normal((6, 2))
    ours, theirs = minidl.linalg.lstsq(minidl.tensor(a), minidl.tensor(b), driver=driver), \
        torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), driver=driver)
    for name in ("residuals", "rank", "singular_values"):
        o, t = getattr(ours, name), getattr(theirs, name)
        assert tuple(o.shape) == tuple(t.shape), (name, o.shape, t.shape)
        np.testing.assert_allclose(o.numpy(), t.numpy(), atol=1e-10)


@pytest.mark.parametrize("n", [0, 1, 3, -2])
def test_matrix_power_matches_torch(n):
    _compare(lambda lib, a: lib.linalg.matrix_power(a + 3 * lib.eye(3, dtype=a.dtype), n), [(2, 3, 3)])
    _compare(lambda lib, a: (a + 3 * lib.eye(3, dtype=a.dtype)).matrix_power(n), [(3, 3)])


@pytest.mark.parametrize("scale", [0.1, 3.0])
def test_matrix_exp_matches_torch(scale):
    _compare(lambda lib, a: lib.linalg.matrix_exp(a * scale), [(2, 4, 4)])
    _compare(lambda lib, a: lib.matrix_exp(a * scale), [(3, 3)])


def test_multi_dot_cond_vecdot_match_torch():
    _compare(lambda lib, a, b, c: lib.linalg.multi_dot([a, b, c]), [(3,), (3, 4), (4,)])
    _compare(lambda lib, a, b, c: lib.linalg.multi_dot([a, b, c]), [(2, 3), (3, 4), (4, 5)])
    _compare(lambda lib, a: lib.linalg.cond(a), [(3, 3)])
    _compare(lambda lib, a, b: lib.linalg.vecdot(a, b), [(3, 4), (3, 4)])


def test_solver_messages():
    not_spd = minidl.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=minidl.float64)
    with pytest.raises(Exception, match="positive-definite|Matrix is not positive definite"):
        minidl.linalg.cholesky(not_spd)
    with pytest.raises(RuntimeError, match="solve_triangular: Incompatible shapes"):
        minidl.linalg.solve_triangular(minidl.eye(3), minidl.ones(2, 2), upper=True)
    with pytest.raises(RuntimeError, match="lstsq: parameter `driver`"):
        minidl.linalg.lstsq(minidl.eye(3), minidl.ones(3, 1), driver="magic")
    with pytest.raises(TypeError, match="matrix_power: n must be an int"):
        minidl.linalg.matrix_power(minidl.eye(2), 1.5)
