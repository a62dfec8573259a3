"""CuPy launcher of kernels/gemm_wgmma.cu: the Hopper (sm_90) tensor-core GEMM, wgmma fed by TMA.

gemm_tc in gemm.py calls `gemm_wgmma` first on an H100/H200; it returns False when this kernel does not
take the problem (another GPU: see `unsupported_reason`), and gemm_tc then runs the mma.sync kernel
(kernels/gemm_tc.cu). minidl.primitives.set_tensor_core_gemm("mma_sync") forces the
latter, "wgmma" makes a refusal an error (tests and benchmarks use both).

What the launcher does per call (the first time it meets a problem on given pointers; after that the launch is
replayed from a cache of its arguments): picks the tile shape (tile_shape: 128 x 256, 256 x 128, ... the largest
that still gives every SM a tile), builds the two TMA tensor maps (tma.py; cached), and launches one persistent block per
SM (at most one per tile). TF32 wgmma reads K-major operands only (A stored (M, K), B stored (N, K)); an
operand stored the other way is first copied transposed (one pass over it, counted in the benchmarks).
TMA reads rows that start on 16-byte boundaries only; an operand whose start, leading dimension or batch
stride breaks that (a 650-wide bfloat16 matrix, say) is first copied into padded rows: one pass over a
matrix, against a kernel twice as fast as mma.sync.
"""
from __future__ import annotations

import collections
import functools
import math

import cupy
import numpy as np

from ..._dtypes import by_dtype
from .. import _common
from ._compile import get_kernel, get_template_kernel
from ._launch import STORAGE_KINDS, arrival_counters, sm_count
from . import tma

KINDS = STORAGE_KINDS   # KIND of kernels/gemm_wgmma.cu
# The TMA data type of C's staged store, keyed by dtype (by_dtype: numpy's dtype.name is a Python property,
# ~2 us, and a training step launches this kernel dozens of times; issue 23: the host cost of an op).
_TMA_TYPE_OF = by_dtype({"float16": "float16", "bfloat16": "bfloat16"})
BM = 128                # tile rows (two consumer warpgroups of 64)
ROW_BYTES = 128         # bytes of k per stage row (the 128-byte swizzle span)
SLAB = 64               # columns of an M/N-major TMA box
SMEM_BUDGET = 196608    # SMEM_BUDGET of the kernel: bytes of pipeline stages
SMEM_BUDGET_STAGED = 229376  # SMEM_BUDGET_STAGED: stages + the staged 16-bit output tile
THREADS = 384           # one producer and two consumer warpgroups
TILE_WIDTHS = (256, 128, 64)
# The 16-bit epilogue (wgmma_pipeline.cuh, section 6): "staged" = the tile goes through shared memory and
# a TMA store that overlaps the next tile (one fewer pipeline stage at BN = 256), "16byte" = 16-byte stores
# from registers, "pairs" = 4-byte stores; float32 output always leaves from registers. Measured in
# benchmarks/results/gpu_gemm_tc.md.
EPILOGUE = "staged"
_kernels: dict = {}
_LAUNCH_CACHE_SIZE = 4096
_launches: "collections.OrderedDict[tuple, tuple]" = collections.OrderedDict()   # gemm_wgmma's plans, by problem


@functools.lru_cache(maxsize=None)
def stages(bn: int, staged: bool = False, mi: int = 1) -> int:
    """Pipeline depth of a wgmma kernel with a (128 * mi) x bn tile (Config::STAGES)."""
    budget = SMEM_BUDGET_STAGED - BM * mi * bn * 2 if staged else SMEM_BUDGET
    return min(8, budget // ((BM * mi + bn) * ROW_BYTES))


@functools.lru_cache(maxsize=None)
def smem_bytes(bn: int, staged: bool = False, mi: int = 1) -> int:
    """Dynamic shared memory of one block: the stages, the staged output tile, two 8-byte mbarriers per
    stage, 1024 for alignment."""
    return stages(bn, staged, mi) * ((BM * mi + bn) * ROW_BYTES + 16) + (BM * mi * bn * 2 if staged else 0) + 1024


# Tile shapes (m64 sub-tiles per consumer warpgroup, BN), best first: 128 x 256 and 256 x 128 move the fewest
# bytes per MMA; the narrower ones serve narrow or small problems.
TILE_SHAPES = ((1, 256), (2, 128), (1, 128), (2, 64), (1, 64))


def tile_shape(M: int, N: int, batch: int = 1) -> tuple[int, int]:
    """(mi, bn): the first of TILE_SHAPES no wider than N needs that still gives every SM a tile; else the
    smallest tile (a GPU with idle SMs loses more than small tiles cost). 128 x 128 goes before 128 x 256 where
    its columns pad N less: a Linear layer of 384 or 1152 outputs (char_gpt's) ran 7-22% faster on it than on 128 x
    256, whose last column of tiles is half padding (H200, M = 16384, session 19's probe: gpu_gemm_tc.md)."""
    return _tile_shape(M, N, batch, sm_count(), TILE_SHAPES, TILE_WIDTHS)


@functools.lru_cache(maxsize=4096)
def _tile_shape(M: int, N: int, batch: int, sms: int, tile_shapes, tile_widths) -> tuple[int, int]:
    cover = next((w for w in sorted(tile_widths) if N <= w), max(tile_widths))
    shapes = [(mi, bn) for mi, bn in tile_shapes if bn <= cover and bn in tile_widths]
    if (1, 256) in shapes and (1, 128) in shapes and -(-N // 128) * 128 < -(-N // 256) * 256:
        shapes.remove((1, 128))
        shapes.insert(shapes.index((1, 256)), (1, 128))
    for mi, bn in shapes:
        if math.ceil(M / (BM * mi)) * math.ceil(N / bn) * batch >= sms:
            return mi, bn
    return shapes[-1]


# Split-K (kernels/gemm_wgmma.cu, GemmProblem::split_fixup): a problem whose output tiles leave SMs idle even at the
# smallest tile (a weight gradient dW = dy^T x: out x in outputs, K = every row of the batch; char_gpt's are 18 to
# 72 tiles of 128 x 64 on 132 SMs) runs its k steps in `splits` slices side by side; the slice of a tile that
# finishes last adds the slices' fp32 sums up, in slice order, and stores the tile. No launch of its own: the
# arrival counters (one per output tile) and a workspace of the slices' sums are the launch's only extras.
SPLIT_K = True
MIN_SPLIT_STEPS = 8    # k steps a slice gets at least (8 x 64 of K in 16 bits): the pipeline's fill is amortised
MAX_SPLITS = 16


def split_k_choice(M: int, N: int, K: int, bk: int) -> tuple[int, int, int, int] | None:
    """(mi, bn, splits, k steps per slice) for a problem (batch 1) whose tiles cannot fill the GPU, or None (no
    split). The tiles the kernel can split (mi * bn <= 128) among TILE_SHAPES; the first that gives
    at least 3/4 of the SMs a slice, else the one that gives the most."""
    return _split_k_choice(M, N, K, bk, sm_count(), TILE_SHAPES, TILE_WIDTHS)


@functools.lru_cache(maxsize=4096)
def _split_k_choice(M, N, K, bk, sms, tile_shapes, tile_widths):
    k_steps = -(-K // bk)
    best, best_busy = None, 0.0
    for mi, bn in tile_shapes:
        if mi * bn > 128 or bn not in tile_widths:
            continue
        outputs = math.ceil(M / (BM * mi)) * math.ceil(N / bn)
        splits = min(MAX_SPLITS, sms // outputs, k_steps // MIN_SPLIT_STEPS)
        if splits < 2:
            continue
        per_split = -(-k_steps // splits)
        splits = -(-k_steps // per_split)
        busy = outputs * splits / sms
        if busy > best_busy:
            best, best_busy = (mi, bn, splits, per_split), busy
        if busy >= 0.75:
            break
    return best


@functools.lru_cache(maxsize=None)
def device_has_wgmma(device_id: int) -> bool:
    """wgmma exists on compute capability 9.0 exactly (sm_90a: H100, H200), not before and not after."""
    return cupy.cuda.Device(device_id).compute_capability == "90"


def _kernel(kind: int, bn: int, trans_a: bool, trans_b: bool, staged: bool, mi: int, out_kind: int):
    key = (cupy.cuda.Device().id, kind, bn, trans_a, trans_b, staged, mi, out_kind)
    kernel = _kernels.get(key)
    if kernel is None:
        flag = lambda b: str(b).lower()  # noqa: E731
        out = "" if out_kind == kind else f", {out_kind}"   # (the template's default: C of the data's type)
        name = f"gemm_wgmma<{kind}, {bn}, {flag(trans_a)}, {flag(trans_b)}, {flag(staged)}, {mi}{out}>"
        kernel = get_template_kernel("gemm_wgmma", name)
        kernel.max_dynamic_shared_size_bytes = smem_bytes(bn, staged, mi)
        _kernels[key] = kernel
    return kernel


NO_MAP = np.zeros(1, dtype=tma.MAP_DTYPE)   # the output-map argument when the epilogue does not use one
_NULL = np.uint64(0)   # an absent pointer argument (the split-K workspace and counters of an unsplit launch)
# struct GemmArgs of kernels/gemm_wgmma.cu, field for field, passed to the kernel as its raw bytes
GEMM_ARGS = np.dtype([("ldc_row", np.int64), ("ldc_col", np.int64), ("stride_c", np.int64)]
                     + [(name, np.int32) for name in ("use_map_c", "M", "N", "K", "batch", "a_batched", "b_batched",
                                                      "vec_c")]
                     + [("alpha", np.float32), ("beta", np.float32)]
                     + [(name, np.int32) for name in ("bias_f32", "splits", "per_split", "pad")])
_GEMM_ARGS_BYTES = np.dtype((np.void, GEMM_ARGS.itemsize))


def unsupported_reason(dtype, trans_a, trans_b, batch) -> str | None:
    """Why this kernel cannot take the problem (None: it can)."""
    kind = KINDS.get(dtype)
    if kind is None:
        return f"{dtype} data (the kernel takes float32 as TF32, float16, bfloat16)"
    if not device_has_wgmma(cupy.cuda.runtime.getDevice()):
        return "this GPU has no wgmma (compute capability 9.0 only: H100, H200)"
    if batch > 65535 and (kind == KINDS["float32"] and (trans_a or not trans_b)):
        return "a TF32 operand to transpose in a batch of more than 65535 (the transpose's grid)"
    return None


SMALL_TF32_COPY_WORK = 1 << 27   # M*N*K below which a TF32 GEMM that needs a K-major copy runs on mma.sync


def tma_readable(ptr: int, ld: int, stride: int, batch: int, itemsize: int) -> bool:
    """TMA's rules for an operand: 16-byte aligned start, rows and batch entries 16 bytes apart."""
    return ptr % 16 == 0 and (ld * itemsize) % 16 == 0 and (batch == 1 or stride == 0 or (stride * itemsize) % 16 == 0)


def _view(ptr: int, shape, strides, dtype):
    """A CuPy array over device memory we were handed as a raw pointer (no copy, no ownership)."""
    itemsize = np.dtype(dtype).itemsize
    span = sum((n - 1) * s for n, s in zip(shape, strides)) + 1
    mem = cupy.cuda.UnownedMemory(ptr, span * itemsize, owner=None)
    return cupy.ndarray(shape, dtype=dtype, memptr=cupy.cuda.MemoryPointer(mem, 0),
                        strides=tuple(s * itemsize for s in strides))


def _padded_copy(ptr, rows, cols, ld, stride, batch, itemsize):
    """An operand TMA cannot read (misaligned start, rows or batch entries) copied into rows padded to a
    multiple of 16 bytes (the padding is never read: the map's extent is `cols`). Copied as raw bits
    (uint16 / uint32), so any 16- or 32-bit type goes through CuPy's plain copy.
    Returns (copy, pointer, leading dimension, batch stride)."""
    bits = np.uint16 if itemsize == 2 else np.uint32
    batched = batch > 1 and stride != 0          # a broadcast operand (stride 0) is one matrix: copy it once
    shape, strides = (rows, cols), (ld, 1)
    if batched:
        shape, strides = (batch,) + shape, (stride,) + strides
    ld_out = -(-cols // (16 // itemsize)) * (16 // itemsize)
    out = cupy.ndarray(shape[:-1] + (ld_out,), dtype=bits)
    out[..., :cols] = _view(ptr, shape, strides, bits)
    return out, out.data.ptr, ld_out, (rows * ld_out if batched else 0)


def _k_major_copy(ptr, rows, k, ld, stride, batch, dtype):
    """The operand stored (K, rows) [per batch entry] copied to (rows, K) row-major, what TF32 wgmma reads
    (kernel gemm_wgmma_transpose); its rows padded to a multiple of 16 bytes (TMA's rule; the padding is
    never read: the map's extent is K). Returns (copy, pointer, leading dimension, batch stride)."""
    ld_out = -(-k // 4) * 4
    count = batch if batch > 1 and stride != 0 else 1   # a broadcast operand (stride 0): one matrix
    out = cupy.ndarray((count, rows, ld_out) if count > 1 else (rows, ld_out), dtype=np.float32)
    kernel = get_kernel("gemm_wgmma", "gemm_wgmma_transpose")
    i32, i64 = np.int32, np.int64
    kernel((math.ceil(rows / 32), math.ceil(k / 32), count), (32, 8),
           (np.uint64(ptr), out, i32(rows), i32(k), i64(ld), i64(ld_out), i64(stride), i64(rows * ld_out)))
    return out, out.data.ptr, ld_out, (rows * ld_out if count > 1 else 0)


def _operand_map(dtype_name, k_major, rows, K, ld, stride, batched, box_rows, bk) -> tma.MapRecipe:
    """The TMA map recipe of one operand: K-major (stored (rows, K)) boxes of (bk, box_rows); M/N-major (stored
    (K, rows)) boxes of (64 columns, bk)."""
    size = 4 if dtype_name in ("float32", "tfloat32") else 2
    inner, outer = (K, rows) if k_major else (rows, K)
    batch_stride = stride * size if batched > 1 else max(16, -(-(ld * outer * size) // 16) * 16)
    box = (bk, box_rows) if k_major else (SLAB, bk)
    return tma.MapRecipe(dtype_name, (inner, outer, batched), (ld * size, batch_stride), box + (1,))


last_plan = None   # the plan gemm_wgmma's latest call launched from or made (None: none, e.g. it copied an operand)


def launch_plan(plan, a_ptr: int, b_ptr: int, c_ptr: int, bias_ptr: int = 0) -> None:
    """Launch a plan of gemm_wgmma on operands at new addresses (what a planned problem's call comes down to)."""
    kernel, grid, smem, recipe_a, recipe_b, recipe_c, args, split = plan
    map_a, map_b = recipe_a.maps.get(a_ptr), recipe_b.maps.get(b_ptr)   # (maps made before for these addresses)
    map_c = NO_MAP if recipe_c is None else recipe_c.maps.get(c_ptr)
    ws = counters = _NULL
    if split is not None:
        ws, counters, grid, args = _split_arrays(split, grid, args)
    kernel(grid, (THREADS,), (recipe_a.at(a_ptr) if map_a is None else map_a,
                              recipe_b.at(b_ptr) if map_b is None else map_b,
                              recipe_c.at(c_ptr) if map_c is None else map_c, args, np.uint64(c_ptr),
                              np.uint64(bias_ptr), ws, counters), shared_mem=smem)


def _split_arrays(split, grid, args):
    """(workspace, counters, grid, args) of a split-K launch: a new fp32 workspace for the slices' sums and the
    stream's arrival counters; during a CUDA graph capture on a stream that has none yet (they cannot be zeroed
    inside a capture), the problem unsplit instead (its own grid and arguments)."""
    ws_floats, outputs, grid_unsplit, args_unsplit = split
    counters = arrival_counters(outputs)
    if counters is None:
        return _NULL, _NULL, grid_unsplit, args_unsplit
    return cupy.ndarray(ws_floats, dtype=np.float32), counters, grid, args


def gemm_wgmma(M, N, K, a_ptr, lda, b_ptr, ldb, c_ptr, *, dtype, trans_a, trans_b, alpha, beta, ldc_row,
               ldc_col, batch, stride_a, stride_b, stride_c, bias_ptr=0, bias_f32=0, out_dtype=None) -> bool:
    """C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b] on wgmma, with gemm_tc's arguments (raw pointers,
    strides in elements). Returns False, launching nothing, when the kernel does not take the problem
    (and raises instead when set_tensor_core_gemm("wgmma") asked for this kernel). bias_ptr: 0, or the
    device pointer of N values of C's dtype (bias_f32 = 1: of float32, with 16-bit C) added to every row in the epilogue
    (before alpha). out_dtype: C's
    dtype (default the data's; float32 for 16-bit data: the fp32 accumulators stored as they are)."""
    choice = _common.tensor_core_gemm
    if choice == "mma_sync":
        return False
    # A training step launches the same GEMM problems every step, on operands at addresses that change (CuPy's
    # pool): a problem planned before (same shapes, strides, dtype, and the addresses' alignment, which decides
    # the copies and the store width) is launched from its plan; only the tensor maps take the new addresses.
    key = (M, N, K, lda, ldb, dtype, trans_a, trans_b, alpha, beta, ldc_row, ldc_col, batch, stride_a, stride_b,
           stride_c, a_ptr % 16, b_ptr % 16, c_ptr % 16, choice, EPILOGUE, _common.tf32_tma_type, TILE_SHAPES,
           TILE_WIDTHS, cupy.cuda.runtime.getDevice(), out_dtype, bias_f32, SPLIT_K)
    global last_plan
    plan = last_plan = _launches.get(key)
    if plan is not None:
        launch_plan(plan, a_ptr, b_ptr, c_ptr, bias_ptr)
        return True
    dtype = np.dtype(dtype)
    reason = unsupported_reason(dtype, trans_a, trans_b, batch)
    if reason is not None:
        if choice == "wgmma":
            raise RuntimeError(f"gemm: set_tensor_core_gemm('wgmma') asked for the wgmma kernel, but {reason}")
        return False
    kind = KINDS[dtype]
    if (choice != "wgmma" and kind == KINDS["float32"] and (trans_a or not trans_b)
            and M * N * K * batch < SMALL_TF32_COPY_WORK):
        # TF32 wgmma reads both operands K-major, so this one would first be transposed (a launch, a copy,
        # and its host work): on a problem this small the mma.sync kernel, which reads it as it is, is
        # quicker end to end (issue 23: the MNIST CNN's TF32 step spent its extra host time here)
        return False
    keep = []   # copies made here live until the launch is queued (the pool reuses them in stream order)
    if kind == KINDS["float32"] and trans_a:     # TF32 wgmma: both operands K-major
        a, a_ptr, lda, stride_a = _k_major_copy(a_ptr, M, K, lda, stride_a, batch, dtype)
        keep.append(a)
        trans_a = False
    if kind == KINDS["float32"] and not trans_b:
        b, b_ptr, ldb, stride_b = _k_major_copy(b_ptr, N, K, ldb, stride_b, batch, dtype)
        keep.append(b)
        trans_b = True
    size = dtype.itemsize
    if not tma_readable(a_ptr, lda, stride_a, batch, size):
        a, a_ptr, lda, stride_a = _padded_copy(a_ptr, *((K, M) if trans_a else (M, K)), lda, stride_a, batch, size)
        keep.append(a)
    if not tma_readable(b_ptr, ldb, stride_b, batch, size):
        b, b_ptr, ldb, stride_b = _padded_copy(b_ptr, *((N, K) if trans_b else (K, N)), ldb, stride_b, batch, size)
        keep.append(b)
    mi, bn = tile_shape(M, N, batch)
    bk = ROW_BYTES // dtype.itemsize
    choice = None   # split-K's (mi, bn, splits, per_split)
    if SPLIT_K and batch == 1 and math.ceil(M / (BM * mi)) * math.ceil(N / bn) < sm_count():
        choice = split_k_choice(M, N, K, bk)
        if choice is not None:
            mi, bn = choice[:2]
    map_type = tma_data_type(dtype)
    a_batch = batch if batch > 1 and stride_a != 0 else 1
    b_batch = batch if batch > 1 and stride_b != 0 else 1
    recipe_a = _operand_map(map_type, not trans_a, M, K, lda, stride_a, a_batch, BM * mi, bk)
    recipe_b = _operand_map(map_type, trans_b, N, K, ldb, stride_b, b_batch, bn, bk)
    out = dtype if out_dtype is None else np.dtype(out_dtype)   # C's dtype
    # C's stores: staged through shared memory and a TMA store; else 2 = 16-byte stores of 8 adjacent 16-bit
    # elements (rows 16-byte aligned), 1 = pairs, 0 = one by one
    row_major = ldc_col == 1
    rows16 = row_major and c_ptr % 16 == 0 and (ldc_row * out.itemsize) % 16 == 0 and \
        (batch == 1 or (stride_c * out.itemsize) % 16 == 0)
    staged = EPILOGUE == "staged" and out.itemsize == 2 and rows16 and beta == 0
    if EPILOGUE != "pairs" and out.itemsize == 2 and rows16:
        vec_c = np.int32(2)
    else:
        vec_c = np.int32(row_major and ldc_row % 2 == 0 and c_ptr % (2 * out.itemsize) == 0
                         and (batch == 1 or stride_c % 2 == 0))
    recipe_c = None
    if staged:
        c_stride = stride_c * out.itemsize if batch > 1 else max(16, ldc_row * M * out.itemsize)
        recipe_c = tma.MapRecipe(_TMA_TYPE_OF[out], (N, M, batch), (ldc_row * out.itemsize, c_stride),
                                 (bn, BM * mi, 1), swizzle=tma.SWIZZLE_NONE)
    tiles = math.ceil(M / (BM * mi)) * math.ceil(N / bn) * batch
    kernel = _kernel(kind, bn, bool(trans_a), bool(trans_b), staged, mi, KINDS[out])
    grid = (min(tiles, sm_count()),)

    def arguments(splits, per_split):
        return np.array([(ldc_row, ldc_col, stride_c, int(staged), M, N, K, batch, int(a_batch > 1), int(b_batch > 1),
                          int(vec_c), alpha, beta, int(bias_f32), splits, per_split, 0)],
                        dtype=GEMM_ARGS).view(_GEMM_ARGS_BYTES)

    args = arguments(1, 0)
    split = None   # the plan's split-K part: (workspace floats, output tiles, the unsplit grid and arguments)
    if choice is not None:   # (workspace: each output tile's slices, TILE_M x bn fp32 sums each)
        splits, per_split = choice[2:]
        split = (tiles * splits * BM * mi * bn, tiles, grid, args)
        grid, args = (min(tiles * splits, sm_count()),), arguments(splits, per_split)
    smem = smem_bytes(bn, staged, mi)
    plan = (kernel, grid, smem, recipe_a, recipe_b, recipe_c, args, split)
    launch_plan(plan, a_ptr, b_ptr, c_ptr, bias_ptr)
    if not keep:   # (a launch that read copies made here needs them made again: no plan)
        _launches[key] = last_plan = plan
        if len(_launches) > _LAUNCH_CACHE_SIZE:
            _launches.popitem(last=False)
    return True


def tma_data_type(dtype) -> str:
    """The tensor maps' element type: float16 / bfloat16 as they are; float32 as TF32 data
    (_common.tf32_tma_type, "tfloat32" by default: see gpu_gemm_tc.md for what the copy engine does with it)."""
    dtype = np.dtype(dtype)
    return _common.tf32_tma_type if dtype == np.float32 else _TMA_TYPE_OF[dtype]
