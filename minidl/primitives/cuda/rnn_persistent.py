"""Launcher of the persistent RNN algorithm (kernels/rnn_persistent.cu): one launch per layer runs every
time step of both directions, with the recurrent weights held in shared memory for the whole sequence.

The standard algorithm (minidl/primitives/cuda/rnn.py) launches, per step, a recurrent GEMM and a fused
cell; the persistent one replaces that step loop and nothing else: the input projection of all steps
before it and the weight-gradient GEMMs after it are the same calls, and the records it leaves for the
backward pass (hs, cs, the saved gates) have the same layout, so a forward pass of one algorithm can be
followed by the backward pass of the other.

`plan(mode, B, H, D)` says whether a problem fits, and how it is split: CTA c of a direction owns
hidden units c*U ... c*U + U - 1, with U the smallest count that keeps the grid (D * ceil(H / U) CTAs) at
one CTA per SM, because the kernel's grid-wide barrier needs every CTA resident at once. What must fit
in one CTA's shared memory: forward, the G*U rows of W_hh for its units (G*U x H floats); backward, its
U columns of W_hh (U x G*H floats); each plus a staging buffer for the exchanged state (B x 132 floats)
and 16 KB for partial sums. On an H100 (132 SMs, 227 KB per CTA) an LSTM fits up to H = 1024 for one
direction (U = 8: 128 KB of weights) and H = 768 for two; past that `plan` says why and the standard
algorithm runs.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import cupy
import numpy as np

from ._compile import get_kernel
from ._launch import sm_count

PT = 256                # threads per CTA (kernels/rnn_persistent.cu: PT)
PKCP = 128 + 4          # a staged row of the exchanged state (PKCP)
RED_FLOATS = 4096       # the partial-sum buffer
FLOAT_BYTES = 4
# Tests and benchmarks set this to force the hidden units per CTA (None: plan picks the smallest that fits).
UNITS = None
GATES = {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}
KERNELS = {"rnn_tanh": ("rnn_persistent_forward", "rnn_persistent_backward"),
           "rnn_relu": ("rnn_persistent_forward", "rnn_persistent_backward"),
           "lstm": ("lstm_persistent_forward", "lstm_persistent_backward"),
           "gru": ("gru_persistent_forward", "gru_persistent_backward")}


class Plan(NamedTuple):
    """How a persistent launch splits one layer: `units` hidden units per CTA, `blocks` CTAs in all
    (both directions), and the dynamic shared memory of the forward and backward kernels in bytes."""

    units: int
    blocks: int
    forward_smem: int
    backward_smem: int


def _round4(x: int) -> int:
    return (x + 3) // 4 * 4


@functools.lru_cache(maxsize=None)
def _smem_limit(device_id: int) -> int:
    return cupy.cuda.Device(device_id).attributes["MaxSharedMemoryPerBlockOptin"]


def smem_bytes(mode: str, B: int, H: int, units: int) -> tuple:
    """(forward, backward) dynamic shared memory of a CTA owning `units` hidden units."""
    G = GATES[mode]
    BP = _round4(B)
    forward = (_round4(G * units) * (H + 4) + BP * PKCP + RED_FLOATS) * FLOAT_BYTES
    backward = (_round4(units) * (G * H + 4) + BP * PKCP + RED_FLOATS + 2 * B * units) * FLOAT_BYTES
    return forward, backward


def plan(mode: str, B: int, H: int, D: int, units: int | None = None):
    """(Plan, None) when the persistent kernels can run this layer shape, else (None, the reason).

    units: force the hidden units per CTA (benchmarks); None picks the smallest that fits the SMs."""
    if H % 4:
        return None, f"hidden_size {H} is not a multiple of 4 (the kernel stages the state as float4)"
    sms = sm_count()
    units = units or UNITS or -(-H // (sms // D))
    per_direction = -(-H // units)
    if D * per_direction > sms:
        return None, (f"{D * per_direction} CTAs (units={units}) would not all be resident on {sms} SMs, "
                      "which the grid-wide barrier needs")
    G = GATES[mode]
    tiles_b = _round4(B) // 4
    if tiles_b * (_round4(G * units) // 4) > PT:
        return None, f"batch {B} is too large for one CTA's register tiles ({PT} threads x 4x4 outputs)"
    forward, backward = smem_bytes(mode, B, H, units)
    limit = _smem_limit(cupy.cuda.runtime.getDevice())
    if max(forward, backward) > limit:
        return None, (f"the weights of {units} hidden units ({mode}, hidden_size {H}, batch {B}) need "
                      f"{max(forward, backward) // 1024} KB of shared memory per CTA; this GPU has {limit // 1024} KB")
    return Plan(units, D * per_direction, forward, backward), None


def _function(name: str, smem: int):
    """The CUfunction pointer of a persistent kernel, allowed `smem` bytes of dynamic shared memory."""
    kernel = get_kernel("rnn_persistent", name)
    while not isinstance(kernel, cupy.RawKernel):  # the profiler's launch counter wraps it
        kernel = kernel.kernel
    if kernel.max_dynamic_shared_size_bytes < smem:
        kernel.max_dynamic_shared_size_bytes = smem
    return kernel.kernel.ptr


def _launch(name: str, blocks: int, smem: int, args: list) -> None:
    """Launch with each argument given as a tuple of 8-byte words (a struct of pointers is several words;
    an int is read from its word's low 4 bytes: x86 and Arm are little-endian), packed in one buffer as
    cuLaunchKernel wants them: an array of pointers, one per argument, to the argument's bytes."""
    words = [np.asarray(a, dtype=np.uint64).ravel() for a in args]
    buffer = np.concatenate(words)
    starts = np.cumsum([0] + [len(w) for w in words[:-1]])
    params = (buffer.ctypes.data + 8 * starts).astype(np.uint64)
    function = _function(name, smem)
    cupy.cuda.driver.launchKernel(function, blocks, 1, 1, PT, 1, 1, smem, cupy.cuda.get_current_stream().ptr,
                                  params.ctypes.data, 0)


def _ptr(a) -> int:
    return 0 if a is None else a.data.ptr


def forward(mode, the_plan, directions, y, lengths, T, B, H):
    """Run the step loops of one layer's directions (rnn.py's _ForwardDirection objects: gates_x filled,
    hs/cs holding the initial state) in one launch. y (T, B, D*H) gets every direction's columns."""
    D = len(directions)
    structs = []
    for d, run in enumerate(directions):
        structs.append((_ptr(run.gates_x), _ptr(run.w_hh), _ptr(run.b_ih), _ptr(run.b_hh), _ptr(run.hs),
                        _ptr(run.cs), _ptr(run.gates), _ptr(y) + d * H * FLOAT_BYTES))
    if D == 1:
        structs.append((0,) * 8)
    barrier = cupy.zeros(1, dtype=cupy.uint32)
    args = structs + [_ptr(lengths), T, B, H, the_plan.units, D * H, int(mode == "rnn_relu"), _ptr(barrier)]
    _launch(KERNELS[mode][0], the_plan.blocks, the_plan.forward_smem, args)


def backward(mode, the_plan, directions, dout, lengths, dh, dc, T, B, H):
    """BPTT of one layer's directions (rnn.py's _BackwardDirection objects, holding dgates_x/dgates_h and
    their records) in one launch. dh, dc: lists of the (B, H) arrays holding dhy/dcy on entry and
    receiving dh0/dc0 (dc None unless LSTM)."""
    D = len(directions)
    structs = []
    for d, run in enumerate(directions):
        hs, cs, saved = run.record
        dy = 0 if dout is None else _ptr(dout) + d * H * FLOAT_BYTES
        structs.append((_ptr(run.w_hh), _ptr(hs), _ptr(cs), _ptr(saved), dy, _ptr(run.dgates_x),
                        _ptr(run.dgates_h), _ptr(dh[d]), _ptr(dc[d])))
    if D == 1:
        structs.append((0,) * 9)
    barrier = cupy.zeros(1, dtype=cupy.uint32)
    args = structs + [_ptr(lengths), T, B, H, the_plan.units, D * H, int(mode == "rnn_relu"), _ptr(barrier)]
    _launch(KERNELS[mode][1], the_plan.blocks, the_plan.backward_smem, args)
