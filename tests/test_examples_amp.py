"""The examples with --amp, on the CPU: autocast + GradScaler in the training step, the scaler's
state in the checkpoint, and a resumed run that ends where the uninterrupted one does."""
import minidl
from tests.test_examples import (assert_loss_falls, load_example, run_resume_check, write_mnist,
                                 write_word_corpus)


def test_train_mnist_amp_float16(tmp_path):
    write_mnist(tmp_path / "data")
    mnist = load_example("train_mnist")
    args = ["--device", "cpu", "--data", str(tmp_path / "data"), "--model", "mlp", "--batch-size", "16",
            "--limit-batches", "4", "--no-progress", "--lr", "3e-3", "--amp"]
    full = run_resume_check(mnist, args, tmp_path)
    assert_loss_falls(full["history"])
    scaler = minidl.load(str(tmp_path / "full.mdl"))["scaler"]
    assert scaler["scale"] == 2.0**16 and scaler["_growth_tracker"] == 12  # 3 epochs x 4 steps, no overflow


def test_ptb_lm_amp_bfloat16(tmp_path):
    write_word_corpus(tmp_path)
    ptb = load_example("ptb_lm")
    args = ["--device", "cpu", "--data", str(tmp_path), "--hidden-size", "24", "--embed-size", "24",
            "--batch-size", "4", "--bptt", "8", "--limit-batches", "16", "--no-progress", "--optimizer", "adam",
            "--lr", "2e-2", "--dropout", "0.2", "--amp", "--amp-dtype", "bfloat16"]
    full = run_resume_check(ptb, args, tmp_path)
    assert_loss_falls(full["history"])
    assert minidl.load(str(tmp_path / "full.mdl"))["scaler"] == {}  # bfloat16: no loss scaling
