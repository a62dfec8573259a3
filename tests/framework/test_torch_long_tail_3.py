"""Session 10's additions for real programs, against torch: quantile / nanquantile / nanmedian / cov / corrcoef /
trapezoid (ops/statistics.py), the RNG state, use_deterministic_algorithms, iinfo / can_cast / promote_types /
result_type, asarray / empty_strided, float_power, diag_embed, unique_consecutive, inference_mode, and the nn long
tail of nn/functional/longtail.py (channel_shuffle, alpha_dropout, rrelu, lp_pool, the margin losses, pdist), and
nn.utils.get_total_norm / clip_grads_with_norm_. Values and gradients in float64."""
import numpy as np
import pytest
import torch

import minidl

RNG = np.random.default_rng(0)


def _compare(fn, *arrays, ints=(), rtol=1e-10, atol=1e-12):
    """fn(lib, *tensors) -> a tensor or tuple of tensors; values and the gradients of a weighted sum must agree."""
    got = []
    for lib in (minidl, torch):
        ts = [lib.tensor(a, requires_grad=i not in ints) for i, a in enumerate(arrays)]
        outs = fn(lib, *ts)
        outs = outs if isinstance(outs, tuple) else (outs,)
        loss = 0
        for k, o in enumerate(outs):
            if o.is_floating_point():
                w = lib.tensor(np.random.default_rng(k + 5).standard_normal(tuple(o.shape)))
                loss = loss + (o * w).nansum()
        if len(ints) < len(arrays):
            loss.backward()
        got.append([o.detach().numpy() for o in outs] + [t.grad.numpy() for i, t in enumerate(ts) if i not in ints])
    for ours, theirs in zip(*got):
        assert ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol, equal_nan=True)


A = RNG.standard_normal((4, 7))


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
def test_quantile_matches_torch(interpolation):
    _compare(lambda lib, t: lib.quantile(t, 0.3, dim=1, interpolation=interpolation), A)
    _compare(lambda lib, t: t.quantile(lib.tensor([0.1, 0.5, 0.9], dtype=lib.float64), dim=0, keepdim=True,
                                       interpolation=interpolation), A)
    _compare(lambda lib, t: lib.quantile(t, lib.tensor([0.25, 0.75], dtype=lib.float64), keepdim=True,
                                         interpolation=interpolation), A)


def test_nan_aware_statistics_match_torch():
    a = A.copy()
    a[1, 3] = np.nan
    a[2, :] = np.nan
    for lib_fn in (lambda lib, t: lib.quantile(t, 0.5, dim=1), lambda lib, t: lib.nanquantile(t, 0.4, dim=1),
                   lambda lib, t: lib.nanmedian(t), lambda lib, t: lib.nanmedian(t, dim=1).values):
        _compare(lib_fn, a, ints=(0,))


def test_cov_corrcoef_trapezoid_match_torch():
    w = (lambda lib: lib.tensor([1, 2, 1, 3, 1, 1, 2]), lambda lib: lib.tensor(np.linspace(0.5, 1.5, 7)))
    _compare(lambda lib, t: lib.cov(t), A)
    _compare(lambda lib, t: lib.cov(t, correction=0), A)
    _compare(lambda lib, t: lib.cov(t, fweights=w[0](lib), aweights=w[1](lib)), A)
    _compare(lambda lib, t: t.corrcoef(), A)
    _compare(lambda lib, t: lib.cov(t[0]), A)
    x = np.cumsum(np.abs(RNG.standard_normal(7)))
    _compare(lambda lib, t: lib.trapezoid(t), A)
    _compare(lambda lib, t: lib.trapezoid(t, dx=0.5, dim=0), A)
    _compare(lambda lib, t: lib.trapezoid(t, lib.tensor(x)), A)
    _compare(lambda lib, t: lib.cumulative_trapezoid(t, lib.tensor(x)), A)


def test_rng_state_restores_the_draws():
    minidl.manual_seed(3)
    state = minidl.get_rng_state()
    first = [minidl.rand(4).tolist(), minidl.randn(2, 2).tolist(), minidl.randint(0, 9, (5,)).tolist()]
    minidl.rand(10)
    minidl.set_rng_state(state)
    again = [minidl.rand(4).tolist(), minidl.randn(2, 2).tolist(), minidl.randint(0, 9, (5,)).tolist()]
    assert first == again and state.dtype == minidl.uint8
    with pytest.raises(RuntimeError, match="set_rng_state: not a state minidl.get_rng_state\\(\\) returned"):
        minidl.set_rng_state(torch.get_rng_state().numpy())


def test_deterministic_flags_and_dtype_helpers():
    try:
        minidl.use_deterministic_algorithms(True, warn_only=True)
        assert minidl.are_deterministic_algorithms_enabled() and minidl.is_deterministic_algorithms_warn_only_enabled()
        assert minidl.backends.cudnn.deterministic
    finally:
        minidl.use_deterministic_algorithms(False)
    assert not minidl.backends.cudnn.deterministic
    for name in ("int8", "int32", "int64", "uint8"):
        ours, theirs = minidl.iinfo(getattr(minidl, name)), torch.iinfo(getattr(torch, name))
        assert (ours.min, ours.max, ours.bits) == (theirs.min, theirs.max, theirs.bits)
    kinds = ["bool", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
    for a in kinds:
        for b in kinds:
            ma, mb, ta, tb = (getattr(minidl, a if a != "bool" else "bool_"), getattr(minidl, b if b != "bool" else "bool_"),
                              getattr(torch, a), getattr(torch, b))
            assert minidl.can_cast(ma, mb) == torch.can_cast(ta, tb), (a, b)
            assert str(minidl.promote_types(ma, mb)).replace("bool", "bool") == str(torch.promote_types(ta, tb)).replace(
                "torch.", ""), (a, b)
    assert str(minidl.result_type(minidl.tensor([1, 2]), 1.0)) == "float32"
    assert str(minidl.result_type(minidl.tensor([1.0], dtype=minidl.float16), minidl.tensor(2.0))) == "float16"


def test_creation_helpers_float_power_diag_embed_unique_consecutive():
    t = minidl.tensor([1.0, 2.0])
    assert minidl.asarray(t)._data is t._data and minidl.asarray(t, copy=True)._data is not t._data
    assert minidl.asarray([1, 2], dtype=minidl.float32, requires_grad=True).requires_grad
    assert minidl.empty_strided((2, 3), (3, 1)).shape == (2, 3)
    _compare(lambda lib, a, b: lib.float_power(a, b), np.abs(A) + 0.1, A)
    assert minidl.float_power(minidl.tensor([2, 3]), 2).dtype == minidl.float64
    v = RNG.standard_normal((2, 3))
    for offset, d1, d2 in [(0, -2, -1), (1, -2, -1), (-1, -1, -2), (0, 0, 2), (2, 1, 0)]:
        _compare(lambda lib, a: lib.diag_embed(a, offset, d1, d2), v)
    u = [1, 1, 2, 2, 3, 1, 1, 2]
    ours = minidl.unique_consecutive(minidl.tensor(u), return_inverse=True, return_counts=True)
    theirs = torch.unique_consecutive(torch.tensor(u), return_inverse=True, return_counts=True)
    assert [o.tolist() for o in ours] == [t.tolist() for t in theirs]


def test_inference_mode():
    assert not minidl.is_inference_mode_enabled()
    with minidl.inference_mode():
        assert minidl.is_inference_mode_enabled() and not minidl.is_grad_enabled()
        with minidl.inference_mode(False):
            assert not minidl.is_inference_mode_enabled()

    @minidl.inference_mode()
    def f():
        return minidl.is_inference_mode_enabled()

    @minidl.inference_mode
    def g():
        return (minidl.ones(2, requires_grad=True) * 2).requires_grad

    assert f() and g() is False and minidl.is_grad_enabled() and not minidl.is_inference_mode_enabled()


X4 = RNG.standard_normal((2, 6, 3, 3))


def test_nn_long_tail_matches_torch():
    _compare(lambda lib, a: lib.nn.functional.channel_shuffle(a, 3), X4)
    _compare(lambda lib, a: lib.nn.ChannelShuffle(2)(a), X4)
    _compare(lambda lib, a: lib.nn.Softmax2d()(a), X4)
    _compare(lambda lib, a: lib.nn.functional.rrelu(a, 0.1, 0.3), X4)
    _compare(lambda lib, a: lib.nn.functional.lp_pool2d(a, 2, 2, 1), np.abs(X4) + 0.1)
    _compare(lambda lib, a: lib.nn.LPPool2d(3, (2, 3), 1)(a), np.abs(X4) + 0.1)
    _compare(lambda lib, a: lib.nn.LPPool1d(2, 3, 2)(a), np.abs(RNG.standard_normal((2, 3, 9))) + 0.1)
    for p in (1.0, 2.0, 3.0):
        _compare(lambda lib, a: lib.nn.functional.pdist(a, p), RNG.standard_normal((5, 3)))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_margin_losses_match_torch(reduction):
    x, t = RNG.standard_normal((5, 4)), np.array([0, 3, 1, 1, 2])
    for p in (1, 2):
        _compare(lambda lib, a, b: lib.nn.functional.multi_margin_loss(a, b, p=p, margin=0.7, reduction=reduction),
                 x, t, ints=(1,))
    _compare(lambda lib, a, b: lib.nn.MultiMarginLoss(weight=lib.tensor([1.0, 2.0, 0.5, 1.5], dtype=lib.float64),
                                                          reduction=reduction)(a, b),
             x, t, ints=(1,))
    labels = np.array([[3, 0, -1, 1], [0, 1, 2, 3], [1, -1, 0, 0], [2, 2, -1, 0], [-1, 0, 0, 0]])
    _compare(lambda lib, a, b: lib.nn.MultiLabelMarginLoss(reduction=reduction)(a, b), x, labels, ints=(1,))
    a, p, n = (RNG.standard_normal((4, 5)) for _ in range(3))
    _compare(lambda lib, u, v, w: lib.nn.functional.triplet_margin_with_distance_loss(u, v, w, reduction=reduction),
             a, p, n)
    _compare(lambda lib, u, v, w: lib.nn.TripletMarginWithDistanceLoss(
        distance_function=lambda s, q: 1 - lib.nn.functional.cosine_similarity(s, q), swap=True, margin=0.5,
        reduction=reduction)(u, v, w), a, p, n)


def test_alpha_dropout_keeps_selu_statistics():
    minidl.manual_seed(0)
    y = minidl.nn.functional.selu(minidl.randn(200000, dtype=minidl.float64))
    z = minidl.nn.AlphaDropout(0.2).train()(y)
    assert abs(float(z.mean())) < 0.01 and abs(float(z.std()) - 1) < 0.01
    assert (z == -1.7580993408473766 * 0).sum().item() < 10   # dropped units are not zeros
    assert minidl.nn.AlphaDropout(0.2).eval()(y) is y
    f = minidl.nn.FeatureAlphaDropout(0.5).train()(minidl.randn(4, 8, 3, 3))
    per_channel = f.reshape(4, 8, 9)
    assert bool(((per_channel - per_channel[..., :1]).abs().amax(-1) > 0).any())   # values vary inside a channel
    r = minidl.nn.RReLU(0.1, 0.3).train()(minidl.full((1000,), -1.0))
    assert -0.3 <= float(r.min()) < float(r.max()) <= -0.1


def test_total_norm_and_clipping_with_it_match_torch():
    grads = [RNG.standard_normal(s) for s in ((3, 4), (5,), (2, 2, 2))]
    for p in (2.0, 1.0, float("inf"), 3.0):
        ours = minidl.nn.utils.get_total_norm([minidl.tensor(g) for g in grads], p)
        theirs = torch.nn.utils.get_total_norm([torch.tensor(g) for g in grads], p)
        assert float(ours) == pytest.approx(float(theirs), rel=1e-12)
    results = []
    for lib in (minidl, torch):
        params = [lib.nn.Parameter(lib.tensor(np.zeros_like(g))) for g in grads]
        for param, g in zip(params, grads):
            param.grad = lib.tensor(g.copy())
        lib.nn.utils.clip_grads_with_norm_(params, 1.0, lib.nn.utils.get_total_norm([q.grad for q in params]))
        results.append([q.grad.numpy() for q in params])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_sparse_embeddings_with_sparse_adam_match_torch():
    """Embedding(sparse=True) (a dense gradient here, the values of torch's sparse one) with optim.SparseAdam, which
    updates only the rows looked up, beside Adam on a linear layer: the embedding after six steps as torch's."""
    w = RNG.standard_normal((20, 4)).astype(np.float32)
    lin = RNG.standard_normal((3, 4)).astype(np.float32)
    results = []
    for lib in (minidl, torch):
        emb = lib.nn.Embedding(20, 4, sparse=True)
        emb.weight.data = lib.tensor(w.copy())
        head = lib.nn.Linear(4, 3)
        head.weight.data, head.bias.data = lib.tensor(lin.copy()), lib.zeros(3)
        sparse_opt, dense_opt = lib.optim.SparseAdam(list(emb.parameters()), lr=0.05), lib.optim.Adam(head.parameters(), lr=0.05)
        draws = np.random.default_rng(1)
        for _ in range(6):
            loss = (head(emb(lib.tensor(draws.integers(0, 20, (8,))))) ** 2).mean()
            sparse_opt.zero_grad()
            dense_opt.zero_grad()
            loss.backward()
            sparse_opt.step()
            dense_opt.step()
        results.append(emb.weight.detach().numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-6)
    bag = minidl.nn.EmbeddingBag(10, 3, mode="sum", sparse=True)
    assert bag(minidl.tensor([[1, 2], [3, 3]])).shape == (2, 3)


def test_more_tensor_methods_match_torch():
    for rows, cols, wrap in [(3, 3, False), (5, 3, False), (7, 3, True), (3, 5, False), (3, 5, True)]:
        ours, theirs = minidl.zeros(rows, cols), torch.zeros(rows, cols)
        ours.fill_diagonal_(2.0, wrap)
        theirs.fill_diagonal_(2.0, wrap)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    _compare(lambda lib, a: (a * 1).tril_(-1) + (a * 2).triu_(1), RNG.standard_normal((4, 4)))
    _compare(lambda lib, a: a.renorm(2, 0, 1.0), RNG.standard_normal((3, 4)))
    _compare(lambda lib, a: lib.ldexp(a, lib.tensor([2, 3, 1])), RNG.standard_normal(3))
    assert minidl.gcd(minidl.tensor([12, 18]), minidl.tensor([8, 27])).tolist() == [4, 9]
    assert minidl.tensor([4, 6]).lcm(minidl.tensor([6, 4])).tolist() == [12, 12]
    assert minidl.tensor([1.5, -2.5]).fix().tolist() == [1.0, -2.0]
    assert minidl.zeros(2).get_device() == -1 and minidl.zeros(2).is_signed()
    assert not minidl.zeros(2, dtype=minidl.uint8).is_signed() and minidl.tensor([1.0]).isreal().tolist() == [True]
    assert minidl.arange(6).narrow_copy(0, 1, 3).tolist() == [1, 2, 3]
    t = minidl.zeros(3)
    assert not t.is_shared() and t.share_memory_() is t and t.is_shared()   # (test_torch_long_tail_4.py: fork)
    minidl.manual_seed(0)
    assert abs(float(minidl.empty(100000).cauchy_().median())) < 0.02
    assert abs(float(minidl.empty(100000).log_normal_(0.0, 0.5).log().std()) - 0.5) < 0.01
    assert abs(float(minidl.empty(100000).geometric_(0.25).mean()) - 4.0) < 0.05
    assert minidl.tensor([0.2, 0.8]).bernoulli().shape == (2,)
    assert minidl.tensor([[0.2, 0.8]]).multinomial(3, replacement=True).shape == (1, 3)
    assert minidl.tensor([[1.0, 2.0]]).diag_embed().shape == (1, 2, 2)


def test_datasets_combined_and_sequences_unpacked_as_torch():
    data = minidl.data
    a, b = data.TensorDataset(minidl.arange(3)), data.TensorDataset(minidl.arange(10, 15))
    both = a + b
    assert isinstance(both, data.ConcatDataset) and len(both) == 8 and both.cumulative_sizes == [3, 8]
    assert [int(both[i][0]) for i in (0, 2, 3, -1)] == [0, 2, 10, 14]
    assert [batch[0].tolist() for batch in data.DataLoader(both, batch_size=4)] == [[0, 1, 2, 10], [11, 12, 13, 14]]
    stacked = data.StackDataset(x=a, y=a)
    assert len(stacked) == 3 and int(stacked[1]["y"][0]) == 1
    with pytest.raises(ValueError, match="size mismatch"):
        data.StackDataset(a, b)

    class Stream(data.IterableDataset):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return iter(range(self.n))

    assert list(data.ChainDataset([Stream(2), Stream(3)])) == [0, 1, 0, 1, 2]
    seqs = [RNG.standard_normal((n, 2)) for n in (4, 2, 3)]
    for lib in (minidl, torch):
        tensors = [lib.tensor(s) for s in seqs]
        rnn = lib.nn.utils.rnn
        unpacked = rnn.unpack_sequence(rnn.pack_sequence(tensors, enforce_sorted=False))
        unpadded = rnn.unpad_sequence(rnn.pad_sequence(tensors, batch_first=True), lib.tensor([4, 2, 3]),
                                      batch_first=True)
        for got in (unpacked, unpadded):
            assert all(np.array_equal(g.numpy(), s) for g, s in zip(got, seqs))
        assert rnn.invert_permutation(lib.tensor([2, 0, 1])).tolist() == [1, 2, 0]


@pytest.mark.parametrize("name,args", [("relu_", ()), ("elu_", (0.5,)), ("leaky_relu_", (0.2,)),
                                       ("hardtanh_", (-0.5, 0.5)), ("selu_", ()), ("celu_", (0.7,)),
                                       ("threshold_", (0.1, -1.0))])
def test_functional_in_place_forms_match_torch(name, args):
    x = RNG.standard_normal((2, 3, 4))
    got = []
    for lib in (minidl, torch):
        leaf = lib.tensor(x, requires_grad=True)
        y = leaf * 1
        assert getattr(lib.nn.functional, name)(y, *args) is y
        (y * y).sum().backward()
        got.append((y.detach().numpy(), leaf.grad.numpy()))
    for ours, theirs in zip(*got):
        np.testing.assert_allclose(ours, theirs, rtol=1e-7, atol=1e-12)
    x4 = minidl.tensor(RNG.standard_normal((1, 2, 4, 4)))
    values, indices = minidl.nn.functional.max_pool2d_with_indices(x4, 2)
    tv, ti = torch.nn.functional.max_pool2d_with_indices(torch.tensor(x4.numpy()), 2)
    assert np.array_equal(values.numpy(), tv.numpy()) and np.array_equal(indices.numpy(), ti.numpy())


def test_factories_take_size_as_a_keyword():
    """torch.empty(size=(2, 3)) (pytorch/examples gat), zeros/ones/rand/randn(size=...): the same shapes as torch;
    a size given twice, or an unknown keyword, is a TypeError naming it."""
    import torch

    for name in ("empty", "zeros", "ones", "rand", "randn"):
        assert tuple(getattr(minidl, name)(size=(2, 3)).shape) == tuple(getattr(torch, name)(size=(2, 3)).shape)
    np.testing.assert_array_equal(minidl.ones(size=[4]).numpy(), torch.ones(size=[4]).numpy())
    with pytest.raises(TypeError, match="both positionally"):
        minidl.zeros(2, size=(2,))
    with pytest.raises(TypeError, match="'shape'"):
        minidl.zeros(shape=(2,))


def _forms_cases(lib):
    """(name, call) pairs of torch's top-level forms of nn.functional, on float64 inputs from one generator."""
    rng = np.random.default_rng(11)
    t = lambda *shape: lib.tensor(rng.standard_normal(shape))   # noqa: E731
    x4, w4, b4 = t(2, 3, 6, 6), t(4, 3, 3, 3), t(4)
    x3, w3 = t(2, 3, 8), t(4, 3, 3)
    mean, var = t(3), lib.tensor(rng.random(3) + 0.5)
    weight, bias = t(3), t(3)
    table, ids = t(7, 5), lib.tensor(np.array([[0, 3, 6], [2, 2, 1]]))
    return [
        ("conv2d", lambda: lib.conv2d(x4, w4, b4, 1, 1)),
        ("conv1d", lambda: lib.conv1d(x3, w3, None, 2)),
        ("conv_transpose2d", lambda: lib.conv_transpose2d(x4, w4.transpose(0, 1), None, 2)),
        ("max_pool2d", lambda: lib.max_pool2d(x4, 2)),
        ("avg_pool1d", lambda: lib.avg_pool1d(x3, 2)),
        ("adaptive_avg_pool1d", lambda: lib.adaptive_avg_pool1d(x3, 3)),
        ("selu", lambda: lib.selu(x3)),
        ("celu", lambda: lib.celu(x3, 0.7)),
        ("hardshrink", lambda: lib.hardshrink(x3, 0.3)),
        ("threshold", lambda: lib.threshold(x3, 0.1, -2.0)),
        ("prelu", lambda: lib.prelu(x3, lib.tensor([0.25]).double())),
        ("pdist", lambda: lib.pdist(x3.reshape(2, -1))),
        ("cosine_similarity", lambda: lib.cosine_similarity(x3, x3.flip(0))),
        ("pixel_shuffle", lambda: lib.pixel_shuffle(t(1, 4, 2, 2), 2)),
        ("dropout eval", lambda: lib.dropout(x3, 0.5, False)),
        ("batch_norm", lambda: lib.batch_norm(x4, weight, bias, mean, var, False, 0.1, 1e-5, True)),
        ("instance_norm", lambda: lib.instance_norm(x4, weight, bias, None, None, True, 0.1, 1e-5, True)),
        ("layer_norm", lambda: lib.layer_norm(x4, (6, 6), None, None, 1e-5, True)),
        ("group_norm", lambda: lib.group_norm(t(2, 4, 3), 2, None, None, 1e-5, True)),
        ("embedding", lambda: lib.embedding(table, ids)),
        ("embedding padding_idx", lambda: lib.embedding(table, ids, 2)),
    ]


def test_torch_top_level_forms_of_functional_match_torch():
    """torch.conv2d(...), torch.dropout(input, p, train), torch.batch_norm(input, weight, bias, mean, var, ...),
    torch.embedding(weight, indices), ...: the same values as torch's, with torch's argument order."""
    ours, theirs = _forms_cases(minidl), _forms_cases(torch)
    for (name, mine), (_, reference) in zip(ours, theirs):
        np.testing.assert_allclose(mine().detach().numpy(), reference().detach().numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=name)
    train = minidl.dropout(minidl.ones(1000, dtype=minidl.float64), 0.5, True)
    assert set(np.unique(train.numpy())) <= {0.0, 2.0} and 300 < int((train == 0).sum()) < 700
    with pytest.raises(AttributeError, match="no attribute 'conv4d'"):
        minidl.conv4d


def test_nn_buffer_and_the_rnn_base_classes():
    """nn.Buffer(t) assigned to a module attribute registers a buffer (persistent or not) as register_buffer does;
    nn.RNNBase / nn.RNNCellBase are the recurrent layers' bases (isinstance checks in init code)."""
    class WithBuffers(minidl.nn.Module):
        def __init__(self):
            super().__init__()
            self.kept = minidl.nn.Buffer(minidl.ones(2))
            self.scratch = minidl.nn.Buffer(minidl.zeros(3), persistent=False)

    m = WithBuffers()
    assert list(m.state_dict()) == ["kept"] and [n for n, _ in m.named_buffers()] == ["kept", "scratch"]
    assert isinstance(m.kept, minidl.nn.Buffer) and not isinstance(minidl.ones(1), minidl.nn.Buffer)
    assert not m.kept.requires_grad and type(m.kept) is minidl.Tensor
    assert isinstance(minidl.nn.LSTM(2, 3), minidl.nn.RNNBase) and isinstance(minidl.nn.GRUCell(2, 3),
                                                                              minidl.nn.RNNCellBase)


@pytest.mark.parametrize("case", ["combinations", "combinations_r3_repl", "diagflat", "dist", "addr", "trapz", "adjoint",
                                  "vander"])
def test_more_of_torchs_long_tail_matches_torch(case):
    """combinations, diagflat, dist, addr, trapz, adjoint and vander: values and the gradient of a weighted sum.
    (torch's own vander has no working backward in 2.13, "modified by an inplace operation": its gradient is taken
    from the same matrix built by powers.)"""
    x = np.random.default_rng(12).standard_normal(5)
    fns = {
        "combinations": lambda lib, t: lib.combinations(t, 2),
        "combinations_r3_repl": lambda lib, t: lib.combinations(t, 3, with_replacement=True),
        "diagflat": lambda lib, t: lib.diagflat(t[:3], 1),
        "dist": lambda lib, t: lib.dist(t, t.flip(0) * 2, 3),
        "addr": lambda lib, t: lib.addr(lib.ones(5, 5, dtype=lib.float64), t, t.flip(0), beta=0.5, alpha=2),
        "trapz": lambda lib, t: lib.trapz(t.reshape(1, 5) * t.reshape(5, 1)),
        "adjoint": lambda lib, t: lib.adjoint(t.reshape(1, 5)),
        "vander": lambda lib, t: (lib.vander(t, 4) if lib is minidl else
                                  lib.stack([t ** 3, t ** 2, t, lib.ones_like(t)], dim=1)),
    }
    got = []
    for lib in (minidl, torch):
        t = lib.tensor(x, requires_grad=True)
        out = fns[case](lib, t)
        w = lib.tensor(np.random.default_rng(3).standard_normal(tuple(out.shape)))
        (out * w).sum().backward()
        got.append((out.detach().numpy(), t.grad.numpy()))
    for ours, theirs in zip(*got):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    if case == "vander":   # the values against torch's own, increasing and N defaulted too
        for kwargs in ({}, {"N": 3, "increasing": True}):
            np.testing.assert_allclose(minidl.vander(minidl.tensor(x), **kwargs).numpy(),
                                       torch.vander(torch.tensor(x), **kwargs).numpy(), rtol=1e-12)


def test_logspace_range_and_histogram_match_torch():
    np.testing.assert_allclose(minidl.logspace(-1, 2, 7, base=2.0).numpy(), torch.logspace(-1, 2, 7, base=2.0).numpy(),
                               rtol=1e-6)
    with pytest.warns(UserWarning):   # (torch's deprecation of its range)
        want = torch.range(1, 4, 0.5)
    got = minidl.range(1, 4, 0.5)
    assert got.dtype == minidl.float32 and np.array_equal(got.numpy(), want.numpy())
    x = np.random.default_rng(13).standard_normal(50)
    for kwargs in ({"bins": 6}, {"bins": 4, "range": (-1.0, 1.0)}, {"bins": 5, "density": True}):
        h, e = minidl.histogram(minidl.tensor(x), **kwargs)
        th, te = torch.histogram(torch.tensor(x), **kwargs)
        np.testing.assert_allclose(h.numpy(), th.numpy(), rtol=1e-12)
        np.testing.assert_allclose(e.numpy(), te.numpy(), rtol=1e-12)
    edges = torch.tensor([-2.0, 0.0, 0.5, 2.0], dtype=torch.float64)
    np.testing.assert_allclose(minidl.histogram(minidl.tensor(x), minidl.tensor(edges.numpy()))[0].numpy(),
                               torch.histogram(torch.tensor(x), edges)[0].numpy())


def test_index_add_on_the_cpu_needs_no_index_by_size_matrix():
    """index_add into a million-element tensor from 20 000 entries (repeats included): on the CPU a scatter-add, so
    no 20 000 x 1 000 000 one-hot product (which cannot be allocated); values as torch's, the source's gradient alpha
    everywhere; an index past the end is an error, as in torch."""
    rng = np.random.default_rng(15)
    index, source = rng.integers(0, 1_000_000, 20000), rng.standard_normal(20000)
    src = minidl.tensor(source, requires_grad=True)
    out = minidl.zeros(1_000_000, dtype=minidl.float64).index_add(0, minidl.tensor(index), src, alpha=2.0)
    want = torch.zeros(1_000_000, dtype=torch.float64).index_add(0, torch.tensor(index), torch.tensor(source), alpha=2.0)
    np.testing.assert_allclose(out.detach().numpy(), want.numpy(), rtol=1e-12, atol=1e-12)
    out.sum().backward()
    np.testing.assert_array_equal(src.grad.numpy(), np.full(20000, 2.0))
    with pytest.raises(RuntimeError, match="out of bounds"):
        minidl.zeros(3).index_add(0, minidl.tensor([0, 3]), minidl.ones(2))


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce_matches_torch_values_and_gradients(reduce, include_self):
    """torch.index_reduce (and index_reduce_): slice i of source combined into slice index[i] of self along dim, with
    an index that repeats; values and both gradients as torch's (distinct values: no ties)."""
    rng = np.random.default_rng(3)
    base, src = rng.standard_normal((5, 3)), rng.standard_normal((3, 4)) + 0.5
    index = np.array([3, 0, 3, 1])
    results = []
    for lib in (minidl, torch):
        s, t = lib.tensor(base, requires_grad=True), lib.tensor(src, requires_grad=True)
        out = s.transpose(0, 1).index_reduce(1, lib.tensor(index), t, reduce, include_self=include_self)
        (out * lib.tensor(np.arange(15.0).reshape(3, 5))).sum().backward()
        inplace = s.detach().clone().transpose(0, 1).contiguous()
        inplace.index_reduce_(1, lib.tensor(index), t.detach(), reduce, include_self=include_self)
        results.append((out.detach().numpy(), s.grad.numpy(), t.grad.numpy(), inplace.numpy()))
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)


def test_frexp_and_linalg_cross_as_torch():
    x = np.array([0.3, -5.0, 8.0, 0.0, 1e-310])
    m, e = minidl.frexp(minidl.tensor(x))
    tm, te = torch.frexp(torch.tensor(x))
    np.testing.assert_array_equal(m.numpy(), tm.numpy())
    np.testing.assert_array_equal(e.numpy(), te.numpy())
    assert e.dtype == minidl.int32
    a, b = np.random.default_rng(0).standard_normal((2, 4, 3)), np.random.default_rng(1).standard_normal((1, 4, 3))
    np.testing.assert_allclose(minidl.linalg.cross(minidl.tensor(a), minidl.tensor(b)).numpy(),
                               torch.linalg.cross(torch.tensor(a), torch.tensor(b)).numpy(), rtol=1e-12)


def test_cuda_memory_and_device_queries_without_a_gpu_and_cpu_threads_and_the_old_profiler():
    """What training scripts call for logging and setup: on a machine without a GPU the memory queries report 0 and
    is_bf16_supported is False (as torch's; nanoGPT's train.py asks it); set_num_threads / get_num_threads;
    torch.autograd.profiler.profile and record_function on minidl's profiler (enabled=False records nothing)."""
    if minidl.cuda.is_available():
        pytest.skip("a GPU is present: tests/gpu/test_framework_gpu.py checks these there")
    assert minidl.cuda.memory_allocated() == minidl.cuda.max_memory_allocated() == minidl.cuda.memory_reserved() == 0
    assert minidl.cuda.is_bf16_supported() is False
    assert set(minidl.cuda.memory_stats()) >= {"allocated_bytes.all.current", "reserved_bytes.all.peak"}
    minidl.cuda.reset_peak_memory_stats()
    assert "allocated 0.0 MiB" in minidl.cuda.memory_summary()
    with pytest.raises(RuntimeError, match="cuda.get_device_properties: the CUDA path is not available"):
        minidl.cuda.get_device_properties(0)
    before = minidl.get_num_threads()
    try:
        minidl.set_num_threads(1)
        assert minidl.get_num_threads() == 1
        with pytest.raises(ValueError, match="expected a positive number of threads"):
            minidl.set_num_threads(0)
    finally:
        minidl.set_num_threads(before)
    from minidl.autograd import profiler

    x = minidl.tensor(np.ones((4, 3), np.float32), requires_grad=True)
    with profiler.profile(record_shapes=True) as prof:
        with profiler.record_function("model"):
            y = minidl.nn.functional.linear(x, minidl.tensor(np.ones((2, 3), np.float32))).sum()
        y.backward()
    names = {row["name"] for row in prof.key_averages()}
    assert "model" in names and "gemm" in names
    with profiler.profile(enabled=False) as nothing:
        assert nothing is None
