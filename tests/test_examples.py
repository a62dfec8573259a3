"""The example trainings end to end on tiny synthetic data, on the CPU, plus clip_grad_norm_ vs torch.

Each example reads its data in the real on-disk format (idx files, CIFAR-10 binary batches, text
files) written to tmp_path, trains a few batches per epoch, and must
- lower its training loss (the data is made learnable: the class is drawn into the image, the text
  repeats),
- write a checkpoint holding exactly the final model and optimizer state,
- resume: a 3-epoch run stopped after 2 (--stop-after), then --resume, ends in the same model,
  optimizer (and scheduler) state as 3 epochs in one run. That needs the optimizer's buffers, the
  lr schedule and the random streams (shuffling, augmentation, dropout) to be restored, so it fails
  if any of them is not.
"""
from __future__ import annotations

import gzip
import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import minidl
from minidl.autograd.tensor import Tensor
from minidl.nn.utils import clip_grad_norm_, clip_grad_value_
from tests.conftest import rel_err

ROOT = Path(__file__).resolve().parents[1]


def load_example(name):
    """Import examples/<name>.py as a module (examples/ is not a package)."""
    sys.path.insert(0, str(ROOT / "examples"))
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------------
# Synthetic data in the real formats
# ------------------------------------------------------------------------------------------------


def _idx_bytes(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in array.shape)
    return header + array.astype(np.uint8).tobytes()


def _images_with_class_marks(rng, n, shape_hw, channels_last=None):
    """uint8 images whose label is drawn in: a bright 6x6 square at a label-dependent place, on noise."""
    h, w = shape_hw
    labels = np.arange(n) % 10
    rng.shuffle(labels)
    images = rng.integers(0, 60, size=(n, h, w), dtype=np.int64)
    for i, label in enumerate(labels):
        top, left = 3 + 12 * (label // 5), 2 + 5 * (label % 5)
        images[i, top:top + 6, left:left + 6] = 230
    return images.astype(np.uint8), labels.astype(np.uint8)


def write_mnist(root: Path, n_train=96, n_test=40):
    rng = np.random.default_rng(1)
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images, labels = _images_with_class_marks(rng, n, (28, 28))
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(_idx_bytes(images))
        # the labels gzipped, as the official downloads are: both forms are read
        with gzip.open(raw / f"{prefix}-labels-idx1-ubyte.gz", "wb") as f:
            f.write(_idx_bytes(labels))


def write_cifar_binary(root: Path, per_batch=16, n_test=24):
    """cifar-10-batches-bin/: records of 1 label byte + 3072 bytes (R plane, G plane, B plane)."""
    rng = np.random.default_rng(2)
    folder = root / "cifar-10-batches-bin"
    folder.mkdir(parents=True)
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    for name in names:
        n = n_test if name == "test_batch.bin" else per_batch
        grey, labels = _images_with_class_marks(rng, n, (32, 32))
        planes = np.stack([grey, np.roll(grey, 1, axis=1), 255 - grey], axis=1)  # (n, 3, 32, 32)
        records = np.concatenate([labels[:, None], planes.reshape(n, -1)], axis=1).astype(np.uint8)
        (folder / name).write_bytes(records.tobytes())


def write_text(path: Path):
    path.write_text("the quick brown fox jumps over the lazy dog.\nso the dog sleeps.\n" * 40)


def write_word_corpus(root: Path):
    rng = np.random.default_rng(3)
    nouns, verbs = ["cat", "dog", "bird", "fish", "man"], ["sees", "eats", "likes", "finds"]

    def lines(n):
        return "\n".join(f"the {rng.choice(nouns)} {rng.choice(verbs)} a {rng.choice(nouns)}" for _ in range(n)) + "\n"

    for name, n in (("train.txt", 240), ("valid.txt", 30), ("test.txt", 30)):
        (root / name).write_text(lines(n))


# ------------------------------------------------------------------------------------------------
# Comparing states
# ------------------------------------------------------------------------------------------------


def _as_numpy(value):
    if isinstance(value, Tensor):
        return value.numpy()
    return np.asarray(value)


def assert_same_state(a, b, where="state", rtol=1e-6):
    """Nested dicts/lists of tensors and numbers are equal (tensors to rtol, everything else exactly)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{where}: keys {sorted(map(str, a))} vs {sorted(map(str, b))}"
        for key in a:
            assert_same_state(a[key], b[key], f"{where}[{key!r}]", rtol)
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), f"{where}: {a!r} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_state(x, y, f"{where}[{i}]", rtol)
    elif isinstance(a, Tensor) or isinstance(b, Tensor):
        x, y = _as_numpy(a), _as_numpy(b)
        assert x.shape == y.shape, f"{where}: shapes {x.shape} vs {y.shape}"
        if x.dtype.kind == "f":
            assert rel_err(x, y) <= rtol or np.array_equal(x, y), f"{where}: rel err {rel_err(x, y):.3g}"
        else:
            assert np.array_equal(x, y), f"{where}: {x} vs {y}"
    elif isinstance(a, float) and isinstance(b, float):
        assert a == b or math.isclose(a, b, rel_tol=1e-12) or (math.isnan(a) and math.isnan(b)), f"{where}: {a} vs {b}"
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


def run_resume_check(module, base_args, ckpt_dir: Path, scheduler=False):
    """3 epochs in one run vs a run of 3 epochs stopped after 2 and resumed: the same final state.
    Returns the one-run result."""
    full = module.main(base_args + ["--epochs", "3", "--checkpoint", str(ckpt_dir / "full.mdl")])
    part = module.main(base_args + ["--epochs", "3", "--stop-after", "2", "--checkpoint", str(ckpt_dir / "part.mdl")])

    # The checkpoint holds exactly the state the run ended with.
    saved = minidl.load(str(ckpt_dir / "part.mdl"))
    assert saved["epoch"] == 2
    assert_same_state(saved["optimizer"], part["optimizer"].state_dict(), "checkpoint optimizer")
    assert_same_state(saved["model"], part["model"].state_dict(), "checkpoint model")

    resumed = module.main(base_args + ["--epochs", "3", "--resume", "--checkpoint", str(ckpt_dir / "part.mdl")])
    assert [r["epoch"] for r in resumed["history"]] == [3]
    assert_same_state(resumed["optimizer"].state_dict(), full["optimizer"].state_dict(), "optimizer after resume")
    assert_same_state(resumed["model"].state_dict(), full["model"].state_dict(), "model after resume")
    if scheduler:
        assert resumed["scheduler"].last_epoch == full["scheduler"].last_epoch
        assert resumed["scheduler"].get_last_lr() == full["scheduler"].get_last_lr()
    # And the last epoch trained the same way.
    assert resumed["history"][0]["train_loss"] == pytest.approx(full["history"][-1]["train_loss"], rel=1e-6)
    return full


def assert_loss_falls(history, factor=0.9):
    losses = [r["train_loss"] for r in history]
    assert all(np.isfinite(losses)), losses
    assert losses[-1] < factor * losses[0], f"training loss did not fall: {losses}"


# ------------------------------------------------------------------------------------------------
# The examples
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_train_mnist(tmp_path, model):
    write_mnist(tmp_path / "data")
    mnist = load_example("train_mnist")
    args = ["--device", "cpu", "--data", str(tmp_path / "data"), "--model", model, "--batch-size", "16",
            "--limit-batches", "4", "--no-progress", "--lr", "3e-3"]
    full = run_resume_check(mnist, args, tmp_path)
    assert_loss_falls(full["history"])
    assert all(0.0 <= r["test_accuracy"] <= 1.0 for r in full["history"])
    assert full["history"][-1]["steps"] == 4


def _cifar_args(tmp_path, norm):
    return ["--device", "cpu", "--data", str(tmp_path / "data"), "--norm", norm, "--width", "8",
            "--batch-size", "16", "--limit-batches", "5", "--no-progress"]  # the default lr of each norm


def test_train_cifar10(tmp_path):
    write_cifar_binary(tmp_path / "data")
    cifar = load_example("train_cifar10")
    full = run_resume_check(cifar, _cifar_args(tmp_path, "bn"), tmp_path, scheduler=True)
    assert_loss_falls(full["history"], factor=0.97)
    # one-cycle over 3 epochs of 5 steps: warm-up for the first 20% (3 steps), then down to max_lr / 4000
    assert full["scheduler"].last_epoch == 15
    assert full["history"][-1]["lr"] == pytest.approx(0.4 / 20 / 200)
    # a resume with another --epochs would change the schedule: refused
    with pytest.raises(SystemExit, match="spans 3 epochs"):
        cifar.main(_cifar_args(tmp_path, "bn") + ["--epochs", "4", "--resume", "--checkpoint",
                                                  str(tmp_path / "full.mdl")])


def test_train_cifar10_lrn(tmp_path):
    """--norm lrn: no batch norm left, LRN layers instead, and it still learns."""
    write_cifar_binary(tmp_path / "data")
    cifar = load_example("train_cifar10")
    out = cifar.main(_cifar_args(tmp_path, "lrn") + ["--epochs", "2", "--checkpoint", str(tmp_path / "c.mdl")])
    kinds = {type(m).__name__ for m in out["model"].modules()}
    assert "LocalResponseNorm" in kinds and "BatchNorm2d" not in kinds
    assert_loss_falls(out["history"], factor=0.97)


def test_train_cifar10_cutout_and_no_decay_bn(tmp_path):
    """--no-decay-bn: the 1-D parameters (batch-norm weights and biases here) train without weight
    decay; --cutout 0 turns off the cutout that the default runs."""
    write_cifar_binary(tmp_path / "data")
    cifar = load_example("train_cifar10")
    args = _cifar_args(tmp_path, "bn") + ["--epochs", "1", "--limit-batches", "2"]
    out = cifar.main(args + ["--no-decay-bn", "--checkpoint", str(tmp_path / "a.mdl")])
    decay, no_decay = out["optimizer"].param_groups
    assert decay["weight_decay"] == 5e-4 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim > 1 for p in decay["params"]) and all(p.ndim == 1 for p in no_decay["params"])
    batch_norms = [m for m in out["model"].modules() if type(m).__name__ == "BatchNorm2d"]
    assert len(no_decay["params"]) == 2 * len(batch_norms)
    with_cutout = cifar.main(args + ["--checkpoint", str(tmp_path / "b.mdl")])
    without = cifar.main(args + ["--cutout", "0", "--checkpoint", str(tmp_path / "c.mdl")])
    assert len(with_cutout["optimizer"].param_groups) == 1
    assert with_cutout["history"][0]["train_loss"] != without["history"][0]["train_loss"]


def test_train_cifar10_ema_resumes_and_reports(tmp_path):
    """--ema: the moving averages are checkpointed, so a resumed run ends with the same averages as an
    uninterrupted one; the final table has every model under both test-time augmentations."""
    write_cifar_binary(tmp_path / "data")
    cifar = load_example("train_cifar10")
    args = _cifar_args(tmp_path, "bn") + ["--epochs", "3", "--ema", "0.9", "0.5", "--ema-every", "2"]
    full = cifar.main(args + ["--checkpoint", str(tmp_path / "full.mdl")])
    cifar.main(args + ["--stop-after", "2", "--checkpoint", str(tmp_path / "part.mdl")])
    resumed = cifar.main(args + ["--resume", "--checkpoint", str(tmp_path / "part.mdl")])
    assert sorted(full["emas"]) == ["EMA 0.5", "EMA 0.9"]
    for name, ema in full["emas"].items():
        assert ema._count == 7  # steps 2, 4, ..., 14 of 15
        assert_same_state(resumed["emas"][name].state_dict(), ema.state_dict(), name)
        # an average is not the last weights
        assert rel_err(ema.module.fc.weight.detach().numpy(), full["model"].fc.weight.detach().numpy()) > 1e-4
    assert set(full["final"]) == {(m, t) for m in ("weights", "EMA 0.9", "EMA 0.5") for t in ("flip", "flip-translate")}
    assert all(0.0 <= a <= 1.0 for a in full["final"].values())
    with pytest.raises(SystemExit, match="same --ema"):
        cifar.main(args[:-4] + ["--resume", "--checkpoint", str(tmp_path / "part.mdl")])


def test_cifar10_seeds_reads_the_final_table(tmp_path, capsys):
    """benchmarks/cifar10_seeds.py builds its table from the example's printed output: the two must agree."""
    write_cifar_binary(tmp_path / "data")
    cifar = load_example("train_cifar10")
    out = cifar.main(_cifar_args(tmp_path, "bn") + ["--epochs", "2", "--ema", "0.9", "--checkpoint", str(tmp_path / "c.mdl")])
    spec = importlib.util.spec_from_file_location("cifar10_seeds", ROOT / "benchmarks" / "cifar10_seeds.py")
    seeds = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seeds)
    parsed = seeds.parse_log(capsys.readouterr().out)
    assert parsed["epochs"] == 2
    assert parsed["final"] == {k: pytest.approx(v * 100, abs=0.005) for k, v in out["final"].items()}


def test_cifar10_tta_views():
    """flip-translate: the batch, its mirror, and both shifted one pixel down-right and up-left."""
    cifar = load_example("train_cifar10")
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 5)).astype(np.float32)
    views = [v.numpy() for v in cifar.tta_views(minidl.tensor(x), "flip-translate")]
    assert len(views) == 6 and len(cifar.tta_views(minidl.tensor(x), "flip")) == 2
    mirror = x[..., ::-1]
    np.testing.assert_array_equal(views[0], x)
    np.testing.assert_array_equal(views[1], mirror)
    for i, image in enumerate((x, mirror)):
        down_right, up_left = views[2 + 2 * i], views[3 + 2 * i]
        np.testing.assert_array_equal(down_right[:, :, 1:, 1:], image[:, :, :-1, :-1])
        assert not down_right[:, :, 0, :].any() and not down_right[:, :, :, 0].any()
        np.testing.assert_array_equal(up_left[:, :, :-1, :-1], image[:, :, 1:, 1:])
        assert not up_left[:, :, -1, :].any() and not up_left[:, :, :, -1].any()
    with pytest.raises(ValueError, match="tta must be one of"):
        cifar.evaluate(cifar.build_model(width=4), None, tta="rotate")


def test_cifar10_resnet9_shapes():
    cifar = load_example("train_cifar10")
    model = cifar.build_model(width=4)
    logits = model(minidl.randn(2, 3, 32, 32))
    assert logits.shape == (2, 10)
    # full width: channels 64-128-256-512; counted by hand: convs + BN affine + fc = 6,573,120
    assert cifar.parameter_count(cifar.build_model(width=64)) == 6_573_120


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_char_rnn(tmp_path, cell, capsys):
    text = tmp_path / "tiny.txt"
    write_text(text)
    char_rnn = load_example("char_rnn")
    args = ["--device", "cpu", "--data", str(text), "--cell", cell, "--hidden-size", "32", "--embed-size", "16",
            "--batch-size", "4", "--bptt", "16", "--limit-batches", "10", "--no-progress", "--lr", "3e-2",
            "--sample-every", "5", "--sample-length", "20"]
    full = run_resume_check(char_rnn, args, tmp_path, scheduler=True)
    assert_loss_falls(full["history"])
    vocab = set(text.read_text())
    for sample in full["samples"]:
        assert len(sample) == 21 and set(sample) <= vocab  # the prime "\n" + 20 generated characters
    assert "--- sample" in capsys.readouterr().out


def test_char_gpt(tmp_path, capsys):
    """The GPT example: resumes exactly (random windows by (seed, epoch), dropout's Philox state, AdamW's
    moments, the warm-up + cosine lr by step), its loss falls, samples use the corpus's characters, and the
    tied embedding/head weight stays one tensor."""
    text = tmp_path / "tiny.txt"
    write_text(text)
    gpt = load_example("char_gpt")
    args = ["--device", "cpu", "--data", str(text), "--n-layer", "2", "--n-head", "2", "--n-embd", "16",
            "--block-size", "16", "--batch-size", "8", "--steps-per-epoch", "12", "--warmup", "4", "--no-progress",
            "--lr", "1e-2", "--sample-length", "20", "--dropout", "0.1"]
    full = run_resume_check(gpt, args, tmp_path)
    assert_loss_falls(full["history"])
    assert all(np.isfinite(r["val_loss"]) for r in full["history"])
    assert full["model"].head.weight is full["model"].tok.weight
    vocab = set(text.read_text())
    for sample in full["samples"]:
        assert len(sample) == 21 and set(sample) <= vocab
    out = capsys.readouterr().out
    assert "--- sample" in out
    # the weights of the best validation loss are kept beside the last ones (the text is small: it overfits)
    losses = [r["val_loss"] for r in full["history"]]
    best_epoch = int(np.argmin(losses)) + 1
    saved = [minidl.load(str(f)) for f in tmp_path.rglob("*.best.mdl")]
    assert saved and any(state["epoch"] == best_epoch and state["extra"]["val_loss"] == min(losses) for state in saved)
    assert f"best validation loss {min(losses):.4f} nats/char at epoch {best_epoch}" in out
    with pytest.raises(SystemExit):
        gpt.parse_args(["--n-embd", "10", "--n-head", "3"])


def test_ptb_lm(tmp_path):
    write_word_corpus(tmp_path)
    ptb = load_example("ptb_lm")
    args = ["--device", "cpu", "--data", str(tmp_path), "--hidden-size", "24", "--embed-size", "24",
            "--batch-size", "4", "--bptt", "8", "--limit-batches", "16", "--no-progress", "--optimizer", "adam",
            "--lr", "2e-2", "--dropout", "0.2"]  # (the SGD path runs in the plateau test below)
    full = run_resume_check(ptb, args, tmp_path)
    assert_loss_falls(full["history"])
    # better than a uniform guess over the 13 words
    assert math.isfinite(full["test_perplexity"]) and full["test_perplexity"] < 13


def test_ptb_lm_lr_drops_on_plateau(tmp_path):
    """At lr 1e-30 the weights do not move (in float32), so the validation loss never improves after
    epoch 1, and after every later epoch the lr is divided by 4."""
    write_word_corpus(tmp_path)
    ptb = load_example("ptb_lm")
    out = ptb.main(["--device", "cpu", "--data", str(tmp_path), "--hidden-size", "8", "--embed-size", "8",
                    "--batch-size", "4", "--bptt", "8", "--limit-batches", "1", "--no-progress", "--lr", "1e-30",
                    "--dropout", "0", "--epochs", "3", "--checkpoint", str(tmp_path / "c.mdl")])
    # the lr each epoch trained with: epoch 1 improves on "no model yet", epochs 2 and 3 do not
    assert [r["lr"] for r in out["history"]] == [1e-30, 1e-30, 1e-30 / 4]
    assert out["optimizer"].param_groups[0]["lr"] == 1e-30 / 16


# ------------------------------------------------------------------------------------------------
# clip_grad_norm_ / clip_grad_value_ against torch
# ------------------------------------------------------------------------------------------------


def _params_with_grads(shapes, scale, seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    grads = [(rng.standard_normal(s) * scale).astype(dtype) for s in shapes]
    ours, theirs = [], []
    for g in grads:
        p = minidl.zeros(*g.shape, dtype=dtype, requires_grad=True)
        p.grad = minidl.tensor(g.copy())
        ours.append(p)
        q = torch.zeros(g.shape, dtype=torch.float32 if dtype == np.float32 else torch.float64, requires_grad=True)
        q.grad = torch.from_numpy(g.copy())
        theirs.append(q)
    return ours, theirs


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e4])  # clips, and leaves alone
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    shapes = [(7, 5), (5,), (3, 2, 4)]
    ours, theirs = _params_with_grads(shapes, scale=2.0, seed=7 if norm_type == math.inf else int(norm_type))
    ours.append(minidl.zeros(3, requires_grad=True))  # no .grad: skipped
    total = clip_grad_norm_(ours, max_norm, norm_type=norm_type)
    expected = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type=norm_type)
    assert isinstance(total, Tensor) and total.shape == ()
    assert rel_err(total.numpy(), expected.numpy()) <= 1e-5
    for p, q in zip(ours, theirs):
        assert rel_err(p.grad.numpy(), q.grad.numpy()) <= 1e-5
    clipped_norm = np.linalg.norm(np.concatenate([p.grad.numpy().ravel() for p in ours[:3]]),
                                  ord=np.inf if norm_type == math.inf else norm_type)
    assert clipped_norm <= max_norm * (1 + 1e-5)
    assert ours[3].grad is None


def test_clip_grad_norm_float64_and_single_tensor():
    ours, theirs = _params_with_grads([(4, 3)], scale=5.0, seed=3, dtype=np.float64)
    total = clip_grad_norm_(ours[0], 1.0)
    expected = torch.nn.utils.clip_grad_norm_(theirs[0], 1.0)
    assert total.dtype == np.float64
    assert rel_err(total.numpy(), expected.numpy()) <= 1e-12
    assert rel_err(ours[0].grad.numpy(), theirs[0].grad.numpy()) <= 1e-12


def test_clip_grad_norm_nonfinite_and_bad_args():
    ours, _ = _params_with_grads([(3,)], scale=1.0, seed=4)
    ours[0].grad._data[1] = np.inf
    before = ours[0].grad.numpy().copy()
    with pytest.raises(RuntimeError, match="clip_grad_norm_.*non-finite"):
        clip_grad_norm_(ours, 1.0, error_if_nonfinite=True)
    np.testing.assert_array_equal(ours[0].grad.numpy(), before)  # nothing changed
    with pytest.raises(ValueError, match="clip_grad_norm_: max_norm"):
        clip_grad_norm_(ours, -1.0)
    with pytest.raises(ValueError, match="clip_grad_norm_: norm_type"):
        clip_grad_norm_(ours, 1.0, norm_type=0)
    with pytest.raises(TypeError, match="clip_grad_norm_: parameters must be Tensors"):
        clip_grad_norm_([np.zeros(3)], 1.0)
    assert float(clip_grad_norm_([minidl.zeros(2, requires_grad=True)], 1.0).item()) == 0.0  # no grads at all


def test_clip_grad_value_matches_torch():
    ours, theirs = _params_with_grads([(6, 4), (9,)], scale=3.0, seed=5)
    clip_grad_value_(ours, 1.5)
    torch.nn.utils.clip_grad_value_(theirs, 1.5)
    for p, q in zip(ours, theirs):
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())
    with pytest.raises(ValueError, match="clip_grad_value_"):
        clip_grad_value_(ours, -1)


def test_examples_benchmark_table(tmp_path):
    """The benchmark script times a step of a workload and writes its markdown table."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("examples_table", ROOT / "benchmarks" / "examples_table.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "examples.md"
    rows = bench.main(["--only", "mnist_mlp", "--cpu-steps", "1", "--out", str(out), "--commit", "abc123",
                       "--torch-threads", "1"])
    text = out.read_text()
    assert "- commit: abc123" in text
    assert {(r[2], r[1]) for r in rows} >= {("minidl", "cpu"), ("PyTorch", "cpu")}
    assert all(r[3] > 0 for r in rows)
    assert text.count("| mnist_mlp |") == len(rows)


def test_running_loss_does_not_alias_a_static_loss():
    """A graphed training step returns the same static loss tensor every step (each replay overwrites it): the
    epoch's sum must hold the values as they were added, not a reference to the first of them."""
    sys.path.insert(0, str(ROOT / "examples"))
    from _common import RunningLoss

    class Bar:
        total, disable = 3, True

    static = minidl.tensor(2.0)
    running = RunningLoss(Bar())
    for value in (2.0, 4.0, 9.0):
        static._data[...] = value          # what a replay does to the graph's output
        running.add(static)
    assert running.mean() == 5.0
