"""Launcher of the persistent RNN algorithm (kernels/rnn_persistent.cu): one launch per layer runs every
time step of both directions, with the recurrent weights held in shared memory for the whole sequence.

The standard algorithm (minidl/primitives/cuda/rnn.py) launches, per step, a recurrent GEMM and a fused
cell; the persistent one replaces that step loop and nothing else: the input projection of all steps
before it and the weight-gradient GEMMs after it are the same calls, and the records it leaves for the
backward pass (hs, cs, the saved gates) have the same layout, so a forward pass of one algorithm can be
followed by the backward pass of the other.

`plan(mode, B, H, D)` says whether a problem fits, and how it is split: CTA c of a direction owns
hidden units c*U ... c*U + U - 1, with U the smallest count that keeps the grid (D * ceil(H / U) CTAs) at
one CTA per SM, because the kernel's grid-wide barrier needs every CTA resident at once (forward and
backward choose their counts apart: `UNITS` forces them). What must fit in one CTA's shared memory: forward, the G*U rows of W_hh for its units (G*U x H floats); backward, its
U columns of W_hh (U x G*H floats); each plus a ring of 3 staging buffers for the exchanged state
(3 x B x 136 floats, B rounded up to 16), 16 KB for partial sums and a few floats per unit and batch
row. The product runs on the tensor cores: 3xTF32 for math="fp32" (fp32 accuracy), TF32 for "tf32",
bfloat16 for "bf16" (kernel_math; in bf16 the CTAs also exchange each step's state (forward) and gate gradients
(backward) as bfloat16, rounded once by the cell that makes them: the bits the product used to round, half the
bytes staged, in chunks twice as wide). Past
that, `plan` says why and the
standard algorithm runs (RNNDescriptor algo="auto"). Where the limit falls on this GPU, by hidden size
and batch, is the table benchmarks/bench_gpu_rnn.py prints from `plan`.

The partial-sum backward (`Plan.partial`, `use_partial`): each CTA keeps the forward's G*U rows of W_hh instead of
U columns, multiplies its own gate gradients by them, and the CTAs sum each other's partial dh for their units (two
slots of CTAs x B x H floats, laid out by reader). A CTA writes and reads B x H floats a step where the staged backward
reads B x G*H: half the L2 traffic for the LSTM in fp32 and TF32, the same as bf16's staged exchange
(benchmarks/bench_rnn_backward.py).

The wavefront (`wave_plan`, `forward_wave`, `backward_wave`): two stacked layers of one direction in one launch, half
the SMs each: forward, the lower layer's CTAs also project the upper layer's input (they stage its input, their own
state, anyway), and the upper layer's step t runs beside the lower layer's step t + 2; backward, the other way round:
the upper layer's CTAs also project the lower layer's dy from the gate gradients they stage (LSTM, RNN; the GRU's lower
layer adds the upper layer's input gradient in its own product). Measured A/B by benchmarks/bench_rnn_wavefront.py and
in benchmarks/results/gpu_rnn.md.

Batch groups (`batch_groups`, `forward_groups`, `Pass.groups`): the recurrence of a batch row reads no other row, so a
launch can split the batch between independent groups of CTAs, each with 1 / groups of the SMs, its own rows of every
array and its own barrier counters, for groups times the units a CTA. A CTA then stages (or gathers) 1 / groups of the
exchanged state a step, which is most of a backward step: 8-46% faster backward passes from batch 32 (fp32 and
TF32 20-46%; the docstring of batch_groups has the table). The forward gains less (its 256-thread compile only:
forward_groups).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import cupy
import numpy as np

from ._compile import get_kernel
from ._launch import function_pointer, sm_count

PT = 512                # threads per CTA (kernels/rnn_persistent.cu: PT; PT // 2 for the wavefront's bf16 backward:
                        # backward_threads)
PKCP = 128 + 8          # a row of a staged chunk of the exchanged state (PKCP)
NBUF = 3                # chunk buffers in the ring (NBUF)
RED_FLOATS = 4096       # the partial-sum buffer (RED)
MAX_TILES = 32          # 16 x 8 output tiles per CTA (block_product's KS x BP x RP partial sums <= RED)
BACKWARD_OPS = 7        # the cell operands fetched per unit in backward (at most: LSTM's NOPS)
FLOAT_BYTES = 4
# Tests and benchmarks set this to force the hidden units per CTA: an int for both passes, or a pair
# (forward, backward). None: plan picks the smallest count that fits the SMs.
UNITS = None
UNITS_WAVE = None       # the same for the wavefront (wave_plan)
# Two stacked layers of one direction in one launch, forward and backward (wave_plan): "auto" where it measured faster,
# True wherever it fits (tests), False never.
WAVEFRONT = "auto"
GATES = {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}
EXCHANGE_BF16 = True    # bf16: stage each step's state (forward) and gate gradients (backward) as bfloat16 (False: fp32)
# The partial-sum backward (kernels/rnn_persistent.cu, persistent_backward_partial): each CTA multiplies its own gate
# gradients by its own rows of W_hh and the CTAs sum each other's partial dh, instead of each CTA staging every CTA's
# gate gradients. It runs where it fits (Plan.partial) and use_partial says so: "auto" where it measured faster, True
# always, False never.
PARTIAL_BACKWARD = "auto"
# Batch groups (batch_groups): "auto" where it measured faster, an int to force that many groups wherever they fit;
# BATCH_GROUPS_FORWARD likewise for the forward (forward_groups), which runs them in the 256-thread compile.
BATCH_GROUPS = "auto"
BATCH_GROUPS_FORWARD = "auto"
# The wavefront's backward with 256 threads a CTA instead of 512 (backward_threads): "auto" where it measured faster,
# True wherever the wavefront runs (tests), False never.
HALF_CTA_WAVE_BACKWARD = "auto"
KERNELS = {"rnn_tanh": ("rnn_persistent_forward", "rnn_persistent_backward"),
           "rnn_relu": ("rnn_persistent_forward", "rnn_persistent_backward"),
           "lstm": ("lstm_persistent_forward", "lstm_persistent_backward"),
           "gru": ("gru_persistent_forward", "gru_persistent_backward")}


class Pass(NamedTuple):
    """One persistent launch of a layer: `units` hidden units per CTA, `blocks` CTAs in all (both
    directions, every batch group), `smem` bytes of dynamic shared memory, `groups` batch groups (batch_groups)."""

    units: int
    blocks: int
    smem: int
    groups: int = 1


class Plan(NamedTuple):
    """The forward's launch, the staged backward's, and the partial-sum backward's where it fits (else None)."""

    forward: Pass
    backward: Pass
    partial: Pass | None = None


def _round(x: int, m: int) -> int:
    return (x + m - 1) // m * m


# Static shared memory the kernels declare beside the dynamic (the backward's DirBackward, 120 bytes; the trace's marks,
# 128): a CTA's dynamic shared memory may be the device's limit less this (where a plan asked for exactly the limit,
# the launch would fail).
STATIC_SMEM_BYTES = 512


@functools.lru_cache(maxsize=None)
def _smem_limit(device_id: int) -> int:
    return cupy.cuda.Device(device_id).attributes["MaxSharedMemoryPerBlockOptin"] - STATIC_SMEM_BYTES


def smem_bytes(mode: str, B: int, H: int, units: int, backward: bool, math: str = "fp32",
               input_columns: int = 0, partial: bool = False, project: bool = False) -> int:
    """Dynamic shared memory of a CTA owning `units` hidden units (the layout in rnn_persistent.cu). bf16 keeps W
    as halves; input_columns: the backward wavefront's lower layer (GRU), whose W columns also hold the upper layer's
    W_ih (G*H more); project: the forward wavefront's lower layer, whose W rows also hold the upper layer's W_ih rows
    of its units, or the backward wavefront's upper layer (LSTM, RNN), whose W rows also hold its W_ih's columns for
    its units (twice the rows either way); partial: the
    partial-sum backward (W_hh's G*U rows transposed, H x (G*U rounded up to 16, + 8), and one buffer of the ring)."""
    G = GATES[mode]
    if partial:
        w = _round(H, 8) * (_round(G * units, 16) + 8)
        rest = _round(B, 16) * PKCP + RED_FLOATS + (2 + BACKWARD_OPS) * B * units
        return ((w // 2 if math == "bf16" else w) + rest) * FLOAT_BYTES
    ring = NBUF * _round(B, 16) * PKCP + RED_FLOATS
    if backward:   # (the wavefront's lower layer: input_columns = G*H, the upper layer's W_ih columns)
        w = (2 if project else 1) * _round(units, 8) * (
            _round(_round(G * H, 16) + input_columns if input_columns else G * H, 8) + 8)
        rest = (2 + BACKWARD_OPS) * B * units
    else:
        w = _round((2 if project else 1) * G * units, 8) * (_round(H, 8) + 8)
        rest = (G + 2) * B * units + 2 * G * units   # (gx, h, c; the biases of the CTA's gates)
    return ((w // 2 if math == "bf16" else w) + ring + rest) * FLOAT_BYTES


def _group_rows(B: int, groups: int):
    """The batch rows of each of `groups` batch groups (the kernels' Bg = ceil(B / groups)), or None where the
    last group would have none."""
    rows = -(-B // groups)
    return rows if groups >= 1 and (groups - 1) * rows < B else None


def _pass(mode, B, H, D, units, backward, partial=False, groups=1):
    sms = sm_count()
    # The fewest units per CTA that keep one CTA per SM. (Backward's mma tiles are 8 columns of W_hh wide,
    # so 4 units leave half of each empty; yet 8 units, in half the CTAs, measured slower: 31 vs 29 us per
    # step, LSTM 512, batch 64, H200.) With batch groups each group gets 1 / groups of the SMs.
    rows = _group_rows(B, groups)
    if rows is None:
        return None, f"batch {B} cannot be split between {groups} groups"
    B = rows   # (what one CTA holds: its group's rows)
    units = units or -(-H // max(1, sms // (D * groups)))
    per_direction = -(-H // units)
    if groups * D * per_direction > sms:
        return None, (f"{groups * D * per_direction} CTAs (units={units}) would not all be resident on {sms} SMs, "
                      "which the grid-wide barrier needs")
    if partial:
        if not partial_applies(B, H, units):
            return None, "units % 4, hidden % 8 or hidden % units is not 0"
        smem = smem_bytes(mode, B, H, units, True, partial=True)
        if smem > _smem_limit(cupy.cuda.runtime.getDevice()):
            return None, f"{smem // 1024} KB of shared memory"
        return Pass(units, groups * D * per_direction, smem, groups), None
    rows = units if backward else GATES[mode] * units
    if (_round(B, 16) // 16) * (_round(rows, 8) // 8) > MAX_TILES:
        return None, (f"batch {B} x {rows} rows of W_hh per CTA is more than the {MAX_TILES} mma tiles (16 x 8) "
                      "one CTA holds")
    smem = smem_bytes(mode, B, H, units, backward)
    limit = _smem_limit(cupy.cuda.runtime.getDevice())
    if smem > limit:
        return None, (f"the {'columns' if backward else 'rows'} of W_hh for {units} hidden units ({mode}, "
                      f"hidden_size {H}, batch {B}) need {smem // 1024} KB of shared memory per CTA; this GPU "
                      f"has {limit // 1024} KB")
    return Pass(units, groups * D * per_direction, smem, groups), None


def partial_applies(B: int, H: int, units: int) -> bool:
    """Whether the partial-sum backward can run: its gather reads runs of 4 units (16 bytes), its product writes
    tiles of 8 units, every CTA owns the same count, and the gather's sums fit the partial-sum buffer."""
    return units % 4 == 0 and H % 8 == 0 and H % units == 0 and B * units <= RED_FLOATS


def use_partial(mode: str, B: int, math: str) -> bool:
    """Whether the backward runs by partial sums where it fits (PARTIAL_BACKWARD). "auto": the LSTM and the GRU, in
    bf16 up to batch 32. Measured per step of one 512 layer (H200, benchmarks/results/gpu_rnn.md): LSTM B32 7.9 / 7.4
    / 7.6 us against the staged 16.6 / 15.2 / 9.9 (fp32 / TF32 / bf16), B64 15.0 / 12.7 / 12.8 against 24.0 / 20.3 /
    12.8. The vanilla RNN's staged backward reads B x H floats a CTA, what the partials would write and read again:
    there it measured slower (1.1-1.8x)."""
    if PARTIAL_BACKWARD == "auto":
        return GATES[mode] > 1 and (math != "bf16" or B <= 32)
    return bool(PARTIAL_BACKWARD)


def plan(mode: str, B: int, H: int, D: int, units=None):
    """(Plan, None) when the persistent kernels can run this layer shape, else (None, the reason).

    units: force the hidden units per CTA, an int or a (forward, backward) pair (benchmarks); None picks
    the smallest that fits the SMs."""
    units = units or UNITS
    forward_units, backward_units = units if isinstance(units, tuple) else (units, units)
    forward, reason = _pass(mode, B, H, D, forward_units, False)
    if forward is None:
        return None, reason
    backward, reason = _pass(mode, B, H, D, backward_units, True)
    if backward is None:
        return None, reason
    return Plan(forward, backward, _pass(mode, B, H, D, backward_units, True, partial=True)[0]), None


def wave_plan(mode: str, B: int, H: int, math: str, units=None, backward: bool = False):
    """(Pass, None) when two stacked layers of one direction can run their forward (or backward) passes in one launch
    (the wavefront: forward, CTAs 0 .. S-1 run layer l and S .. 2S-1 layer l + 1, step t of the upper layer beside
    step t + 2 of the lower one; backward, the other way round), else (None, why not). Forward, the lower layer's
    CTAs multiply the state they stage at step s, h[s - 1] = its y[s - 1], by their units' rows of W_hh and of the
    upper layer's W_ih, and write the upper layer's gates_x[s - 1]: the upper layer's input projection is no GEMM of
    its own, and its step is a single layer's (kernels/rnn_persistent.cu, DirForward::gx_up). Backward (LSTM, RNN),
    the upper layer's CTAs multiply the gate gradients they stage by their units' columns of W_hh and of its W_ih,
    and write the lower layer's dy (DirBackward::dy_low); the GRU's lower layer multiplies [dgates_h | the upper
    layer's dgates_x at t] by [W_hh; W_ih of the layer above]. Either way the upper layer's input gradient is no GEMM
    of its own.

    "auto" takes the forward wavefront wherever it fits: measured (2x512, T35, H200, the forward alone replayed from a
    CUDA graph, ms, one launch per layer -> wavefront, benchmarks/results/gpu_rnn.md session 22): LSTM bf16 B32 0.48
    -> 0.35, TF32 B32 0.58 -> 0.49, fp32 B32 0.83 -> 0.72, GRU bf16 B32 0.44 -> 0.32, TF32 B64 0.72 -> 0.67, fp32 B64
    1.11 -> 1.04; it ties on the LSTM's TF32 and fp32 B64 rows (0.79 / 0.79, 1.19 / 1.19). The backward's policy
    follows."""
    if not WAVEFRONT:
        return None, "rnn_persistent.WAVEFRONT is off"
    if WAVEFRONT == "auto" and backward and mode == "gru" and math == "bf16":
        # each layer gets half the SMs and the lower layer's product doubles; measured (2x512, T35, H200): the GRU's
        # bf16 backward 0.804 -> 0.780 ms at B32, 1.042 -> 1.073 at B64, where every other case gained 5-65%
        return None, "the GRU's bf16 backward measured no faster as a wavefront"
    if WAVEFRONT == "auto" and backward and (math == "fp32" or (mode == "lstm" and math == "tf32")) \
            and use_partial(mode, B, math):
        # the wavefront's backward stages every CTA's gate gradients; measured (2x512, T35, B32, H200), ms, wavefront
        # against partial sums one layer at a time: LSTM fp32 1.538 / 1.086, TF32 1.227 / 0.800, bf16 0.755 / 0.754;
        # GRU fp32 1.219 / 1.036, TF32 1.133 / 1.459, bf16 0.957 / 0.871 (but "auto" keeps the GRU's bf16 backward off
        # the wavefront, above)
        one_layer = plan(mode, B, H, 1)[0]
        if one_layer is not None and one_layer.partial is not None:
            return None, "the partial-sum backward, one launch per layer, measured faster"
    if WAVEFRONT == "auto" and backward and mode == "gru" and batch_groups(B, wave=True) == 1 < batch_groups(B) \
            and _capturing():
        # the per-layer backward splits the batch into groups of 16 rows, the wavefront only into groups of 32 (below);
        # measured (2x512, T35, H200, backward kernel ms, wavefront / per layer, benchmarks/results/gpu_rnn.md session
        # 21): GRU TF32 B32 0.818 / 0.573. Only in a CUDA graph, where the kernels' time is all there is: eagerly these
        # shapes are host-bound, and the per-layer backward's second launch and input-gradient GEMM cost more host time
        # than its kernels save (GRU TF32 T35 B32 eager fwd+bwd 2.27 and 2.57 ms per layer against 1.75 with the
        # wavefront, bench_gpu_rnn.py). (The LSTM's wavefront, whose upper layer projects the lower layer's dy, beats its
        # per-layer groups: bf16 B32 fwd+bwd graphed 0.93 against 0.97 ms, session 22.)
        return None, "in a CUDA graph the per-layer backward in batch groups measured faster (batch 32 .. 63)"
    groups = batch_groups(B, wave=True) if backward else forward_groups(mode, B, math)
    return _fewest_halvings(groups, lambda g: _wave_pass(mode, B, H, math, units, backward, g))


def _fewest_halvings(groups: int, make):
    """make(g) -> (Pass or None, reason) for g = groups, groups // 2, ..., 1: the first that fits (where a group's
    units do not fit, half as many groups), else the one group's (None, reason)."""
    while True:
        launch, reason = make(groups)
        if launch is not None or groups <= 1:
            return launch, reason
        groups //= 2


def _capturing() -> bool:
    """Whether the current stream is being captured into a CUDA graph (where only the kernels' time counts)."""
    return cupy.cuda.get_current_stream().is_capturing()


def _upper_projects_dy(mode: str) -> bool:
    """Whether the backward wavefront's upper layer writes the lower layer's dy (DirBackward::dy_low): where its
    dgates_x is its dgates_h, the operand it stages anyway (LSTM, RNN; not the GRU, whose n gate r scales)."""
    return mode != "gru"


def _wave_pass(mode, B, H, math, units, backward, groups):
    """wave_plan's Pass for `groups` batch groups, or (None, why it does not fit)."""
    sms = sm_count()
    rows = _group_rows(B, groups)
    if rows is None:
        return None, f"batch {B} cannot be split between {groups} groups"
    B = rows   # (what one CTA holds: its group's rows)
    units = units or UNITS_WAVE or -(-H // max(1, sms // (2 * groups)))
    per_layer = -(-H // units)
    if 2 * groups * per_layer > sms:
        return None, (f"two layers of {per_layer} CTAs (units={units}) in {groups} batch group(s) would not all be "
                      f"resident on {sms} SMs")
    # forward: the lower layer holds the upper layer's W_ih rows too; backward, LSTM and RNN: the upper layer its W_ih
    # columns (projects), GRU: the lower layer the upper layer's W_ih columns (input_columns)
    project = not backward or _upper_projects_dy(mode)
    rows = (2 * _round(units, 8) if project else units) if backward else 2 * GATES[mode] * units
    if (_round(B, 16) // 16) * (_round(rows, 8) // 8) > MAX_TILES:
        return None, f"batch {B} x {rows} rows per CTA is more than the {MAX_TILES} mma tiles"
    smem = smem_bytes(mode, B, H, units, backward, math,
                      input_columns=GATES[mode] * H if backward and not project else 0, project=project)
    limit = _smem_limit(cupy.cuda.runtime.getDevice())
    if smem > limit:
        what = ("upper layer's columns of W_hh and W_ih" if project else "lower layer's columns of [W_hh; W_ih above]") \
            if backward else "lower layer's rows of W_hh and W_ih above"
        return None, (f"the {what} for {units} hidden units need {smem // 1024} KB of shared memory per CTA ({math}, "
                      f"batch {B}); this GPU has {limit // 1024} KB")
    return Pass(units, 2 * groups * per_layer, smem, groups), None


def batch_groups(B: int, wave: bool = False) -> int:
    """How many independent groups of CTAs a backward launch splits the batch between (the backward kernels' `nb`:
    each group runs its rows with the same weights on 1 / groups of the SMs, so a CTA stages or gathers 1 / groups
    of the gate gradients a step, for groups times the units; the forward's count is forward_groups'). Where a group's
    units do not fit (shared memory, mma tiles), the launchers halve it until they do (_fewest_halvings).

    BATCH_GROUPS "auto": groups of at least 16 rows (one mma row tile; the wavefront: 32), at most 4. Measured (2x512,
    T35, H200, the backward pass's kernel time, ms, the kernels before groups against "auto", alternating in one call;
    benchmarks/trace_rnn_persistent.py, benchmarks/results/gpu_rnn.md session 21): the partial-sum backward LSTM fp32
    B32 0.693 -> 0.554 (2 groups), B64 1.145 -> 0.743 (4); GRU fp32 0.687 -> 0.550, 1.149 -> 0.648; LSTM TF32 0.629 ->
    0.490, 1.021 -> 0.620; GRU TF32 B64 1.024 -> 0.555; GRU bf16 B32 0.626 -> 0.504; the staged backward GRU bf16 B64
    0.838 -> 0.675; the wavefront LSTM bf16 B64 0.813 -> 0.750 (2 groups; 4 do not fit), bidirectional LSTM bf16 B64
    1.012 -> 0.927, fp32 1.501 -> 1.212. The wavefront at B32 with 2 groups of 16 rows: 0.581 -> 0.592 (slower; hence
    32 rows there); groups of 8 rows lose too (LSTM fp32 B32: 0.561 with 2 groups, 0.720 with 4). An int: that many
    groups wherever they fit."""
    if BATCH_GROUPS != "auto":
        return _forced_groups("BATCH_GROUPS", BATCH_GROUPS)
    return max(1, min(4, B // (32 if wave else 16)))


def _forced_groups(name: str, value) -> int:
    """A forced group count (BATCH_GROUPS, BATCH_GROUPS_FORWARD): an int >= 1, or a ValueError that says so."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"rnn_persistent.{name} must be 'auto' or a number of batch groups >= 1, got {value!r}")
    return value


def forward_groups(mode: str, B: int, math: str) -> int:
    """batch_groups for a forward launch. The forward kernels run groups only in their 256-thread compile
    (kernels/rnn_persistent.cu, FORWARD_GROUPS: with 16 warps the group's offsets spill). BATCH_GROUPS_FORWARD "auto":
    2 groups for the GRU in bf16 from batch 64, else one. Measured (2x512, T35, H200, the forward pass's kernel time,
    ms: the 512-thread forward against 2 and 4 groups, benchmarks/trace_rnn_persistent.py --forward-groups,
    benchmarks/results/gpu_rnn.md session 21): GRU bf16 B64 0.589 / 0.544 / 0.560, B32 0.509 / 0.452 / 0.568; but
    slower everywhere else, e.g. LSTM bf16 B32 (the wavefront) 0.456 / 0.558 / 0.530, LSTM TF32 B64 0.766 / 0.889 /
    0.914, GRU fp32 B64 0.861 / 0.947 / 0.974: the forward's product is not held up by its staging as the backward's
    is, and 8 warps do its tiles more slowly. An int: that many groups wherever they fit."""
    if BATCH_GROUPS_FORWARD != "auto":
        return _forced_groups("BATCH_GROUPS_FORWARD", BATCH_GROUPS_FORWARD)
    return 2 if mode == "gru" and math == "bf16" and B >= 64 else 1


def _grouped(launch: Pass, mode, B, H, D, math, partial=False, backward=True) -> Pass:
    """A plan's one-group Pass split into batch_groups' (forward_groups') groups, halved until they fit (else
    `launch`)."""
    groups = batch_groups(B) if backward else forward_groups(mode, B, math)
    if groups == 1 or launch.groups != 1:
        return launch
    forced = UNITS[int(backward)] if isinstance(UNITS, tuple) else UNITS
    grouped, _ = _fewest_halvings(groups, lambda g: _pass(mode, B, H, D, forced, backward, partial=partial, groups=g))
    return grouped or launch


def kernel_math(math: str) -> int:
    """The kernel's `math` argument: 0 fp32 (3xTF32), 1 TF32, 2 bf16."""
    return {"fp32": 0, "tf32": 1, "bf16": 2}[math]


def backward_threads(B: int, math: str, wave: bool) -> int:
    """Threads a CTA of the backward kernel runs (the kernel's PT: 512, or PT // 2 = 256 from a second compile of
    kernels/rnn_persistent.cu with -DPERSIST_PT=256). HALF_CTA_WAVE_BACKWARD ("auto"): 256 for the wavefront's backward
    in bf16 up to batch 16 (one mma row tile): there a step's product waits on its staging (L2) whatever the warp count,
    while its fixed work (the step's index arithmetic, the sum of the k slices: fewer with fewer warps) takes half the
    time with 8 warps (trace: 0.63 -> 0.32 us to the product's first __syncthreads, 0.35 -> 0.19 us for the slices'
    sum). The first such launch compiles the file's second variant (NVRTC, once, then cached).
    Measured (2x512 LSTM, T35, bf16, H200, the backward pass's kernel time, benchmarks/trace_rnn_persistent.py
    --half-cta-wave-backward on/off --spin-us 3000, two rounds alternating in one call; benchmarks/results/gpu_rnn.md,
    session 24): B16 0.384 / 0.383 ms with 256 threads against 0.399 / 0.400 with 512; B32 0.483 / 0.484 against
    **0.459 / 0.460**. Session 20 had measured 256 faster at B32 too (0.573-0.580 against 0.610-0.659), when the
    backward's step loop was inlined and spilled at 512 threads; since it is a called function (session 23) 512 spills
    nothing and wins there. Elsewhere 256 measured no faster or slower: bf16 B64 0.846 against 0.847; fp32 B64 1.51
    against 1.15 (and the partial-sum backward, which this leaves at 512). True: 256 wherever the wavefront runs
    (tests), False: never."""
    if HALF_CTA_WAVE_BACKWARD == "auto":
        return PT // 2 if wave and math == "bf16" and B <= 16 else PT
    return PT // 2 if wave and HALF_CTA_WAVE_BACKWARD else PT


def _options(threads: int) -> tuple:
    """The compile options of the kernels that run `threads` a CTA."""
    return () if threads == PT else (f"-DPERSIST_PT={threads}",)


def _function(name: str, smem: int, options: tuple = ()):
    """The CUfunction pointer of a persistent kernel, allowed `smem` bytes of dynamic shared memory."""
    kernel = get_kernel("rnn_persistent", name, options)
    if kernel.max_dynamic_shared_size_bytes < smem:
        kernel.max_dynamic_shared_size_bytes = smem   # (on the RawKernel, through the wrappers)
    return function_pointer(kernel)


def _launch(name: str, blocks: int, smem: int, args: list, threads: int = PT) -> None:
    """Launch with each argument given as a tuple of 8-byte words (a struct of pointers is several words;
    an int is read from its word's low 4 bytes: x86 and Arm are little-endian), packed in one buffer as
    cuLaunchKernel wants them: an array of pointers, one per argument, to the argument's bytes. `threads`: the CTA
    size, which picks the compile of the kernels (_options)."""
    words = [np.asarray(a, dtype=np.uint64).ravel() for a in args]
    buffer = np.concatenate(words)
    starts = np.cumsum([0] + [len(w) for w in words[:-1]])
    params = (buffer.ctypes.data + 8 * starts).astype(np.uint64)
    function = _function(name, smem, _options(threads))
    cupy.cuda.driver.launchKernel(function, blocks, 1, 1, threads, 1, 1, smem, cupy.cuda.get_current_stream().ptr,
                                  params.ctypes.data, 0)


def _ptr(a) -> int:
    return 0 if a is None else a.data.ptr


def _forward_struct(run, y, column, exchange, above=None):
    """DirForward's words (kernels/rnn_persistent.cu) for one run (rnn.py's _ForwardDirection); `above`: the
    wavefront's upper layer's run, whose gates_x this (lower) layer's product writes."""
    return (_ptr(run.gates_x), _ptr(run.w_hh), _ptr(run.b_ih), _ptr(run.b_hh), _ptr(run.hs), _ptr(run.cs),
            _ptr(run.gates), _ptr(y) + column * FLOAT_BYTES, _ptr(exchange), 2,
            0 if above is None else _ptr(above.w_ih), 0 if above is None else _ptr(above.gates_x))


def _exchange(math, B, width):
    """bf16: the CTAs stage each step's state (forward, width H: DirForward::xchg) or dgates_h (backward, width G*H:
    DirBackward::xchg) as bfloat16, two slots of (B, width): the product rounds it to bfloat16 anyway, and staging it
    is half a step's memory traffic. None in other maths."""
    return cupy.ndarray(2 * B * width, dtype=cupy.uint16) if math == "bf16" and EXCHANGE_BF16 else None


def _launch_forward(mode, launch, structs, lengths, T, B, H, D, math, wave):
    # one counter per direction (per layer in a wavefront) and batch group; batch groups run the 256-thread compile
    barrier = cupy.zeros(2 * launch.groups, dtype=cupy.uint32)
    args = structs + [_ptr(lengths), T, B, H, launch.units, D * H, int(mode == "rnn_relu"), kernel_math(math), wave,
                      launch.groups, _ptr(barrier)]
    _launch(KERNELS[mode][0], launch.blocks, launch.smem, args, PT // 2 if launch.groups > 1 else PT)


def forward(mode, the_plan, directions, y, lengths, T, B, H, math="fp32"):
    """Run the step loops of one layer's directions (rnn.py's _ForwardDirection objects: gates_x filled,
    hs/cs holding the initial state) in one launch. y (T, B, D*H) gets every direction's columns."""
    D = len(directions)
    exchange = [_exchange(math, B, H) for _ in directions]   # (alive until the launch is queued)
    structs = [_forward_struct(run, y, d * H, exchange[d]) for d, run in enumerate(directions)]
    if D == 1:
        structs.append((0,) * 12)
    launch = _grouped(the_plan.forward, mode, B, H, D, math, backward=False)
    _launch_forward(mode, launch, structs, lengths, T, B, H, D, math, 0)


def forward_wave(mode, launch, lower, upper, y_lower, y_upper, lengths, T, B, H, math="fp32"):
    """The forward passes of two stacked layers of one direction in one launch (wave_plan's Pass): `lower` as
    forward() runs it, whose CTAs also multiply the state they stage at step s (h[s - 1] = y_lower[s - 1]) by the
    upper layer's W_ih rows of their units and write upper.gates_x[s - 1] (upper.gates_x allocated, not computed; its
    w_ih set); `upper` as forward() runs it, reading its gates_x[t] once every CTA of the lower layer is past step
    t + 1. (A padded batch's y is 0 past a sequence's end where the state is not; the upper layer's cell ignores its
    gates there.)"""
    low_exchange, up_exchange = _exchange(math, B, H), _exchange(math, B, H)   # (alive until queued)
    structs = [_forward_struct(lower, y_lower, 0, low_exchange, above=upper),
               _forward_struct(upper, y_upper, 0, up_exchange)]
    _launch_forward(mode, launch, structs, lengths, T, B, H, 1, math, 1)


BACKWARD_PART_WORD = 13   # the index of DirBackward::part among _backward_struct's words (benchmarks read it)


def _backward_struct(run, dout, column, dh, dc, exchange, above=None, part=None, dy_low=None):
    """DirBackward's words (kernels/rnn_persistent.cu) for one run (rnn.py's _BackwardDirection); `above`: the
    wavefront's upper layer's run, whose input gradient this (lower) layer's product adds (GRU); `part`: the
    partial-sum backward's two slots of every CTA's partial dh; `dy_low`: the wavefront's lower layer's dy, which
    this (upper) layer's product writes with its own W_ih (LSTM, RNN)."""
    hs, cs, saved = run.record
    dy = 0 if dout is None else _ptr(dout) + column * FLOAT_BYTES
    w_ih = _ptr(above.w_ih) if above is not None else (_ptr(run.w_ih) if dy_low is not None else 0)
    return (_ptr(run.w_hh), _ptr(hs), _ptr(cs), _ptr(saved), dy, _ptr(run.dgates_x), _ptr(run.dgates_h), _ptr(dh),
            _ptr(dc), _ptr(exchange), 2, w_ih, 0 if above is None else _ptr(above.dgates_x), _ptr(part),
            _ptr(dy_low))


def _launch_backward(mode, launch, structs, lengths, T, B, H, D, math, wave):
    barrier = cupy.zeros(2 * launch.groups, dtype=cupy.uint32)
    args = structs + [_ptr(lengths), T, B, H, launch.units, D * H, int(mode == "rnn_relu"), kernel_math(math), wave,
                      launch.groups, _ptr(barrier)]
    _launch(KERNELS[mode][1], launch.blocks, launch.smem, args, backward_threads(B, math, bool(wave)))


def backward(mode, the_plan, directions, dout, lengths, dh, dc, T, B, H, math="fp32"):
    """BPTT of one layer's directions (rnn.py's _BackwardDirection objects, holding dgates_x/dgates_h and
    their records) in one launch. dh, dc: lists of the (B, H) arrays holding dhy/dcy on entry and
    receiving dh0/dc0 (dc None unless LSTM)."""
    D = len(directions)
    partial = the_plan.partial is not None and use_partial(mode, B, math)
    launch = _grouped(the_plan.partial if partial else the_plan.backward, mode, B, H, D, math, partial)
    if partial:   # two slots of (CTAs, rows, H) partial sums per direction and batch group; no exchange
        per_direction = launch.blocks // (D * launch.groups)
        size = launch.groups * 2 * per_direction * _group_rows(B, launch.groups) * H
        part = [cupy.ndarray(size, dtype=cupy.float32) for _ in directions]
        exchange = [None] * D
    else:
        part = [None] * D
        exchange = [_exchange(math, B, GATES[mode] * H) for _ in directions]   # (alive until the launch is queued)
    structs = [_backward_struct(run, dout, d * H, dh[d], dc[d], exchange[d], part=part[d])
               for d, run in enumerate(directions)]
    if D == 1:
        structs.append((0,) * 15)
    _launch_backward(mode, launch, structs, lengths, T, B, H, D, math, 0)


def backward_wave(mode, launch, upper, lower, dout, lengths, dh, dc, T, B, H, math="fp32"):
    """BPTT of two stacked layers of one direction in one launch (wave_plan(..., backward=True)): `upper` (layer l+1,
    its w_ih set) as backward() runs it with dout; `lower` (layer l) with the upper layer's input gradient as its dy.
    Where dgates_x is dgates_h (LSTM, RNN), the upper layer's CTAs multiply the dgates they stage at their step s (those
    of the step before, t = T - s) by their units' columns of its W_ih too and write the lower layer's dy[t], which the
    lower layer reads once every upper CTA is past step s: its step is then a single layer's. The GRU's upper layer
    stages dgates_h, not dgates_x: there the lower layer's product adds dgates_x[t] @ W_ih itself (its W holds the
    upper layer's W_ih columns too), once every upper CTA is past time t. dh, dc: [upper's, lower's]."""
    G = GATES[mode]
    up_exchange, low_exchange = _exchange(math, B, G * H), _exchange(math, B, G * H)   # (alive until queued)
    if _upper_projects_dy(mode):
        dy_low = cupy.ndarray((T, B, H), dtype=cupy.float32)
        structs = [_backward_struct(upper, dout, 0, dh[0], dc[0], up_exchange, dy_low=dy_low),
                   _backward_struct(lower, dy_low, 0, dh[1], dc[1], low_exchange)]
    else:
        structs = [_backward_struct(upper, dout, 0, dh[0], dc[0], up_exchange),
                   _backward_struct(lower, None, 0, dh[1], dc[1], low_exchange, above=upper)]
    _launch_backward(mode, launch, structs, lengths, T, B, H, 1, math, 1)
