"""Convolution on the CPU: the NumPy reference, three algorithms that compute the same function.

A convolution layer (really a cross-correlation, as in every framework) computes, for 2-D,

    y[n, k, i, j] = sum_{c in group(k)} sum_{a, b} w[k, c, a, b] * x_pad[n, c, i*s0 + a*d0, j*s1 + b*d1]

with x_pad the input padded with zeros, s the stride and d the dilation. 1-D and 3-D are the same
with one or three spatial indices. With `groups=G` the C input channels and K output channels are
split into G independent slices (G = C is a depthwise convolution).

The three algorithms, as cuDNN names them:

* ``direct``      -- the definition itself. For each kernel tap (a, b) the tap's weights multiply a
                     strided window of x, for every batch item and output pixel at once. Padding is
                     handled by clipping each tap's index range, so no padded copy: workspace 0.
* ``im2col_gemm`` -- "lower" the input to a column matrix whose rows are (c, a, b) and whose columns
                     are the output pixels (n, i, j), then one matrix product per group:
                     y = W (K/G, C/G*R*S) @ cols (C/G*R*S, N*P*Q). Uses BLAS, so it is the fast CPU
                     path; the column matrix is its workspace (R*S times the size of x).
* ``winograd``    -- F(2x2, 3x3) of Lavin & Gray (2015) for 3x3 kernels with stride 1: each 2x2
                     output tile costs 16 multiplies instead of 36, once input and filter are
                     transformed into a 4x4 "Winograd domain".
* ``fft``         -- the convolution theorem: transform the padded input and the filters (np.fft),
                     multiply per frequency and sum over channels, transform back and crop. Stride 1,
                     dilation 1, groups 1; the cost does not grow with the filter size.

Arithmetic (the `math` of the problem, cuDNN's math type): "fp32" computes in the data's dtype;
"tf32" emulates the GPU's TF32 tensor cores -- x, w and dy are rounded to TF32 (10 mantissa bits,
to nearest, ties away from zero, as cvt.rna.tf32.f32) and the products are summed in float32.
float16 / bfloat16 data are computed in float32 and the result rounded to the data's dtype, as the
tensor-core kernels do with their fp32 accumulators.

The gradients:

* backward data   dx = the "transposed convolution" of dy with w: each tap scatters
                  w[k, c, tap] * dy back onto the input positions it read (col2im for im2col).
* backward filter dw[k, c, tap] = sum over (n, output pixel) of dy * the input window of that tap,
                  i.e. dw = dy_matrix @ cols^T for im2col.
* backward bias   db[k] = sum of dy over the batch and every output pixel.

Every function here takes already validated arguments (see ../convolution.py): a
`ConvolutionProblem` that holds every shape and hyper-parameter, the layout ("NCHW" or "NHWC"), and
alpha/beta/out for cuDNN-style blending. Internally everything runs in channels-first; channels-last
arrays are viewed as channels-first (a transpose, no copy) on the way in and copied back on the way
out.
"""
from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from .._common import blend, fft_convolution_refusal, to_channels_first, to_channels_last

ALGORITHMS = ("direct", "im2col_gemm", "winograd", "fft")

DIRECTIONS = ("forward", "backward_data", "backward_filter")


# ----------------------------------------------------------------------------------------------
# Which algorithm applies, and how much scratch memory it needs
# ----------------------------------------------------------------------------------------------


def is_supported(algo: str, direction: str, problem) -> tuple[bool, str]:
    """(True, "") when `algo` can run `direction` on `problem`, else (False, the reason why)."""
    if algo not in ALGORITHMS:
        return False, f"unknown CPU algorithm {algo!r}; the CPU has {', '.join(ALGORITHMS)}"
    if direction not in DIRECTIONS:
        return False, f"unknown direction {direction!r}; use one of {', '.join(DIRECTIONS)}"
    if algo in ("direct", "im2col_gemm"):
        return True, ""
    if algo == "fft":
        refusal = fft_convolution_refusal(problem)
        return not refusal, refusal
    # winograd F(2x2, 3x3)
    if direction == "backward_filter":
        return False, ("winograd F(2x2,3x3) computes forward and backward_data only; the filter "
                       "gradient is a convolution with a dy-sized kernel, which the 3x3 transforms "
                       "do not fit")
    if problem.spatial_dims != 2:
        return False, f"winograd F(2x2,3x3) is 2-D only, this is a {problem.spatial_dims}-D convolution"
    if problem.kernel_size != (3, 3):
        return False, f"winograd F(2x2,3x3) needs a 3x3 kernel, got {_size_str(problem.kernel_size)}"
    if problem.stride != (1, 1):
        return False, f"winograd F(2x2,3x3) needs stride 1, got stride {problem.stride}"
    if problem.dilation != (1, 1):
        return False, f"winograd F(2x2,3x3) needs dilation 1, got dilation {problem.dilation}"
    if direction == "backward_data" and any(p > 2 for p in problem.padding):
        return False, (f"winograd backward_data pads dy by 2 - padding, so it needs padding <= 2, "
                       f"got padding {problem.padding}")
    return True, ""


def algorithm_math(algo: str, problem) -> str:
    """The arithmetic `algo` uses here: "tf32" (emulated) for float32 under math='tf32', else "fp32"
    (half data is computed in float32)."""
    return "tf32" if problem.math == "tf32" and problem.dtype == "float32" else "fp32"


def workspace_bytes(algo: str, direction: str, problem) -> int:
    """Bytes of scratch memory the algorithm allocates beyond its inputs and output.

    direct: none. im2col_gemm: the column matrix (C*R*S rows, N*P*Q columns), for every direction.
    winograd: the transformed filter, input tiles and products (16 values per 2x2 tile).
    """
    itemsize = 4 if problem.dtype in HALF_DTYPES else np.dtype(problem.dtype).itemsize
    if algo == "direct":
        return 0
    if algo == "im2col_gemm":
        return problem.C * math.prod(problem.kernel_size) * problem.N * math.prod(problem.out_size) * itemsize
    if algo == "winograd":
        if direction == "forward":
            c_in, c_out, out_hw = problem.C, problem.K, problem.out_size
        else:  # backward data: a forward winograd from dy (K channels) to dx (C channels)
            c_in, c_out, out_hw = problem.K, problem.C, problem.in_size
        tiles = problem.N * math.ceil(out_hw[0] / 2) * math.ceil(out_hw[1] / 2)
        filter_elems = 16 * c_out * (c_in // problem.groups)
        # transformed filter U, input tiles d and their transform V, products M
        return (filter_elems + 2 * 16 * c_in * tiles + 16 * c_out * tiles) * itemsize
    if algo == "fft":
        sizes = _fft_sizes(problem)
        freqs = math.prod(sizes[:-1]) * (sizes[-1] // 2 + 1)
        spectra = 2 * itemsize * freqs * (problem.N * problem.C + problem.K * problem.C + problem.N * problem.K)
        return spectra + itemsize * math.prod(sizes) * problem.N * max(problem.C, problem.K)
    raise ValueError(f"workspace_bytes: unknown CPU algorithm {algo!r}")


# ----------------------------------------------------------------------------------------------
# The four primitives: layout in, dispatch to the algorithm, layout out, blend
# ----------------------------------------------------------------------------------------------


def convolution_forward(x, w, problem, bias, algo, alpha, beta, out):
    """y = alpha * (conv(x, w) + bias) + beta * out.

    x: (N, C, *in) or (N, *in, C); w: (K, C/groups, *kernel) or (K, *kernel, C/groups);
    bias: (K,) or None. Returns y: (N, K, *out) or (N, *out, K).
    """
    x, w = _operands(problem, x, w)
    x_cf, w_cf = _channels_first(x, problem), _channels_first(w, problem)
    y = _algorithm("convolution_forward", FORWARD, algo)(x_cf, w_cf, problem)
    if bias is not None:
        y += bias.astype(y.dtype).reshape((1, -1) + (1,) * problem.spatial_dims)
    y = np.ascontiguousarray(_in_layout(y, problem))
    return _blend_result("convolution_forward", y, problem, out, alpha, beta)


def convolution_backward_data(w, dy, problem, algo, alpha, beta, out):
    """dx = alpha * conv_transpose(dy, w) + beta * out.

    w: the forward weight; dy: (N, K, *out) or (N, *out, K). Returns dx shaped like x.
    """
    w, dy = _operands(problem, w, dy)
    dy_cf, w_cf = _channels_first(dy, problem), _channels_first(w, problem)
    dx = _algorithm("convolution_backward_data", BACKWARD_DATA, algo)(w_cf, dy_cf, problem)
    dx = np.ascontiguousarray(_in_layout(dx, problem))
    return _blend_result("convolution_backward_data", dx, problem, out, alpha, beta)


def convolution_backward_filter(x, dy, problem, algo, alpha, beta, out):
    """dw = alpha * (gradient of the loss w.r.t. w) + beta * out, shaped like w (in its layout)."""
    x, dy = _operands(problem, x, dy)
    x_cf, dy_cf = _channels_first(x, problem), _channels_first(dy, problem)
    dw = _algorithm("convolution_backward_filter", BACKWARD_FILTER, algo)(x_cf, dy_cf, problem)
    dw = np.ascontiguousarray(_in_layout(dw, problem))
    return _blend_result("convolution_backward_filter", dw, problem, out, alpha, beta)


def _algorithm(op, table, algo):
    """The reference function of `algo` for one direction (the tables are at the end of the file)."""
    fn = table.get(algo)
    if fn is None:
        raise ValueError(f"{op}: CPU algorithm {algo!r} does not compute it; the CPU has {', '.join(table)}")
    return fn


def convolution_backward_bias(dy, problem, alpha, beta, out, out_dtype=None):
    """db[k] = alpha * sum of dy over the batch and every output position + beta * out. Shape (K,).
    out_dtype float32 (16-bit dy, no out): the fp32 sums, not rounded to dy's dtype."""
    (dy,) = _operands(problem, dy, tf32=False)
    dy_cf = _channels_first(dy, problem)
    reduce_axes = (0,) + tuple(range(2, dy_cf.ndim))
    db = dy_cf.sum(axis=reduce_axes)
    if out_dtype is not None:
        return np.float32(alpha) * db.astype(np.float32)
    return _blend_result("convolution_backward_bias", db, problem, out, alpha, beta)


# ----------------------------------------------------------------------------------------------
# Arithmetic: TF32 emulation and half data computed in float32
# ----------------------------------------------------------------------------------------------

HALF_DTYPES = ("float16", "bfloat16")


def round_to_tf32(a):
    """float32 -> float32 holding a TF32 value: 10 mantissa bits, rounded to nearest, ties away
    from zero (PTX cvt.rna.tf32.f32). Adding half of the dropped range (0x1000) to the magnitude
    bits and clearing the 13 low bits does exactly that; NaN and inf pass through."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    bits = a.view(np.uint32)
    rounded = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(a), rounded, a)


def _operands(problem, *arrays, tf32=True):
    """The operands as the arithmetic sees them: half data as float32, TF32-rounded for math='tf32'."""
    result = []
    for a in arrays:
        if problem.dtype in HALF_DTYPES:
            a = a.astype(np.float32)
        elif tf32 and problem.math == "tf32" and problem.dtype == "float32":
            a = round_to_tf32(a)
        result.append(a)
    return result


def _blend_result(op, result, problem, out, alpha, beta):
    """blend() for float32/float64; half data blends in float32 and rounds once to its dtype."""
    if problem.dtype not in HALF_DTYPES:
        if out is None and alpha == 1 and beta == 0:   # the usual call: nothing to blend
            return result
        return blend(op, result, out, alpha, beta)
    dtype = out.dtype if out is not None else _half_dtype(problem.dtype)
    prior = None if out is None else out.astype(np.float32)
    blended = blend(op, result.astype(np.float32), prior, alpha, beta).astype(dtype)
    if out is None:
        return blended
    out[...] = blended
    return out


def _half_dtype(name):
    if name == "bfloat16":
        import ml_dtypes  # NumPy has no bfloat16; ml_dtypes adds it (a test/CPU-half dependency)

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


# ----------------------------------------------------------------------------------------------
# Layout helpers for weights: channels-last filters are (K, *kernel, C/groups), cuDNN's KRSC
# ----------------------------------------------------------------------------------------------


def _channels_first(a, problem):
    """An array of the problem's layout seen channels-first (a view): (N, *spatial, C) -> (N, C, *spatial), filters
    (K, *kernel, C/g) -> (K, C/g, *kernel) alike. A channels-first problem's arrays pass as they are."""
    return a if problem.layout == "NCHW" else to_channels_first(a, problem.layout)


def _in_layout(a, problem):
    """The inverse of _channels_first: a channels-first result (a view) in the problem's layout."""
    return a if problem.layout == "NCHW" else to_channels_last(a, problem.layout)


def _size_str(t) -> str:
    return "x".join(str(v) for v in t)


def _kernel_taps(kernel_size):
    """Every kernel tap as a tuple of indices, (0, 0), (0, 1), ... in C order (matching reshape)."""
    return itertools.product(*(range(k) for k in kernel_size))


# ----------------------------------------------------------------------------------------------
# direct: loop over kernel taps; vectorised over batch, channels and output positions
# ----------------------------------------------------------------------------------------------


def _tap_slices(problem, tap):
    """For one kernel tap, the output positions whose input index falls inside x, and those inputs.

    Output index o reads input index o*stride + tap*dilation - padding. Instead of padding x with
    zeros, keep only the o for which that index lies in [0, in_size): returns (out_slices,
    in_slices), one slice per spatial dim, or None when the tap only ever reads padding.
    """
    out_slices, in_slices = [], []
    for t, n_in, n_out, s, d, p in zip(tap, problem.in_size, problem.out_size, problem.stride,
                                       problem.dilation, problem.padding):
        offset = t * d - p
        first = max(0, -(offset // s) if offset < 0 else 0)   # smallest o with o*s + offset >= 0
        last = min(n_out - 1, (n_in - 1 - offset) // s)       # largest o with o*s + offset < n_in
        if first > last:
            return None
        out_slices.append(slice(first, last + 1))
        in_slices.append(slice(first * s + offset, last * s + offset + 1, s))
    return tuple(out_slices), tuple(in_slices)


@functools.lru_cache(maxsize=1024)
def _live_taps(problem):
    """(tap, out_slices, in_slices) of every kernel tap that reads some of x (_tap_slices), in tap order.
    Cached per problem: a training loop asks for the same few problems at every step, and for a small
    layer working the slices out again costs more than the arithmetic."""
    return tuple((tap,) + slices for tap in _kernel_taps(problem.kernel_size)
                 if (slices := _tap_slices(problem, tap)) is not None)


def convolution_forward_direct(x, w, problem):
    """x: (N, C, *in), w: (K, C/g, *kernel) -> y: (N, K, *out), one weighted window sum per tap."""
    N, G, K = problem.N, problem.groups, problem.K
    Cg, Kg = problem.C // G, K // G
    y = np.zeros((N, G, Kg) + problem.out_size, dtype=x.dtype)
    xg = x.reshape((N, G, Cg) + problem.in_size)
    wg = w.reshape((G, Kg, Cg) + problem.kernel_size)
    for tap, out_sl, in_sl in _live_taps(problem):
        window = xg[(slice(None),) * 3 + in_sl]                  # (N, G, Cg, *out part)
        # y[n, g, k, ...] += sum_c w[g, k, c, tap] * window[n, g, c, ...]
        y[(slice(None),) * 3 + out_sl] += np.einsum("gkc,ngc...->ngk...", wg[(...,) + tap], window)
    return y.reshape((N, K) + problem.out_size)


def convolution_backward_data_direct(w, dy, problem):
    """dy: (N, K, *out) -> dx: (N, C, *in): each tap scatters its weighted dy back onto its window."""
    N, G, C = problem.N, problem.groups, problem.C
    Cg, Kg = C // G, problem.K // G
    dx = np.zeros((N, G, Cg) + problem.in_size, dtype=dy.dtype)
    dyg = dy.reshape((N, G, Kg) + problem.out_size)
    wg = w.reshape((G, Kg, Cg) + problem.kernel_size)
    for tap, out_sl, in_sl in _live_taps(problem):
        # Within one tap every output position reads a different input position, so `+=` on the
        # strided window never hits the same element twice.
        dx[(slice(None),) * 3 + in_sl] += np.einsum("gkc,ngk...->ngc...", wg[(...,) + tap],
                                                    dyg[(slice(None),) * 3 + out_sl])
    return dx.reshape((N, C) + problem.in_size)


def convolution_backward_filter_direct(x, dy, problem):
    """dw[k, c, tap] = sum over n and output positions of dy[n, k, o] * x[n, c, o*s + tap*d - p]."""
    N, G, K = problem.N, problem.groups, problem.K
    Cg, Kg = problem.C // G, K // G
    dw = np.zeros((G, Kg, Cg) + problem.kernel_size, dtype=x.dtype)
    xg = x.reshape((N, G, Cg) + problem.in_size)
    dyg = dy.reshape((N, G, Kg) + problem.out_size)
    for tap, out_sl, in_sl in _live_taps(problem):
        # einsum cannot sum over "...", so flatten the output positions (a copy of the windows)
        dy_window = dyg[(slice(None),) * 3 + out_sl].reshape(N, G, Kg, -1)
        x_window = xg[(slice(None),) * 3 + in_sl].reshape(N, G, Cg, -1)
        dw[(...,) + tap] = np.einsum("ngkl,ngcl->gkc", dy_window, x_window)
    return dw.reshape((K, Cg) + problem.kernel_size)


# ----------------------------------------------------------------------------------------------
# im2col + GEMM
# ----------------------------------------------------------------------------------------------


def convolution_im2col(x, problem):
    """x: (N, C, *in) -> cols: (C, *kernel, N, *out), the column matrix before reshaping.

    Row (c, tap) of the column matrix holds, for every output position (n, o), the input value that
    tap multiplies. One strided slice of the input per tap fills a whole row block; there is no loop
    over pixels. Reshaped to (G, C/G * prod(kernel), N * prod(out)) it is the right-hand side of one
    GEMM per group.

    Padding is never materialised: cols starts as zeros and each tap copies only the output
    positions whose input lies inside x (_tap_slices, as in the direct algorithm). That saves the
    padded copy of x, and np.zeros of a large array costs nothing until it is written.
    """
    cols = np.zeros((problem.C,) + problem.kernel_size + (problem.N,) + problem.out_size, dtype=x.dtype)
    x_cn = x.swapaxes(0, 1)                                              # (C, N, *in), a view
    everything = (slice(None), slice(None))
    for tap, out_sl, in_sl in _live_taps(problem):
        cols[(slice(None),) + tap + (slice(None),) + out_sl] = x_cn[everything + in_sl]
    return cols


def convolution_col2im(dcols, problem):
    """The adjoint of convolution_im2col: dcols (C, *kernel, N, *out) -> dx (N, C, *in).

    Each tap's row block is added back onto the strided window of the input it came from; windows
    of different taps overlap, which is why this is an accumulation. Positions that fell in the
    padding are skipped (_tap_slices), so there is no padded buffer to allocate and crop.
    """
    dx = np.zeros((problem.N, problem.C) + problem.in_size, dtype=dcols.dtype)
    everything = (slice(None), slice(None))
    for tap, out_sl, in_sl in _live_taps(problem):
        dx[everything + in_sl] += dcols[(slice(None),) + tap + (slice(None),) + out_sl].swapaxes(0, 1)
    return dx


def _gemm_shapes(problem):
    G = problem.groups
    rows = (problem.C // G) * math.prod(problem.kernel_size)           # C/G * R * S
    cols = problem.N * math.prod(problem.out_size)                     # N * P * Q
    return G, problem.K // G, rows, cols


def _dy_matrix(dy, problem):
    """dy (N, K, *out) -> (G, K/G, N*prod(out)), the layout of the GEMM's output."""
    G, Kg, _, ncols = _gemm_shapes(problem)
    return dy.swapaxes(0, 1).reshape(G, Kg, ncols)


def convolution_forward_im2col_gemm(x, w, problem):
    """y_g = W_g (K/G, C/G*RS) @ cols_g (C/G*RS, N*PQ), batched over the G groups by np.matmul."""
    G, Kg, rows, ncols = _gemm_shapes(problem)
    cols = convolution_im2col(x, problem).reshape(G, rows, ncols)
    y = np.matmul(w.reshape(G, Kg, rows), cols)                          # (G, K/G, N*PQ)
    y = y.reshape((problem.K, problem.N) + problem.out_size)
    return y.swapaxes(0, 1)                                               # (N, K, *out)


def convolution_backward_data_im2col_gemm(w, dy, problem):
    """dcols_g = W_g^T (C/G*RS, K/G) @ dy_g (K/G, N*PQ), then col2im back onto the input."""
    G, Kg, rows, ncols = _gemm_shapes(problem)
    dcols = np.matmul(w.reshape(G, Kg, rows).swapaxes(1, 2), _dy_matrix(dy, problem))
    dcols = dcols.reshape((problem.C,) + problem.kernel_size + (problem.N,) + problem.out_size)
    return convolution_col2im(dcols, problem)


def convolution_backward_filter_im2col_gemm(x, dy, problem):
    """dW_g = dy_g (K/G, N*PQ) @ cols_g^T (N*PQ, C/G*RS), or its transpose, whichever is taller."""
    G, Kg, rows, ncols = _gemm_shapes(problem)
    cols = convolution_im2col(x, problem).reshape(G, rows, ncols)
    dy_mat = _dy_matrix(dy, problem)
    if Kg >= rows:
        dw = np.matmul(dy_mat, cols.swapaxes(1, 2))                      # (G, K/G, C/G*RS)
    else:
        # The same sum over the N*PQ output pixels, computed as dW^T = cols @ dy^T. Why: the
        # contraction here is very long (N*PQ) and the result small; OpenBLAS's threaded sgemm
        # ran such a product 3-20x slower when the result was wide and short (K/G rows, C/G*RS
        # columns) than when it was tall and narrow (measured on 2 cores). Transposing the
        # (K/G, C/G*RS) result back is a negligible copy.
        dw = np.matmul(cols, dy_mat.swapaxes(1, 2)).swapaxes(1, 2)      # (G, K/G, C/G*RS)
    return dw.reshape((problem.K, problem.C // G) + problem.kernel_size)


# ----------------------------------------------------------------------------------------------
# Winograd F(2x2, 3x3)  (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2015)
# ----------------------------------------------------------------------------------------------
#
# In 1-D, F(2, 3) computes two outputs of a 3-tap filter g from a 4-value input tile d with 4
# multiplies instead of 6:   y = A^T [ (G g) * (B^T d) ]      (* is elementwise)
# Nesting it gives F(2x2, 3x3): a 2x2 output tile from a 4x4 input tile with 16 multiplies instead
# of 36:                     Y = A^T [ (G g G^T) * (B^T d B) ] A
#
#   B^T = [[1,  0, -1,  0],      G = [[1,    0,   0  ],      A^T = [[1, 1,  1,  0],
#          [0,  1,  1,  0],           [1/2,  1/2, 1/2],             [0, 1, -1, -1]]
#          [0, -1,  1,  0],           [1/2, -1/2, 1/2],
#          [0,  1,  0, -1]]           [0,    0,   1  ]]
#
# U = G g G^T is computed once per filter, V = B^T d B once per input tile (tiles overlap by 2,
# the filter's size minus 1). The sum over input channels happens in the Winograd domain, so for
# each of the 16 positions (xi, nu) of the 4x4 tile it is a matrix product:
#   M[xi, nu] (K, tiles) = U[xi, nu] (K, C) @ V[xi, nu] (C, tiles)
# which is where the BLAS time goes; then each tile goes back with Y = A^T M A.

_WINOGRAD_BT = np.array([[1, 0, -1, 0],
                         [0, 1, 1, 0],
                         [0, -1, 1, 0],
                         [0, 1, 0, -1]], dtype=np.float64)
_WINOGRAD_G = np.array([[1, 0, 0],
                        [0.5, 0.5, 0.5],
                        [0.5, -0.5, 0.5],
                        [0, 0, 1]], dtype=np.float64)
_WINOGRAD_AT = np.array([[1, 1, 1, 0],
                         [0, 1, -1, -1]], dtype=np.float64)


def _sandwich(mat, t):
    """mat @ t[:, :, r] @ mat^T for every trailing index r of t: (a, b, ...) -> (m, m, ...).

    The small transforms act on the two leading (tile) axes; doing them as two matrix products over
    all tiles at once, instead of one tiny 4x4 product per tile, keeps NumPy in BLAS.
    """
    m, rest = mat.shape[0], t.shape[2:]
    t = np.matmul(mat, t.reshape(t.shape[0], -1)).reshape((m, t.shape[1]) + rest)    # rows: mat @ t
    t = t.swapaxes(0, 1)                                                              # columns next
    t = np.matmul(mat, t.reshape(t.shape[0], -1)).reshape((m, m) + rest)             # (t @ mat^T)^T
    return t.swapaxes(0, 1)


def _winograd_f2x2_3x3(x, w, padding, groups):
    """A 3x3, stride-1 convolution by Winograd F(2x2, 3x3).

    x: (N, C, H, W), w: (K, C/groups, 3, 3), padding (ph, pw) -> y: (N, K, H + 2ph - 2, W + 2pw - 2).
    """
    dtype = x.dtype
    BT, G, AT = (m.astype(dtype) for m in (_WINOGRAD_BT, _WINOGRAD_G, _WINOGRAD_AT))
    N, C, H, W = x.shape
    K = w.shape[0]
    Cg, Kg = C // groups, K // groups
    P, Q = H + 2 * padding[0] - 2, W + 2 * padding[1] - 2
    tiles_h, tiles_w = -(-P // 2), -(-Q // 2)                  # ceil: a last tile may hang over
    n_tiles = N * tiles_h * tiles_w

    # Pad so that every 4x4 tile, including the overhanging last ones, lies inside the array:
    # the convolution's own padding on the top/left, and enough zeros on the bottom/right.
    pad_bottom = 2 * tiles_h + 2 - H - padding[0]
    pad_right = 2 * tiles_w + 2 - W - padding[1]
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0], pad_bottom), (padding[1], pad_right)))

    # Input tiles d[a, b, c, n, t, u] = xp[n, c, 2t + a, 2u + b]: tile (t, u) starts at (2t, 2u),
    # so neighbouring tiles overlap by 2. The tile position (a, b) comes first, channels next, so
    # that after the transform each of the 16 positions is a ready (C, tiles) matrix.
    d = np.empty((4, 4, C, N, tiles_h, tiles_w), dtype=dtype)
    for a in range(4):
        for b in range(4):
            d[a, b] = xp[:, :, a:a + 2 * tiles_h:2, b:b + 2 * tiles_w:2].swapaxes(0, 1)

    U = _sandwich(G, w.transpose(2, 3, 0, 1))                   # G g G^T: (4, 4, K, Cg)
    V = _sandwich(BT, d)                                        # B^T d B: (4, 4, C, N, th, tw)

    # The channel sum, one batched GEMM per tile position and group:
    #   M (16, G, Kg, N*tiles) = U (16, G, Kg, Cg) @ V (16, G, Cg, N*tiles)
    M = np.matmul(U.reshape(16, groups, Kg, Cg), V.reshape(16, groups, Cg, n_tiles))
    M = M.reshape(4, 4, K, N, tiles_h, tiles_w)

    Y = _sandwich(AT, M)                                        # A^T M A: (2, 2, K, N, th, tw)
    # y[n, k, 2t + i, 2u + j] = Y[i, j, k, n, t, u]
    y = Y.transpose(3, 2, 4, 0, 5, 1).reshape(N, K, 2 * tiles_h, 2 * tiles_w)
    return y[:, :, :P, :Q]


def convolution_forward_winograd(x, w, problem):
    """Forward by Winograd F(2x2, 3x3) (see _winograd_f2x2_3x3)."""
    return _winograd_f2x2_3x3(x, w, problem.padding, problem.groups)


def convolution_backward_data_winograd(w, dy, problem):
    """dx as a forward Winograd convolution: dy padded by (2 - padding) with the flipped filter.

    dx[n, c, i, j] = sum_k sum_{a,b} dy[n, k, i + p - a, j + p - b] * w[k, c, a, b]. Substituting
    a' = 2 - a turns this into a stride-1 3x3 cross-correlation of dy (padded by 2 - p) with
    w'[c, k, a', b'] = w[k, c, 2 - a', 2 - b']: the filter rotated by 180 degrees with its in/out
    channels swapped (within each group).
    """
    G = problem.groups
    Cg, Kg = problem.C // G, problem.K // G
    w_flipped = w.reshape(G, Kg, Cg, 3, 3)[:, :, :, ::-1, ::-1]
    w_t = w_flipped.transpose(0, 2, 1, 3, 4).reshape(problem.C, Kg, 3, 3)
    pad = tuple(2 - p for p in problem.padding)
    return _winograd_f2x2_3x3(dy, w_t, pad, G)


# ----------------------------------------------------------------------------------------------
# FFT convolution (the convolution theorem; cuDNN's CUDNN_CONVOLUTION_FWD_ALGO_FFT)
# ----------------------------------------------------------------------------------------------
#
# With the input zero-padded to size F >= in + 2*pad per spatial dim, a stride-1 cross-correlation is
#   y[p]  = sum_r xp[p + r] w[r]          ->  Y  = X . conj(W)   (circular correlation; no wrap-around
#                                                                 reaches the kept outputs p < out)
#   dxp[i] = sum_r dy[i - r] w[r]          ->  DX = DY . W        (linear convolution, length out + k - 1 = F)
#   dw[r] = sum_p dy[p] xp[p + r]          ->  DW = conj(DY) . X
# with the channel sums done per frequency (einsum below; the GPU's kernel convolution_fft_products).


def _fft_sizes(problem):
    return tuple(n + 2 * p for n, p in zip(problem.in_size, problem.padding))


def _spectra_axes(problem):
    return tuple(range(2, 2 + problem.spatial_dims))


def _padded_spectrum(a, problem):
    pads = ((0, 0), (0, 0)) + tuple((p, p) for p in problem.padding)
    return np.fft.rfftn(np.pad(a, pads), axes=_spectra_axes(problem))


def convolution_forward_fft(x, w, problem):
    """x: (N, C, *in), w: (K, C, *kernel) -> y: (N, K, *out)."""
    sizes, axes = _fft_sizes(problem), _spectra_axes(problem)
    X = _padded_spectrum(x, problem)
    W = np.fft.rfftn(w, s=sizes, axes=axes)
    Y = np.einsum("nc...,kc...->nk...", X, W.conj())
    y = np.fft.irfftn(Y, s=sizes, axes=axes)
    keep = (slice(None), slice(None)) + tuple(slice(0, o) for o in problem.out_size)
    return np.ascontiguousarray(y[keep]).astype(x.dtype)


def convolution_backward_data_fft(w, dy, problem):
    """dy: (N, K, *out) -> dx: (N, C, *in)."""
    sizes, axes = _fft_sizes(problem), _spectra_axes(problem)
    DY = np.fft.rfftn(dy, s=sizes, axes=axes)
    W = np.fft.rfftn(w, s=sizes, axes=axes)
    dxp = np.fft.irfftn(np.einsum("nk...,kc...->nc...", DY, W), s=sizes, axes=axes)
    keep = (slice(None), slice(None)) + tuple(slice(p, p + n) for p, n in zip(problem.padding, problem.in_size))
    return np.ascontiguousarray(dxp[keep]).astype(dy.dtype)


def convolution_backward_filter_fft(x, dy, problem):
    """x: (N, C, *in), dy: (N, K, *out) -> dw: (K, C, *kernel)."""
    sizes, axes = _fft_sizes(problem), _spectra_axes(problem)
    X = _padded_spectrum(x, problem)
    DY = np.fft.rfftn(dy, s=sizes, axes=axes)
    dw = np.fft.irfftn(np.einsum("nk...,nc...->kc...", DY.conj(), X), s=sizes, axes=axes)
    keep = (slice(None), slice(None)) + tuple(slice(0, k) for k in problem.kernel_size)
    return np.ascontiguousarray(dw[keep]).astype(x.dtype)


# ----------------------------------------------------------------------------------------------
# The algorithms by name: one reference function per (direction, algorithm), named as the GPU's
# launcher and kernel (convolution_<direction>_<algo>); the entries above look them up here.
# ----------------------------------------------------------------------------------------------


def convolution_forward_implicit_gemm(x, w, problem):
    """implicit_gemm's mathematics: im2col_gemm's product. The GPU kernel forms each tile of the column
    matrix in shared memory as it goes and never writes the matrix; NumPy forms it whole, so the
    reference of both is one function (not a CPU algorithm of its own: the query does not list it)."""
    return convolution_forward_im2col_gemm(x, w, problem)


def convolution_backward_data_implicit_gemm(w, dy, problem):
    """implicit_gemm's backward data: im2col_gemm's (see convolution_forward_implicit_gemm)."""
    return convolution_backward_data_im2col_gemm(w, dy, problem)


def convolution_backward_filter_implicit_gemm(x, dy, problem):
    """implicit_gemm's backward filter: im2col_gemm's (see convolution_forward_implicit_gemm)."""
    return convolution_backward_filter_im2col_gemm(x, dy, problem)


def convolution_forward_implicit_precomp_gemm(x, w, problem):
    """implicit_precomp_gemm's mathematics: implicit_gemm's (the GPU kernel reads a precomputed table of
    per-tap offsets instead of dividing indices; the arithmetic is the same)."""
    return convolution_forward_implicit_gemm(x, w, problem)


def convolution_backward_data_implicit_precomp_gemm(w, dy, problem):
    """implicit_precomp_gemm's backward data: implicit_gemm's (see its forward)."""
    return convolution_backward_data_implicit_gemm(w, dy, problem)


def convolution_forward_implicit_gemm_tc(x, w, problem):
    """implicit_gemm_tc's mathematics: the implicit GEMM on tensor cores. The operands arrive here already
    rounded as the tensor cores read them (TF32 for float32 under math="tf32"; half data widened to
    float32: convolution_forward's _operands), and the products are summed in float32, as the
    tensor cores' accumulators do."""
    return convolution_forward_implicit_gemm(x, w, problem)


def convolution_backward_data_implicit_gemm_tc(w, dy, problem):
    """implicit_gemm_tc's backward data (see its forward)."""
    return convolution_backward_data_implicit_gemm(w, dy, problem)


def convolution_backward_filter_implicit_gemm_tc(x, dy, problem):
    """implicit_gemm_tc's backward filter (see its forward)."""
    return convolution_backward_filter_implicit_gemm(x, dy, problem)


FORWARD = {"direct": convolution_forward_direct, "im2col_gemm": convolution_forward_im2col_gemm,
           "winograd": convolution_forward_winograd, "fft": convolution_forward_fft}
BACKWARD_DATA = {"direct": convolution_backward_data_direct, "im2col_gemm": convolution_backward_data_im2col_gemm,
                 "winograd": convolution_backward_data_winograd, "fft": convolution_backward_data_fft}
BACKWARD_FILTER = {"direct": convolution_backward_filter_direct,
                   "im2col_gemm": convolution_backward_filter_im2col_gemm, "fft": convolution_backward_filter_fft}
