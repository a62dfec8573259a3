"""torch.save files read by minidl.load (a restricted unpickler: no code from the file ever runs), and
minidl.save(..., format="torch") files read by torch.load(weights_only=True); a torch model + optimizer
checkpoint resumed in minidl trains on as torch does; crafted pickles are refused, naming the global."""
import io
import pickle
import zipfile

import numpy as np
import pytest
import torch

import minidl
import minidl.nn as nn
from minidl.utils.serialization import CheckpointError


def _torch_checkpoint(path):
    torch.manual_seed(0)
    obj = {
        "floats": torch.randn(3, 4), "halves": torch.randn(5).half(), "bf16": torch.randn(4).bfloat16(),
        "longs": torch.arange(6), "bools": torch.tensor([True, False]), "view": torch.arange(12.0)[2:11:3],
        "transposed": torch.randn(3, 2).t(), "empty": torch.zeros(0, 3), "scalar": torch.tensor(2.5),
        "param": torch.nn.Parameter(torch.randn(2)), "nested": [1, (2.5, "x"), {"k": None, 7: True}],
    }
    torch.save(obj, path)
    return obj


def test_torch_save_files_load_with_their_values(tmp_path):
    want = _torch_checkpoint(tmp_path / "t.pt")
    got = minidl.load(tmp_path / "t.pt")
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            theirs = value.detach().float().numpy() if value.dtype == torch.bfloat16 else value.detach().numpy()
            ours = got[key].numpy().astype(np.float32) if value.dtype == torch.bfloat16 else got[key].detach().numpy()
            assert ours.shape == theirs.shape and np.array_equal(ours, theirs), key
    assert got["halves"].dtype == minidl.float16 and got["bf16"].dtype == minidl.bfloat16
    assert got["longs"].dtype == minidl.int64 and got["bools"].dtype == minidl.bool_
    assert type(got["param"]).__name__ == "Parameter" and got["param"].requires_grad
    assert got["nested"] == [1, (2.5, "x"), {"k": None, 7: True}]


def test_minidl_writes_what_torch_loads(tmp_path):
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Linear(5, 2))
    obj = {"model": net.state_dict(), "epoch": 7, "half": minidl.randn(3).half(), "bf16": minidl.randn(2).bfloat16(),
           "param": net[0].weight, "cl": minidl.randn(2, 3, 4, 5).to(memory_format=minidl.channels_last)}
    minidl.save(obj, tmp_path / "m.pt", format="torch")
    back = torch.load(tmp_path / "m.pt", weights_only=True)
    assert back["epoch"] == 7 and list(back["model"]) == list(net.state_dict())
    for k, v in net.state_dict().items():
        assert np.array_equal(back["model"][k].numpy(), v.numpy()), k
    assert back["half"].dtype == torch.float16 and back["bf16"].dtype == torch.bfloat16
    assert isinstance(back["param"], torch.nn.Parameter)
    assert np.array_equal(back["cl"].numpy(), obj["cl"].numpy())
    assert np.array_equal(minidl.load(tmp_path / "m.pt")["model"]["2.weight"].numpy(), net[2].weight.detach().numpy())


def test_a_torch_training_checkpoint_resumes_in_minidl(tmp_path):
    torch.manual_seed(1)
    tnet = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    topt = torch.optim.Adam(tnet.parameters(), lr=1e-2)
    x = torch.randn(16, 4)
    y = torch.randint(0, 3, (16,))
    for _ in range(3):
        topt.zero_grad()
        torch.nn.functional.cross_entropy(tnet(x), y).backward()
        topt.step()
    torch.save({"model": tnet.state_dict(), "optimizer": topt.state_dict()}, tmp_path / "ckpt.pt")
    ckpt = minidl.load(tmp_path / "ckpt.pt")
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    net.load_state_dict(ckpt["model"])
    opt = minidl.optim.Adam(net.parameters(), lr=1e-2)
    opt.load_state_dict(ckpt["optimizer"])
    for _ in range(2):
        topt.zero_grad()
        torch.nn.functional.cross_entropy(tnet(x), y).backward()
        topt.step()
        opt.zero_grad()
        minidl.nn.functional.cross_entropy(net(minidl.tensor(x.numpy())), minidl.tensor(y.numpy())).backward()
        opt.step()
    for (name, p), tp in zip(net.named_parameters(), tnet.parameters()):
        assert np.allclose(p.detach().numpy(), tp.detach().numpy(), atol=1e-6), name


def _zip_with_pickle(path, payload: bytes, storages=None):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", payload)
        zf.writestr("archive/version", "3\n")
        for key, data in (storages or {}).items():
            zf.writestr(f"archive/data/{key}", data)


class _Evil:
    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        import os

        return (os.system, (self.command,))


@pytest.mark.parametrize("global_name, payload", [   # (protocol 2 names them posix.system, __builtin__.eval)
    (r"(os|posix)\.system", lambda marker: pickle.dumps(_Evil(f"touch {marker}"), protocol=2)),
    (r"(builtins|__builtin__)\.eval", lambda marker: pickle.dumps(type("E", (), {"__reduce__": lambda self: (eval, (
        f"open({str(marker)!r}, 'w')",))})(), protocol=2)),
])
def test_crafted_pickles_never_run(tmp_path, global_name, payload):
    marker = tmp_path / "pwned"
    _zip_with_pickle(tmp_path / "evil.pt", payload(marker))
    with pytest.raises(CheckpointError, match=global_name):
        minidl.load(tmp_path / "evil.pt")
    assert not marker.exists()


def test_damaged_torch_files_are_one_error(tmp_path):
    good = io.BytesIO()
    minidl.save({"w": minidl.randn(4)}, good, format="torch")
    with zipfile.ZipFile(io.BytesIO(good.getvalue())) as zf:
        pkl = zf.read("archive/data.pkl")
    _zip_with_pickle(tmp_path / "missing.pt", pkl)                     # the storage entry is gone
    with pytest.raises(CheckpointError, match="missing storage"):
        minidl.load(tmp_path / "missing.pt")
    _zip_with_pickle(tmp_path / "short.pt", pkl, {"0": b"\x00" * 7})   # 7 bytes for 4 floats
    with pytest.raises(CheckpointError, match="claims 4 elements"):
        minidl.load(tmp_path / "short.pt")
    _zip_with_pickle(tmp_path / "cut.pt", pkl[: len(pkl) // 2], {"0": b"\x00" * 16})
    with pytest.raises(CheckpointError, match="damaged"):
        minidl.load(tmp_path / "cut.pt")
    (tmp_path / "raw.pkl").write_bytes(pickle.dumps({"a": 1}, protocol=2))
    with pytest.raises(CheckpointError, match="plain pickle"):
        minidl.load(tmp_path / "raw.pkl")


def test_torch_save_and_load_through_the_runner(tmp_path):
    import subprocess
    import sys

    prog = tmp_path / "prog.py"
    prog.write_text(
        "import torch, torch.nn as nn\n"
        "m = nn.Linear(3, 2)\n"
        "torch.save(m.state_dict(), 'w.pt')\n"
        "m2 = nn.Linear(3, 2)\n"
        "m2.load_state_dict(torch.load('w.pt', weights_only=True))\n"
        "print('same', bool((m.weight == m2.weight).all()))\n")
    result = subprocess.run([sys.executable, "-m", "minidl.run", str(prog)], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "same True" in result.stdout
