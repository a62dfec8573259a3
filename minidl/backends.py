"""Framework-level switches for the primitive library, named as in `torch.backends`.

    minidl.backends.cudnn.benchmark = True      # algo="auto" measures every convolution algorithm
                                                # once per shape and keeps the fastest
    minidl.backends.cudnn.deterministic = True  # algo="auto" picks only bit-reproducible algorithms

Both map onto the convolution algorithm policy of minidl.primitives (set_convolution_policy):
benchmark -> "prefer_fastest", deterministic -> "deterministic" (it wins when both are set, as in
PyTorch), neither -> the library's own default ("heuristic": a fixed preference order, no measuring).
A layer built with an explicit `algo=` (e.g. Conv2d(..., algo="winograd")) ignores these switches.

    minidl.backends.cudnn.allow_tf32 = True     # convolutions and RNNs may use TF32 tensor cores on the
                                                # GPU (PyTorch's default: True); False = true fp32 math
    minidl.backends.cuda.matmul.allow_tf32 = False  # Linear / matmul may use TF32 tensor cores
                                                # (PyTorch's default: False)

TF32 keeps fp32's range but rounds the multiplied operands to 10 mantissa bits (products are summed in
fp32), so results differ from fp32 in about the 4th significant digit (relative error ~1e-3 on long
sums). The flags only concern float32 arrays on the GPU; float16/bfloat16 always use tensor cores
with fp32 accumulation, and the CPU path is always exact fp32/fp64. `math_for_conv(dtype)` and
`math_for_matmul(dtype)` turn the flags into the primitive library's `math=` argument ("fp32"/"tf32").

    minidl.backends.cuda.use_cublas = True      # Linear's matrix products on cuBLAS (through CuPy)
                                                # instead of minidl's own SGEMM (kernels/gemm.cu)
    minidl.backends.cuda.check_indices = True   # validate class targets / embedding indices on the
                                                # host (one GPU sync per call) and raise at once

`use_cublas` exists so that the two GEMMs can be compared (benchmarks/bench_gpu_primitives.py) and
so that float64 layers run on the GPU (our SGEMM is float32; float64 always goes to cuBLAS).

`check_indices`: on the CPU, cross_entropy / nll_loss / embedding always check their integer
indices and raise a ValueError naming the bad value. On the GPU that check would copy a flag back to
the host and wait for the GPU in every training step, so by default it runs on the device instead:
an out-of-range index makes the result NaN (the loss, or the embedding rows it selected), and the
first NaN loss you print points at it. PyTorch has the same trade-off (its CUDA kernels raise an
asynchronous "device-side assert"). Set `check_indices = True` while debugging to get the eager error.
"""
from __future__ import annotations

import contextlib

from .primitives import convolution as _conv

__all__ = ["cudnn", "cuda", "cpu", "mkldnn", "mkl", "openmp", "nnpack", "opt_einsum"]


class _CudnnFlags:
    """The `minidl.backends.cudnn` namespace: benchmark and deterministic flags."""

    def __init__(self):
        self.benchmark = False
        self.deterministic = False
        self.allow_tf32 = True  # PyTorch's default for cuDNN convolutions and RNNs

    def policy(self):
        """The convolution policy the flags ask for, or None to leave the library's setting alone."""
        if self.deterministic:
            return "deterministic"
        if self.benchmark:
            return "prefer_fastest"
        return None

    @contextlib.contextmanager
    def flags(self, benchmark=None, deterministic=None, allow_tf32=None):
        """Set the flags inside a `with` block, then restore them."""
        previous = (self.benchmark, self.deterministic, self.allow_tf32)
        if benchmark is not None:
            self.benchmark = bool(benchmark)
        if deterministic is not None:
            self.deterministic = bool(deterministic)
        if allow_tf32 is not None:
            self.allow_tf32 = bool(allow_tf32)
        try:
            yield self
        finally:
            self.benchmark, self.deterministic, self.allow_tf32 = previous

    def __repr__(self):
        return f"cudnn(benchmark={self.benchmark}, deterministic={self.deterministic}, allow_tf32={self.allow_tf32})"


cudnn = _CudnnFlags()


class _MatmulFlags:
    """The `minidl.backends.cuda.matmul` namespace: allow_tf32 (PyTorch's default: False)."""

    def __init__(self):
        self.allow_tf32 = False

    def __repr__(self):
        return f"matmul(allow_tf32={self.allow_tf32})"


class _CudaFlags:
    """The `minidl.backends.cuda` namespace: matmul.allow_tf32, use_cublas and check_indices (see the
    module docstring)."""

    def __init__(self):
        self.matmul = _MatmulFlags()
        self.use_cublas = False
        self.check_indices = False
        # scaled_dot_product_attention's backends (torch.backends.cuda's sdp flags, minidl.nn.attention.sdpa_kernel):
        # minidl has two, the fused attention primitive (what torch's flash / memory-efficient / cuDNN backends
        # are) and the composite of matmul, softmax and dropout (torch's math backend). As torch, the flags apply
        # on every device.
        self.sdp = {"flash": True, "mem_efficient": True, "cudnn": True, "math": True}

    def enable_flash_sdp(self, enabled: bool):
        self.sdp["flash"] = bool(enabled)

    def enable_mem_efficient_sdp(self, enabled: bool):
        self.sdp["mem_efficient"] = bool(enabled)

    def enable_cudnn_sdp(self, enabled: bool):
        self.sdp["cudnn"] = bool(enabled)

    def enable_math_sdp(self, enabled: bool):
        self.sdp["math"] = bool(enabled)

    def flash_sdp_enabled(self) -> bool:
        return self.sdp["flash"]

    def mem_efficient_sdp_enabled(self) -> bool:
        return self.sdp["mem_efficient"]

    def cudnn_sdp_enabled(self) -> bool:
        return self.sdp["cudnn"]

    def math_sdp_enabled(self) -> bool:
        return self.sdp["math"]

    @contextlib.contextmanager
    def sdp_kernel(self, enable_flash=True, enable_math=True, enable_mem_efficient=True, enable_cudnn=True):
        """torch.backends.cuda.sdp_kernel (deprecated there for torch.nn.attention.sdpa_kernel): the backends
        scaled_dot_product_attention may use inside the block."""
        previous = dict(self.sdp)
        self.sdp.update(flash=bool(enable_flash), math=bool(enable_math), mem_efficient=bool(enable_mem_efficient),
                        cudnn=bool(enable_cudnn))
        try:
            yield
        finally:
            self.sdp.update(previous)

    @contextlib.contextmanager
    def flags(self, use_cublas=None, check_indices=None):
        """Set the flags inside a `with` block, then restore them."""
        previous = (self.use_cublas, self.check_indices)
        if use_cublas is not None:
            self.use_cublas = bool(use_cublas)
        if check_indices is not None:
            self.check_indices = bool(check_indices)
        try:
            yield self
        finally:
            self.use_cublas, self.check_indices = previous

    def is_built(self) -> bool:
        """Whether minidl can run CUDA here: CuPy importable (torch's: built with CUDA)."""
        from . import _device

        return _device._load_cupy() is not None

    def is_flash_attention_available(self) -> bool:
        """minidl's fused attention kernel (kernels/attention.cu) runs on any CUDA GPU minidl runs on."""
        from . import _device

        return _device.cuda_unavailable_reason() is None

    def __repr__(self):
        return f"cuda(use_cublas={self.use_cublas}, check_indices={self.check_indices})"


cuda = _CudaFlags()


class _NotUsed:
    """A torch.backends library minidl does not use (mkldnn, mkl, openmp, nnpack, ...): is_available() False, and
    its `enabled` flag accepted."""

    def __init__(self, name):
        self.name, self.enabled = name, False

    def is_available(self) -> bool:
        return False

    @contextlib.contextmanager
    def flags(self, enabled=False, **kwargs):
        yield

    def __repr__(self):
        return f"<minidl.backends.{self.name}: not used by minidl>"


mkldnn, mkl, openmp, nnpack, opt_einsum = (_NotUsed(n) for n in ("mkldnn", "mkl", "openmp", "nnpack", "opt_einsum"))


class _Cpu:
    def get_cpu_capability(self) -> str:
        """torch's vector-instruction level; minidl's CPU path is NumPy's, which chooses its own: 'NUMPY'."""
        return "NUMPY"


cpu = _Cpu()


def math_for_conv(dtype) -> str:
    """The primitive library's `math=` for a convolution or RNN on float32 data: "tf32" when
    minidl.backends.cudnn.allow_tf32 is set, else "fp32" (half dtypes always run on tensor cores)."""
    return "tf32" if cudnn.allow_tf32 else "fp32"


def math_for_matmul(dtype) -> str:
    """The primitive library's `math=` for Linear / matmul on float32 data (cuda.matmul.allow_tf32)."""
    return "tf32" if cuda.matmul.allow_tf32 else "fp32"


def _conv_policy_for(algo: str):
    """The policy a convolution with this `algo` should run under (None: the library's own setting).

    Read once when the op is recorded and handed to its ConvolutionPlan as an argument, so its
    backward uses the same policy as its forward."""
    return cudnn.policy() if algo == "auto" else None


_deterministic = {"mode": False, "warn_only": False}


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """torch.use_deterministic_algorithms: only bit-reproducible algorithms from now on. In minidl that is the
    convolution policy's "deterministic" (backends.cudnn.deterministic); its other GPU kernels are deterministic
    already (sums in a fixed order, no float atomics on the training path). warn_only is recorded."""
    _deterministic.update(mode=bool(mode), warn_only=bool(warn_only))
    cudnn.deterministic = bool(mode)


def are_deterministic_algorithms_enabled() -> bool:
    return _deterministic["mode"]


def set_deterministic_debug_mode(debug_mode) -> None:
    """torch.set_deterministic_debug_mode: "default" / 0 off, "warn" / 1 and "error" / 2 on (as
    use_deterministic_algorithms with warn_only for "warn")."""
    levels = {"default": 0, "warn": 1, "error": 2}
    level = levels.get(debug_mode, debug_mode)
    if level not in (0, 1, 2):
        raise RuntimeError(f"invalid value of debug_mode, expected one of `default`, `warn`, `error`, but got "
                           f"{debug_mode}")
    use_deterministic_algorithms(level > 0, warn_only=level == 1)


def get_deterministic_debug_mode() -> int:
    return 0 if not _deterministic["mode"] else (1 if _deterministic["warn_only"] else 2)


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    return _deterministic["warn_only"]


_threads = {"intra": None, "interop": None}


def set_num_threads(n: int) -> None:
    """torch.set_num_threads: the CPU threads minidl's NumPy kernels may use. NumPy's BLAS sizes its thread pool when it
    loads (OMP_NUM_THREADS / OPENBLAS_NUM_THREADS); with threadpoolctl installed this limits that pool now, without
    it the number is recorded (get_num_threads) and the pool keeps its size."""
    n = int(n)
    if n < 1:
        raise ValueError(f"set_num_threads: expected a positive number of threads, got {n}")
    _threads["intra"] = n
    try:
        import threadpoolctl
    except ImportError:
        return
    threadpoolctl.threadpool_limits(n)


def get_num_threads() -> int:
    """What set_num_threads recorded, else the CPUs this process may run on."""
    import os

    if _threads["intra"] is not None:
        return _threads["intra"]
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def set_num_interop_threads(n: int) -> None:
    """Recorded (minidl runs one op at a time on the CPU: there is no inter-op pool)."""
    _threads["interop"] = int(n)


def get_num_interop_threads() -> int:
    return _threads["interop"] or 1
