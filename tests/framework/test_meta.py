"""The meta device (minidl/_meta.py) against torch's: models built without values (torch.device("meta") as a
context, device="meta" factories), what a meta tensor knows (shape, dtype, device, repr), shape-only arithmetic,
load_state_dict(assign=True), to_empty, and the errors where values would be needed."""
import numpy as np
import pytest
import torch

import minidl
import minidl.nn as nn


def _net(lib):
    class Net(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = lib.nn.Conv2d(3, 4, 3)
            self.bn = lib.nn.BatchNorm2d(4)
            self.emb = lib.nn.Embedding(10, 4)
            self.lstm = lib.nn.LSTM(4, 5, batch_first=True)
            self.fc = lib.nn.Linear(5, 2)

        def forward(self, img, tok):
            h, _ = self.lstm(self.emb(tok))
            return self.fc(h[:, -1]) + self.bn(self.conv(img)).mean((2, 3))[:, :2]

    return Net


def test_a_model_built_on_meta_has_shapes_and_no_values_as_torch():
    for lib in (minidl, torch):
        with lib.device("meta"):
            model = _net(lib)()
        assert all(p.is_meta and str(p.device) == "meta" for p in model.parameters())
        assert model.bn.running_mean.is_meta
    ours = {k: (tuple(v.shape), str(v.dtype).replace("torch.", "")) for k, v in model.state_dict().items()}
    with minidl.device("meta"):
        mine = _net(minidl)()
    assert {k: (tuple(v.shape), str(v.dtype)) for k, v in mine.state_dict().items()} == ours
    assert repr(mine.fc.bias) == "Parameter containing:\ntensor(..., device='meta', size=(2,), requires_grad=True)"
    assert repr(minidl.zeros(2, 3, device="meta", dtype=minidl.float16)) == \
        "tensor(..., device='meta', size=(2, 3), dtype=minidl.float16)"


def test_building_on_meta_draws_no_random_numbers():
    minidl.manual_seed(0)
    with minidl.device("meta"):
        _net(minidl)()
    after_meta = minidl.rand(3).numpy()
    minidl.manual_seed(0)
    np.testing.assert_array_equal(minidl.rand(3).numpy(), after_meta)


def test_weights_reach_a_meta_model_by_assign_or_to_empty():
    minidl.manual_seed(0)
    ref = _net(minidl)().eval()
    img, tok = minidl.randn(2, 3, 6, 6), minidl.randint(0, 10, (2, 5))
    want = ref(img, tok).detach().numpy()
    with minidl.device("meta"):
        assigned = _net(minidl)()
    assigned.load_state_dict(ref.state_dict(), assign=True)
    assert not assigned.fc.weight.is_meta and isinstance(assigned.fc.weight, nn.Parameter)
    assert assigned.fc.weight.requires_grad and not assigned.bn.running_mean.is_meta
    np.testing.assert_array_equal(assigned.eval()(img, tok).detach().numpy(), want)
    emptied = _net(minidl)().to("meta").to_empty(device="cpu")
    assert str(emptied.fc.weight.device) == "cpu"
    emptied.load_state_dict(ref.state_dict())
    np.testing.assert_array_equal(emptied.eval()(img, tok).detach().numpy(), want)


def test_copying_into_a_meta_model_warns_that_nothing_is_copied():
    meta = nn.Linear(3, 2, device="meta")
    with pytest.warns(UserWarning, match="which is a no-op.*assign=True"):
        meta.load_state_dict(nn.Linear(3, 2).state_dict())
    assert meta.weight.is_meta


def test_meta_arithmetic_gives_shapes_and_dtypes_as_torch():
    def run(lib):
        x = lib.empty(3, 4, device="meta")
        w = lib.zeros(4, 5, device="meta")
        y = (x @ w) * 2 + 1
        return [(tuple(t.shape), str(t.dtype).replace("torch.", ""), str(t.device))
                for t in (y, x.t(), x[1:], x.reshape(2, 6), x.double(), x > 0, x.unsqueeze(0))]

    assert run(minidl) == run(torch)


def test_values_of_a_meta_tensor_are_refused_with_the_way_out():
    x = minidl.ones(2, 2, device="meta")
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor.*to_empty"):
        x.to("cpu")
    with pytest.raises(NotImplementedError, match="to_empty"):
        nn.Linear(2, 2, device="meta").to("cpu")
    with pytest.raises(RuntimeError, match="no values.*to_empty"):
        x.tolist()
    with pytest.raises((RuntimeError, AttributeError, TypeError), match="no values"):
        minidl.nn.functional.conv2d(minidl.ones(1, 1, 3, 3, device="meta"), minidl.ones(1, 1, 2, 2, device="meta"))
    with pytest.raises(ValueError, match="the meta device has no index"):
        minidl.device("meta:1")
