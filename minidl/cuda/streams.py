"""CUDA streams, as torch.cuda's: `Stream`, `current_stream`, `default_stream`, `stream(s)` and `set_stream`.

A stream is a queue of GPU work: kernels queued on one stream run in order; kernels on two streams may overlap.
Every minidl launcher queues its kernel on CuPy's *current* stream (primitives/cuda/_launch.py), so
`with minidl.cuda.stream(s):` sends the ops of the block to `s`, as torch's does. Ordering between streams is the
program's: `s.wait_stream(other)` (or an Event) before using what `other` wrote, as in torch.

As torch's, a new Stream does not wait for the default stream (it is created non-blocking): a side stream that
reads a tensor the default stream is still writing must `wait_stream(current_stream())` first. CuPy's memory pool
keeps a free block on the stream that freed it, so memory is not handed across streams behind the program's back
(torch's caching allocator needs `record_stream` for that; minidl's `Tensor.record_stream` is accepted and not
needed).
"""
from __future__ import annotations

import contextlib

from .. import _device


class Stream:
    """torch.cuda.Stream(device=None, priority=0): a new stream on `device` (the current GPU by default). priority:
    0 is the default, a negative number is a higher priority (the GPU's range, see cudaDeviceGetStreamPriorityRange)."""

    def __init__(self, device=None, priority=0, *, _cupy_stream=None):
        cupy = _device.require_cuda("cuda.Stream")
        index = cupy.cuda.runtime.getDevice() if device is None else _device.Device(device).index
        if _cupy_stream is None:
            with cupy.cuda.Device(index):
                _cupy_stream = cupy.cuda.Stream(non_blocking=True, **({"priority": int(priority)} if priority else {}))
        self._stream = _cupy_stream
        self.device = _device.Device(f"cuda:{index}")
        self.priority = int(priority)

    @property
    def cuda_stream(self) -> int:
        """The cudaStream_t as an integer (0 is the legacy default stream)."""
        return int(self._stream.ptr)

    def query(self) -> bool:
        """True when all the work queued on this stream has finished."""
        return bool(self._stream.done)

    def synchronize(self) -> None:
        """Wait (on the host) for all the work queued on this stream."""
        self._stream.synchronize()

    def wait_event(self, event) -> None:
        """Work queued on this stream after this call waits for `event` (an Event recorded on another stream)."""
        self._stream.wait_event(event._event)

    def wait_stream(self, stream) -> None:
        """Work queued on this stream after this call waits for everything queued on `stream` so far."""
        if stream != self:
            self.wait_event(stream.record_event())

    def record_event(self, event=None):
        """Record `event` (a new Event when None) on this stream, and return it."""
        from . import Event

        event = Event() if event is None else event
        event.record(self)
        return event

    def __enter__(self):
        self._context = stream(self)
        return self._context.__enter__()

    def __exit__(self, *exc):
        return self._context.__exit__(*exc)

    def __eq__(self, other):
        return isinstance(other, Stream) and other.cuda_stream == self.cuda_stream and other.device == self.device

    def __hash__(self):
        return hash((self.cuda_stream, str(self.device)))

    def __repr__(self):
        return f"<torch.cuda.Stream device={self.device} cuda_stream={self.cuda_stream:#x}>"


class ExternalStream(Stream):
    """A stream created elsewhere (another library's cudaStream_t, as an integer), as torch.cuda.ExternalStream."""

    def __init__(self, stream_ptr, device=None):
        import warnings

        cupy = _device.require_cuda("cuda.ExternalStream")
        with warnings.catch_warnings():   # CuPy 14 deprecates ExternalStream for objects with __cuda_stream__; a
            warnings.simplefilter("ignore", DeprecationWarning)   # bare pointer, as torch takes, still needs it
            external = cupy.cuda.ExternalStream(int(stream_ptr))
        super().__init__(device, _cupy_stream=external)


def _wrap(cupy_stream):
    return Stream(_cupy_stream=cupy_stream)


def current_stream(device=None) -> Stream:
    """The stream minidl's kernels are queued on now, on `device` (the current GPU by default)."""
    cupy = _device.require_cuda("cuda.current_stream")
    if device is None:
        return _wrap(cupy.cuda.get_current_stream())
    with cupy.cuda.Device(_device.Device(device).index):
        return _wrap(cupy.cuda.get_current_stream())


def default_stream(device=None) -> Stream:
    """The legacy default stream (cuda_stream 0), where minidl's kernels go unless a stream is made current."""
    cupy = _device.require_cuda("cuda.default_stream")
    s = _wrap(cupy.cuda.Stream.null)
    if device is not None:
        s.device = _device.Device(f"cuda:{_device.Device(device).index}")
    return s


def set_stream(s: Stream) -> None:
    """Make `s` the current stream (prefer `with cuda.stream(s):`, which restores the previous one)."""
    if s is not None:
        s._stream.use()


class StreamContext:
    """What cuda.stream(s) returns: `s` is current inside the block, the previous stream again after it. None does
    nothing (as torch's, so that `with cuda.stream(s if use_side else None):` works)."""

    def __init__(self, s):
        self.stream = s
        self._previous = None

    def __enter__(self):
        if self.stream is None:
            return None
        cupy = _device.require_cuda("cuda.stream")
        self._device = cupy.cuda.Device(self.stream.device.index)
        self._device.__enter__()
        self._previous = cupy.cuda.get_current_stream()
        self.stream._stream.use()
        return self.stream

    def __exit__(self, *exc):
        if self.stream is not None:
            self._previous.use()
            self._device.__exit__(*exc)
        return False


def stream(s) -> StreamContext:
    """`with minidl.cuda.stream(s):` queues the block's GPU work on stream `s` (torch.cuda.stream)."""
    return StreamContext(s)


@contextlib.contextmanager
def device(index):
    """`with minidl.cuda.device(1):` makes GPU 1 current inside the block ("cuda" means it), as torch.cuda.device.
    None or a negative index does nothing."""
    if index is None or (isinstance(index, int) and index < 0):
        yield
        return
    cupy = _device.require_cuda("cuda.device")
    with cupy.cuda.Device(index if isinstance(index, int) else _device.Device(index).index):
        yield


def device_of(obj):
    """`with cuda.device_of(tensor):` makes the tensor's GPU current (nothing for a CPU tensor), as torch's."""
    return device(obj.device.index if getattr(obj, "is_cuda", False) else None)
