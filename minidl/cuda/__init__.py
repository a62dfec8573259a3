"""minidl.cuda: is the GPU path usable, a few device-wide helpers, streams (streams.py), NVTX ranges (nvtx.py) and
CUDA graphs (as torch.cuda)."""
from __future__ import annotations

import numpy as np

from .. import _device
from .._graphs import (  # noqa: F401  (CUDA graphs: see minidl/_graphs.py)
    CUDAGraph, CUDAGraphStep, graph, graph_pool_handle, graphed_step, is_current_stream_capturing,
    make_graphed_callables,
)
from . import nvtx  # noqa: F401
from .streams import (  # noqa: F401
    ExternalStream, Stream, StreamContext, current_stream, default_stream, device, device_of, set_stream, stream,
)


def is_available() -> bool:
    """True when CuPy imports and sees at least one CUDA GPU."""
    return _device.cuda_unavailable_reason() is None


def unavailable_reason() -> str | None:
    """Why the GPU path cannot run (CuPy missing, or no GPU), or None when it can."""
    return _device.cuda_unavailable_reason()


def device_count() -> int:
    return _device.require_cuda("cuda.device_count").cuda.runtime.getDeviceCount() if is_available() else 0


def set_device(device) -> None:
    """Make `device` ("cuda:1", 1 or a Device) the current GPU: "cuda" and new arrays mean that one from now
    on, in this thread (torch.cuda.set_device). One process per GPU calls this with its LOCAL_RANK."""
    cupy = _device.require_cuda("cuda.set_device")
    index = device if isinstance(device, int) else _device.Device(device).index
    if not 0 <= index < cupy.cuda.runtime.getDeviceCount():
        raise ValueError(f"cuda.set_device: there is no GPU {index}; this machine has {device_count()}")
    cupy.cuda.Device(index).use()


def current_device() -> int:
    """The index of the current GPU (torch.cuda.current_device)."""
    return _device.require_cuda("cuda.current_device").cuda.Device().id


def synchronize() -> None:
    """Wait for every kernel queued on the current device to finish."""
    _device.require_cuda("cuda.synchronize").cuda.Device().synchronize()


def get_device_name(index: int = 0) -> str:
    cupy = _device.require_cuda("cuda.get_device_name")
    return cupy.cuda.runtime.getDeviceProperties(index)["name"].decode()


def _pool():
    """CuPy's default memory pool, or None without a GPU (then the memory functions report 0, as torch's do before
    CUDA is initialised)."""
    return _device._cupy.get_default_memory_pool() if is_available() else None


def memory_allocated(device=None) -> int:
    """Bytes currently held by live arrays in CuPy's memory pool."""
    pool = _pool()
    return 0 if pool is None else pool.used_bytes()


def memory_reserved(device=None) -> int:
    """Bytes the memory pool holds from the driver (live plus cached for reuse)."""
    pool = _pool()
    return 0 if pool is None else pool.total_bytes()


def max_memory_allocated(device=None) -> int:
    """An upper bound of the peak of memory_allocated since the start or the last reset_peak_memory_stats: the bytes
    the pool holds (it keeps freed blocks for reuse, so what was once in use is still held). CuPy's pool records no
    peak of its own, and counting every allocation in Python would cost each eager op a few µs."""
    return memory_reserved(device)


max_memory_reserved = max_memory_allocated


def reset_peak_memory_stats(device=None) -> None:
    """Start the peak over from the memory now in use: the pool's cached blocks are given back to the driver."""
    pool = _pool()
    if pool is not None:
        pool.free_all_blocks()


reset_max_memory_allocated = reset_peak_memory_stats


def memory_stats(device=None) -> dict:
    """torch's memory_stats keys that minidl can fill (from CuPy's pool)."""
    used, held = memory_allocated(device), memory_reserved(device)
    return {"allocated_bytes.all.current": used, "allocated_bytes.all.peak": held,
            "reserved_bytes.all.current": held, "reserved_bytes.all.peak": held}


def memory_summary(device=None, abbreviated=False) -> str:
    used, held = memory_allocated(device), memory_reserved(device)
    return (f"minidl CUDA memory (CuPy's pool): allocated {used / 2**20:.1f} MiB, reserved {held / 2**20:.1f} MiB "
            f"(the peak of allocated is at most the reserved)")


def set_per_process_memory_fraction(fraction, device=None) -> None:
    """Limit the pool to this fraction of the GPU's memory (CuPy's MemoryPool.set_limit)."""
    if not 0 <= float(fraction) <= 1:
        raise ValueError(f"cuda.set_per_process_memory_fraction: fraction must be in [0, 1], got {fraction}")
    _device.require_cuda("cuda.set_per_process_memory_fraction").get_default_memory_pool().set_limit(
        fraction=float(fraction))


def empty_cache() -> None:
    pool = _pool()
    if pool is not None:
        pool.free_all_blocks()


class _DeviceProperties:
    """What torch.cuda.get_device_properties returns, from the driver's cudaDeviceProp."""

    def __init__(self, props):
        self.name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        self.major, self.minor = int(props["major"]), int(props["minor"])
        self.total_memory = int(props["totalGlobalMem"])
        self.multi_processor_count = int(props["multiProcessorCount"])

    def __repr__(self):
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // 2**20}MB, multi_processor_count={self.multi_processor_count})")


def _index(device) -> int:
    return current_device() if device is None else (device if isinstance(device, int) else
                                                     _device.Device(device).index)


def get_device_properties(device=None):
    cupy = _device.require_cuda("cuda.get_device_properties")
    return _DeviceProperties(cupy.cuda.runtime.getDeviceProperties(_index(device)))


def get_device_capability(device=None) -> tuple:
    """(major, minor) compute capability: (9, 0) on an H100 / H200."""
    props = get_device_properties(device)
    return props.major, props.minor


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """bfloat16 on this GPU: compute capability 8.0 and later (minidl's bf16 kernels need mma.sync of sm_80); False
    without a GPU, as torch's."""
    return is_available() and get_device_capability()[0] >= 8


def precompile(families=None) -> list:
    """Compile every CUDA kernel family now, so that no later call (or timing) includes a compile."""
    _device.require_cuda("cuda.precompile")
    from ..primitives.cuda import precompile

    return precompile(families)


def manual_seed(seed: int) -> None:
    """Seed the GPU generators (as torch.cuda.manual_seed: every GPU's Philox state (seed, 0), and CuPy's generator for
    the integer draws); does nothing without a GPU, as torch."""
    if is_available():
        from .. import random

        random.seed_cuda(int(seed))


manual_seed_all = manual_seed


def _state_device(device):
    index = current_device() if device is None or device == "cuda" else _device.Device(device).index
    return _device.Device(f"cuda:{index}")


def get_rng_state(device="cuda"):
    """The GPU generator's state (torch.cuda.get_rng_state): a uint8 tensor on the CPU holding the 16 bytes of the
    device's Philox (seed, offset), the stream rand, randn, normal_, uniform_, bernoulli_ and dropout draw from. It
    reads the device (a synchronisation): for checkpoints, not inside a training step. CuPy's generator, which
    randint, randperm and multinomial use on the GPU, is not in it."""
    from .. import random
    from ..autograd.tensor import Tensor

    _device.require_cuda("cuda.get_rng_state")
    state = _device.move_array(random.philox_state(_state_device(device)), "cpu")
    return Tensor._make(state.view(np.uint8).copy())


def set_rng_state(new_state, device="cuda") -> None:
    """Restore a state get_rng_state returned (in place: a captured CUDA graph keeps drawing from the same array)."""
    from .. import random

    _device.require_cuda("cuda.set_rng_state")
    raw = np.ascontiguousarray(np.asarray(getattr(new_state, "_data", new_state)))
    if raw.dtype != np.uint8 or raw.size != 16:
        raise RuntimeError(f"cuda.set_rng_state: expected the 16-byte uint8 state cuda.get_rng_state() returns "
                           f"(minidl's Philox (seed, offset); torch's CUDA states are laid out the same way only by "
                           f"chance), got {raw.size} values of {raw.dtype}")
    values = raw.reshape(-1).view(np.uint64)
    state = random.philox_state(_state_device(device))
    state[0], state[1] = values[0], values[1]


def get_rng_state_all() -> list:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def initial_seed() -> int:
    from .. import random

    return random.cuda_initial_seed()


def seed() -> None:
    """Seed the GPU generators with a fresh random seed (torch.cuda.seed)."""
    manual_seed(int(np.random.SeedSequence().entropy % (2**63 - 1)))


seed_all = seed


class Event:
    """A CUDA event (torch.cuda.Event): record() it on the current stream, then elapsed_time(other) gives
    the milliseconds between two recorded events as the GPU measured them (not the host's clock).
    enable_timing=True is needed for elapsed_time, as in torch."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        cupy = _device.require_cuda("cuda.Event")
        if interprocess:
            raise NotImplementedError("cuda.Event: interprocess events are not supported in minidl")
        self.enable_timing = enable_timing
        self._event = cupy.cuda.Event(block=blocking, disable_timing=not enable_timing)

    def record(self, stream=None):
        """Record on `stream` (a minidl.cuda.Stream; the current stream when None)."""
        self._event.record(getattr(stream, "_stream", stream))

    def synchronize(self):
        self._event.synchronize()

    def query(self) -> bool:
        return self._event.done

    def wait(self, stream=None):
        cupy = _device.require_cuda("cuda.Event.wait")
        (getattr(stream, "_stream", stream) or cupy.cuda.get_current_stream()).wait_event(self._event)

    def elapsed_time(self, end_event) -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("cuda.Event.elapsed_time: both events must be created with enable_timing=True")
        cupy = _device.require_cuda("cuda.Event.elapsed_time")
        return float(cupy.cuda.get_elapsed_time(self._event, end_event._event))


def mem_get_info(device=None) -> tuple:
    """(free, total) bytes of the GPU as the driver sees them (cudaMemGetInfo): free does not count what minidl's
    memory pool holds for reuse (see memory_reserved)."""
    cupy = _device.require_cuda("cuda.mem_get_info")
    with cupy.cuda.Device(_index(device)):
        free, total = cupy.cuda.runtime.memGetInfo()
    return int(free), int(total)


class _NoGpuOutOfMemoryError(RuntimeError):
    """torch.cuda.OutOfMemoryError where there is no GPU path (nothing raises it there)."""




def is_initialized() -> bool:
    """True once the GPU is usable (minidl initialises CUDA lazily, at the first GPU array; torch's likewise)."""
    return is_available()


def init() -> None:
    """Initialise CUDA now (torch.cuda.init); raises with the reason when the GPU path is not there."""
    _device.require_cuda("cuda.init").cuda.runtime.getDeviceCount()


def get_arch_list() -> list:
    """The architectures minidl's kernels are compiled for: at run time for this GPU by NVRTC, so sm_<major><minor>
    of the current GPU ([] without one)."""
    if not is_available():
        return []
    major, minor = get_device_capability()
    return [f"sm_{major}{minor}"]


def is_tf32_supported() -> bool:
    return is_available() and get_device_capability()[0] >= 8


def can_device_access_peer(device, peer_device) -> bool:
    cupy = _device.require_cuda("cuda.can_device_access_peer")
    return bool(cupy.cuda.runtime.deviceCanAccessPeer(_index(device), _index(peer_device)))


_sync_debug_mode = 0


def set_sync_debug_mode(debug_mode) -> None:
    """Accepted for torch's programs ("default" / 0); minidl does not warn on synchronising calls ("warn" and
    "error" raise, so that a program relying on them learns it)."""
    global _sync_debug_mode
    mode = {"default": 0, "warn": 1, "error": 2}.get(debug_mode, debug_mode)
    if mode not in (0, 1, 2):
        raise RuntimeError(f"cuda.set_sync_debug_mode: expected 'default', 'warn', 'error' or 0-2, got {debug_mode!r}")
    if mode:
        raise NotImplementedError("cuda.set_sync_debug_mode: minidl has no sync debug mode (tests/gpu's "
                                  "test_training_step_never_waits_for_the_gpu shows how to check a step for syncs)")
    _sync_debug_mode = mode


def get_sync_debug_mode() -> int:
    return _sync_debug_mode


def ipc_collect() -> None:
    """Nothing to collect: minidl shares no GPU memory between processes."""


memory_cached = memory_reserved             # torch's old names
max_memory_cached = max_memory_reserved
reset_max_memory_cached = reset_peak_memory_stats


def _legacy_cuda_types():
    from ..autograd.legacy import cuda_typed

    return {name: cuda_typed(name) for name in ("FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor",
                                                "LongTensor", "IntTensor", "ShortTensor", "CharTensor",
                                                "ByteTensor", "BoolTensor")}


globals().update(_legacy_cuda_types())   # torch.cuda.FloatTensor, ...: see autograd/legacy.py


def __getattr__(name):
    if name == "OutOfMemoryError":
        # CuPy's, where CuPy is, so that `except torch.cuda.OutOfMemoryError:` catches what a failed allocation
        # raises (looked up late: importing minidl does not import CuPy). Unlike torch's it is a MemoryError, not a
        # RuntimeError: a program that catches RuntimeError and looks for "out of memory" does not catch it, and
        # building one takes CuPy's (size, total) arguments, not a message. Re-raising CuPy's error as a class of
        # minidl's would take an allocator hook: a Python frame in every allocation (tried in session 14, and left).
        cupy = _device._load_cupy()
        return cupy.cuda.memory.OutOfMemoryError if cupy is not None else _NoGpuOutOfMemoryError
    if name == "amp":   # torch.cuda.amp.autocast / GradScaler reached as attributes (imported late: amp imports nn)
        from ..amp import cuda_amp

        return cuda_amp
    raise AttributeError(f"module 'minidl.cuda' has no attribute {name!r}")
