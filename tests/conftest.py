"""Shared test fixtures: devices, seeds, and the GPU skip rule.

Tests that touch the GPU are marked `gpu` and skipped (not failed) where no GPU is present. On the GPU
machine: `python3 -m pytest -m gpu`.
"""
import os

import numpy as np
import pytest
from hypothesis import settings

# CI runs the property tests with a fixed seed (derandomize) so a red run is reproducible; local runs
# explore new examples each time.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def _gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


GPU_AVAILABLE = _gpu_available()


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU and CuPy")
    skip_slow = pytest.mark.skip(reason="slow; set MINIDL_SLOW=1")
    for item in items:
        if "gpu" in item.keywords and not GPU_AVAILABLE:
            item.add_marker(skip_gpu)
        if "slow" in item.keywords and not os.environ.get("MINIDL_SLOW"):
            item.add_marker(skip_slow)


# Parametrize a test over devices with: @pytest.mark.parametrize("device", DEVICES)
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def rel_err(a, b) -> float:
    """‖a − b‖ / ‖b‖ in float64; NaN anywhere gives inf, so NaN never passes."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return float("inf")
    denom = np.linalg.norm(b.ravel())
    return float(np.linalg.norm((a - b).ravel()) / (denom if denom > 0 else 1.0))


def oracle_unavailable(exc: BaseException) -> bool:
    """True when torch (the oracle) failed because its own CPU kernels cannot run on this machine,
    e.g. oneDNN's bf16 LSTM without AVX-512 ("could not create a primitive descriptor"). A test then
    skips what it cannot check, saying why; it never fails for the oracle's sake."""
    text = str(exc)
    return "could not create a primitive" in text or "oneDNN" in text and "not supported" in text


# Every test that compares float32 GPU results with float64 references or torch at 1e-4 needs TF32 off
# (minidl's and PyTorch's default for convolutions and RNNs is backends.cudnn.allow_tf32 = True; TF32
# rounds the products' inputs to 10 bits). So every test runs with TF32 off on both sides, the device-
# parametrised framework tests too; the tests of the TF32 paths ask for it explicitly (math="tf32" on
# the primitives, or `with minidl.backends.cudnn.flags(allow_tf32=True)`). On the CPU the flag changes
# nothing.
@pytest.fixture(autouse=True)
def tf32_off():
    import minidl

    torch_flags = None
    try:
        import torch

        torch_flags = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    except ImportError:
        pass
    with minidl.backends.cudnn.flags(allow_tf32=False):
        yield
    if torch_flags is not None:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = torch_flags


def captured_without_arrival_counters(fn):
    """fn() recorded into a CUDA graph on a fresh stream with minidl's arrival counters cleared, so that the one-launch
    reductions (the last block adds the chunks) take their two-launch form, then replayed once: its result. The
    counters are put back after."""
    import cupy

    from minidl.primitives.cuda import _launch

    saved = dict(_launch._ARRIVALS)
    try:
        _launch._ARRIVALS.clear()
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:   # while capturing, arrival_counters gives None (no array can be zeroed inside a capture)
            stream.begin_capture()
            result = fn()
            graph = stream.end_capture()
            graph.launch(stream)
            stream.synchronize()
    finally:
        _launch._ARRIVALS.clear()
        _launch._ARRIVALS.update(saved)
    return result
