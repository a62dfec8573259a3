"""The examples with --amp, on the CPU: autocast + GradScaler in the training step, the scaler's
state in the checkpoint, and a resumed run that ends where the uninterrupted one does."""
import numpy as np

import minidl
from tests.test_examples import (assert_loss_falls, load_example, run_resume_check, write_cifar_binary, write_mnist,
                                 write_word_corpus)


def test_train_mnist_amp_bfloat16(tmp_path):
    write_mnist(tmp_path / "data")
    mnist = load_example("train_mnist")
    out = mnist.main(["--device", "cpu", "--data", str(tmp_path / "data"), "--model", "mlp", "--batch-size", "16",
                      "--limit-batches", "4", "--no-progress", "--lr", "3e-3", "--amp", "--amp-dtype", "bfloat16",
                      "--epochs", "2", "--checkpoint", str(tmp_path / "c.mdl")])
    assert_loss_falls(out["history"])
    assert minidl.load(str(tmp_path / "c.mdl"))["scaler"] == {}  # bfloat16: no loss scaling


def test_ptb_lm_amp_float16_resumes(tmp_path):
    """An LSTM language model in float16 with loss scaling and clipping (unscale_ first); a run
    stopped and resumed ends where the uninterrupted one does, scaler state included."""
    write_word_corpus(tmp_path)
    ptb = load_example("ptb_lm")
    args = ["--device", "cpu", "--data", str(tmp_path), "--hidden-size", "24", "--embed-size", "24",
            "--batch-size", "4", "--bptt", "8", "--limit-batches", "16", "--no-progress", "--optimizer", "adam",
            "--lr", "2e-2", "--dropout", "0.2", "--amp"]
    full = run_resume_check(ptb, args, tmp_path)
    assert_loss_falls(full["history"])
    scaler = minidl.load(str(tmp_path / "full.mdl"))["scaler"]
    assert scaler["scale"] == 2.0**16 and scaler["_growth_tracker"] == 3 * 16  # 3 epochs of 16 steps, no overflow
    # the resumed run (2 epochs, then 1 more) counted on from the checkpoint's tracker
    assert minidl.load(str(tmp_path / "part.mdl"))["scaler"] == scaler


def test_train_cifar10_amp_float16(tmp_path):
    """ResNet-9 (width 8) for two steps: convolutions in float16 under autocast, batch norm on half
    activations, the GradScaler's state in the checkpoint."""
    write_cifar_binary(tmp_path / "data")
    cifar = load_example("train_cifar10")
    out = cifar.main(["--device", "cpu", "--data", str(tmp_path / "data"), "--norm", "bn", "--width", "8",
                      "--batch-size", "16", "--limit-batches", "2", "--no-progress", "--amp", "--epochs", "1",
                      "--checkpoint", str(tmp_path / "c.mdl")])
    assert np.isfinite(out["history"][0]["train_loss"])
    assert minidl.load(str(tmp_path / "c.mdl"))["scaler"]["_growth_tracker"] == 2
