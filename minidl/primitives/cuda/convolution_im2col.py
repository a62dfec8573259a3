"""CuPy launchers of im2col_gemm, the convolution algorithm of kernels/convolution.cu that lowers the input into a
column matrix (convolution_im2col; its transpose convolution_col2im for backward data) around gemm.cu's SGEMM. Called
through cuda/convolution.py's tables, with its geometry `g` (convolution._geometry) and its prologue (outputs,
alpha/beta): the same interface as its other launchers. Arguments were validated by minidl/primitives/convolution.py."""
from __future__ import annotations

import numpy as np

from ._compile import get_kernel
from ._launch import grid_stride_blocks
from .gemm import sgemm, split_k_workspace_bytes


def _cl(g) -> np.int32:
    return np.int32(1 if g.channels_last else 0)


def workspace_bytes(direction: str, g) -> int:
    """The column matrix (N*OPQ rows of C/groups * taps), and for backward_filter a channels-last copy of dy
    (NCHW) and the SGEMM's split-K partial sums."""
    col = 4 * g.N * g.OPQ * g.Cg * g.TRS
    if direction != "backward_filter":
        return col
    dy_copy = 0 if g.channels_last else 4 * g.N * g.OPQ * g.K
    return col + dy_copy + split_k_workspace_bytes(g.Kg, g.Cg * g.TRS, g.N * g.OPQ, 1)


def convolution_forward_im2col_gemm(x, w, bias, y, g, handle, problem, alpha, beta, options=()):
    """convolution_im2col unrolls each group's input into the workspace, then one SGEMM (batched over
    images in NCHW) multiplies it by the filters; the bias is blended in first. (The GEMM epilogue has
    no ReLU: `options` stays unused and convolution_forward applies it after.)"""
    depth = g.Cg * g.TRS
    ws = handle.workspace(workspace_bytes("forward", g))
    col = ws[: g.N * g.OPQ * depth]
    if bias is not None:  # y = alpha * bias + beta * y first, then the GEMM adds alpha * conv
        spatial = g.OPQ
        get_kernel("convolution", "convolution_bias_blend")(
            (grid_stride_blocks(y.size),), (256,),
            (y, bias, np.int64(y.size), np.int32(g.K), np.int32(spatial), np.float32(alpha),
             np.float32(beta), _cl(g)))
        beta = 1.0
    im2col = get_kernel("convolution", "convolution_im2col")
    flat_y, flat_w = y.reshape(-1), w.reshape(-1)
    for group in range(g.groups):
        im2col((grid_stride_blocks(col.size),), (256,), (x, col, np.int32(group), *g.args(), _cl(g)))
        w_group = flat_w[group * g.Kg * depth:]
        if g.channels_last:  # y (N*OPQ, K): one GEMM, rows = output pixels
            sgemm(g.N * g.OPQ, g.Kg, depth, col, depth, w_group, depth, flat_y[group * g.Kg:], trans_b=True,
                  alpha=alpha, beta=beta, ldc_row=g.K, ldc_col=1)
        else:  # y (N, K, OPQ): one GEMM per image (batched), C(opq, k) at k*OPQ + opq
            sgemm(g.OPQ, g.Kg, depth, col, depth, w_group, depth, flat_y[group * g.Kg * g.OPQ:], trans_b=True,
                  alpha=alpha, beta=beta, ldc_row=1, ldc_col=g.OPQ, batch=g.N, stride_a=g.OPQ * depth,
                  stride_b=0, stride_c=g.K * g.OPQ)


def convolution_backward_data_im2col_gemm(w, dy, dx, g, handle, problem, alpha, beta):
    """col = dy @ the filters (one SGEMM per group, batched over images in NCHW), then convolution_col2im adds each
    column back onto the input pixels it came from."""
    depth = g.Cg * g.TRS
    ws = handle.workspace(workspace_bytes("backward_data", g))
    col = ws[: g.N * g.OPQ * depth]
    col2im = get_kernel("convolution", "convolution_col2im")
    flat_dy, flat_w = dy.reshape(-1), w.reshape(-1)
    for group in range(g.groups):
        w_group = flat_w[group * g.Kg * depth:]
        # col (N*OPQ, depth) = dy_group (N*OPQ, Kg) @ w_group (Kg, depth)
        if g.channels_last:
            sgemm(g.N * g.OPQ, depth, g.Kg, flat_dy[group * g.Kg:], g.K, w_group, depth, col)
        else:  # dy_n is (K, OPQ): op(A) = its transpose, one GEMM per image
            sgemm(g.OPQ, depth, g.Kg, flat_dy[group * g.Kg * g.OPQ:], g.OPQ, w_group, depth, col, trans_a=True,
                  batch=g.N, stride_a=g.K * g.OPQ, stride_b=0, stride_c=g.OPQ * depth)
        col2im((grid_stride_blocks(g.N * g.Cg * g.DHW),), (256,),
               (col, dx, np.int32(group), *g.args(), np.float32(alpha), np.float32(beta), _cl(g)))


def convolution_backward_filter_im2col_gemm(x, dy, dw, g, handle, problem, alpha, beta):
    """dw = dy^T @ im2col(x) per group: the reduction over every output pixel in one SGEMM (split-K when tall)."""
    depth, rows = g.Cg * g.TRS, g.N * g.OPQ
    ws = handle.workspace(workspace_bytes("backward_filter", g))
    col = ws[: rows * depth]
    rest = ws[rows * depth:]
    if g.channels_last:
        dy_rows = dy.reshape(-1)  # (N*OPQ, K) already
    else:  # channels-last copy of dy, so that its rows are output pixels
        dy_rows = rest[: rows * g.K]
        dy_rows.reshape(g.N, g.OPQ, g.K)[...] = dy.reshape(g.N, g.K, g.OPQ).transpose(0, 2, 1)
        rest = rest[rows * g.K:]
    im2col = get_kernel("convolution", "convolution_im2col")
    flat_dw = dw.reshape(-1)
    for group in range(g.groups):
        im2col((grid_stride_blocks(col.size),), (256,), (x, col, np.int32(group), *g.args(), _cl(g)))
        # dw_group (Kg, depth) = dy_group^T (Kg, N*OPQ) @ col (N*OPQ, depth)
        sgemm(g.Kg, depth, rows, dy_rows[group * g.Kg:], g.K, col, depth, flat_dw[group * g.Kg * depth:],
              trans_a=True, alpha=alpha, beta=beta, workspace=rest)
