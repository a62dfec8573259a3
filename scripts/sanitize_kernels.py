"""Small runs of the kernels whose correctness rests on synchronisation, for compute-sanitizer:

    compute-sanitizer --tool racecheck python3 scripts/sanitize_kernels.py    # shared-memory races
    compute-sanitizer --tool synccheck python3 scripts/sanitize_kernels.py    # barriers in divergent code
    compute-sanitizer --tool memcheck  python3 scripts/sanitize_kernels.py    # out-of-bounds accesses

The persistent RNN kernels (kernels/rnn_persistent.cu: cp.async rings, a grid-wide barrier, the wavefront's
wait on the other layer's counter) for every mode, one bidirectional layer and two unidirectional ones (the
wavefront, whose bf16 backward runs the 256-thread compile: backward_threads), padded and not, fp32, TF32 and bf16,
in one batch group and (fp32, bf16) in two (rnn_persistent.BATCH_GROUPS and BATCH_GROUPS_FORWARD: 4 rows and 3)
(`--rnn-only`: these alone); the fused attention kernels
(kernels/attention.cu: cp.async double buffering; float32's backward: one Q/dO buffer refilled behind dQ)
in float16, bfloat16 and float32, causal and not, with a mask and dropout; on an H100/H200 the 16-bit forward
(and backward at D = 64) runs kernels/attention_wgmma.cu (cp.async double buffers read by wgmma through the
async proxy; dS^T stored by threads, read by wgmma), so it is run there at several key and query blocks
(L = S = 260) and D = 64 and 128, and once more held to mma.sync. Sizes are
tiny (the tools slow a kernel down by 100x or more) but cover the partial tiles. Racecheck sees shared
memory only: a race on the global state h between CTAs shows up instead as wrong values in
tests/gpu/test_rnn_persistent_gpu.py (which runs every size with NaN-poisoned buffers).

`--rnn-from N` skips the first N RNN cases (racecheck takes minutes over all 50: a run its time limit stopped can be
resumed where it stopped; each case prints its number). `--wave-backward-512`: the wavefront's bf16 backward at 512
threads a CTA, as "auto" runs it from batch 17 on (these cases' batch of 7 would take the 256-thread compile).
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def rnn_cases(first=0):
    import cupy

    from minidl.primitives import RNNDescriptor, rnn_backward, rnn_forward

    from minidl.primitives.cuda import rnn_persistent

    rng = np.random.default_rng(0)
    # one bidirectional layer (both directions in one launch), or two unidirectional ones (the wavefront); then the
    # partial-sum backward (4 units a CTA, one launch per layer)
    cases = [(mode, bidirectional, layers, math, partial, groups) for partial in (False, True)
             for mode in ("lstm", "gru", "rnn_tanh") for bidirectional, layers in ((False, 2), (True, 1))
             for math in ("fp32", "tf32", "bf16") for groups in (1, 2)
             if not ((partial and mode == "rnn_tanh") or (groups > 1 and math == "tf32"))]
    half_cta = False if "--wave-backward-512" in sys.argv else "auto"
    for number, (mode, bidirectional, layers, math, partial, groups) in enumerate(cases):
        if number < first:
            continue
        rnn_persistent.WAVEFRONT = not partial   # (the wavefront forward and backward, every mode)
        rnn_persistent.PARTIAL_BACKWARD = partial
        rnn_persistent.UNITS = 4 if partial else None
        rnn_persistent.BATCH_GROUPS = rnn_persistent.BATCH_GROUPS_FORWARD = groups
        rnn_persistent.HALF_CTA_WAVE_BACKWARD = half_cta
        desc = RNNDescriptor(mode, 24, 40, layers, bidirectional, algo="persistent")
        T, B = 5, 7
        w = [tuple(cupy.asarray((rng.uniform(-0.3, 0.3, s.shape)).astype(np.float32)) for s in e)
             for e in desc.weight_shapes()]
        x = cupy.asarray(rng.standard_normal((T, B, 24)).astype(np.float32))
        dy = cupy.asarray(rng.standard_normal((T, B, desc.num_directions * 40)).astype(np.float32))
        lengths = np.array([5, 2, 5, 1, 4, 3, 5])
        for padded in (lengths, None):   # (padded: the wavefront's upper layer reads y, else the exchange)
            _, _, _, reserve = rnn_forward(x, None, None, w, desc, seq_lengths=padded, math=math)
            rnn_backward(dy, None, None, reserve)
        cupy.cuda.Device().synchronize()
        print(f"rnn case {number} of {len(cases)}: persistent {mode} layers={layers} bidirectional={bidirectional} "
              f"{math}{' partial-sum backward' if partial else ''}, {groups} batch group(s): ran")
    rnn_persistent.WAVEFRONT, rnn_persistent.PARTIAL_BACKWARD, rnn_persistent.UNITS = "auto", "auto", None
    rnn_persistent.BATCH_GROUPS = rnn_persistent.BATCH_GROUPS_FORWARD = "auto"
    rnn_persistent.HALF_CTA_WAVE_BACKWARD = "auto"


def attention_cases():
    import cupy

    from minidl._dtypes import bfloat16
    from minidl.primitives import attention_backward, attention_forward
    from minidl.primitives.gemm import set_tensor_core_gemm

    rng = np.random.default_rng(1)
    cases = [(dtype, causal, with_mask, dropout_p, 70, 45, 64, "auto") for dtype in (np.float16, bfloat16, np.float32)
             for causal, with_mask, dropout_p in ((False, False, 0.0), (True, False, 0.0), (False, True, 0.1))]
    cases += [(bfloat16, True, False, 0.0, 260, 260, D, kernel) for D in (64, 128) for kernel in ("auto", "mma_sync")]
    cases += [(np.float16, False, True, 0.1, 130, 260, 64, "auto")]
    for dtype, causal, with_mask, dropout_p, L, S, D, kernel in cases:
        set_tensor_core_gemm(kernel)
        B, H = 1, 2
        q, k, v, do = (cupy.asarray(rng.standard_normal(shape).astype(np.float32).astype(dtype))
                       for shape in ((B, H, L, D), (B, H, S, D), (B, H, S, D), (B, H, L, D)))
        mask = cupy.asarray(rng.random((L, S)) > 0.2) if with_mask else None
        out, lse = attention_forward(q, k, v, mask, causal=causal, scale=D ** -0.5, dropout_p=dropout_p, seed=3)
        attention_backward(q, k, v, out, do, lse, mask, causal=causal, scale=D ** -0.5, dropout_p=dropout_p,
                           seed=3)
        cupy.cuda.Device().synchronize()
        print(f"attention {np.dtype(dtype).name} L={L} S={S} D={D} causal={causal} mask={with_mask} "
              f"dropout={dropout_p} ({kernel}): ran")
    set_tensor_core_gemm("auto")


if __name__ == "__main__":
    if "--attention-only" not in sys.argv:
        rnn_cases(int(sys.argv[sys.argv.index("--rnn-from") + 1]) if "--rnn-from" in sys.argv else 0)
    if "--rnn-only" not in sys.argv:
        attention_cases()
