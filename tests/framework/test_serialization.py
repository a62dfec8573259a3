"""minidl.save / minidl.load: round trips of state dicts without pickle, refusal of pickles,
atomic writes, and map_location."""
import io
import json
import os
import pickle
import zipfile

import numpy as np
import pytest

import minidl
from minidl import optim
from minidl.utils import serialization
from minidl.utils.serialization import CheckpointError
from minidl.utils.serialization import CheckpointError
from tests.conftest import DEVICES, GPU_AVAILABLE


def sample_state():
    rng = np.random.default_rng(0)
    return {
        "model": {
            "fc.weight": minidl.tensor(rng.standard_normal((4, 3)).astype(np.float32)),
            "fc.bias": minidl.tensor(rng.standard_normal(4), dtype=minidl.float64),
            "bn.num_batches_tracked": minidl.tensor(17),
            "mask": minidl.tensor([True, False, True]),
        },
        "raw": np.arange(6, dtype=np.int16).reshape(2, 3),
        "epoch": 7,
        "lr": 0.1,
        "weird_floats": [float("inf"), -0.0, float("nan"), 1e-310],
        "name": "resnet-ä",
        "flags": (True, False, None),
        3: "int key",
        (1, "a"): "tuple key",
        "np_scalar": np.float32(2.5),
        "empty": {"list": [], "tensor": minidl.zeros(0, 5)},
    }


def assert_same(a, b):
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, minidl.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and a.device == b.device
        np.testing.assert_array_equal(a.cpu().numpy(), b.cpu().numpy())
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b)
    else:
        assert a == b and (not isinstance(a, float) or np.copysign(1, a) == np.copysign(1, b))
        if isinstance(a, np.generic):
            assert a.dtype == b.dtype


def test_round_trip_keeps_types_dtypes_and_nesting(tmp_path):
    state = sample_state()
    minidl.save(state, tmp_path / "a.ckpt")
    assert_same(minidl.load(tmp_path / "a.ckpt"), state)
    minidl.save(state, str(tmp_path / "b.ckpt"))  # str paths too
    assert_same(minidl.load(str(tmp_path / "b.ckpt")), state)


def test_file_is_a_zip_of_npy_entries_and_json_without_pickle(tmp_path):
    minidl.save(sample_state(), tmp_path / "a.ckpt")
    with zipfile.ZipFile(tmp_path / "a.ckpt") as zf:
        names = zf.namelist()
        structure = json.loads(zf.read("structure.json"))
    assert "structure.json" in names and all(n.endswith(".npy") for n in names if n != "structure.json")
    assert structure["format"] == "minidl.checkpoint"
    # NumPy reads it as an .npz with pickling disabled: no entry needs unpickling.
    with np.load(tmp_path / "a.ckpt", allow_pickle=False) as npz:
        arrays = [npz[k] for k in npz.files if k != "structure.json"]
    assert any(a.shape == (4, 3) and a.dtype == np.float32 for a in arrays)


def test_file_objects(tmp_path):
    buf = io.BytesIO()
    minidl.save({"w": minidl.ones(2, 2)}, buf)
    buf.seek(0)
    np.testing.assert_array_equal(minidl.load(buf)["w"].numpy(), np.ones((2, 2), np.float32))


def test_optimizer_state_dict_round_trip(tmp_path):
    w = minidl.randn(3, 2, requires_grad=True)
    opt = optim.Adam([w], lr=0.01, betas=(0.8, 0.99))
    (w * w).sum().backward()
    opt.step()
    minidl.save(opt.state_dict(), tmp_path / "opt")
    loaded = minidl.load(tmp_path / "opt")
    assert loaded["param_groups"][0]["betas"] == (0.8, 0.99)
    assert loaded["param_groups"][0]["params"] == [0] and loaded["state"][0]["step"] == 1
    np.testing.assert_array_equal(loaded["state"][0]["exp_avg"].numpy(), opt.state[w]["exp_avg"].numpy())


def test_requires_grad_is_kept():
    buf = io.BytesIO()
    minidl.save({"p": minidl.randn(3, requires_grad=True), "q": minidl.randn(3)}, buf)
    buf.seek(0)
    out = minidl.load(buf)
    assert out["p"].requires_grad and out["p"].is_leaf and not out["q"].requires_grad


def test_unsupported_objects_raise_before_touching_the_file(tmp_path):
    path = tmp_path / "keep.ckpt"
    minidl.save({"v": 1}, path)
    before = path.read_bytes()

    class Model:
        pass

    with pytest.raises(TypeError, match=r"Model at obj\['net'\]"):
        minidl.save({"net": Model()}, path)
    with pytest.raises(TypeError, match="Python objects.*pickle cannot store it either"):
        minidl.save({"a": np.array([lambda: 1], dtype=object)}, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["keep.ckpt"]


class _Net(minidl.nn.Module):   # (module level: pickle finds a class by its name)
    def __init__(self):
        super().__init__()
        self.fc = minidl.nn.Linear(3, 2)
        self.bn = minidl.nn.BatchNorm1d(2)

    def forward(self, x):
        return self.bn(self.fc(x))


def test_a_whole_model_is_pickled_and_read_back_as_torch_load_does(tmp_path):
    """torch.save(model, path) as torch does it (pickle); load reads it as torch.load since 2.6: a restricted
    unpickler that builds tensors and arrays and only the classes allowed (safe_globals / add_safe_globals), or plain
    pickle under weights_only=False. The model comes back whole: class, parameters, buffers, training flag."""
    from minidl.utils.serialization import add_safe_globals, clear_safe_globals, get_safe_globals, safe_globals

    net = _Net()
    net(minidl.randn(5, 3))   # running statistics move
    net.eval()
    path = tmp_path / "model.pth"
    minidl.save(net, path)
    with pytest.raises(CheckpointError, match=r"weights-only load refused .*_Net.*safe_globals\(\[_Net\]\)"):
        minidl.load(path)
    with pytest.raises(CheckpointError, match=r"refused minidl\.nn\.layers\.linear\.Linear"):
        with safe_globals([_Net]):
            minidl.load(path)
    x = minidl.randn(4, 3)
    for back in (minidl.load(path, weights_only=False), _load_allowed(path, safe_globals)):
        assert type(back) is _Net and not back.training
        np.testing.assert_array_equal(back(x).detach().numpy(), net(x).detach().numpy())
        np.testing.assert_array_equal(back.bn.running_mean.numpy(), net.bn.running_mean.numpy())
    assert get_safe_globals() == []   # the context restored the list
    add_safe_globals([_Net, minidl.nn.Linear, minidl.nn.BatchNorm1d])
    try:
        assert type(minidl.load(path)) is _Net
    finally:
        clear_safe_globals()
    moved = minidl.load(path, weights_only=False, map_location="cpu")
    assert str(moved.fc.weight.device) == "cpu"
    minidl.save({"sd": net.state_dict()}, path)   # plain data: read without any of it, as before
    assert set(minidl.load(path)["sd"]) == set(net.state_dict())


def _load_allowed(path, safe_globals):
    with safe_globals([_Net, minidl.nn.Linear, minidl.nn.BatchNorm1d]):
        return minidl.load(path)


def test_a_restricted_load_refuses_a_pickle_that_calls_a_function(tmp_path):
    """A crafted checkpoint whose pickle would call os.system: the restricted load names it and runs nothing."""
    import zipfile

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    path = tmp_path / "evil.pth"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("object.pkl", pickle.dumps(Evil()))
        zf.writestr("structure.json", json.dumps({"format": "minidl.checkpoint", "version": 2,
                                                  "pickled": "object.pkl", "class": "x.Evil"}))
    with pytest.raises(CheckpointError, match=r"refused (posix|os|nt)\.system"):
        minidl.load(path)
    assert not (tmp_path / "pwned").exists()


def test_crash_mid_save_leaves_the_previous_file_intact(tmp_path, monkeypatch):
    path = tmp_path / "model.ckpt"
    minidl.save({"w": minidl.ones(3), "step": 1}, path)
    real_write = np.lib.format.write_array
    calls = []

    def write_then_crash(fp, array, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the first array is already in the temporary file
            raise OSError("disk full (simulated)")
        return real_write(fp, array, **kwargs)

    monkeypatch.setattr(np.lib.format, "write_array", write_then_crash)
    with pytest.raises(OSError, match="simulated"):
        minidl.save({"w": minidl.zeros(3), "b": minidl.zeros(2), "step": 2}, path)
    monkeypatch.undo()
    assert len(calls) == 2
    old = minidl.load(path)
    assert old["step"] == 1 and np.array_equal(old["w"].numpy(), np.ones(3, np.float32))
    assert os.listdir(tmp_path) == ["model.ckpt"]  # the temporary file was removed


def test_save_writes_through_a_temporary_file_and_fsyncs(tmp_path, monkeypatch):
    path = tmp_path / "model.ckpt"
    replaced, synced = [], []
    real_replace, real_fsync = os.replace, os.fsync
    monkeypatch.setattr(os, "replace", lambda a, b: (replaced.append((a, b)), real_replace(a, b))[1])
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    minidl.save({"w": minidl.ones(3)}, path)
    assert len(replaced) == 1 and os.path.dirname(replaced[0][0]) == str(tmp_path)
    assert replaced[0][1] == str(path) and synced


def test_pickle_files_are_refused(tmp_path):
    path = tmp_path / "evil.pt"
    path.write_bytes(pickle.dumps({"w": np.ones(3)}))
    with pytest.raises(CheckpointError, match="pickle"):
        minidl.load(path)


def test_torch_save_files_are_read_without_unpickling_code(tmp_path):
    """torch.save files load through a restricted unpickler (tests/framework/test_torch_checkpoints.py has the
    details and the crafted files); a plain pickle is still refused."""
    torch = pytest.importorskip("torch")
    path = tmp_path / "torch.pt"
    torch.save({"w": torch.ones(3)}, path)
    assert minidl.load(path)["w"].tolist() == [1.0, 1.0, 1.0]
    (tmp_path / "plain.pkl").write_bytes(pickle.dumps({"w": 1}, protocol=2))
    with pytest.raises(CheckpointError, match="plain pickle"):
        minidl.load(tmp_path / "plain.pkl")


def test_object_arrays_inside_a_zip_are_refused(tmp_path):
    path = tmp_path / "objects.ckpt"
    with zipfile.ZipFile(path, "w") as zf:
        with zf.open("arr_0.npy", "w") as fh:
            np.lib.format.write_array(fh, np.array([{"a": 1}], dtype=object), allow_pickle=True)
        structure = {"format": "minidl.checkpoint", "version": 1,
                     "object": {"type": "ndarray", "entry": "arr_0.npy"}}
        zf.writestr("structure.json", json.dumps(structure))
    with pytest.raises(CheckpointError, match="Python objects"):
        minidl.load(path)


def test_other_files_are_refused(tmp_path):
    (tmp_path / "text").write_text("hello")
    with pytest.raises(CheckpointError, match="not a minidl checkpoint"):
        minidl.load(tmp_path / "text")
    np.savez(tmp_path / "plain.npz", a=np.ones(2))
    with pytest.raises(CheckpointError, match="no structure.json"):
        minidl.load(tmp_path / "plain.npz")


def test_map_location_errors():
    buf = io.BytesIO()
    minidl.save({"w": minidl.ones(2)}, buf)
    buf.seek(0)
    with pytest.raises(TypeError, match="map_location"):
        minidl.load(buf, map_location={"cuda": "cpu"})
    with pytest.raises(ValueError, match="unknown device"):
        minidl.load(buf, map_location="tpu")
    if not GPU_AVAILABLE:
        with pytest.raises(RuntimeError, match="CuPy"):
            minidl.load(buf, map_location="cuda")


def test_tensors_saved_on_a_gpu_load_on_the_cpu_when_there_is_none(tmp_path, monkeypatch):
    # Write a checkpoint as a GPU run would (device recorded as cuda:0), then load without a GPU.
    minidl.save({"w": minidl.ones(2)}, tmp_path / "c")
    with zipfile.ZipFile(tmp_path / "c") as zf:
        entries = {n: zf.read(n) for n in zf.namelist()}
    structure = json.loads(entries["structure.json"])
    structure["object"]["items"][0][1]["device"] = "cuda:0"
    entries["structure.json"] = json.dumps(structure).encode()
    with zipfile.ZipFile(tmp_path / "c", "w") as zf:
        for n, data in entries.items():
            zf.writestr(n, data)
    monkeypatch.setattr(serialization._device, "cuda_unavailable_reason", lambda: "no GPU (simulated)")
    w = minidl.load(tmp_path / "c")["w"]
    assert w.device == minidl.device("cpu") and np.array_equal(w.numpy(), np.ones(2, np.float32))


@pytest.mark.parametrize("device", DEVICES)
def test_map_location_puts_tensors_on_that_device(device, tmp_path):
    state = {"w": minidl.randn(3, 4, device=device), "step": 3}
    minidl.save(state, tmp_path / "c")
    same = minidl.load(tmp_path / "c")
    assert same["w"].device == minidl.device(device)
    on_cpu = minidl.load(tmp_path / "c", map_location="cpu")
    assert on_cpu["w"].device == minidl.device("cpu")
    np.testing.assert_array_equal(on_cpu["w"].numpy(), state["w"].cpu().numpy())
    if GPU_AVAILABLE:
        on_gpu = minidl.load(tmp_path / "c", map_location="cuda")
        assert on_gpu["w"].is_cuda
        np.testing.assert_array_equal(on_gpu["w"].cpu().numpy(), state["w"].cpu().numpy())


def test_parameters_and_a_model_state_dict_round_trip(tmp_path):
    nn = pytest.importorskip("minidl.nn")
    minidl.manual_seed(0)
    model = nn.Linear(5, 3)
    minidl.save({"model": model.state_dict(), "p": nn.Parameter(minidl.randn(2))}, tmp_path / "m")
    ckpt = minidl.load(tmp_path / "m")
    assert isinstance(ckpt["p"], nn.Parameter) and ckpt["p"].requires_grad
    fresh = nn.Linear(5, 3)
    fresh.load_state_dict(ckpt["model"])
    for (k, a), (k2, b) in zip(model.state_dict().items(), fresh.state_dict().items()):
        assert k == k2
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_saved_file_has_the_mode_open_would_give(tmp_path):
    """save() writes through a private temporary file (mkstemp: 0600); the result is an ordinary
    file: 0666 less the umask, as open() would make it."""
    import os

    import minidl

    old = os.umask(0o027)
    try:
        minidl.save({"w": minidl.ones(2)}, tmp_path / "a.mdl")
    finally:
        os.umask(old)
    assert (tmp_path / "a.mdl").stat().st_mode & 0o777 == 0o640
    minidl.save({"w": minidl.ones(2)}, tmp_path / "b.mdl")
    assert (tmp_path / "b.mdl").stat().st_mode & 0o777 == 0o666 & ~old
