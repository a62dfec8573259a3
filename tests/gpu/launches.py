"""Which kernels a block of code launches, by name: for tests that count launches (the transposes of a layer's step,
a kernel a cached result should skip). Launchers keep their kernels in launch plans, so counting calls to get_kernel
would miss every launch after a problem's first; this records the launch itself (the CUfunction handed to
cuLaunchKernel by _launch.Kernel) and names it after the call from the kernels get_kernel has made."""
import contextlib


@contextlib.contextmanager
def kernel_launches():
    """with kernel_launches() as names: ... -> names: the launched kernels' names (template instantiations as
    their expression, e.g. "layout_transform<unsigned int>"), in launch order, filled when the block ends."""
    from minidl.primitives.cuda import _compile, _launch

    pointers = []
    real = _launch._launch_kernel

    def record(function, *args):
        pointers.append(function)
        return real(function, *args)

    names = []
    _launch._launch_kernel = record
    try:
        yield names
    finally:
        _launch._launch_kernel = real
        by_pointer = {kernel.ptr: key[1] for key, kernel in _compile._functions.items()}
        names.extend(by_pointer.get(p, f"<unknown kernel {p:#x}>") for p in pointers)


def layout_launches(names) -> int:
    """How many of the launched kernels are the layout primitive's transposes (kernels/layout.cu)."""
    return sum(name.startswith("layout_transform") for name in names)
