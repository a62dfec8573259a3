"""Issue 15, second corpus: bad inputs that must end in minidl's own error (naming the op and what is
wrong) and leave state unchanged. Written as an independent re-probe after the first corpus
(test_bad_input.py); each case was classified by hand (good / weak / bad) and the weak and bad ones fixed.
Cases that torch accepts too are listed in ACCEPTED and checked to run."""

import os
import pickle
import re
import tempfile

import pytest
import numpy as np
import minidl
import minidl.nn as nn
import minidl.nn.functional as F
import minidl.optim as optim
import minidl.primitives as P
from minidl.data import DataLoader, TensorDataset

cases = {}


def x2():
    return minidl.randn(2, 3)


def x4():
    return minidl.randn(2, 3, 5, 5)


def C(name, f):
    assert name not in cases, name
    cases[name] = f


# --- tensor ops: dims, dtypes, shapes (ops not in the first corpus) ---
C("narrow dim 5", lambda: x2().narrow(5, 0, 1))
C("narrow length too long", lambda: x2().narrow(1, 1, 5))
C("narrow negative length", lambda: x2().narrow(1, 0, -1))
C("index_select dim 3", lambda: x2().index_select(3, minidl.tensor([0])))
C("index_select float index", lambda: x2().index_select(0, minidl.tensor([0.0])))
C("index_select out of range", lambda: x2().index_select(0, minidl.tensor([5])))
C("index_select 2-d index", lambda: x2().index_select(0, minidl.tensor([[0]])))
C("gather out of range", lambda: x2().gather(1, minidl.tensor([[5, 0, 0], [0, 0, 0]])))
C("gather negative index", lambda: x2().gather(1, minidl.tensor([[-1, 0, 0], [0, 0, 0]])))
C("scatter src wrong dtype", lambda: x2().scatter(1, minidl.tensor([[0], [1]]), minidl.tensor([[1], [2]])))
C("scatter out of range", lambda: x2().scatter(1, minidl.tensor([[7], [1]]), 1.0))
C("scatter bad reduce", lambda: x2().scatter(1, minidl.tensor([[0], [1]]), 1.0, reduce="max"))
C("topk k too big", lambda: x2().topk(4))
C("topk negative k", lambda: x2().topk(-1))
C("topk dim 2", lambda: x2().topk(1, dim=2))
C("kthvalue k=0", lambda: x2().kthvalue(0))
C("sort dim 4", lambda: x2().sort(4))
C("cumsum dim 2", lambda: x2().cumsum(2))
C("cumsum no dim", lambda: x2().cumsum())
C("flip dim 3", lambda: x2().flip(3))
C("flip repeated dims", lambda: x2().flip(0, 0))
C("roll", lambda: x2().roll(1, 5))
C("tril 1-d", lambda: minidl.randn(3).tril())
C("norm p string", lambda: x2().norm("abc"))
C("norm nuc 1-d", lambda: minidl.randn(3).norm("nuc"))
C("norm int tensor", lambda: minidl.tensor([1, 2]).norm())
C("masked_fill float mask", lambda: x2().masked_fill(minidl.zeros(2, 3), 1.0))
C("masked_fill mask bad shape", lambda: x2().masked_fill(minidl.zeros(4, 3, dtype=minidl.bool_), 1.0))
C("masked_select bad mask shape", lambda: x2().masked_select(minidl.zeros(3, 2, dtype=minidl.bool_)))
C("expand to smaller", lambda: x2().expand(2, 2))
C("expand -1 new dim", lambda: x2().expand(-1, 2, 3))
C("view bad size", lambda: x2().view(4))
C("view two -1", lambda: x2().view(-1, -1))
C("repeat fewer dims", lambda: x2().repeat(2))
C("mm 1-d", lambda: minidl.randn(3).mm(minidl.randn(3, 2)))
C("mm shape mismatch", lambda: x2().mm(minidl.randn(2, 3)))
C("bmm 2-d", lambda: x2().bmm(minidl.randn(3, 2)))
C("bmm batch mismatch", lambda: minidl.randn(2, 2, 3).bmm(minidl.randn(3, 3, 2)))
C("matmul 0-d", lambda: minidl.tensor(1.0) @ minidl.tensor(2.0))
C("dot 2-d", lambda: x2().dot(x2()))
C("dot length mismatch", lambda: minidl.randn(3).dot(minidl.randn(4)))
C("mv mismatch", lambda: x2().mv(minidl.randn(2)))
C("div bad rounding", lambda: x2().div(2, rounding_mode="ceil"))
C("pow string", lambda: x2() ** "a")
C("clamp min>max", lambda: x2().clamp(1, 0))
C("clamp no bounds", lambda: x2().clamp())
C("unbind dim 2", lambda: x2().unbind(2))
C("new_full bad size", lambda: x2().new_full(3, 1.0))
C("arange zero step", lambda: minidl.arange(0, 10, 0))
C("arange wrong sign", lambda: minidl.arange(0, 10, -1))
C("linspace negative steps", lambda: minidl.linspace(0, 1, -1))
C("zeros negative", lambda: minidl.zeros(-1, 2))
C("randn float size", lambda: minidl.randn(2.5))
C("randint low>=high", lambda: minidl.randint(5, 5, (2,)))
C("eye negative", lambda: minidl.eye(-1))
C("full non-number", lambda: minidl.full((2,), "a"))
C("tensor ragged", lambda: minidl.tensor([[1, 2], [3]]))
C("tensor of strings", lambda: minidl.tensor(["a", "b"]))
C("view_as_complex odd", lambda: minidl.view_as_complex(minidl.randn(3, 4)))
C("item of many", lambda: x2().item())
C("bool of many", lambda: bool(x2()))
C("int of many", lambda: int(x2()))
C("index with 4 indices", lambda: x2()[0, 0, 0])
C("index out of range", lambda: x2()[5])
C("index bool mask wrong shape", lambda: x2()[minidl.tensor([True, False, True])])
C("setitem wrong shape", lambda: x2().__setitem__(0, minidl.randn(4)))
C("setitem float index", lambda: x2().__setitem__(1.5, 0.0))
C("type unknown", lambda: x2().type("torch.WeirdTensor"))
C("to bad dtype", lambda: x2().to("float99"))
C("to cuda:-1", lambda: x2().to("cuda:-1"))
C("to memory_format channels_last", lambda: x2().to(memory_format=minidl.channels_last))
C("backward non-scalar", lambda: x2().requires_grad_().mul(2).backward())
C("backward no grad", lambda: x2().sum().backward())
C("backward twice", lambda: (lambda t: ((t * t).sum().backward(), (t * t).sum().backward()))(x2().requires_grad_()) )
C("requires_grad on int", lambda: minidl.tensor([1, 2]).requires_grad_())
C("grad shape mismatch", lambda: setattr(x2().requires_grad_(), "grad", minidl.randn(3)))
C("detach then inplace on leaf", lambda: x2().requires_grad_().add_(1))
C("pad reflect too big", lambda: F.pad(minidl.randn(1, 1, 3), (3, 3), mode="reflect"))
C("pad bad mode", lambda: F.pad(x2(), (1, 1), mode="mirror"))
C("pad odd length", lambda: F.pad(x2(), (1,)))
C("pad reflect 1-d input", lambda: F.pad(minidl.randn(5), (1, 1), mode="reflect"))
# --- layers ---
C("Linear wrong in_features", lambda: nn.Linear(4, 2)(x2()))
C("Linear negative size", lambda: nn.Linear(-1, 2))
C("Linear float size", lambda: nn.Linear(2.5, 2))
C("Conv2d kernel 0", lambda: nn.Conv2d(3, 4, 0))
C("Conv2d stride 0", lambda: nn.Conv2d(3, 4, 3, stride=0))
C("Conv2d groups not dividing", lambda: nn.Conv2d(3, 4, 3, groups=2))
C("Conv2d negative padding", lambda: nn.Conv2d(3, 4, 3, padding=-1))
C("Conv2d padding string bad", lambda: nn.Conv2d(3, 4, 3, padding="full"))
C("Conv2d padding same stride 2", lambda: nn.Conv2d(3, 4, 3, padding="same", stride=2))
C("Conv2d wrong channels", lambda: nn.Conv2d(4, 4, 3)(x4()))
C("Conv2d 3-d input wrong", lambda: nn.Conv2d(3, 4, 3)(minidl.randn(3, 5)))
C("Conv2d input too small", lambda: nn.Conv2d(3, 4, 7)(x4()))
C("Conv2d int input", lambda: nn.Conv2d(3, 4, 3)(minidl.zeros(2, 3, 5, 5, dtype=minidl.int64)))
C("Conv1d 4-d input", lambda: nn.Conv1d(3, 4, 3)(x4()))
C("MaxPool2d kernel 0", lambda: nn.MaxPool2d(0))
C("MaxPool2d padding > half kernel", lambda: nn.MaxPool2d(2, padding=2)(x4()))
C("MaxPool2d window > input", lambda: nn.MaxPool2d(7)(x4()))
C("AvgPool2d divisor 0", lambda: F.avg_pool2d(x4(), 2, divisor_override=0))
C("AdaptiveAvgPool2d 0", lambda: nn.AdaptiveAvgPool2d(0)(x4()))
C("BatchNorm2d wrong channels", lambda: nn.BatchNorm2d(4)(x4()))
C("BatchNorm1d 4-d", lambda: nn.BatchNorm1d(3)(x4()))
C("BatchNorm2d batch of one train", lambda: nn.BatchNorm1d(3)(minidl.randn(1, 3)))
C("BatchNorm negative eps", lambda: nn.BatchNorm2d(3, eps=-1))
C("LRN size 0", lambda: nn.LocalResponseNorm(0))
C("Dropout p=1.5", lambda: nn.Dropout(1.5))
C("Dropout p negative F", lambda: F.dropout(x2(), -0.1))
C("Embedding out of range", lambda: nn.Embedding(5, 3)(minidl.tensor([7])))
C("Embedding negative index", lambda: nn.Embedding(5, 3)(minidl.tensor([-1])))
C("Embedding float index", lambda: nn.Embedding(5, 3)(minidl.tensor([1.0])))
C("Embedding padding_idx out of range", lambda: nn.Embedding(5, 3, padding_idx=9))
C("LSTM wrong feature size", lambda: nn.LSTM(4, 8)(minidl.randn(5, 2, 3)))
C("LSTM 2-d input batched expected", lambda: nn.LSTM(3, 8)(minidl.randn(5, 3)))
C("LSTM h0 wrong shape", lambda: nn.LSTM(3, 8)(minidl.randn(5, 2, 3), (minidl.zeros(1, 3, 8), minidl.zeros(1, 3, 8))))
C("LSTM h only not tuple", lambda: nn.LSTM(3, 8)(minidl.randn(5, 2, 3), minidl.zeros(1, 2, 8)))
C("GRU num_layers 0", lambda: nn.GRU(3, 8, num_layers=0))
C("RNN bad nonlinearity", lambda: nn.RNN(3, 8, nonlinearity="sigmoid"))
C("LSTM dropout 2", lambda: nn.LSTM(3, 8, dropout=2.0))
C("LSTMCell wrong input", lambda: nn.LSTMCell(3, 8)(minidl.randn(2, 4)))
C("GRU batch_first mixup h0", lambda: nn.GRU(3, 8, batch_first=True)(minidl.randn(2, 5, 3), minidl.zeros(1, 5, 8)))
C("Flatten start>end", lambda: nn.Flatten(2, 1)(x4()))
C("Sequential non-module", lambda: nn.Sequential(nn.ReLU(), 3))
C("ModuleList append int", lambda: nn.ModuleList().append(3))
C("add_module bad name", lambda: nn.Module().add_module("a.b", nn.ReLU()))
C("register_buffer non-tensor", lambda: nn.Module().register_buffer("b", [1, 2]))
C("Parameter of int", lambda: nn.Parameter(minidl.tensor([1, 2])))
C("Module.to bad device", lambda: nn.Linear(2, 2).to("tpu"))
C("ReflectionPad2d 3 ints", lambda: nn.ReflectionPad2d((1, 2, 3)))
# --- losses ---
C("cross_entropy 1-d logits 2-d target", lambda: F.cross_entropy(minidl.randn(3), minidl.tensor([[0]])))
C("cross_entropy target out of range", lambda: F.cross_entropy(x2(), minidl.tensor([0, 5])))
C("cross_entropy float target wrong shape", lambda: F.cross_entropy(x2(), minidl.randn(2, 4)))
C("cross_entropy negative label_smoothing", lambda: F.cross_entropy(x2(), minidl.tensor([0, 1]), label_smoothing=-0.1))
C("cross_entropy bad reduction", lambda: F.cross_entropy(x2(), minidl.tensor([0, 1]), reduction="avg"))
C("cross_entropy weight wrong size", lambda: F.cross_entropy(x2(), minidl.tensor([0, 1]), weight=minidl.ones(4)))
C("nll_loss batch mismatch", lambda: F.nll_loss(x2(), minidl.tensor([0, 1, 2])))
C("mse_loss shape mismatch", lambda: F.mse_loss(x2(), minidl.randn(3, 2)))
C("l1_loss int inputs", lambda: F.l1_loss(minidl.tensor([1, 2]), minidl.tensor([1, 3])))
C("bce_logits target shape", lambda: F.binary_cross_entropy_with_logits(x2(), minidl.rand(3)))
C("bce_logits pos_weight wrong", lambda: F.binary_cross_entropy_with_logits(x2(), minidl.rand(2, 3), pos_weight=minidl.ones(4)))
C("smooth_l1 negative beta", lambda: F.smooth_l1_loss(x2(), x2(), beta=-1.0))
C("one_hot negative", lambda: F.one_hot(minidl.tensor([-1, 0])))
C("one_hot float", lambda: F.one_hot(minidl.tensor([1.0])))
C("one_hot classes too few", lambda: F.one_hot(minidl.tensor([3]), 2))
# --- optimizers / schedulers ---
ps = lambda: [nn.Parameter(minidl.randn(3))]
C("SGD nesterov no momentum", lambda: optim.SGD(ps(), lr=0.1, nesterov=True))
C("SGD negative momentum", lambda: optim.SGD(ps(), lr=0.1, momentum=-0.5))
C("SGD no params", lambda: optim.SGD([], lr=0.1))
C("SGD param twice", lambda: (lambda p: optim.SGD([p, p], lr=0.1))(nn.Parameter(minidl.randn(2))))
C("SGD non-leaf param", lambda: optim.SGD([minidl.randn(2, requires_grad=True) * 2], lr=0.1))
C("SGD param of a non-tensor", lambda: optim.SGD([1.0], lr=0.1))
C("Adam betas length 3", lambda: optim.Adam(ps(), betas=(0.9, 0.99, 0.9)))
C("Adam weight_decay nan", lambda: optim.Adam(ps(), weight_decay=float("nan")))
C("RMSprop alpha > 1", lambda: optim.RMSprop(ps(), alpha=1.5))
C("Adadelta rho 2", lambda: optim.Adadelta(ps(), rho=2.0))
C("LBFGS two groups", lambda: optim.LBFGS([{"params": ps()}, {"params": ps()}]))
C("LBFGS bad line search", lambda: optim.LBFGS(ps(), line_search_fn="wolfe"))
C("LBFGS step without closure", lambda: optim.LBFGS(ps()).step())
C("add_param_group overlapping", lambda: (lambda p: optim.SGD([p], lr=0.1).add_param_group({"params": [p]}))(nn.Parameter(minidl.randn(2))))
C("StepLR step_size 0", lambda: optim.lr_scheduler.StepLR(optim.SGD(ps(), lr=0.1), step_size=0))
C("StepLR on non-optimizer", lambda: optim.lr_scheduler.StepLR("opt", step_size=1))
C("OneCycleLR no total", lambda: optim.lr_scheduler.OneCycleLR(optim.SGD(ps(), lr=0.1), max_lr=1.0))
C("CosineAnnealingLR T_max 0", lambda: optim.lr_scheduler.CosineAnnealingLR(optim.SGD(ps(), lr=0.1), T_max=0))
C("MultiStepLR unsorted", lambda: optim.lr_scheduler.MultiStepLR(optim.SGD(ps(), lr=0.1), milestones=[5, 2]))
C("clip_grad_norm negative", lambda: nn.utils.clip_grad_norm_(ps(), -1.0))
C("clip_grad_norm bad norm type", lambda: nn.utils.clip_grad_norm_(ps(), 1.0, norm_type="fro2"))
# --- state dicts / checkpoints ---
def sd_case(mutate):
    m = nn.Linear(2, 3); sd = m.state_dict(); mutate(sd); m2 = nn.Linear(2, 3)
    before = {k: v.numpy().copy() for k, v in m2.state_dict().items()}
    try:
        m2.load_state_dict(sd)
    finally:
        after = {k: v.numpy() for k, v in m2.state_dict().items()}
        changed = [k for k in before if not np.array_equal(before[k], after[k])]
        assert not changed, f"a failed load_state_dict changed {changed}"
C("load_state_dict string value", lambda: sd_case(lambda sd: sd.__setitem__("bias", "abc")))
C("load_state_dict list value", lambda: sd_case(lambda sd: sd.__setitem__("bias", [1.0, 2.0, 3.0])))
C("load_state_dict not a dict", lambda: nn.Linear(2, 3).load_state_dict([1, 2]))
C("load_state_dict nested dict", lambda: sd_case(lambda sd: sd.__setitem__("weight", {"a": 1})))
C("load_state_dict 0-d for vector", lambda: sd_case(lambda sd: sd.__setitem__("bias", minidl.tensor(1.0))))
C("load_state_dict nan values", lambda: sd_case(lambda sd: sd.__setitem__("bias", minidl.tensor([float("nan")] * 3))))
tmp = tempfile.mkdtemp()
def ckpt(content_fn):
    path = os.path.join(tmp, "c.ckpt")
    minidl.save({"w": minidl.randn(3), "n": 1}, path)
    content_fn(path)
    return minidl.load(path)
C("load missing file", lambda: minidl.load(os.path.join(tmp, "nope.ckpt")))
C("load directory", lambda: minidl.load(tmp))
C("load empty file", lambda: ckpt(lambda p: open(p, "wb").close()))
C("load truncated", lambda: ckpt(lambda p: open(p, "r+b").truncate(os.path.getsize(p) // 2)))
C("load text file", lambda: ckpt(lambda p: open(p, "w").write("hello")))
C("load a pickle", lambda: ckpt(lambda p: open(p, "wb").write(pickle.dumps({"a": 1}))))
C("load numpy npz", lambda: ckpt(lambda p: np.savez(open(p, "wb"), a=np.ones(3))))
C("save to missing dir", lambda: minidl.save({"a": 1}, os.path.join(tmp, "no", "dir", "x.ckpt")))
C("save a module", lambda: minidl.save(nn.Linear(2, 2), os.path.join(tmp, "m.ckpt")))
C("save a lambda", lambda: minidl.save({"f": lambda: 1}, os.path.join(tmp, "f.ckpt")))
C("save object array", lambda: minidl.save({"a": np.array([None, 1], dtype=object)}, os.path.join(tmp, "o.ckpt")))
# --- data ---
C("DataLoader batch_size 0", lambda: DataLoader(TensorDataset(minidl.randn(4, 2)), batch_size=0))
C("DataLoader negative workers", lambda: DataLoader(TensorDataset(minidl.randn(4, 2)), num_workers=-1))
C("DataLoader sampler and shuffle", lambda: DataLoader(TensorDataset(minidl.randn(4, 2)), sampler=[0, 1], shuffle=True))
C("DataLoader batch_sampler and batch_size", lambda: DataLoader(TensorDataset(minidl.randn(4, 2)), batch_sampler=[[0, 1]], batch_size=3))
C("DataLoader not a dataset", lambda: list(DataLoader(5)))
C("TensorDataset size mismatch", lambda: TensorDataset(minidl.randn(4, 2), minidl.randn(3)))
C("DataLoader collate ragged", lambda: list(DataLoader([np.ones(2), np.ones(3)], batch_size=2)))
C("DataLoader prefetch without workers", lambda: DataLoader(TensorDataset(minidl.randn(4, 2)), prefetch_factor=2))
C("DataLoader timeout negative", lambda: DataLoader(TensorDataset(minidl.randn(4, 2)), timeout=-1))
C("MNIST bad root", lambda: __import__("minidl.vision", fromlist=["datasets"]).datasets.MNIST(os.path.join(tmp, "none"), train=True))
C("CIFAR10 bad root", lambda: __import__("minidl.vision", fromlist=["datasets"]).datasets.CIFAR10(os.path.join(tmp, "none"), train=True))
C("Normalize wrong channel count", lambda: __import__("minidl.vision", fromlist=["transforms"]).transforms.Normalize((0.5,) * 2, (0.5,) * 2)(minidl.rand(3, 4, 4)))
C("Normalize zero std", lambda: __import__("minidl.vision", fromlist=["transforms"]).transforms.Normalize((0.5,), (0.0,))(minidl.rand(1, 4, 4)))
C("RandomCrop larger than image", lambda: __import__("minidl.vision", fromlist=["transforms"]).transforms.RandomCrop(8)(minidl.rand(1, 4, 4)))
C("Resize negative", lambda: __import__("minidl.vision", fromlist=["transforms"]).transforms.Resize(-1))
C("ToTensor of a string", lambda: __import__("minidl.vision", fromlist=["transforms"]).transforms.ToTensor()("img"))
# --- primitives ---
C("P conv NHWC wrong layout name", lambda: P.convolution_forward(np.ones((1, 3, 5, 5), np.float32), np.ones((2, 3, 3, 3), np.float32), P.ConvolutionDescriptor(), layout="NWHC"))
C("P conv dtype mix", lambda: P.convolution_forward(np.ones((1, 3, 5, 5), np.float32), np.ones((2, 3, 3, 3), np.float64), P.ConvolutionDescriptor()))
C("P conv non-contiguous", lambda: P.convolution_forward(np.ones((1, 5, 5, 3), np.float32).transpose(0, 3, 1, 2), np.ones((2, 3, 3, 3), np.float32), P.ConvolutionDescriptor()))
C("P conv descriptor stride 0", lambda: P.ConvolutionDescriptor(stride=0))
C("P conv unknown algo", lambda: P.convolution_forward(np.ones((1, 3, 5, 5), np.float32), np.ones((2, 3, 3, 3), np.float32), P.ConvolutionDescriptor(), algo="magic"))
C("P pooling desc negative", lambda: P.PoolingDescriptor("max", -1, 1))
C("P pooling mode bad", lambda: P.PoolingDescriptor("median", 2, 2))
C("P softmax int", lambda: P.softmax_forward(np.ones((2, 3), np.int64)))
C("P activation bad mode", lambda: P.ActivationDescriptor("swish"))
C("P batch_norm wrong gamma", lambda: P.batch_norm_forward_training(np.ones((2, 3, 4, 4), np.float32), np.ones(4, np.float32), np.zeros(3, np.float32), np.zeros(3, np.float32), np.ones(3, np.float32)))
C("P lrn even size", lambda: P.LRNDescriptor(4))
C("P dropout p 1.5", lambda: P.dropout_forward(np.ones(4, np.float32), 1.5, 0, 0))
C("P gemm shape mismatch", lambda: P.gemm(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)))
C("P rnn bad mode", lambda: P.RNNDescriptor("lstm2", 3, 4))


EXPECT = {
    'narrow dim 5': ("IndexError", 'narrow: dim 5 is out of range for a tensor of sh'),
    'narrow length too long': ("IndexError", 'narrow: start 1 + length 5 exceeds dim 1 of size'),
    'narrow negative length': ("IndexError", 'narrow: start 0 + length -1 exceeds dim 1 of siz'),
    'index_select dim 3': ("IndexError", 'index_select: dim 3 is out of range for a tensor'),
    'index_select float index': ("IndexError", 'index_select: index must be a 1-D integer tensor'),
    'index_select out of range': ("IndexError", 'index: index 5 is out of bounds for axis 0 with'),
    'index_select 2-d index': ("IndexError", 'index_select: index must be a 1-D integer tensor'),
    'gather out of range': ("IndexError", 'gather: index 5 is out of bounds for dim 1 with'),
    'gather negative index': ("IndexError", 'gather: index -1 is out of bounds for dim 1 with'),
    'scatter src wrong dtype': ("RuntimeError", 'scatter: expected self and src to have the same'),
    'scatter out of range': ("RuntimeError", 'scatter: index 7 is out of bounds for dim 1 with'),
    'scatter bad reduce': ("ValueError", "scatter: reduce must be None, 'add' or 'multiply"),
    'topk k too big': ("RuntimeError", 'topk: k (4) is out of range for dim -1 of shape'),
    'topk negative k': ("RuntimeError", 'topk: k (-1) is out of range for dim -1 of shape'),
    'topk dim 2': ("IndexError", 'topk: dim 2 is out of range for a tensor of shap'),
    'kthvalue k=0': ("RuntimeError", 'kthvalue: k (0) is out of range for dim -1 of sh'),
    'sort dim 4': ("IndexError", 'sort: dim 4 is out of range for a tensor of shap'),
    'cumsum dim 2': ("IndexError", 'cumsum: dim 2 is out of range for a tensor of sh'),
    'flip dim 3': ("IndexError", 'flip: Dimension out of range (expected to be in'),
    'flip repeated dims': ("ValueError", 'flip: dim 0 appears multiple times in the list o'),
    'roll': ("IndexError", 'roll: Dimension out of range (expected to be in'),
    'tril 1-d': ("RuntimeError", 'tril: input tensor must have at least 2 dimensio'),
    'norm p string': ("ValueError", "norm: p must be 'fro', 'nuc' or a number (inf an"),
    'norm nuc 1-d': ("RuntimeError", "norm(p='nuc'): needs a 2-D input or dim= two dim"),
    'norm int tensor': ("RuntimeError", 'norm: needs a floating-point tensor, got int64'),
    'masked_fill float mask': ("TypeError", 'where: expected condition to be a bool tensor, g'),
    'masked_fill mask bad shape': ("ValueError", 'where: condition (4, 3), input () and other (2,'),
    'masked_select bad mask shape': ("ValueError", 'masked_select: mask (3, 2) and input (2, 3) cann'),
    'expand to smaller': ("ValueError", 'expand: cannot expand shape (2, 3) to (2, 2)'),
    'expand -1 new dim': ("ValueError", 'expand: -1 is not allowed in a new leading dim ('),
    'view bad size': ("RuntimeError", 'view: shape [4] is invalid for input of size 6:'),
    'view two -1': ("RuntimeError", 'view: shape [-1, -1] is invalid for input of siz'),
    'repeat fewer dims': ("RuntimeError", 'repeat: number of repeat dims (1) can not be sma'),
    'mm 1-d': ("RuntimeError", 'mm: both arguments must be 2-D matrices, got sha'),
    'mm shape mismatch': ("ValueError", 'matmul: shapes (2, 3) and (2, 3) are not aligned'),
    'bmm 2-d': ("RuntimeError", 'bmm: expects two 3-D tensors with the same batch'),
    'bmm batch mismatch': ("RuntimeError", 'bmm: expects two 3-D tensors with the same batch'),
    'matmul 0-d': ("ValueError", 'matmul: both operands need at least 1 dim, got s'),
    'dot 2-d': ("RuntimeError", 'dot: expects two 1-D tensors, got shapes (2, 3)'),
    'dot length mismatch': ("ValueError", 'matmul: shapes (3,) and (4,) are not aligned: th'),
    'mv mismatch': ("ValueError", 'matmul: shapes (2, 3) and (2,) are not aligned:'),
    'div bad rounding': ("ValueError", "div: rounding_mode must be None, 'trunc' or 'flo"),
    'pow string': ("TypeError", 'pow: unsupported operand of type str (expected a'),
    'clamp no bounds': ("ValueError", 'clamp: at least one of min and max must be given'),
    'unbind dim 2': ("IndexError", 'unbind: dim 2 is out of range for a tensor of sh'),
    'new_full bad size': ("TypeError", 'new_full: size must be a tuple of ints, got int'),
    'arange zero step': ("ValueError", 'arange: step must be nonzero'),
    'arange wrong sign': ("ValueError", 'arange: upper bound and larger bound inconsisten'),
    'linspace negative steps': ("ValueError", 'linspace: steps must be an int >= 0, got -1'),
    'zeros negative': ("ValueError", 'zeros: negative dimension in size (-1, 2)'),
    'randn float size': ("TypeError", 'randn: size must be a tuple of ints, got (2.5,)'),
    'randint low>=high': ("ValueError", 'randint: the range [low, high) = [5, 5) is empty'),
    'eye negative': ("ValueError", 'eye: negative dimension in size (-1,)'),
    'full non-number': ("TypeError", "full: fill_value must be a number, got str 'a'"),
    'tensor ragged': ("ValueError", 'tensor: the nested lists of list data have diffe'),
    'tensor of strings': ("TypeError", "tensor: cannot make a tensor from strings: ['a',"),
    'view_as_complex odd': ("RuntimeError", 'view_as_complex: the last dimension must have size'),
    'item of many': ("ValueError", 'item(): only one-element tensors can be converte'),
    'bool of many': ("RuntimeError", 'the truth value of a tensor with 6 elements is a'),
    'int of many': ("ValueError", 'item(): only one-element tensors can be converte'),
    'index with 4 indices': ("IndexError", 'index: too many indices for array: array is 2-di'),
    'index out of range': ("IndexError", 'index: index 5 is out of bounds for axis 0 with'),
    'index bool mask wrong shape': ("IndexError", 'index: boolean index did not match indexed array'),
    'setitem wrong shape': ("ValueError", 'index assignment: the value of shape (4,) does n'),
    'setitem float index': ("IndexError", 'index assignment: only integers, slices (`:`), e'),
    'type unknown': ("TypeError", "type: unknown dtype 'torch.WeirdTensor' (use a m"),
    'to bad dtype': ("ValueError", "unknown device 'float99': use 'cpu', 'cuda', 'cuda:N' or 'meta'"),
    'to cuda:-1': ("ValueError", "unknown device 'cuda:-1': the index after 'cuda:"),
    'to memory_format channels_last': ("RuntimeError", 'to(): minidl.channels_last needs a 4-D tensor, got'),
    'backward non-scalar': ("RuntimeError", 'backward: grad can be implicitly created only fo'),
    'backward no grad': ("RuntimeError", 'backward: this tensor does not require grad and'),
    'requires_grad on int': ("RuntimeError", 'only floating-point tensors can require gradient'),
    'grad shape mismatch': ("RuntimeError", 'assigned grad has data of a different size: (3,)'),
    'detach then inplace on leaf': ("RuntimeError", 'add_: a leaf Variable that requires grad is bein'),
    'pad reflect too big': ("ValueError", "pad: mode='reflect' pads dim 2 of size 3 by (3,"),
    'pad bad mode': ("ValueError", "pad: mode must be 'constant', 'reflect', 'replic"),
    'pad odd length': ("ValueError", 'pad: pad (1,) must have an even length of at mos'),
    'pad reflect 1-d input': ("NotImplementedError", "pad: mode='reflect' pads the last 1, 2 or 3 dims"),
    'Linear wrong in_features': ("ValueError", 'Linear: expected input with last dim in_features'),
    'Linear negative size': ("ValueError", 'Linear: in_features (-1) and out_features (2) mu'),
    'Linear float size': ("TypeError", 'Linear: in_features must be an int, got float 2.'),
    'Conv2d kernel 0': ("ValueError", 'Conv2d: kernel_size must be >= 1, got 0'),
    'Conv2d stride 0': ("ValueError", 'Conv2d: stride must be >= 1, got 0'),
    'Conv2d groups not dividing': ("ValueError", 'Conv2d: in_channels (3) and out_channels (4) mus'),
    'Conv2d negative padding': ("ValueError", 'Conv2d: padding must be >= 0, got -1'),
    'Conv2d padding string bad': ("ValueError", "Conv2d: padding must be an int, a tuple, 'same'"),
    'Conv2d padding same stride 2': ("ValueError", "Conv2d: padding='same' is not supported for stri"),
    'Conv2d wrong channels': ("ValueError", 'convolution_forward: input has 3 channels but we'),
    'Conv2d 3-d input wrong': ("ValueError", 'conv2d: expected a 4-D input (N, C, 2 spatial di'),
    'Conv2d input too small': ("ValueError", 'convolution_forward: kernel (7, 7) (dilation (1,'),
    'Conv2d int input': ("TypeError", 'conv2d: input must be a floating-point tensor, g'),
    'Conv1d 4-d input': ("ValueError", 'conv1d: expected a 3-D input (N, C, 1 spatial di'),
    'MaxPool2d padding > half kernel': ("ValueError", 'max_pool2d: PoolingDescriptor: padding (2, 2) mu'),
    'MaxPool2d window > input': ("ValueError", 'pooling_forward: input (2, 3, 5, 5) (NCHW) is to'),
    'AvgPool2d divisor 0': ("ValueError", 'avg_pool2d: divisor_override must be a nonzero i'),
    'AdaptiveAvgPool2d 0': ("ValueError", 'adaptive_avg_pooling_forward: output_size must b'),
    'BatchNorm2d wrong channels': ("ValueError", 'BatchNorm2d: input of shape (2, 3, 5, 5) has 3 c'),
    'BatchNorm1d 4-d': ("ValueError", 'BatchNorm1d: expected 2D or 3D input (got 4D inp'),
    'BatchNorm2d batch of one train': ("ValueError", 'batch_norm: expected more than 1 value per chann'),
    'Dropout p=1.5': ("ValueError", 'Dropout: p (the drop probability) must be in [0,'),
    'Dropout p negative F': ("ValueError", 'dropout: p (the drop probability) must be in [0,'),
    'Embedding out of range': ("ValueError", 'embedding: index out of range: input (1,) holds'),
    'Embedding negative index': ("ValueError", 'embedding: index out of range: input (1,) holds'),
    'Embedding float index': ("TypeError", 'embedding: input must hold integer indices, got'),
    'Embedding padding_idx out of range': ("ValueError", 'Embedding: padding_idx 9 is out of range for 5 e'),
    'LSTM wrong feature size': ("ValueError", 'LSTM: input of shape (5, 2, 3) has input_size 3,'),
    'LSTM h0 wrong shape': ("ValueError", 'LSTM: expected h_0 of shape (1, 2, 8), got (1, 3'),
    'LSTM h only not tuple': ("ValueError", 'LSTM: hx must be a tuple (h_0, c_0)'),
    'GRU num_layers 0': ("ValueError", 'RNNDescriptor: num_layers must be an int >= 1, g'),
    'RNN bad nonlinearity': ("ValueError", "RNN: nonlinearity must be 'tanh' or 'relu', got"),
    'LSTM dropout 2': ("ValueError", 'LSTM: dropout must be in [0, 1], got 2.0'),
    'LSTMCell wrong input': ("ValueError", 'LSTMCell: expected input (batch, 3) or (3,), got'),
    'GRU batch_first mixup h0': ("ValueError", 'GRU: expected h_0 of shape (1, 2, 8), got (1, 5,'),
    'Flatten start>end': ("ValueError", 'flatten: start_dim 2 comes after end_dim 1 for s'),
    'Sequential non-module': ("TypeError", "add_module: '1' must be a Module or None, got in"),
    'ModuleList append int': ("TypeError", "add_module: '0' must be a Module or None, got in"),
    'add_module bad name': ("KeyError", '"module name must be non-empty and contain no \'.'),
    'register_buffer non-tensor': ("TypeError", "register_buffer: 'b' must be a Tensor or None, g"),
    'Parameter of int': ("RuntimeError", 'only floating-point tensors can require gradient'),
    'Module.to bad device': ("ValueError", "unknown device 'tpu': use 'cpu', 'cuda', 'cuda:N' or 'meta'"),
    'ReflectionPad2d 3 ints': ("ValueError", 'ReflectionPad2d: padding must be an int or 4 int'),
    'cross_entropy 1-d logits 2-d target': ("ValueError", 'cross_entropy: input (1, 3) expects a target of'),
    'cross_entropy target out of range': ("ValueError", 'cross_entropy: target holds class index 5, out o'),
    'cross_entropy float target wrong shape': ("ValueError", 'cross_entropy: probability target must have the'),
    'cross_entropy negative label_smoothing': ("ValueError", 'cross_entropy: label_smoothing must be in [0, 1]'),
    'cross_entropy bad reduction': ("ValueError", "cross_entropy: reduction must be 'mean', 'sum' o"),
    'cross_entropy weight wrong size': ("ValueError", 'cross_entropy: weight has shape (4,), expected ('),
    'nll_loss batch mismatch': ("ValueError", 'nll_loss: input (2, 3) expects a target of shape'),
    'mse_loss shape mismatch': ("ValueError", 'mse_loss: input (2, 3) and target (3, 2) cannot'),
    'l1_loss int inputs': ("TypeError", 'l1_loss: input must be a floating-point tensor,'),
    'bce_logits target shape': ("ValueError", 'binary_cross_entropy_with_logits: input (2, 3) a'),
    'bce_logits pos_weight wrong': ("ValueError", 'binary_cross_entropy_with_logits: pos_weight of'),
    'smooth_l1 negative beta': ("ValueError", 'smooth_l1_loss: beta must be >= 0, got -1.0'),
    'one_hot negative': ("ValueError", 'one_hot: class values must be in [0, 1), got [-1'),
    'one_hot float': ("TypeError", 'one_hot: needs an integer tensor of class indice'),
    'one_hot classes too few': ("ValueError", 'one_hot: class values must be in [0, 2), got [3,'),
    'SGD nesterov no momentum': ("ValueError", 'SGD: Nesterov momentum requires a momentum > 0 a'),
    'SGD negative momentum': ("ValueError", 'SGD: invalid momentum -0.5 (must be a finite num'),
    'SGD no params': ("ValueError", 'SGD: got an empty parameter list'),
    'SGD param twice': ("ValueError", 'SGD: a parameter group contains the same tensor'),
    'SGD non-leaf param': ("ValueError", "SGD: can't optimize a non-leaf Tensor (parameter"),
    'SGD param of a non-tensor': ("TypeError", 'SGD: can only optimize Tensors, but parameter 0'),
    'Adam betas length 3': ("ValueError", 'Adam: betas must be a pair (beta1, beta2), got ('),
    'Adam weight_decay nan': ("ValueError", 'Adam: invalid weight_decay nan (must be a finite'),
    'Adadelta rho 2': ("ValueError", 'Adadelta: invalid rho 2.0 (must lie in [0, 1])'),
    'LBFGS two groups': ("ValueError", "LBFGS doesn't support per-parameter options (par"),
    'LBFGS bad line search': ("ValueError", "LBFGS: line_search_fn must be None or 'strong_wo"),
    'LBFGS step without closure': ("RuntimeError", 'LBFGS.step needs a closure that re-evaluates the'),
    'add_param_group overlapping': ("ValueError", 'SGD: some parameters appear in more than one par'),
    'StepLR step_size 0': ("ValueError", 'StepLR: step_size must be a positive integer, go'),
    'StepLR on non-optimizer': ("TypeError", 'StepLR: str is not an Optimizer'),
    'OneCycleLR no total': ("ValueError", 'OneCycleLR: give either total_steps or both epoc'),
    'CosineAnnealingLR T_max 0': ("ValueError", 'CosineAnnealingLR: T_max must be positive, got 0'),
    'clip_grad_norm negative': ("ValueError", 'clip_grad_norm_: max_norm must be >= 0, got -1.0'),
    'clip_grad_norm bad norm type': ("ValueError", 'clip_grad_norm_: max_norm and norm_type must be'),
    'load_state_dict string value': ("RuntimeError", 'Error(s) in loading state_dict for Linear:'),
    'load_state_dict not a dict': ("TypeError", 'load_state_dict: expected a dict-like state_dict'),
    'load_state_dict nested dict': ("RuntimeError", 'Error(s) in loading state_dict for Linear:'),
    'load_state_dict 0-d for vector': ("RuntimeError", 'Error(s) in loading state_dict for Linear:'),
    'load missing file': ("FileNotFoundError", "[Errno 2] No such file or directory: '"),
    'load directory': ("IsADirectoryError", "[Errno 21] Is a directory: '"),
    'load empty file': ("CheckpointError", 'load:  is not a minidl checkpoint (not a zip fil'),
    'load truncated': ("CheckpointError", 'load:  is not a minidl checkpoint (not a zip fil'),
    'load text file': ("CheckpointError", 'load:  is not a minidl checkpoint (not a zip fil'),
    'load a pickle': ("CheckpointError", 'load:  is a plain pickle file (pickle.dump, or to'),
    'load numpy npz': ("CheckpointError", 'load:  has no structure.json, so it is neither a '),
    'save to missing dir': ("FileNotFoundError", 'save: the folder  does not exist (create it firs'),
    'save a lambda': ("TypeError", "save: cannot store a function at obj['f'] as plai"),
    'DataLoader batch_size 0': ("ValueError", 'DataLoader: batch_size must be a positive int, g'),
    'DataLoader negative workers': ("ValueError", 'DataLoader: num_workers must be a non-negative i'),
    'DataLoader sampler and shuffle': ("ValueError", 'DataLoader: sampler option is mutually exclusive'),
    'DataLoader batch_sampler and batch_size': ("ValueError", 'DataLoader: batch_sampler option is mutually exc'),
    'DataLoader not a dataset': ("TypeError", 'DataLoader: the dataset must have a length, got'),
    'TensorDataset size mismatch': ("ValueError", 'TensorDataset: all arrays must have the same fir'),
    'DataLoader collate ragged': ("ValueError", 'default_collate: samples have different shapes ['),
    'DataLoader prefetch without workers': ("ValueError", 'DataLoader: prefetch_factor and persistent_worke'),
    'DataLoader timeout negative': ("ValueError", 'DataLoader: timeout option should be a number >='),
    'MNIST bad root': ("DatasetNotFoundError", 'MNIST: missing train-images-idx3-ubyte(.gz), tra'),
    'CIFAR10 bad root': ("DatasetNotFoundError", 'CIFAR10: missing cifar-10-python.tar.gz. Downloa'),
    'Normalize wrong channel count': ("ValueError", 'Normalize: 2 means / 2 stds for an image with 3'),
    'Normalize zero std': ("ValueError", 'Normalize: std evaluated to zero after conversio'),
    'RandomCrop larger than image': ("ValueError", 'RandomCrop: required crop size (8, 8) is larger'),
    'Resize negative': ("ValueError", 'Resize: size must be an int >= 1 or a pair (h, w'),
    'ToTensor of a string': ("TypeError", 'ToTensor: expects a NumPy image (H, W[, C]) or a'),
    'P conv NHWC wrong layout name': ("ValueError", "convolution_forward: unknown layout 'NWHC'; use"),
    'P conv dtype mix': ("TypeError", 'convolution_forward: all arrays must have the sa'),
    'P conv descriptor stride 0': ("ValueError", 'ConvolutionDescriptor: stride must be >= 1, got'),
    'P conv unknown algo': ("ValueError", "convolution_forward: unknown algorithm 'magic' o"),
    'P pooling desc negative': ("ValueError", 'PoolingDescriptor: kernel_size must be >= 1, got'),
    'P pooling mode bad': ("ValueError", "PoolingDescriptor: unknown mode 'median'; choose"),
    'P softmax int': ("TypeError", 'softmax_forward: x must be float32 or float64, g'),
    'P activation bad mode': ("ValueError", "ActivationDescriptor: unknown mode 'swish'; choo"),
    'P batch_norm wrong gamma': ("ValueError", 'batch_norm_forward_training: gamma has shape (4)'),
    'P gemm shape mismatch': ("ValueError", 'gemm: inner dimensions differ: op(a) is (2, 3) f'),
    'P rnn bad mode': ("ValueError", "RNNDescriptor: mode must be one of ('rnn_tanh',"),
}
ACCEPTED = {  # torch accepts these too (or minidl documents why it does)
    'save a module': 'pickled whole, as torch.save(model); load reads it only with weights_only=False',
    'save object array': 'pickled, as torch.save does; load reads it only with weights_only=False',
    'clamp min>max': 'torch: every element becomes max',
    'backward twice': 'minidl keeps the graph (torch needs retain_graph=True): the gradients accumulate as with it',
    'MaxPool2d kernel 0': 'torch also refuses only at forward (checked below)',
    'BatchNorm negative eps': 'torch does not check eps',
    'LRN size 0': 'refused at forward (checked below)',
    'LSTM 2-d input batched expected': 'an unbatched (L, H_in) input, as torch',
    'RMSprop alpha > 1': 'torch checks only alpha >= 0',
    'MultiStepLR unsorted': 'torch counts milestones in any order',
    'P conv non-contiguous': 'the primitive copies a strided array (same values)',
    'P lrn even size': 'cuDNN and torch allow even sizes',
}


def _exc(name):
    import builtins
    from minidl.data.datasets import DatasetNotFoundError  # noqa: F401
    from minidl.utils.serialization import CheckpointError  # noqa: F401
    return getattr(builtins, name, None) or {"CheckpointError": CheckpointError,
                                             "DatasetNotFoundError": DatasetNotFoundError}[name]


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_bad_input_gets_our_error(name):
    kind, fragment = EXPECT[name]
    with pytest.raises(_exc(kind)) as info:
        cases[name]()
    first_line = str(info.value).split("\n")[0]
    if name.startswith(("load ", "save ")) and kind != "TypeError":
        assert tmp in first_line, f"the message should name the file: {first_line}"
    assert fragment in re.sub(r"/tmp/\S+", "", first_line), first_line


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepted_like_torch(name):
    cases[name]()


def test_every_case_is_classified():
    assert set(cases) - {"P dropout p 1.5", "cumsum no dim", "load_state_dict list value",
                         "load_state_dict nan values"} == set(EXPECT) | set(ACCEPTED)


def test_refused_at_forward():
    with pytest.raises(ValueError, match="kernel_size must be >= 1"):
        nn.MaxPool2d(0)(x4())
    with pytest.raises(ValueError, match="size must be an int >= 1"):
        nn.LocalResponseNorm(0)(x4())


def test_failed_load_state_dict_changes_nothing():
    for bad in ("abc", {"a": 1}, None, minidl.tensor(1.0)):
        m = nn.Linear(2, 3)
        before = {k: v.numpy().copy() for k, v in m.state_dict().items()}
        sd = nn.Linear(2, 3).state_dict()
        sd["bias"] = bad
        with pytest.raises(RuntimeError, match="bias"):
            m.load_state_dict(sd)
        for k, v in m.state_dict().items():
            np.testing.assert_array_equal(v.numpy(), before[k])
