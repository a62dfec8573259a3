"""torch.cuda's API beyond the device queries, as torch's (session 14): the legacy type objects with their devices
(`Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`, `x.type(Tensor)`), NVTX ranges, streams and
the other names real programs call. On the CPU: what holds without a GPU (torch's answers there, and errors that
say why); the GPU behaviour is tested in tests/gpu/test_framework_gpu.py::test_streams_*."""
import numpy as np
import pytest
import torch

import minidl
from tests.conftest import GPU_AVAILABLE


def test_legacy_types_check_dtype_and_device_as_torch():
    for lib in (minidl, torch):
        t = lib.ones(2, 3)
        assert isinstance(t, lib.FloatTensor) and not isinstance(t, lib.DoubleTensor)
        assert not isinstance(t, lib.cuda.FloatTensor)
        assert isinstance(t.long(), lib.LongTensor) and not isinstance(t.long(), lib.cuda.LongTensor)
        assert t.type(lib.DoubleTensor).dtype == lib.float64
        assert t.type("torch.LongTensor").type() == "torch.LongTensor"
        assert isinstance(t.type(lib.FloatTensor), lib.FloatTensor)
        assert lib.FloatTensor(4, 1).fill_(1.0).shape == (4, 1)
    assert repr(minidl.FloatTensor) == "<class 'torch.FloatTensor'>"
    assert repr(minidl.cuda.LongTensor) == "<class 'torch.cuda.LongTensor'>"
    assert minidl.BFloat16Tensor([1.5]).type() == torch.BFloat16Tensor([1.5]).type() == "torch.BFloat16Tensor"


def test_the_older_gan_programs_type_idiom_runs():
    """eriklindernoren/PyTorch-GAN's lines: the tensor type chosen from cuda.is_available() (on the GPU in the GPU suite)."""
    cuda = minidl.cuda.is_available()
    Tensor = minidl.cuda.FloatTensor if cuda else minidl.FloatTensor   # noqa: N806 - the programs' name
    imgs = minidl.tensor(np.arange(6.0).reshape(2, 3))
    valid = minidl.autograd.Variable(Tensor(imgs.size(0), 1).fill_(1.0), requires_grad=False)
    real = minidl.autograd.Variable(imgs.type(Tensor))
    z = minidl.autograd.Variable(Tensor(np.random.default_rng(0).normal(0, 1, (2, 4))))
    assert valid.tolist() == [[1.0], [1.0]] and real.dtype == minidl.float32 and z.shape == (2, 4)
    assert isinstance(real, Tensor) and real.is_cuda == cuda


@pytest.mark.skipif(GPU_AVAILABLE, reason="the answers without a GPU")
def test_without_a_gpu_the_cuda_names_answer_or_say_why():
    assert minidl.cuda.get_arch_list() == [] and not minidl.cuda.is_initialized()
    assert not minidl.cuda.is_tf32_supported()
    assert minidl.cuda.get_sync_debug_mode() == 0
    with minidl.cuda.stream(None), minidl.cuda.device(None), minidl.cuda.device(-1):   # no-ops, as torch's
        pass
    with minidl.cuda.device_of(minidl.ones(1)):
        pass
    for call in (minidl.cuda.Stream, minidl.cuda.current_stream, minidl.cuda.default_stream,
                 minidl.cuda.mem_get_info, minidl.cuda.init):
        with pytest.raises(RuntimeError, match="CUDA path is not available"):
            call()
    with pytest.raises(RuntimeError, match="not available"):
        minidl.Generator(device="cuda")
    with pytest.raises(RuntimeError, match="not available"):
        minidl.ones(2).type(minidl.cuda.FloatTensor)
    assert issubclass(minidl.cuda.OutOfMemoryError, RuntimeError)
    assert minidl.cuda.amp.GradScaler.__module__ == "minidl.amp.cuda_amp"   # torch.cuda.amp as an attribute


def test_nvtx_ranges_nest_and_return_depths_as_nvtx():
    nvtx = minidl.cuda.nvtx
    assert nvtx.range_push("outer") == 0 and nvtx.range_push("inner") == 1
    assert nvtx.range_pop() == 1 and nvtx.range_pop() == 0
    assert nvtx.range_pop() == -1   # nothing open
    with nvtx.range("epoch {}", 3):
        assert nvtx.range_push("x") == 1
        nvtx.range_pop()
    nvtx.mark("here")
    handle = nvtx.range_start("async")
    nvtx.range_end(handle)
    assert nvtx.range_push("after") == 0 and nvtx.range_pop() == 0

    @nvtx.range("step")
    def step(x):
        return x + 1

    assert step(1) == 2


def test_sync_debug_mode_accepts_the_default_and_refuses_what_it_cannot_do():
    minidl.cuda.set_sync_debug_mode("default")
    minidl.cuda.set_sync_debug_mode(0)
    with pytest.raises(NotImplementedError, match="no sync debug mode"):
        minidl.cuda.set_sync_debug_mode("warn")
    with pytest.raises(RuntimeError, match="expected"):
        minidl.cuda.set_sync_debug_mode("loud")


def test_a_generator_draws_only_its_devices_numbers():
    g = minidl.Generator().manual_seed(0)
    assert "device=cpu" in repr(g)
    with pytest.raises(RuntimeError, match="Expected a 'cuda' device type for generator but found 'cpu'"):
        minidl.rand(2, generator=g, device="cuda")
    with pytest.raises(RuntimeError, match="no generator for the meta device"):
        minidl.Generator(device="meta")
