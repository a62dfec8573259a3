"""minidl.hub (torch.hub's weight download): a checkpoint saved by torch, fetched from a file:// URL into the hub
directory once (the second call reads the cached file), checked against the SHA-256 prefix in its name, loaded
with minidl.load; hub.load says it is out of scope."""
import hashlib

import numpy as np
import pytest
import torch

import minidl


def test_load_state_dict_from_url_downloads_once_and_checks_the_hash(tmp_path):
    model = torch.nn.Linear(3, 2)
    src = tmp_path / "weights.pt"
    torch.save(model.state_dict(), src)
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    named = tmp_path / f"linear-{digest[:8]}.pth"
    named.write_bytes(src.read_bytes())
    minidl.hub.set_dir(tmp_path / "hub")
    try:
        state = minidl.hub.load_state_dict_from_url(named.as_uri(), progress=False, check_hash=True)
        cached = tmp_path / "hub" / "checkpoints" / named.name
        assert cached.exists() and minidl.hub.get_dir() == str(tmp_path / "hub")
        ours = minidl.nn.Linear(3, 2)
        ours.load_state_dict(state)
        assert np.array_equal(ours.weight.detach().numpy(), model.weight.detach().numpy())
        named.unlink()   # the second call reads the cache
        assert set(minidl.hub.load_state_dict_from_url(named.as_uri(), progress=False)) == {"weight", "bias"}
        bad = tmp_path / "linear-deadbeef.pth"
        bad.write_bytes(src.read_bytes())
        with pytest.raises(RuntimeError, match="invalid hash value"):
            minidl.hub.load_state_dict_from_url(bad.as_uri(), progress=False, check_hash=True)
    finally:
        minidl.hub._hub_dir = None
    with pytest.raises(NotImplementedError, match="outside minidl's scope"):
        minidl.hub.load("pytorch/vision", "resnet18")
