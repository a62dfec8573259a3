"""CuPy launcher of the RNN primitive (vanilla RNN, LSTM, GRU): cuBLAS GEMMs + the fused cells of kernels/rnn.cu.

The same structure as the NumPy reference (minidl/primitives/cpu/rnn.py), i.e. Appleyard et al.'s:

Forward, per layer and direction:
  1. ONE GEMM projects the inputs of all T steps: gates_x (T*B, G*H) = layer_input @ W_ih^T;
  2. per step, one recurrent GEMM gates_h (B, G*H) = h @ W_hh^T and ONE fused kernel
     (`lstm_cell_forward`, `gru_cell_forward`, `rnn_cell_forward`) that adds both biases, applies
     the gates, masks padded steps, and writes the new state, y[t] and what backward needs.
Backward, per layer (top down) and direction:
  1. per step, in the reverse of the forward order, one fused `*_cell_backward` kernel and one GEMM
     dh += dgates_h @ W_hh (accumulating onto what the kernel left in dh, see kernels/rnn.cu);
  2. then ONE GEMM each for dW_ih and dW_hh over all T*B rows, a column sum for each bias, and one
     GEMM per direction for the gradient of the layer's input.

GEMMs, math="fp32" (the default): cuBLAS sgemm (plain float32, no TF32), called directly through CuPy's thin cuBLAS binding on raw
device pointers. Not `cupy.matmul`, and not minidl's own GEMM: at these sizes (a 64 x 2048 x 512 GEMM
per step) the GPU work per step is a few microseconds, so the Python cost of each call matters as much
as the kernel; cupy.matmul spends several times longer in Python (shape checks, views, a new output
array) than the direct call, and the step loop must not allocate. For the same reason the step loop
works on raw pointers (base + t * step bytes) computed for all steps before it starts, and launches the
cell kernels through cuLaunchKernel with arguments packed in advance (`_PackedLaunches`): the first
version, with CuPy's RawKernel call and per-step pointer arithmetic in Python, spent ~46 us of host time
per step and ran at the speed of Python (LSTM 2x512, T64 B64 on an H200: fwd+bwd 1.84x cuDNN's time);
packed, fwd+bwd is on par with cuDNN (0.98x; GRU 1.09x). What host time is left is mostly cuBLAS's own per-call cost
(~14 us per sgemm in a profile): the next step would be a recurrent GEMM of our own, launched packed.
math="tf32" (minidl.backends.cudnn.allow_tf32, as torch does for cuDNN's RNNs): every GEMM runs on our
TF32 tensor-core kernel (gemm_tc of kernels/gemm_tc.cu) on the same raw pointers, launched through
CuPy's RawKernel call (not yet packed like the cells).

Everything stays on the device: the only host work in the step loop is launching. Bidirectional
layers run the two directions' step loops interleaved on two CUDA streams (the reverse direction on
a side stream), so their small GEMMs and cells overlap on the GPU (measured on the bidirectional LSTM
2x512: fwd 5.6 vs 8.1 ms, fwd+bwd 13.3 vs 16.6 ms); set USE_SIDE_STREAM = False to run both on the
current stream.

State storage (per layer and direction), indexed by time so backward can find everything:
  hs (T+1, B, H): for the forward direction hs[t] is the state entering step t and hs[t+1] the state
  leaving it; for the reverse direction hs[t+1] enters step t and hs[t] leaves it. So h0 sits at hs[0]
  (forward) or hs[T] (reverse), the final state at the other end, and the states entering the T steps
  (the rows of the dW_hh GEMM) are the contiguous block hs[0:T] or hs[1:T+1]. cs likewise (LSTM).
Arguments arrive checked by minidl/primitives/rnn.py; this module checks only that they are float32.
"""
from __future__ import annotations

import cupy
import numpy as np

from ._compile import get_kernel
from .. import _common
from ..._dtypes import bfloat16 as BFLOAT16
from ._launch import THREADS, function_pointer, grid_stride_blocks
from . import gemm_wgmma
from .cast import cast
from . import rnn_persistent
from .convolution import convolution_backward_bias_nhwc
from .gemm import gemm_tc, sgemm

try:  # CuPy >= 10 keeps its library bindings in cupy_backends
    from cupy_backends.cuda.libs import cublas
except ImportError:  # pragma: no cover - older CuPy
    from cupy.cuda import cublas

FLOAT_BYTES = 4
# cuBLAS enum values (cublas_api.h; part of its ABI).
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
CUBLAS_POINTER_MODE_HOST = 0

# Tests set POISON = True: every buffer the kernels and GEMMs are meant to fill then starts as NaN, so an
# element that nothing writes shows up as NaN in some output or gradient.
POISON = False
# Bidirectional layers: run the reverse direction on a second stream, concurrently with the forward one.
USE_SIDE_STREAM = True

# cuBLAS reads alpha and beta from host memory (pointer mode host); the arrays live as long as the module.
_ALPHA_ONE = np.ones(1, np.float32)
_BETA_ZERO = np.zeros(1, np.float32)
_BETA_ONE = np.ones(1, np.float32)
_ALPHA_ONE_PTR, _BETA_ZERO_PTR, _BETA_ONE_PTR = (a.ctypes.data for a in (_ALPHA_ONE, _BETA_ZERO, _BETA_ONE))
_side_streams: dict = {}


# ----------------------------------------------------------------------------------------------
# Small helpers
# ----------------------------------------------------------------------------------------------


def _empty(shape):
    if POISON:
        return cupy.full(shape, np.nan, dtype=cupy.float32)
    return cupy.ndarray(shape, dtype=cupy.float32)


def _as_float32(op, name, a):
    if a is None:
        return None
    if a.dtype != cupy.float32:
        raise TypeError(f"{op}: the CUDA RNN kernels are float32, but {name} has dtype {a.dtype}")
    return cupy.ascontiguousarray(a)


def _ptr(a) -> int:
    return 0 if a is None else a.data.ptr


# The fused cell kernels of kernels/rnn.cu per mode: (forward, backward); rnn_tanh and rnn_relu share
# one kernel pair, the nonlinearity is an argument.
CELL_KERNELS = {"rnn_tanh": ("rnn_cell_forward", "rnn_cell_backward"),
                "rnn_relu": ("rnn_cell_forward", "rnn_cell_backward"),
                "lstm": ("lstm_cell_forward", "lstm_cell_backward"),
                "gru": ("gru_cell_forward", "gru_cell_backward")}

def _side_stream():
    """(stream, cuBLAS handle) for the reverse direction. The handle is its own, not CuPy's: cuBLAS keeps
    one workspace per handle, so two GEMMs running at once on two streams must not share a handle."""
    device = cupy.cuda.Device().id
    if device not in _side_streams:
        handle = cublas.create()
        cublas.setPointerMode(handle, CUBLAS_POINTER_MODE_HOST)
        _side_streams[device] = (cupy.cuda.Stream(non_blocking=True), handle)
    return _side_streams[device]


# Split-K slices of at least this much K for our SGEMM here: a step's GEMM (B x 4H x H, e.g. 32 x 2048 x
# 512) has 16 output tiles for 132 SMs; split 4 ways it keeps 64 blocks busy (gemm.split_k_plan).
SGEMM_MIN_K_PER_SPLIT = 128


def _column_sums(a, columns):
    """a (..., columns) summed over every other axis, as float32 (T*B rows of gate gradients -> a bias gradient)."""
    return convolution_backward_bias_nhwc(a, columns, 1.0, 0.0, None)


def _gemm(c, a, b, m, n, k, *, trans_a=False, trans_b=False, accumulate=False, handle=None, math="fp32"):
    """Row-major C (m, n) = op(A) (m, k) @ op(B) (k, n) [+ C], on raw device pointers c, a, b.

    A is stored (m, k), or (k, m) when trans_a; B is stored (k, n), or (n, k) when trans_b; all three
    are contiguous. cuBLAS is column-major, and a row-major matrix is its transpose seen column-major,
    so we ask it for C^T = op(B)^T @ op(A)^T: swap the operands and the sizes m and n.
    `handle` None means CuPy's handle of the current device. math="tf32": our TF32 tensor-core GEMM
    (row-major itself, so no swap), on CuPy's current stream. math="fp32_sgemm": our float32 SGEMM
    (kernels/gemm.cu), what fp32 math runs while a CUDA graph is captured (_gemm_math).
    """
    if math == "tf32":
        gemm_tc(m, n, k, a, m if trans_a else k, b, k if trans_b else n, c, dtype=np.float32, trans_a=trans_a,
                trans_b=trans_b, beta=1.0 if accumulate else 0.0)
        return
    if math == "fp32_sgemm":
        sgemm(m, n, k, a, m if trans_a else k, b, k if trans_b else n, c, trans_a=trans_a, trans_b=trans_b,
              beta=1.0 if accumulate else 0.0, min_k_per_split=SGEMM_MIN_K_PER_SPLIT)
        return
    if handle is None:
        handle = cupy.cuda.device.get_cublas_handle()
    op_b = CUBLAS_OP_T if trans_b else CUBLAS_OP_N
    op_a = CUBLAS_OP_T if trans_a else CUBLAS_OP_N
    ldb = k if trans_b else n
    lda = m if trans_a else k
    beta = _BETA_ONE_PTR if accumulate else _BETA_ZERO_PTR
    # The binding sets the handle's stream to the current CuPy stream before the call.
    cublas.sgemm(handle, op_b, op_a, n, m, k, _ALPHA_ONE_PTR, b, ldb, a, lda, beta, c, n)


def _use_host_pointer_mode():
    handle = cupy.cuda.device.get_cublas_handle()
    cublas.setPointerMode(handle, CUBLAS_POINTER_MODE_HOST)


class _PackedLaunches:
    """One kernel's launches for every step of a loop, with the arguments packed before the loop starts.

    cuLaunchKernel takes its arguments as an array of pointers, one per argument, each pointing at the
    argument's value. Here every value sits in an 8-byte slot of `values` (steps x arguments); a pointer
    or long long fills its slot, an int is read from the slot's low 4 bytes (x86 and Arm are
    little-endian). Why: CuPy's RawKernel call converts each argument in Python at every launch, which
    for these ~15-argument kernels costs more host time than the kernel takes on the GPU; packed, a
    step's launch is one thin call into the driver.

    columns: one entry per kernel argument, in the kernel's order: an int (the same at every step) or
    an integer array with one value per step (pointers that move with t, t itself).
    """

    def __init__(self, kernel, blocks, steps, columns):
        self.values = np.zeros((steps, len(columns)), dtype=np.uint64)
        for i, column in enumerate(columns):
            self.values[:, i] = np.asarray(column, dtype=np.uint64)
        slot_bytes = self.values.itemsize
        self.params = self.values.ctypes.data + slot_bytes * np.arange(self.values.size, dtype=np.uint64)
        self.step_params = [self.params.ctypes.data + s * len(columns) * self.params.itemsize for s in range(steps)]
        self.function = function_pointer(kernel)   # the driver wants the CUfunction
        self.blocks = blocks

    def launch(self, s, stream_ptr):
        cupy.cuda.driver.launchKernel(self.function, self.blocks, 1, 1, THREADS, 1, 1, 0, stream_ptr,
                                      self.step_params[s], 0)


def _run_interleaved(directions):
    """Run the step loops of one layer's directions, step s of each in turn.

    With two directions and USE_SIDE_STREAM, the second runs on a side stream: it first waits for
    everything queued so far on the current stream (the input projection), and the current stream
    waits for it at the end, so callers see one ordered stream.
    """
    main = cupy.cuda.get_current_stream()
    main_handle = cupy.cuda.device.get_cublas_handle()
    lanes = [(main, main_handle)] * len(directions)
    if len(directions) == 2 and USE_SIDE_STREAM:
        lanes[1] = _side_stream()
        lanes[1][0].wait_event(main.record())
    T = directions[0].T
    for s in range(T):
        for direction, (stream, handle) in zip(directions, lanes):
            if stream is main:
                direction.step(s, handle, stream.ptr)
            else:
                with stream:  # the cuBLAS binding launches on CuPy's current stream
                    direction.step(s, handle, stream.ptr)
    side = lanes[-1][0]
    if side is not main:
        main.wait_event(side.record())


class _Geometry:
    """Sizes and pointer arithmetic of one (layer, direction)."""

    def __init__(self, mode, T, B, H, D, direction):
        self.mode, self.T, self.B, self.H, self.D = mode, T, B, H, D
        self.G = {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}[mode]
        self.reverse = direction == 1
        self.column_bytes = direction * H * FLOAT_BYTES   # this direction's columns of y (T, B, D*H)
        self.state_bytes = B * H * FLOAT_BYTES            # one (B, H) slice of hs / cs
        self.y_step_bytes = B * D * H * FLOAT_BYTES       # one time step of y
        self.n = B * H                                    # threads of work per cell launch
        self.blocks = grid_stride_blocks(self.n)

    def forward_times(self):
        """The time step processed s-th by the forward pass, for s = 0 .. T-1 (an int64 array)."""
        s = np.arange(self.T, dtype=np.int64)
        return self.T - 1 - s if self.reverse else s

    def backward_times(self):
        """Back-propagation takes the steps in the reverse of the forward pass's order."""
        return self.forward_times()[::-1]

    def state_in(self, t):
        """Index in hs/cs of the state entering step t (the state leaving it is the other neighbour)."""
        return t + 1 if self.reverse else t

    def state_out(self, t):
        return t if self.reverse else t + 1


# ----------------------------------------------------------------------------------------------
# Forward
# ----------------------------------------------------------------------------------------------


class _ForwardDirection:
    """The step loop of one (layer, direction); gates_x already holds layer_input @ W_ih^T (no bias)."""

    def __init__(self, geo, kernel, gates_x, w_hh, b_ih, b_hh, h0, c0, y, lengths, training, math="fp32",
                 packed=True):
        self.math = math
        # What the persistent algorithm (rnn_persistent.py) reads instead of the packed step launches.
        self.gates_x, self.w_hh, self.b_ih, self.b_hh = gates_x, w_hh, b_ih, b_hh
        # set for the upper layer of a wavefront (rnn_persistent.forward_wave), whose gates_x the layer below writes
        self.w_ih = None
        self.geo, self.T, self.w_hh_ptr = geo, geo.T, _ptr(w_hh)
        # The launches below hold raw pointers only: keep every array they point into alive until the
        # loop has run, or CuPy's memory pool hands the memory to the next allocation.
        self._keep_alive = (gates_x, w_hh, b_ih, b_hh, y, lengths)
        T, B, H, G = geo.T, geo.B, geo.H, geo.G
        self.hs = _empty((T + 1, B, H))
        self.cs = _empty((T + 1, B, H)) if geo.mode == "lstm" else None
        # LSTM keeps [i, f, g, o], GRU [r, z, n, hn]; the vanilla RNN's backward needs only hs.
        keeps_gates = training and geo.mode in ("lstm", "gru")
        self.gates = _empty((T, B, 4 * H)) if keeps_gates else None
        self.gates_h = _empty((B, G * H))  # scratch of the recurrent GEMM, reused by every step
        self.gates_h_ptr = _ptr(self.gates_h)
        first = geo.state_in(geo.forward_times()[0])
        self._set_state(self.hs, first, h0)
        if self.cs is not None:
            self._set_state(self.cs, first, c0)
        if not packed:  # the persistent algorithm runs every step in one launch
            return

        # Pointers of every step, in the order the steps run (arrays over s; t = times[s]).
        t = geo.forward_times()
        self.h_in = (_ptr(self.hs) + geo.state_in(t) * geo.state_bytes).tolist()  # operand of the GEMM
        h_out = _ptr(self.hs) + geo.state_out(t) * geo.state_bytes
        gates_x_t = _ptr(gates_x) + t * (B * G * H * FLOAT_BYTES)
        y_t = _ptr(y) + t * geo.y_step_bytes + geo.column_bytes
        saved_t = 0 if self.gates is None else _ptr(self.gates) + t * (B * 4 * H * FLOAT_BYTES)
        head = [gates_x_t, _ptr(self.gates_h), _ptr(b_ih), _ptr(b_hh), _ptr(self.hs) + geo.state_in(t) * geo.state_bytes]
        tail = [_ptr(lengths), t, B, H]
        y_args = [y_t, geo.D * H]
        if geo.mode == "lstm":
            # (gates_x, gates_h, b_ih, b_hh, h_prev, c_prev, h_next, c_next, y, y_ld, acts, lengths, t, B, H)
            c_in = _ptr(self.cs) + geo.state_in(t) * geo.state_bytes
            c_out = _ptr(self.cs) + geo.state_out(t) * geo.state_bytes
            columns = head + [c_in, h_out, c_out] + y_args + [saved_t] + tail
        elif geo.mode == "gru":
            # (gates_x, gates_h, b_ih, b_hh, h_prev, h_next, y, y_ld, saved, lengths, t, B, H)
            columns = head + [h_out] + y_args + [saved_t] + tail
        else:
            # (gates_x, gates_h, b_ih, b_hh, h_prev, h_next, y, y_ld, lengths, t, B, H, relu)
            columns = head + [h_out] + y_args + tail + [int(geo.mode == "rnn_relu")]
        self.cell = _PackedLaunches(kernel, geo.blocks, T, columns)

    @staticmethod
    def _set_state(states, index, initial):
        if initial is None:
            states[index].fill(0)
        else:
            states[index] = initial

    def step(self, s, handle, stream_ptr):
        geo = self.geo
        # gates_h (B, G*H) = h @ W_hh^T, then the fused cell.
        _gemm(self.gates_h_ptr, self.h_in[s], self.w_hh_ptr, geo.B, geo.G * geo.H, geo.H, trans_b=True,
              handle=handle, math=self.math)
        self.cell.launch(s, stream_ptr)


def _final_index(geo):
    """Index in hs/cs of the state after the last step."""
    return 0 if geo.reverse else geo.T


def _gemm_math(math: str) -> str:
    """What runs the GEMMs: "tf32" our tensor-core GEMM; "fp32" cuBLAS sgemm, except while the stream is
    captured into a CUDA graph, where CuPy cannot call cuBLAS: then "fp32_sgemm", our float32 SGEMM
    (the same float32 arithmetic in another summation order, so a replay equals an eager step to fp32
    rounding, not bit for bit). Eagerly cuBLAS stays: its host cost per call is lower than our
    RawKernel launch, which a replayed graph does not pay. "bf16" (the persistent kernels' recurrent
    product in bfloat16) runs every other GEMM, and the standard algorithm's, in TF32, but for the backward's
    weight and input gradients on bfloat16 copies where wgmma exists (_bf16_gemms)."""
    if math in ("tf32", "bf16"):
        return "tf32"
    return "fp32_sgemm" if cupy.cuda.get_current_stream().is_capturing() else "fp32"


def _layers_plan(desc, T, B, op, direction):
    """What the forward (direction 0) and the backward (1) of every layer share: the sizes H, D, L, G, whether the
    cell is an LSTM's, the persistent plan (None: the step loop) and the step loop's cell kernel (None: persistent);
    cuBLAS's pointer mode set to host (_use_host_pointer_mode) for both."""
    algorithm, the_plan, _ = choose_algorithm(desc, T, B, op)
    kernel = None if algorithm == "persistent" else get_kernel("rnn", CELL_KERNELS[desc.mode][direction])
    _use_host_pointer_mode()
    is_lstm = desc.mode == "lstm"
    return desc.hidden_size, desc.num_directions, desc.num_layers, desc.gate_count, is_lstm, the_plan, kernel


def choose_algorithm(desc, steps: int, batch: int, op: str = "rnn_forward"):
    """(algorithm, persistent plan or None, why not persistent or None) for one call of this descriptor.

    desc.algo "auto": the persistent algorithm wherever it fits (rnn_persistent.plan) and the sequence has
    more than one step (a single cell step loads the weights for one product: nothing to keep), else the
    standard one; "standard": always the step loop; "persistent": the persistent kernels, or a ValueError that says
    why they cannot run this shape. Forward and backward choose alike (the records are the same)."""
    if desc.algo == "standard":
        return "standard", None, "algo='standard' was asked for"
    if desc.algo == "auto" and steps < 2:
        return "standard", None, "one time step (the persistent kernels pay off over a sequence)"
    the_plan, reason = rnn_persistent.plan(desc.mode, batch, desc.hidden_size, desc.num_directions)
    if the_plan is not None:
        return "persistent", the_plan, None
    if desc.algo == "persistent":
        raise ValueError(f"{op}: algo='persistent' cannot run this RNN on this GPU: {reason}. Use algo='auto' "
                         "(persistent where it fits, the standard step loop elsewhere) or 'standard'.")
    return "standard", None, reason


def rnn_forward(x, h0, c0, weights, desc, seq_lengths, training, math="fp32"):
    """x (T, B, in) float32 on the GPU; h0, c0 (L*D, B, H) or None; seq_lengths host int64 (B,) or None;
    math "fp32" (cuBLAS sgemm; our SGEMM under graph capture, _gemm_math) or "tf32" (our tensor-core GEMM).

    Returns (y, hy, cy, saved) with saved = (layer_inputs, records, lengths) for rnn_backward, or None.
    """
    op = "rnn_forward"
    recurrent_math = math  # the persistent kernels' product ("bf16" stays bf16 there)
    math = _gemm_math(math)
    x = _as_float32(op, "x", x)
    h0 = _as_float32(op, "h0", h0)
    c0 = _as_float32(op, "c0", c0)
    weights = [tuple(_as_float32(op, "weights", w) for w in entry) for entry in weights]
    T, B, _ = x.shape
    lengths = None if seq_lengths is None else cupy.asarray(seq_lengths, dtype=cupy.int32)
    H, D, L, G, is_lstm, the_plan, kernel = _layers_plan(desc, T, B, op, 0)
    persistent = the_plan is not None

    hy = _empty((L * D, B, H))
    cy = _empty((L * D, B, H)) if is_lstm else None
    layer_inputs, records = [], []
    wave = None
    if persistent and D == 1 and L > 1:
        wave, _ = rnn_persistent.wave_plan(desc.mode, B, H, recurrent_math)

    def direction_run(layer, direction, layer_input, y, project=True):
        k = layer * D + direction
        w_ih, w_hh, b_ih, b_hh = weights[k]
        gates_x = _empty((T, B, G * H))
        if project:   # the input projection does not depend on the recurrence: one GEMM for all T steps
            _gemm(_ptr(gates_x), _ptr(layer_input), _ptr(w_ih), T * B, G * H, layer_input.shape[2], trans_b=True,
                  math=math)
        run = _ForwardDirection(_Geometry(desc.mode, T, B, H, D, direction), kernel, gates_x, w_hh, b_ih, b_hh,
                                None if h0 is None else h0[k], None if c0 is None else c0[k], y, lengths, training,
                                math, packed=not persistent)
        if not project:
            run.w_ih = w_ih
        return run

    layer_input = x
    layer = 0
    while layer < L:
        if wave is not None and layer + 1 < L:   # layers l and l + 1 in one launch (rnn_persistent.wave_plan)
            y_lower, y = _empty((T, B, H)), _empty((T, B, H))
            runs = [direction_run(layer, 0, layer_input, y_lower), direction_run(layer + 1, 0, y_lower, y, False)]
            rnn_persistent.forward_wave(desc.mode, wave, runs[0], runs[1], y_lower, y, lengths, T, B, H,
                                        recurrent_math)
            inputs = [layer_input, y_lower]
        else:
            y = _empty((T, B, D * H))
            runs = [direction_run(layer, direction, layer_input, y) for direction in range(D)]
            if persistent:
                rnn_persistent.forward(desc.mode, the_plan, runs, y, lengths, T, B, H, recurrent_math)
            else:
                _run_interleaved(runs)
            inputs = [layer_input]
        for i, run in enumerate(runs):   # (a wavefront's two runs are layers, one direction each)
            k = (layer + i) * D if len(inputs) == 2 else layer * D + i
            final = _final_index(run.geo)
            hy[k] = run.hs[final]
            if is_lstm:
                cy[k] = run.cs[final]
            records.append((run.hs, run.cs, run.gates))
        layer_inputs += inputs
        layer_input = y
        layer += len(inputs)
    saved = (layer_inputs, records, lengths) if training else None
    return layer_input, hy, cy, saved


# ----------------------------------------------------------------------------------------------
# Backward
# ----------------------------------------------------------------------------------------------


class _BackwardDirection:
    """Back-propagation through time for one (layer, direction): fills dgates_x / dgates_h (T, B, G*H)
    and leaves the gradients of the initial state in dh (and dc), views of dh0[k] (and dc0[k])."""

    def __init__(self, geo, kernel, dout, record, w_hh, lengths, dh, dc, math="fp32", packed=True):
        self.math = math
        self.record, self.w_hh = record, w_hh  # what the persistent algorithm reads
        self.w_ih = None   # set for the upper layer of a backward wavefront (rnn_persistent.backward_wave)
        self.geo, self.T, self.w_hh_ptr, self.dh_ptr = geo, geo.T, _ptr(w_hh), _ptr(dh)
        self._keep_alive = (dout, record, w_hh, lengths, dh, dc)  # the launches hold raw pointers only
        T, B, H, G = geo.T, geo.B, geo.H, geo.G
        hs, cs, gates = record
        self.dgates_x = _empty((T, B, G * H))
        # Only the GRU has different x and h gate gradients (r multiplies W_hn h + b_hn).
        self.dgates_h = _empty((T, B, G * H)) if geo.mode == "gru" else self.dgates_x
        if not packed:  # the persistent algorithm runs every step in one launch
            return

        t = geo.backward_times()
        gate_step = t * (B * G * H * FLOAT_BYTES)
        dgx_t = _ptr(self.dgates_x) + gate_step
        self.dgh_t = (_ptr(self.dgates_h) + gate_step).tolist()  # operand of the GEMM
        dy_t = np.zeros_like(t) if dout is None else _ptr(dout) + t * geo.y_step_bytes + geo.column_bytes
        dy_args = [dy_t, geo.D * H]
        tail = [_ptr(lengths), t, B, H]
        h_in = _ptr(hs) + geo.state_in(t) * geo.state_bytes
        h_out = _ptr(hs) + geo.state_out(t) * geo.state_bytes
        saved_t = 0 if gates is None else _ptr(gates) + t * (B * 4 * H * FLOAT_BYTES)
        if geo.mode == "lstm":
            # (dh, dc, dy, dy_ld, acts, c_prev, c_new, dgates, lengths, t, B, H)
            c_in = _ptr(cs) + geo.state_in(t) * geo.state_bytes
            c_out = _ptr(cs) + geo.state_out(t) * geo.state_bytes
            columns = [_ptr(dh), _ptr(dc)] + dy_args + [saved_t, c_in, c_out, dgx_t] + tail
        elif geo.mode == "gru":
            # (dh, dy, dy_ld, saved, h_prev, dgates_x, dgates_h, lengths, t, B, H)
            columns = [_ptr(dh)] + dy_args + [saved_t, h_in, dgx_t, self.dgh_t] + tail
        else:
            # (dh, dy, dy_ld, h_new, dgates, lengths, t, B, H, relu)
            columns = [_ptr(dh)] + dy_args + [h_out, dgx_t] + tail + [int(geo.mode == "rnn_relu")]
        self.cell = _PackedLaunches(kernel, geo.blocks, T, columns)

    def step(self, s, handle, stream_ptr):
        geo = self.geo
        self.cell.launch(s, stream_ptr)
        # dh (the state entering step t) += dgates_h[t] @ W_hh, onto what the kernel left there.
        _gemm(self.dh_ptr, self.dgh_t[s], self.w_hh_ptr, geo.B, geo.H, geo.G * geo.H, accumulate=True,
              handle=handle, math=self.math)


def _set_gradient(target, given):
    if given is None:
        target.fill(0)
    else:
        target[...] = given


def _bf16_gemms(recurrent_math: str) -> bool:
    """math="bf16" on a GPU with the wgmma GEMM: the backward's weight and input gradients multiply bfloat16
    copies of their operands (fp32 accumulation and result, as cuDNN's bf16 RNN): 16-bit wgmma reads the transposed
    operands as they are, where TF32 wgmma needs K-major copies of four of them per layer."""
    return (recurrent_math == "bf16" and _common.tensor_core_gemm != "mma_sync"
            and gemm_wgmma.device_has_wgmma(cupy.cuda.runtime.getDevice()))


def _gemm16(c, a, b, m, n, k, *, trans_a=False, trans_b=False, accumulate=False) -> bool:
    """_gemm on bfloat16 operands (raw pointers) into float32 C, on wgmma; False when it declines."""
    return gemm_wgmma.gemm_wgmma(m, n, k, a, m if trans_a else k, b, k if trans_b else n, c, dtype=BFLOAT16,
                                 trans_a=trans_a, trans_b=trans_b, alpha=1.0, beta=1.0 if accumulate else 0.0,
                                 ldc_row=n, ldc_col=1, batch=1, stride_a=0, stride_b=0, stride_c=0,
                                 out_dtype=np.float32)


def _weight_gradients(layer, directions, layer_input, weights, records, dweights, with_dinput, D, T, B, H, G, math,
                      bf16=False):
    """dweights[k] of one layer's directions from their dgates, by GEMMs over all T*B rows; returns the gradient of
    the layer's input (both directions' added), or None when not asked for. bf16 (_bf16_gemms): on bfloat16 copies
    of the operands, each GEMM falling back to `math` on the float32 ones where wgmma declines."""
    in_size = layer_input.shape[2]
    dinput = _empty((T, B, in_size)) if with_dinput else None
    x16 = cast(layer_input, BFLOAT16) if bf16 else None

    for direction, run in enumerate(directions):
        k = layer * D + direction
        w_ih, w_hh, b_ih, b_hh = weights[k]
        hs = records[k][0]
        dg16 = dgh16 = hs16 = None
        if bf16:
            dg16 = cast(run.dgates_x, BFLOAT16)
            dgh16 = dg16 if run.dgates_h is run.dgates_x else cast(run.dgates_h, BFLOAT16)
            hs16 = cast(hs, BFLOAT16)
        # Weight gradients summed over all steps: one GEMM over the T*B rows each.
        dw_ih = _empty((G * H, in_size))
        _product(bf16, math, _ptr(dw_ih), (_ptr(run.dgates_x), _ptr(dg16)), (_ptr(layer_input), _ptr(x16)),
                 G * H, in_size, T * B, trans_a=True)
        dw_hh = _empty((G * H, H))
        entering = B * H if run.geo.reverse else 0   # hs[1:T+1] or hs[0:T], in elements
        _product(bf16, math, _ptr(dw_hh), (_ptr(run.dgates_h), _ptr(dgh16)),
                 (_ptr(hs) + entering * FLOAT_BYTES, _ptr(hs16) + entering * 2), G * H, H, T * B, trans_a=True)
        # The biases' gradients: column sums of the gate gradients over the T*B rows (the channels-last bias
        # gradient's kernel: coalesced, in a fixed order). LSTM, RNN: both biases get the same sum.
        db_ih = _column_sums(run.dgates_x, G * H) if b_ih is not None else None
        if b_hh is None:
            db_hh = None
        elif run.dgates_h is run.dgates_x and db_ih is not None:
            db_hh = db_ih.copy()
        else:
            db_hh = _column_sums(run.dgates_h, G * H)
        dweights[k] = (dw_ih, dw_hh, db_ih, db_hh)
        if with_dinput:   # both directions read the same layer input, so their input gradients add
            w16 = cast(w_ih, BFLOAT16) if bf16 else None
            _product(bf16, math, _ptr(dinput), (_ptr(run.dgates_x), _ptr(dg16)), (_ptr(w_ih), _ptr(w16)),
                     T * B, in_size, G * H, accumulate=direction > 0)
    return dinput


def _product(bf16, math, c, a, b, m, n, k, **kw):
    """_gemm of C = op(A) @ op(B) from (float32, bfloat16) pointer pairs a, b: on the bfloat16 ones when bf16 and
    wgmma takes the problem, else on the float32 ones in `math`."""
    if not (bf16 and _gemm16(c, a[1], b[1], m, n, k, **kw)):
        _gemm(c, a[0], b[0], m, n, k, math=math, **kw)


def rnn_backward(dy, dhy, dcy, desc, weights, seq_lengths, saved, math="fp32"):
    """dy (T, B, D*H) or None; dhy, dcy (L*D, B, H) or None; math as in the forward pass.
    Returns (dx, dh0, dc0, dweights)."""
    op = "rnn_backward"
    recurrent_math = math
    math = _gemm_math(math)
    dy = _as_float32(op, "dy", dy)
    dhy = _as_float32(op, "dhy", dhy)
    dcy = _as_float32(op, "dcy", dcy)
    weights = [tuple(_as_float32(op, "weights", w) for w in entry) for entry in weights]
    layer_inputs, records, lengths = saved
    T, B, _ = layer_inputs[0].shape
    H, D, L, G, is_lstm, the_plan, kernel = _layers_plan(desc, T, B, op, 1)
    persistent = the_plan is not None

    dh0 = _empty((L * D, B, H))
    dc0 = _empty((L * D, B, H)) if is_lstm else None
    dweights = [None] * len(weights)
    wave = None
    if persistent and D == 1 and L > 1:
        wave, _ = rnn_persistent.wave_plan(desc.mode, B, H, recurrent_math, backward=True)
    bf16 = _bf16_gemms(recurrent_math)

    def direction_run(layer, direction, dout):
        k = layer * D + direction
        _set_gradient(dh0[k], None if dhy is None else dhy[k])
        if is_lstm:
            _set_gradient(dc0[k], None if dcy is None else dcy[k])
        geo = _Geometry(desc.mode, T, B, H, D, direction)
        return _BackwardDirection(geo, kernel, dout, records[k], weights[k][1], lengths, dh0[k],
                                  dc0[k] if is_lstm else None, math, packed=not persistent)

    dout = dy
    layer = L - 1
    while layer >= 0:
        if wave is not None and layer > 0:   # layers l+1 and l in one launch (rnn_persistent.backward_wave)
            upper, lower = direction_run(layer, 0, dout), direction_run(layer - 1, 0, None)
            upper.w_ih = weights[layer][0]
            rnn_persistent.backward_wave(desc.mode, wave, upper, lower, dout, lengths, [dh0[layer], dh0[layer - 1]],
                                         [dc0[layer], dc0[layer - 1]] if is_lstm else [None, None], T, B, H,
                                         recurrent_math)
            done = [(layer, [upper], False), (layer - 1, [lower], True)]   # (the upper's dinput: inside the launch)
        else:
            directions = [direction_run(layer, direction, dout) for direction in range(D)]
            if persistent:
                rnn_persistent.backward(desc.mode, the_plan, directions, dout, lengths,
                                        [dh0[layer * D + d] for d in range(D)],
                                        [dc0[layer * D + d] if is_lstm else None for d in range(D)], T, B, H,
                                        recurrent_math)
            else:
                _run_interleaved(directions)
            done = [(layer, directions, True)]
        for done_layer, directions, with_dinput in done:
            dout = _weight_gradients(done_layer, directions, layer_inputs[done_layer], weights, records, dweights,
                                     with_dinput, D, T, B, H, G, math, bf16)
        layer -= len(done)
    return dout, dh0, dc0, dweights
