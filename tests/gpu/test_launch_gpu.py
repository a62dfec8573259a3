"""The launch path every launcher uses (minidl/primitives/cuda/_launch.Kernel): arguments packed into the layout the
driver reports for the kernel's parameters, then one cuLaunchKernel. Each kind of argument reaches the kernel with
its value (pointers, null, ints and floats of each width, a by-value record with padding), the same as CuPy's own
launch delivers; values of another kind than the first launch's rebuild the packing; the profiler still counts the
launches; attributes reach the RawKernel."""
import numpy as np
import pytest

import minidl
from minidl import primitives as P

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

SOURCE = r"""
struct Record { int a; double b; long long c; };
extern "C" __global__ void probe(double* out, int i, long long q, float f, double d, Record r, const float* p,
                                 unsigned char flag, short h, unsigned long long u)
{
    out[0] = i; out[1] = (double)q; out[2] = f; out[3] = d; out[4] = r.a; out[5] = r.b; out[6] = (double)r.c;
    out[7] = p == nullptr ? 1.0 : p[0]; out[8] = flag; out[9] = h; out[10] = (double)u;
}
"""
RECORD = np.dtype({"names": ["a", "b", "c"], "formats": ["<i4", "<f8", "<i8"], "offsets": [0, 8, 16],
                   "itemsize": 24})


def _kernel():
    from minidl.primitives.cuda._launch import Kernel

    return Kernel(cupy.RawModule(code=SOURCE).get_function("probe"))


def _record(a, b, c):
    return np.array([(a, b, c)], dtype=RECORD).view(np.dtype((np.void, RECORD.itemsize)))


def _run(kernel, args):
    out = cupy.zeros(11, dtype=cupy.float64)
    kernel((1,), (1,), (out,) + args)
    return cupy.asnumpy(out)


def test_every_kind_of_argument_arrives_as_cupy_would_pass_it():
    kernel = _kernel()
    assert kernel._layout is not None, "the driver did not report the parameters' layout (cuFuncGetParamInfo)"
    assert [size for _, size in kernel._layout] == [8, 4, 8, 4, 8, 24, 8, 1, 2, 8]
    x = cupy.asarray([2.5], dtype=cupy.float32)
    args = (np.int32(-7), np.int64(-(2 ** 40)), np.float32(1.25), np.float64(-3.5), _record(9, 0.75, 2 ** 35), x,
            np.uint8(200), np.int16(-300), np.uint64(2 ** 63 + 5))
    want = [-7, -(2 ** 40), 1.25, -3.5, 9, 0.75, 2 ** 35, 2.5, 200, -300, float(2 ** 63 + 5)]
    np.testing.assert_array_equal(_run(kernel, args), want)
    cupy_out = cupy.zeros(11, dtype=cupy.float64)   # CuPy's own launch of the same arguments agrees
    kernel.kernel((1,), (1,), (cupy_out,) + args)
    np.testing.assert_array_equal(cupy.asnumpy(cupy_out), want)
    # a second launch reuses the packing: new values, same kinds; None is a null pointer; Python ints and floats
    args = (5, 7, 0.5, 2.0, _record(-1, 1.5, -3), None, 1, 2, 3)
    np.testing.assert_array_equal(_run(kernel, args), [5, 7, 0.5, 2.0, -1, 1.5, -3, 1.0, 1, 2, 3])


def test_other_kinds_of_values_rebuild_the_packing():
    kernel = _kernel()
    args = (np.int32(1), np.int64(2), np.float32(3), np.float64(4), _record(5, 6, 7), None, np.uint8(8),
            np.int16(9), np.uint64(10))
    np.testing.assert_array_equal(_run(kernel, args), [1, 2, 3, 4, 5, 6, 7, 1, 8, 9, 10])
    # a negative value where the first launch gave an unsigned one cannot be packed by the old format
    args = (np.int32(1), np.int64(2), np.float32(3), np.float64(4), _record(5, 6, 7), None, np.int8(-1),
            np.int16(9), np.int64(-10))
    np.testing.assert_array_equal(_run(kernel, args), [1, 2, 3, 4, 5, 6, 7, 1, 255, 9, -10 + 2.0 ** 64])


def test_a_wrong_argument_count_raises_naming_the_kernel():
    with pytest.raises(TypeError, match="kernel probe takes 10 arguments, the launcher gave 1"):
        _kernel()((1,), (1,), (cupy.zeros(11, dtype=cupy.float64),))


def test_the_profiler_counts_launches_and_attributes_reach_the_raw_kernel():
    from minidl.primitives.cuda._compile import get_kernel
    from minidl.primitives.cuda._launch import Kernel, function_pointer

    kernel = get_kernel("cast", "cast")
    assert isinstance(kernel, Kernel) and isinstance(kernel.kernel, cupy.RawKernel)
    assert function_pointer(kernel) == kernel.kernel.kernel.ptr
    kernel.max_dynamic_shared_size_bytes = 1024
    assert kernel.kernel.max_dynamic_shared_size_bytes == 1024
    x = cupy.arange(1000, dtype=cupy.float32)
    with minidl.profiler.profile(activities=[minidl.profiler.ProfilerActivity.CUDA]) as prof:
        y = P.cast(x, np.float16)
    assert prof._launches == 1
    np.testing.assert_array_equal(cupy.asnumpy(y), np.arange(1000, dtype=np.float16))
