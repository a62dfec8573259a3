"""Random numbers: one seeded generator for the CPU (NumPy's PCG64) and one for the GPU (CuPy's).

`minidl.manual_seed(s)` seeds both, so a script is reproducible on either device. Dropout masks come
from a counter-based generator (Philox4x32-10) whose state (seed, offset) is a (2,) uint64 array kept
where the data lives, one per device (`philox_state`): each dropout call claims its counters with
`minidl.primitives.philox_advance`, on the device, so a CUDA graph replay draws new masks with no host
involvement. The CPU and GPU states start equal (seed s, offset 0), so the same sequence of dropout
calls gives the same masks on either device.
"""
from __future__ import annotations

import contextlib

import numpy as np

from . import _device

_cpu_rng = np.random.default_rng(0)
_seed = 0


_philox_states: dict = {}  # Device -> (2,) uint64 array (seed, offset), NumPy or CuPy


def manual_seed(seed: int):
    """Seed every generator minidl uses (CPU, GPU: the Philox states and CuPy's)."""
    global _cpu_rng, _seed, _cuda_seed
    _seed = int(seed)
    _cuda_seed = None
    _cpu_rng = np.random.default_rng(_seed)
    if _device.cuda_unavailable_reason() is None:
        _device._cupy.random.seed(_seed)
    for state in _philox_states.values():
        # In place: a captured CUDA graph keeps reading the same array.
        state[0] = np.uint64(_seed & 0xFFFFFFFFFFFFFFFF)
        state[1] = np.uint64(0)
    return _seed


_cuda_seed = None   # cuda.manual_seed's seed for GPU states made after it (None: manual_seed's)


def seed_cuda(seed: int) -> None:
    """Seed the GPU generators only (torch.cuda.manual_seed_all): every GPU's Philox state (seed, 0), and CuPy's."""
    global _cuda_seed
    _cuda_seed = int(seed)
    _device.require_cuda("cuda.manual_seed").random.seed(_cuda_seed)
    for device, state in _philox_states.items():
        if device.type == "cuda":
            state[0] = np.uint64(_cuda_seed & 0xFFFFFFFFFFFFFFFF)
            state[1] = np.uint64(0)


def philox_state(device):
    """The Philox generator of `device`: a (2,) uint64 array (seed, offset) on it, advanced in place by every dropout
    call there and, on a GPU, by every uniform and normal draw (CudaGenerator; minidl.primitives.philox_advance)."""
    device = _device.Device(device)
    state = _philox_states.get(device)
    if state is None:
        _device.check_not_capturing("the first random draw (dropout, rand, randn, ...) on a device",
                                    "its generator state is created with a copy from the host; run the "
                                    "step once eagerly before capturing")
        first = _cuda_seed if device.type == "cuda" and _cuda_seed is not None else _seed
        host = np.array([first & 0xFFFFFFFFFFFFFFFF, 0], dtype=np.uint64)
        state = _philox_states[device] = _device.move_array(host, device)
    return state


_states_by_device_id: dict = {}   # -1 (the CPU) or a CUDA device id -> the same arrays as _philox_states holds


def philox_state_of(array):
    """philox_state of the device `array` (NumPy or CuPy) lives on, found by its device id: no Device object is made
    (every dropout call asks). The generator arrays are made once per device and changed only in place, so the
    id's entry stays the device's state."""
    if type(array) is np.ndarray:
        key = -1
    else:
        key = getattr(getattr(array, "data", None), "device_id", None)
        if key is None:   # (not a NumPy or CuPy array: the general lookup)
            return philox_state(_device.device_of(array))
    state = _states_by_device_id.get(key)
    if state is None:
        state = _states_by_device_id[key] = philox_state(_device.device_of(array))
    return state


def initial_seed() -> int:
    return _seed


def cuda_initial_seed() -> int:
    """The seed the GPU generators were last given (cuda.manual_seed's, else manual_seed's)."""
    return _seed if _cuda_seed is None else _cuda_seed


def seed() -> int:
    """Seed every generator with a fresh random seed and return it (torch.seed()).

    minidl starts from seed 0 where torch draws a random seed per process: a student's run gives the
    same numbers every time unless asked otherwise (docs/TORCH_COMPAT.md, intentional differences)."""
    fresh = int(np.random.SeedSequence().entropy % (2**63 - 1))
    manual_seed(fresh)
    return fresh


def cpu_generator() -> np.random.Generator:
    return _cpu_rng


def next_seed() -> int:
    """A fresh 63-bit seed (for dropout masks and data shuffling), drawn from the CPU generator."""
    return int(_cpu_rng.integers(0, 2**63 - 1))


class CudaGenerator:
    """minidl's generator of one GPU, as torch's: counter-based Philox4x32-10 with its (seed, offset) state on the
    device (philox_state, the state dropout draws from too). random() and standard_normal() (what rand, randn,
    normal_, uniform_, bernoulli_, exponential_ and the initialisers use) and randint() / permutation() claim their
    counters with one launch (philox_advance) and fill the array from them with another (philox_uniform /
    philox_normal / philox_bits): no host read, so
    cuda.get_rng_state / set_rng_state restore the stream exactly and a CUDA graph replays fresh numbers. randint and
    randperm use the raw words (philox_bits). The rest (multinomial's choice, gamma, poisson, ranges past 2^32) are
    CuPy's generator's (cupy.random, seeded by manual_seed), which that state does not hold."""

    def __init__(self, device, state=None):
        self.device = _device.Device(device)
        self.state = state   # a minidl.Generator(device="cuda")'s own (seed, offset); None: the device's global one

    def _claim(self, size):
        """(shape, the (seed, offset) claimed for its elements on the device)."""
        from . import primitives as P

        shape = () if size is None else (tuple(size) if hasattr(size, "__len__") else (int(size),))
        n = 1
        for d in shape:
            n *= int(d)
        state = philox_state(self.device) if self.state is None else self.state
        return shape, P.philox_advance(state, n)

    def _fill(self, op, size, dtype):
        from . import primitives as P

        shape, claimed = self._claim(size)
        dtype = np.dtype(dtype)
        out = getattr(P, op)(shape, claimed, dtype=np.float64 if dtype == np.float64 else np.float32)
        return out if out.dtype == dtype else out.astype(dtype)

    def random(self, size=None, dtype=np.float64):
        """Uniform on [0, 1) (24 random bits, as torch's float32 draws)."""
        return self._fill("philox_uniform", size, dtype)

    def standard_normal(self, size=None, dtype=np.float64):
        return self._fill("philox_normal", size, dtype)

    def _bits(self, size):
        from . import primitives as P

        return P.philox_bits(*self._claim(size))

    def randint(self, low, high=None, size=None, dtype=np.int64):
        """low + word % (high - low) (ranges up to 2^32; the bias of the modulo is below range / 2^32)."""
        low, high = (0, low) if high is None else (low, high)
        span = int(high) - int(low)
        if not 0 < span <= 1 << 32:
            return _device.require_cuda().random.randint(low, high, size=size, dtype=dtype)
        return ((self._bits(size).astype(np.int64) % span) + int(low)).astype(dtype)

    def integers(self, low, high=None, size=None, dtype=np.int64):
        """NumPy's name for randint (what a draw with a minidl.Generator calls)."""
        return self.randint(low, high, size, dtype)

    def permutation(self, n):
        """The order of n random words (argsort: ties, rare below n ~ 2^16, keep the index order)."""
        return self._bits((int(n),)).argsort().astype(np.int64)

    def __getattr__(self, name):   # choice, standard_gamma, poisson, ...: CuPy's generator
        return getattr(_device.require_cuda().random, name)


_cuda_generators: dict = {}   # Device -> CudaGenerator


def _rng_for(device):
    device = _device.Device(device)
    if device.type == "cpu":
        return _cpu_rng
    if device.type == "meta":   # draws of the right shape and no numbers (an initialiser on a meta parameter)
        from . import _meta

        return _meta.rng
    _device.require_cuda()
    generator = _cuda_generators.get(device)
    if generator is None:
        generator = _cuda_generators[device] = CudaGenerator(device)
    return generator


def uniform_array(shape, low, high, dtype, device="cpu"):
    dtype = np.dtype(dtype)
    return (_rng_for(device).random(shape, dtype=np.float64) * (high - low) + low).astype(dtype)


def normal_array(shape, mean, std, dtype, device="cpu"):
    dtype = np.dtype(dtype)
    return (_rng_for(device).standard_normal(shape, dtype=np.float64) * std + mean).astype(dtype)


def standard_gamma_array(concentration, dtype, device="cpu"):
    """Gamma(concentration, 1) variates, one per element of the concentration array (on its device)."""
    rng = _rng_for(device)
    return rng.standard_gamma(concentration.astype(np.float64)).astype(dtype)


def poisson_array(rate, dtype, device="cpu"):
    """Poisson(rate) counts, one per element of the rate array (on its device), as `dtype`."""
    rng = _rng_for(device)
    return rng.poisson(rate.astype(np.float64)).astype(dtype)


def integers_array(low, high, shape, dtype, device="cpu"):
    rng = _rng_for(device)
    if _device.Device(device).type == "cpu":
        return rng.integers(low, high, size=shape).astype(dtype)
    return rng.randint(low, high, size=shape).astype(dtype)


def permutation_array(n, device="cpu"):
    rng = _rng_for(device)
    if _device.Device(device).type == "cpu":
        return rng.permutation(n)
    return rng.permutation(n)


def get_rng_state():
    """The CPU generator's state (torch.get_rng_state): a uint8 tensor holding NumPy's PCG64 state, the seed and
    the CPU dropout stream's (seed, offset), to hand back to set_rng_state (a checkpoint's "rng_state")."""
    from .autograd.tensor import Tensor

    cpu = _philox_states.get(_device.Device("cpu"))
    state = {"pcg64": _cpu_rng.bit_generator.state, "seed": _seed,
             "philox": None if cpu is None else (int(cpu[0]), int(cpu[1]))}
    return Tensor._make(np.frombuffer(repr(state).encode(), dtype=np.uint8).copy())


def set_rng_state(new_state) -> None:
    """Restore a state get_rng_state returned (the draws after it repeat those after it was taken)."""
    import ast

    global _seed
    raw = bytes(np.asarray(getattr(new_state, "_data", new_state), dtype=np.uint8))
    try:
        state = ast.literal_eval(raw.decode())
        _cpu_rng.bit_generator.state = state["pcg64"]
    except (ValueError, SyntaxError, KeyError, TypeError, UnicodeDecodeError):
        raise RuntimeError("set_rng_state: not a state minidl.get_rng_state() returned (minidl's generator is NumPy's "
                           "PCG64, not torch's Mersenne Twister: torch's byte states do not load)") from None
    _seed = state["seed"]
    if state["philox"] is not None:
        philox = philox_state("cpu")
        philox[0], philox[1] = np.uint64(state["philox"][0]), np.uint64(state["philox"][1])


def get_philox_states() -> dict:
    """{device string: (seed, offset)} of every dropout generator made so far, as host ints (a host
    read on the GPU: for checkpoints, not for the training step)."""
    out = {}
    for device, state in _philox_states.items():
        host = _device.move_array(state, "cpu")
        out[str(device)] = (int(host[0]), int(host[1]))
    return out


def set_philox_states(states: dict) -> None:
    """Restore what get_philox_states returned (in place, so a captured graph keeps its array)."""
    for device, (seed, offset) in states.items():
        state = philox_state(device)
        state[0] = np.uint64(int(seed))
        state[1] = np.uint64(int(offset))


class Generator:
    """torch.Generator: an independent, seedable random stream. `minidl.Generator().manual_seed(0)` can be
    passed as `generator=` to rand/randn/randint/randperm/normal/multinomial/bernoulli, to the samplers and to
    DataLoader (which continue its stream from epoch to epoch).

    A CPU generator is NumPy's PCG64. A CUDA generator (`Generator(device="cuda")`, as diffusers' pipelines seed
    theirs) is a Philox (seed, offset) pair on that GPU of its own, drawn from as the global GPU stream is
    (CudaGenerator): the same seed gives the numbers `cuda.manual_seed` with that seed gives, and get_state /
    set_state are the 16 bytes `cuda.get_rng_state` returns. The draws CuPy's generator makes on the GPU (gamma,
    poisson, multinomial) do not take a generator."""

    def __init__(self, device="cpu"):
        self.device = _device.Device(device)
        if self.device.type not in ("cpu", "cuda"):
            raise RuntimeError(f"minidl.Generator: no generator for the {self.device.type} device (cpu or cuda)")
        if self.device.type == "cuda":
            _device.require_cuda("Generator(device='cuda')")
            self._cuda_state = _device.move_array(np.zeros(2, dtype=np.uint64), self.device)
            self.rng = CudaGenerator(self.device, self._cuda_state)
        self.manual_seed(int(np.random.SeedSequence().entropy % (2**63)))

    def manual_seed(self, seed):
        self._seed = int(seed)
        if self.device.type == "cuda":
            self._write_cuda_state(self._seed & 0xFFFFFFFFFFFFFFFF, 0)
        else:
            self.rng = np.random.default_rng(self._seed)
        return self

    def _write_cuda_state(self, seed, offset):
        """In place (a CUDA graph that captured draws from this generator keeps reading the same array)."""
        self._cuda_state.set(np.array([seed, offset], dtype=np.uint64))

    def seed(self):
        return self.manual_seed(int(np.random.SeedSequence().entropy % (2**63)))._seed

    def initial_seed(self):
        return self._seed

    def get_state(self):
        """A uint8 tensor on the CPU: PCG64's state (CPU), or the 16 bytes of the Philox (seed, offset) (CUDA; reads
        the device, a synchronisation)."""
        from .autograd.tensor import Tensor

        if self.device.type == "cuda":
            return Tensor._make(_device.move_array(self._cuda_state, "cpu").view(np.uint8).copy())
        state = self.rng.bit_generator.state
        return Tensor._make(np.frombuffer(repr(state).encode(), dtype=np.uint8).copy())

    def set_state(self, state):
        raw = np.ascontiguousarray(np.asarray(getattr(state, "_data", state)))
        if self.device.type == "cuda":
            if raw.dtype != np.uint8 or raw.size != 16:
                raise RuntimeError(f"Generator.set_state: a CUDA generator's state is the 16 bytes get_state() "
                                   f"returns, got {raw.size} values of {raw.dtype}")
            seed, offset = raw.reshape(-1).view(np.uint64)
            self._write_cuda_state(seed, offset)
            return self
        import ast

        self.rng.bit_generator.state = ast.literal_eval(bytes(raw).decode())
        return self

    def __repr__(self):
        return f"<minidl.Generator object, device={self.device}>"


class _DefaultGenerator(Generator):
    """torch.default_generator: minidl's global CPU generator as a Generator object (what draws without a generator=
    use). Seeding it seeds the CPU stream as minidl.manual_seed does (the GPU streams are left alone, as torch's);
    get_state / set_state are get_rng_state / set_rng_state."""

    def __init__(self):
        self.device = _device.Device("cpu")

    @property
    def rng(self):
        return _cpu_rng

    @property
    def _seed(self):
        return _seed

    def manual_seed(self, seed):
        global _cpu_rng, _seed
        _seed = int(seed)
        _cpu_rng = np.random.default_rng(_seed)
        cpu = _philox_states.get(_device.Device("cpu"))
        if cpu is not None:
            cpu[0], cpu[1] = np.uint64(_seed & 0xFFFFFFFFFFFFFFFF), np.uint64(0)
        return self

    def get_state(self):
        return get_rng_state()

    def set_state(self, state):
        set_rng_state(state)
        return self

    def __repr__(self):
        return "<minidl.Generator object (the default CPU generator)>"


default_generator = _DefaultGenerator()


def rng_of(generator, device):
    """The NumPy/CuPy generator to draw from: `generator` (a minidl.Generator of the same device type as the draw)
    or the global one of `device`."""
    if generator is None:
        return _rng_for(device)
    if not isinstance(generator, Generator):
        raise TypeError(f"generator must be a minidl.Generator, got {type(generator).__name__}")
    wanted = _device.Device(device).type
    if wanted == "meta":
        return _rng_for(device)
    if generator.device.type != wanted:
        raise RuntimeError(f"Expected a '{wanted}' device type for generator but found '{generator.device.type}' "
                           f"(as in torch: a {generator.device.type.upper()} minidl.Generator draws "
                           f"{generator.device.type.upper()} numbers only)")
    return generator.rng


@contextlib.contextmanager
def fork_rng(devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices", device_type="cuda"):
    """The random state as it was when the block began, restored when it ends (torch.random.fork_rng): draws
    inside the block do not change the draws after it. The CPU generator and the Philox streams (the CPU's
    dropout stream and each GPU's) used so far."""
    if not enabled:
        yield
        return
    cpu_state, philox = get_rng_state(), get_philox_states()
    try:
        yield
    finally:
        set_rng_state(cpu_state)
        set_philox_states(philox)
