"""CuPy launchers of kernels/convolution_wgmma.cu: algorithm "implicit_gemm_tc" on Hopper (wgmma fed by TMA).

cuda/convolution_tc.py calls these first, on NHWC arrays, and runs its mma.sync kernels when they return
False (another GPU; a problem TMA cannot describe: `reason`). minidl.primitives.set_tensor_core_gemm
("mma_sync") forces the mma.sync kernels, ("wgmma") makes a refusal an error.

What the copy engine needs, checked in `reason`: channel counts whose rows are multiples of 16 bytes
(C and K multiples of 8 for 16-bit data, of 4 for float32), 16-byte aligned arrays, box extents <= 256
(the output-pixel rectangle times the stride), strides <= 8. Backward data runs stride 1 only (a strided
one is not a box); backward filter runs 16-bit data only (TF32 wgmma cannot read its M/N-major operands).
"""
from __future__ import annotations

import math

import cupy
import numpy as np

from .. import _common
from ._compile import get_kernel, get_template_kernel
from ._launch import grid_stride_blocks, sm_count
from . import tma
from . import gemm_wgmma
from .gemm_wgmma import BM, KINDS, NO_MAP, ROW_BYTES, SLAB, THREADS, TILE_WIDTHS, device_has_wgmma, smem_bytes, \
    tile_shape, tma_data_type

# The fields of `struct ConvShape` in kernels/convolution_wgmma.cu, in order (all int32; a CPU test
# checks that the two lists agree).
SHAPE_FIELDS = ("N", "H", "W", "C", "K", "R", "S", "P", "Q", "off_h", "off_w", "sh", "sw", "tap_h", "tap_w",
                "BNI", "BP", "BQ", "c_steps", "splits", "vec_c", "relu", "nchw")
SHAPE_DTYPE = np.dtype([(name, np.int32) for name in SHAPE_FIELDS])
_SHAPE_BYTES = np.dtype((np.void, SHAPE_DTYPE.itemsize))
_configured = set()


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def pixel_rectangle(N: int, P: int, Q: int, pixels: int) -> tuple[int, int, int]:
    """(BNI, BP, BQ): a tile's output pixels as a box of images x rows x columns, BNI * BP * BQ = pixels
    (a power of two). Columns first (up to the next power of two of Q), then rows, then whole images, so
    that a small feature map packs several images into one tile instead of wasting rows."""
    bq = min(_pow2_at_least(Q), pixels)
    bp = min(_pow2_at_least(P), pixels // bq)
    return pixels // (bq * bp), bp, bq


def reason(direction: str, g: dict, dtype: str, arrays) -> str | None:
    """Why the wgmma kernels cannot take this problem (None: they can). g: convolution_tc._geometry."""
    if _common.tensor_core_gemm == "mma_sync":
        return "set_tensor_core_gemm('mma_sync')"
    if dtype not in KINDS:
        return f"{dtype} data"
    if not device_has_wgmma(cupy.cuda.runtime.getDevice()):
        return "this GPU has no wgmma (compute capability 9.0 only)"
    vec = 16 // np.dtype(dtype).itemsize
    if g["K"] % vec or (g["C"] % vec and direction == "backward_data"):
        return f"C = {g['C']} and K = {g['K']} must be multiples of {vec} (TMA reads rows of 16-byte multiples)"
    if direction == "forward" and g["C"] < 32:
        # each k step reads 128 bytes of channels per pixel: with C = 3 padded to 8, 7/8 of the MMAs multiply
        # zeros and the mma.sync kernel (32-byte k steps) is measured 3x faster (gpu_conv_tc.md)
        return f"C = {g['C']} < 32: the 128-byte k step would multiply mostly zeros"
    if any(a.data.ptr % 16 for a in arrays if a is not None):
        return "an array does not start on a 16-byte boundary"
    if max(g["sh"], g["sw"]) > 8:
        return "a stride above 8 (TMA's element strides)"
    if direction == "backward_data" and (g["sh"], g["sw"]) != (1, 1):
        return "a strided backward data is not a TMA box (the mma.sync kernel runs it)"
    if direction == "backward_filter" and dtype == "float32":
        return "TF32 wgmma cannot read backward filter's channel-contiguous operands (the mma.sync kernel runs it)"
    pixels = 64 if direction == "backward_filter" else BM
    rows = (g["N"], g["P"], g["Q"]) if direction != "backward_data" else (g["N"], g["H"], g["W"])
    _, bp, bq = pixel_rectangle(*rows, pixels)
    if bq * g["sw"] > 256 or bp * g["sh"] > 256:
        return "the tile's input window is wider than a TMA box (256)"
    return None


def split_count(tiles: int, k_total: int, sms: int) -> int:
    """Slices of backward filter's pixel reduction: enough to give every SM work, in whole waves (the
    persistent blocks take tiles in turn, so 140 tiles on 132 SMs take two rounds: measured 1.5x slower than
    130), at least 16 k steps a slice; the fewest waves that fill 95% of the SMs (each slice adds an fp32
    copy of dw to write and to add up). Every slice gets ceil(k_total / splits) steps, so no slice is left empty:
    the count is the slices those steps make."""
    if tiles >= sms or k_total < 32:
        return 1
    best, best_eff = 1, tiles / sms
    for waves in (1, 2, 3, 4):
        splits = min(max(1, waves * sms // tiles), max(1, k_total // 16))
        eff = tiles * splits / (math.ceil(tiles * splits / sms) * sms)
        if eff >= 0.95:
            best = splits
            break
        if eff > best_eff:
            best, best_eff = splits, eff
    return math.ceil(k_total / math.ceil(k_total / best))


def _shape(**fields) -> np.ndarray:
    """The ConvShape record, as opaque bytes: CuPy walks a structured dtype's fields on every launch (~40 us for
    22 fields), a void record it copies as it is."""
    return np.array([tuple(fields.get(name, 0) for name in SHAPE_FIELDS)], dtype=SHAPE_DTYPE).view(_SHAPE_BYTES)


# Launch plans: a training step launches the same problems every step on arrays at new addresses (CuPy's pool), so
# the kernel (compiled, its shared memory opted in), the geometry, the ConvShape record and the tensor-map recipes are
# made once per problem (and the output's 16-byte alignment, which decides the store path); a launch finds each map
# by its array's address (_map) and enters no file but this one and _launch.py's.
_row_plans: dict = {}
_PLAN_CACHE_SIZE = 1024


def _kernel(name: str, bn: int, staged: bool = False, mi: int = 1):
    kernel = get_template_kernel("convolution_wgmma", name)
    key = (cupy.cuda.Device().id, name)
    if key not in _configured:
        kernel.max_dynamic_shared_size_bytes = smem_bytes(bn, staged, mi)
        _configured.add(key)
    return kernel


def _channels_padded(a, vec):
    """An NHWC array (or a (K, R, S, C) filter) with its channels zero-padded to a multiple of `vec`: what TMA
    reads when C is not (a first layer's C = 3). One pass over a small tensor."""
    C = a.shape[-1]
    out = cupy.zeros(a.shape[:-1] + (-(-C // vec) * vec,), dtype=a.dtype)
    out.view(cupy.uint16 if a.itemsize == 2 else cupy.uint32)[..., :C] = a.view(
        cupy.uint16 if a.itemsize == 2 else cupy.uint32)
    return out


def _nhwc_recipe(dtype, size, N, H, W, C, box, element_strides=None) -> tma.MapRecipe:
    return tma.MapRecipe(tma_data_type(dtype), (C, W, H, N), (C * size, W * C * size, H * W * C * size), box,
                         element_strides)


def _filter_recipe(dtype, size, rows, taps, depth, bn) -> tma.MapRecipe:
    """The 3-D map (depth, taps, rows) of a filter stored (rows, taps, depth): boxes of (128 bytes, 1 tap, bn rows)."""
    return tma.MapRecipe(tma_data_type(dtype), (depth, taps, rows), (depth * size, taps * depth * size),
                         (ROW_BYTES // size, 1, bn))


def _vec_c(out, channels: int, pointer: int | None = None) -> int:
    """The epilogue's store width: 2 = 16-byte stores (16-bit rows 16-byte aligned), 1 = pairs, 0 = single.
    pointer: where the output will start (default: out's own address)."""
    pointer = out.data.ptr if pointer is None else pointer
    if out.itemsize == 2 and channels % 8 == 0 and pointer % 16 == 0:
        return 2
    return 1 if channels % 2 == 0 and pointer % (2 * out.itemsize) == 0 else 0


def _rows_launch(name, dtype, in_arr, in_dims, w_arr, w_rows, out, out_dims, taps, offs, steps, tap_steps, bias,
                 alpha, beta, relu=False, nchw=False):
    """fprop / dgrad: in_arr (N, H, W, C) NHWC, w_arr (w_rows, R, S, C), out (N, P, Q, w_rows), or with nchw the
    channels-first memory (N, w_rows, P, Q) (out may be an (N, P, Q, w_rows) view of it)."""
    key = (name, dtype, in_dims, w_rows, out_dims, taps, offs, steps, tap_steps, alpha, beta, relu, nchw,
           in_arr.itemsize, out.data.ptr % 16, gemm_wgmma.EPILOGUE, gemm_wgmma.TILE_SHAPES, _common.tf32_tma_type,
           cupy.cuda.runtime.getDevice())
    plan = _planned(key, lambda: _rows_plan(name, dtype, in_arr.itemsize, in_dims, w_rows, out, out_dims, taps, offs,
                                            steps, tap_steps, alpha, beta, relu, nchw))
    kernel, smem, grid, recipe_in, recipe_w, recipe_out, middle = plan
    kernel(grid, (THREADS,),
           (_map(recipe_in, in_arr), _map(recipe_w, w_arr), NO_MAP if recipe_out is None else _map(recipe_out, out),
            *middle, out, np.uint64(0) if bias is None else bias), shared_mem=smem)


def _map(recipe, a):
    """The tensor map of `recipe`'s shape for the array a: the one made for a's address before (recipe.maps, where a
    steady training loop finds every map), else made now (tma.MapRecipe.at)."""
    found = recipe.maps.get(a.data.ptr)
    return found if found is not None else recipe.at(a.data.ptr)


def _rows_plan(name, dtype, size, in_dims, w_rows, out, out_dims, taps, offs, steps, tap_steps, alpha, beta, relu,
               nchw):
    """The launch of one fprop / dgrad problem, all but the arrays' addresses (see _row_plans)."""
    N, H, W, C = in_dims
    _, P, Q = out_dims
    R, S = taps
    mi, bn = tile_shape(N * P * Q, w_rows)
    bni, bp, bq = pixel_rectangle(N, P, Q, BM * mi)
    tiles_m = math.ceil(N / bni) * math.ceil(P / bp) * math.ceil(Q / bq)
    bk = ROW_BYTES // size
    recipe_in = _nhwc_recipe(dtype, size, N, H, W, C, (bk, bq * steps[1], bp * steps[0], bni),
                             (1, steps[1], steps[0], 1))
    recipe_w = _filter_recipe(dtype, size, w_rows, R * S, C, bn)
    shape = _shape(N=N, H=H, W=W, C=C, K=w_rows, R=R, S=S, P=P, Q=Q, off_h=offs[0], off_w=offs[1], sh=steps[0],
                   sw=steps[1], tap_h=tap_steps[0], tap_w=tap_steps[1], BNI=bni, BP=bp, BQ=bq,
                   c_steps=math.ceil(C / bk), splits=1, vec_c=0 if nchw else _vec_c(out, w_rows), relu=int(relu),
                   nchw=int(nchw))
    kind = KINDS[dtype]
    # the 16-bit output tile leaves through shared memory and a TMA store of the box (BN channels, BQ, BP, BNI)
    staged = (gemm_wgmma.EPILOGUE == "staged" and out.itemsize == 2 and beta == 0 and w_rows % 8 == 0
              and out.data.ptr % 16 == 0 and not nchw)
    recipe_out = None
    if staged:
        osize = out.itemsize
        recipe_out = tma.MapRecipe(dtype, (w_rows, Q, P, N), (w_rows * osize, Q * w_rows * osize,
                                                             P * Q * w_rows * osize), (bn, bq, bp, bni),
                                   swizzle=tma.SWIZZLE_NONE)
    tiles = tiles_m * math.ceil(w_rows / bn)
    middle = (np.int32(staged), shape, np.float32(alpha), np.float32(beta))
    return (_kernel(f"{name}<{kind}, {bn}, {str(staged).lower()}, {mi}>", bn, staged, mi), smem_bytes(bn, staged, mi),
            (min(tiles, sm_count()),), recipe_in, recipe_w, recipe_out, middle)


_UNASKED = object()


def _why(direction, g, dtype, inputs, out, why):
    """reason() for the inputs and out; why: what reason() said of the inputs alone, when the caller asked it."""
    if why is _UNASKED:
        return reason(direction, g, dtype, (*inputs, out))
    return "an array does not start on a 16-byte boundary" if why is None and out.data.ptr % 16 else why


def convolution_forward(x, w, bias, y, g, dtype, alpha, beta, nchw=False, why=_UNASKED) -> bool:
    """y = alpha * (conv(x, w) + bias) + beta * y, NHWC arrays (w: (K, R, S, C)), y channels-first memory when nchw;
    False: not taken. why: reason("forward", g, dtype, (x, w, bias)) when the caller has it."""
    why = _why("forward", g, dtype, (x, w, bias), y, why)
    if why is not None:
        return _declined("convolution_forward", why)
    vec = 16 // x.itemsize
    C = g["C"]
    if C % vec:  # channels zero-padded for TMA: the zeros cost tensor-core work only
        x, w = _channels_padded(x, vec), _channels_padded(w, vec)
        C = x.shape[-1]
    _rows_launch("convolution_forward_wgmma", dtype, x, (g["N"], g["H"], g["W"], C), w, g["K"], y,
                 (g["N"], g["P"], g["Q"]), (g["R"], g["S"]), (-g["ph"], -g["pw"]), (g["sh"], g["sw"]),
                 (g["dh"], g["dw"]), bias, alpha, beta, nchw=nchw)
    return True


def convolution_backward_data(wt, dy, dx, g, dtype, alpha, beta, nchw=False, why=_UNASKED) -> bool:
    """dx = alpha * conv_transpose(dy, w) + beta * dx (stride 1), NHWC (dx channels-first memory when nchw); wt: the
    filter as (C, R, S, K). why: reason("backward_data", g, dtype, (wt, dy)) when the caller has it."""
    why = _why("backward_data", g, dtype, (wt, dy), dx, why)
    if why is not None:
        return _declined("convolution_backward_data", why)
    _rows_launch("convolution_backward_data_wgmma", dtype, dy, (g["N"], g["P"], g["Q"], g["K"]), wt, g["C"], dx,
                 (g["N"], g["H"], g["W"]), (g["R"], g["S"]), (g["ph"], g["pw"]), (1, 1), (-g["dh"], -g["dw"]), None,
                 alpha, beta, nchw=nchw)
    return True


def convolution_backward_filter(x, dy, dw, g, dtype, alpha, beta, workspace, reduce_kernel) -> bool:
    """dw = alpha * dL/dw + beta * dw, NHWC (dw: (K, R, S, C)). workspace(nbytes) hands out scratch for the
    split-K partial sums; reduce_kernel() the kernel that adds them (convolution_tc_splitk_reduce_*)."""
    why = reason("backward_filter", g, dtype, (x, dy, dw))
    if why is not None:
        return _declined("convolution_backward_filter", why)
    vec = 16 // x.itemsize
    padded = g["C"] % vec != 0   # channels padded with zeros for TMA; the padded gradient's first C channels are dw's
    if padded:
        x = _channels_padded(x, vec)
        alpha_k, beta_k = 1.0, 0.0   # the blend with dw happens below, on its C channels
    else:
        alpha_k, beta_k = alpha, beta
    key = ("wgrad", dtype, tuple(g[k] for k in _WGRAD_GEOMETRY), alpha_k, beta_k, x.itemsize, dw.data.ptr % 16,
           _common.tf32_tma_type, TILE_WIDTHS, cupy.cuda.runtime.getDevice())
    plan = _planned(key, lambda: _wgrad_plan(g, dtype, x.itemsize, x.shape[-1], dw, padded, alpha_k, beta_k))
    target_shape = plan[-1]
    target = dw if target_shape is None else cupy.ndarray(target_shape, dtype=dw.dtype)
    _wgrad_launch(plan[:-1], dy, x, target, alpha_k, beta_k, workspace, reduce_kernel)
    if target_shape is not None:
        grad = target[..., :g["C"]]
        if beta == 0 and alpha == 1:
            dw[...] = grad
        else:
            grad = alpha * grad.astype(cupy.float32)
            if beta != 0:
                grad += beta * dw.astype(cupy.float32)
            dw[...] = grad.astype(dw.dtype)
    return True


# the geometry a weight-gradient launch depends on (convolution_tc._geometry's keys)
_WGRAD_GEOMETRY = ("N", "H", "W", "C", "K", "R", "S", "P", "Q", "ph", "pw", "sh", "sw", "dh", "dw")


def _wgrad_plan(g, dtype, size, C, dw, padded, alpha_k, beta_k):
    """The launch of one weight-gradient problem, all but the arrays' addresses (see _row_plans); C: the
    channels the kernel reads (padded to a multiple of 16 bytes)."""
    N, H, W, K, R, S, P, Q = (g[k] for k in ("N", "H", "W", "K", "R", "S", "P", "Q"))
    bni, bp, bq = pixel_rectangle(N, P, Q, 64)
    k_total = math.ceil(N / bni) * math.ceil(P / bp) * math.ceil(Q / bq)
    flat = C % SLAB == 0          # column tiles span taps (kernels/convolution_wgmma.cu, ConvWgradProblem)
    width = R * S * C if flat else C
    bn = next((w for w in sorted(TILE_WIDTHS) if width <= w), max(TILE_WIDTHS))
    mi = 2 if K >= 2 * BM and bn <= 128 else 1      # 256 x 128 moves as few bytes per MMA as 128 x 256
    tiles = math.ceil(K / (BM * mi)) * (math.ceil(width / bn) if flat else R * S * math.ceil(C / bn))
    splits = split_count(tiles, k_total, sm_count())
    recipe_dy = _nhwc_recipe(dtype, size, N, P, Q, K, (SLAB, bq, bp, bni))
    recipe_x = _nhwc_recipe(dtype, size, N, H, W, C, (SLAB, bq * g["sw"], bp * g["sh"], bni), (1, g["sw"], g["sh"], 1))
    target_shape = (K, R, S, C) if padded else None
    vec_c = _vec_c(dw, C, 0 if padded else None)   # a fresh padded target starts 256-byte aligned
    shape = _shape(N=N, H=H, W=W, C=C, K=K, R=R, S=S, P=P, Q=Q, off_h=-g["ph"], off_w=-g["pw"], sh=g["sh"],
                   sw=g["sw"], tap_h=g["dh"], tap_w=g["dw"], BNI=bni, BP=bp, BQ=bq, splits=splits,
                   vec_c=vec_c if splits == 1 else 1)
    name = "convolution_backward_filter_wgmma"
    kernel = _kernel(f"{name}<{KINDS[dtype]}, {bn}, {int(splits > 1)}, {mi}>", bn, False, mi)
    return (kernel, smem_bytes(bn, False, mi), (min(tiles * splits, sm_count()),), splits, recipe_dy, recipe_x, shape,
            target_shape)


def nchw_filter_gradient_reason(g: dict, dtype: str) -> str | None:
    """Why the channels-first TF32 weight-gradient kernel cannot take this problem (None: it can); the arrays'
    alignment is checked at launch. g: convolution_tc._geometry."""
    if _common.tensor_core_gemm == "mma_sync":
        return "set_tensor_core_gemm('mma_sync')"
    if dtype != "float32":
        return f"{dtype} data (the 16-bit weight gradient reads NHWC)"
    if not device_has_wgmma(cupy.cuda.runtime.getDevice()):
        return "this GPU has no wgmma (compute capability 9.0 only)"
    if (g["sh"], g["sw"]) != (1, 1):
        return "a strided convolution (a k step is a rectangle of 32 adjacent pixels)"
    if g["Q"] % 4:
        return f"Q = {g['Q']} must be a multiple of 4 (a filter row's offset in x moves a run of pixels by Q)"
    return None


def convolution_backward_filter_nchw(x, dy, dw, g, alpha, beta, workspace, reduce_kernel) -> bool:
    """dw = alpha * dL/dw + beta * dw with TF32, on channels-first arrays as they are: x (N, C, H, W), dy (N, K, P,
    Q), dw (K, C, R, S), all contiguous float32. False: not taken (the caller transposes to NHWC instead)."""
    if nchw_filter_gradient_reason(g, "float32") is not None or any(a.data.ptr % 16 for a in (x, dy)):
        return False
    key = ("wgrad_nchw", tuple(g[k] for k in _WGRAD_GEOMETRY), alpha, beta, dw.data.ptr % 8, _common.tf32_tma_type,
           TILE_WIDTHS, cupy.cuda.runtime.getDevice())
    plan = _planned(key, lambda: _wgrad_nchw_plan(g, dw))
    shift = plan[-1]
    if shift is not None:   # x once per filter column, moved by that column's offset (TMA boxes start 16-byte aligned)
        shift_kernel, grid, rows, W, Q, S, step, first = shift
        xs = cupy.ndarray(S * rows * Q, dtype=cupy.float32)
        shift_kernel(grid, (256,), (x, xs, np.int64(rows), np.int32(W), np.int32(Q), np.int32(S), np.int32(step),
                                    np.int32(first)))
        x = xs
    _wgrad_launch(plan[:-1], dy, x, dw, alpha, beta, workspace, reduce_kernel)
    return True


def _planned(key, make):
    """The launch plan of `key` from _row_plans, made (make()) on its first use."""
    plan = _row_plans.get(key)
    if plan is None:
        plan = _row_plans[key] = make()
        if len(_row_plans) > _PLAN_CACHE_SIZE:
            _row_plans.pop(next(iter(_row_plans)))
    return plan


def _wgrad_launch(plan, dy, x, target, alpha, beta, workspace, reduce_kernel):
    """A weight-gradient kernel into `target`, through fp32 partial sums in `workspace` when split (then added up in
    a fixed order by reduce_kernel(), which applies alpha and beta)."""
    kernel, smem, grid, splits, recipe_dy, recipe_x, shape = plan
    out = target if splits == 1 else workspace(4 * splits * target.size)
    kernel(grid, (THREADS,), (_map(recipe_dy, dy), _map(recipe_x, x), shape, np.float32(alpha), np.float32(beta), out),
           shared_mem=smem)
    if splits > 1:
        reduce_kernel()((grid_stride_blocks(target.size),), (256,),
                        (out, np.int32(splits), np.int64(target.size), np.float32(alpha), np.float32(beta), target))


def _wgrad_nchw_plan(g, dw):
    """The launch of one channels-first TF32 weight-gradient problem, all but the arrays' addresses: k steps of 32
    consecutive pixels (kernels/convolution_wgmma.cu, ConvWgradNchwProblem)."""
    N, C, H, W, K, R, S, P, Q = (g[k] for k in ("N", "C", "H", "W", "K", "R", "S", "P", "Q"))
    size, run = 4, ROW_BYTES // 4
    k_total = N * math.ceil(P * Q / run)
    bn = next((w for w in sorted(TILE_WIDTHS) if C <= w), max(TILE_WIDTHS))
    mi = 2 if K >= 2 * BM and bn <= 128 else 1
    tiles = math.ceil(K / (BM * mi)) * R * S * math.ceil(C / bn)
    splits = split_count(tiles, k_total, sm_count())
    dtype = tma_data_type("float32")
    recipe_dy = tma.MapRecipe(dtype, (P * Q, K, N), (P * Q * size, K * P * Q * size), (run, BM * mi, 1))
    # x's copies, one per filter column, moved by its offset, Q columns wide (x itself where nothing moves)
    shift = None if S == 1 and g["pw"] == 0 and Q == W else (N * C * H, W, Q, S, g["dw"], -g["pw"])
    recipe_x = tma.MapRecipe(dtype, (H * Q, C, N * S), (H * Q * size, C * H * Q * size), (run, bn, 1))
    vec_c = int(R * S == 1 and splits == 1 and C % 2 == 0 and dw.data.ptr % 8 == 0)   # pairs only where contiguous
    shape = _shape(N=N, H=H, W=W, C=C, K=K, R=R, S=S, P=P, Q=Q, off_h=-g["ph"], off_w=-g["pw"], sh=1, sw=1,
                   tap_h=g["dh"], tap_w=g["dw"], splits=splits, vec_c=vec_c)
    if shift is not None:
        shift_kernel = get_kernel("convolution_wgmma", "convolution_wgmma_shift_columns")
        shift = (shift_kernel, (grid_stride_blocks(shift[0] * Q // 4),), *shift)
    name = "convolution_backward_filter_wgmma_nchw"
    kernel = _kernel(f"{name}<{bn}, {mi}>", bn, False, mi)
    return kernel, smem_bytes(bn, False, mi), (min(tiles * splits, sm_count()),), splits, recipe_dy, recipe_x, shape, shift


def _declined(op: str, why: str) -> bool:
    if _common.tensor_core_gemm == "wgmma":
        raise RuntimeError(f"{op}: set_tensor_core_gemm('wgmma') asked for the wgmma kernels, but {why}")
    return False
