"""The Handle: per-thread GPU state of the primitive library, in the spirit of cudnnHandle_t.

cuDNN asks the caller to create a handle per thread (and per device) that holds the stream the
library launches on, and leaves scratch memory ("workspace") and algorithm choices to the caller.
minidl's Handle holds the one of these that needs an object of its own:

* ``workspace``    one growable device buffer, reused by every call that needs scratch memory
                   (im2col columns, Winograd transforms, split-K partial sums, tap tables). It only
                   grows, so a training loop stops allocating after the first step.

The other two live where a reader of the call path meets them: the stream is CuPy's current stream
(``with cupy.cuda.Stream():`` and CUDA graph capture set it; every launcher launches on it), and the
algorithm choices belong to the caller, as in cuDNN: a layer's ConvolutionPlan holds the algorithm
of each direction per shape, and the prefer_fastest policy keeps its measurements in
convolution.py's cache. (The Handle once also carried a stream and an algorithm cache of its own that
nothing used; issue 18 removed them.)

Why per thread: two Python threads launching at once must not share one workspace (each would
overwrite the other's scratch data while its kernels still read it). ``get_handle()`` therefore
returns a handle stored in a ``threading.local``, one per (thread, device); nothing in a handle is
shared across threads, so no lock is needed.
"""
from __future__ import annotations

import contextlib
import threading

import cupy

_local = threading.local()


class Handle:
    """GPU state for one thread on one device: its workspace."""

    def __init__(self, device_id: int):
        self.device_id = device_id
        self._workspace = None  # cupy float32 array, grown on demand

    def workspace(self, nbytes: int):
        """A float32 device array of at least `nbytes` bytes (contents undefined), 256-byte aligned.

        Calls on one stream run in order, so reusing the buffer from call to call is safe; a larger
        request replaces it (the old block returns to CuPy's pool after the kernels queued on this
        stream that use it, because the pool is stream-ordered).
        """
        count = max(1, (int(nbytes) + 3) // 4)
        if self._workspace is None or self._workspace.size < count:
            self._workspace = None
            self._workspace = cupy.ndarray(count, dtype=cupy.float32)
        return self._workspace

    @property
    def workspace_size(self) -> int:
        """Bytes currently held by the workspace."""
        return 0 if self._workspace is None else int(self._workspace.nbytes)

    def release_workspace(self) -> None:
        self._workspace = None


@contextlib.contextmanager
def use_handle(handle: Handle):
    """Make `handle` this thread's handle for its device inside the block (CUDA graph capture uses
    a handle of the graph's own, so its workspace lives in the graph's memory pool)."""
    stack = getattr(_local, "overrides", None)
    if stack is None:
        stack = _local.overrides = []
    stack.append(handle)
    try:
        yield handle
    finally:
        stack.pop()


def get_handle() -> Handle:
    """The calling thread's handle for the current CuPy device (created on first use)."""
    device_id = cupy.cuda.Device().id
    overrides = getattr(_local, "overrides", None)
    if overrides and overrides[-1].device_id == device_id:
        return overrides[-1]
    handles = getattr(_local, "handles", None)
    if handles is None:
        handles = _local.handles = {}
    handle = handles.get(device_id)
    if handle is None:
        handle = handles[device_id] = Handle(device_id)
    return handle
