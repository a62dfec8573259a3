"""tests/framework/test_channels_last.py on the GPU: the same checks against torch (on the CPU), with minidl's
tensors on CUDA, so the channels-last paths of the CUDA kernels (NHWC convolutions, batch norm, pooling,
activations, dropout, CuPy's elementwise arithmetic) are exercised. TF32 is off (conftest)."""
import pytest

from tests.framework import test_channels_last as cpu_tests

pytestmark = pytest.mark.gpu

TESTS = [name for name in dir(cpu_tests) if name.startswith("test_")]


@pytest.fixture(autouse=True)
def _on_cuda(monkeypatch):
    pytest.importorskip("cupy")
    monkeypatch.setattr(cpu_tests, "DEVICE", "cuda")


@pytest.mark.parametrize("name", TESTS)
def test_channels_last_on_cuda(name, tmp_path):
    fn = getattr(cpu_tests, name)
    import inspect

    params = inspect.signature(fn).parameters
    kwargs = {}
    if "tmp_path" in params:
        kwargs["tmp_path"] = tmp_path
    marks = getattr(fn, "pytestmark", [])
    cases = [{}]
    for mark in marks:
        if mark.name == "parametrize":
            argname, values = mark.args
            cases = [dict(c, **{argname: v}) for c in cases for v in values]
    for case in cases:
        fn(**kwargs, **case)
