"""The first hour of a student: what the README tells a new user to run, run as that user would.

Each example is started as a command (a fresh Python process, as `python examples/X.py ...`), on the
CPU, for a couple of batches, on tiny data in the real on-disk formats (tests/test_examples.py writes
it), then resumed. The test fails on
- a traceback anywhere in a run's output (a traceback is for bugs; a user's mistake or situation is
  one line and a non-zero exit status),
- a user error that is not one line: `--resume --epochs 3` on a one-cycle MNIST checkpoint, the
  offline first run without the data (which must name all four MNIST files, plain or .gz, point at
  --data, and leave no empty folder behind),
- a default shown as None in an example's --help,
- a checkpoint that is not an ordinary file (mode 0666 less the umask),
- a README figure that the defaults do not reproduce: each row of the README's "Example trainings"
  table names an epoch count, which must be the example's default for those options, and its
  figure must be what the committed log of that run (benchmarks/results/runs/) ends with.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_examples import load_example, write_cifar_binary, write_mnist, write_text, write_word_corpus

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
RUNS = ROOT / "benchmarks" / "results" / "runs"
EXAMPLES = ["train_mnist", "train_cifar10", "char_rnn", "ptb_lm", "char_gpt"]


def run_example(name, args, data, tmp_path, env_extra=None):
    """`python examples/<name>.py args` in a fresh process; returns (exit status, stdout, stderr)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), MINIDL_DATA=str(data), MINIDL_OFFLINE="1", PYTHONUNBUFFERED="1")
    env.update(env_extra or {})
    done = subprocess.run([sys.executable, str(ROOT / "examples" / f"{name}.py"), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


def assert_clean(rc, out, err, what):
    assert "Traceback" not in out + err, f"{what}: a traceback\n{err[-3000:]}"
    assert rc == 0, f"{what}: exit status {rc}\n{err[-2000:]}"


def assert_user_error(rc, out, err, what):
    """A user error: non-zero exit, no traceback, and the last thing printed is one line."""
    assert rc != 0, f"{what}: exit status 0\n{out[-1000:]}"
    assert "Traceback" not in out + err, f"{what}: a traceback instead of a message\n{err[-3000:]}"
    last = err.strip().splitlines()[-1]
    return last.split("\r")[-1].strip()   # after any progress bar drawn on the same line


def umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# ------------------------------------------------------------------------------------------------
# Short CPU runs and resumes, as commands
# ------------------------------------------------------------------------------------------------

# name -> (how to write its data into a folder, tiny options: the defaults where they are cheap)
TINY = {
    "train_mnist": (write_mnist, []),   # the README's command: the CNN with its defaults
    "train_cifar10": (write_cifar_binary, ["--width", "4", "--batch-size", "16"]),
    "char_rnn": (lambda root: write_text(root / "input.txt"), ["--hidden-size", "16", "--embed-size", "8",
                                                               "--bptt", "16", "--sample-length", "5"]),
    "ptb_lm": (write_word_corpus, ["--hidden-size", "16", "--embed-size", "16", "--bptt", "8"]),
    "char_gpt": (lambda root: write_text(root / "input.txt"), ["--n-layer", "1", "--n-head", "2", "--n-embd", "8",
                                                               "--block-size", "8", "--steps-per-epoch", "3",
                                                               "--sample-length", "5"]),
}


@pytest.mark.parametrize("name", EXAMPLES)
def test_short_cpu_run_then_resume(name, tmp_path, monkeypatch):
    write, options = TINY[name]
    data = tmp_path / "data"
    data.mkdir()
    write(data)
    ckpt = tmp_path / "ckpt" / f"{name}.mdl"
    base = ["--device", "cpu", "--limit-batches", "2", "--epochs", "2", "--checkpoint", str(ckpt), *options]
    rc, out, err = run_example(name, base + ["--stop-after", "1"], data, tmp_path)
    assert_clean(rc, out, err, f"{name} first run")
    assert "epoch 1:" in out and "epoch 2:" not in out
    assert ckpt.stat().st_mode & 0o777 == 0o666 & ~umask(), oct(ckpt.stat().st_mode)

    rc, out, err = run_example(name, base + ["--resume"], data, tmp_path)
    assert_clean(rc, out, err, f"{name} --resume")
    assert f"resumed from {ckpt} after epoch 1" in out and "epoch 2:" in out

    if name == "train_mnist":
        # The usage a student tries next: more epochs on a one-cycle checkpoint; and a checkpoint of
        # another model. Each is one line and exit status 1 (checked in this process: cheaper).
        module = load_example(name)
        monkeypatch.setenv("MINIDL_DATA", str(data))
        monkeypatch.chdir(tmp_path)
        for extra, expected in ((["--epochs", "3"], "resume with --epochs 2"), (["--model", "mlp"], "different model")):
            with pytest.raises(SystemExit) as info:
                module.main(base + ["--resume", "--no-progress", *extra])
            message = info.value.code
            assert isinstance(message, str) and "\n" not in message and message.startswith("--resume:"), message
            assert expected in message, message


@pytest.mark.parametrize("name", EXAMPLES)
def test_unwritable_checkpoint_is_one_line_before_any_training(name, tmp_path):
    """A checkpoint that cannot be written is said before training, in one line naming the path (not
    after an epoch, as a PermissionError about a temporary file). A file where the folder should be
    fails for root too (a read-only folder would not)."""
    write, options = TINY[name]
    data = tmp_path / "data"
    data.mkdir()
    write(data)
    (tmp_path / "taken").write_text("a file, not a folder")
    ckpt = tmp_path / "taken" / "run.mdl"
    rc, out, err = run_example(name, ["--device", "cpu", "--limit-batches", "1", "--epochs", "1",
                                      "--checkpoint", str(ckpt), *options], data, tmp_path)
    last = assert_user_error(rc, out, err, f"{name} unwritable checkpoint")
    assert last.startswith("error: cannot write the checkpoint") and str(ckpt) in last, last
    assert "epoch 1" not in out + err


def test_checkpoint_of_an_earlier_run_is_announced_and_abbreviations_refused(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import _common
    finally:
        sys.path.pop(0)
    ckpt = tmp_path / "run.mdl"
    _common.check_checkpoint_path(str(ckpt), resume=False)
    assert capsys.readouterr().out == ""
    ckpt.write_bytes(b"earlier")
    _common.check_checkpoint_path(str(ckpt), resume=False)
    assert "holds an earlier run's checkpoint" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        _common.check_checkpoint_path(str(tmp_path), resume=False)   # a folder
    with pytest.raises(SystemExit):    # argparse's prefix matching would read --epoch as --epochs
        load_example("train_mnist").parse_args(["--epoch", "3"])
    assert "unrecognized arguments: --epoch" in capsys.readouterr().err


def test_mnist_defaults_depend_on_the_device(capsys):
    module = load_example("train_mnist")
    for device, expected in (("cpu", module.CPU_EPOCHS["cnn"]), ("cuda", module.EPOCHS["cnn"])):
        args = module.parse_args([])
        module.default_epochs(args, device)
        assert args.epochs == expected
    assert module.CPU_EPOCHS["cnn"] < module.EPOCHS["cnn"]
    assert "CPU run: 2 CNN epochs" in capsys.readouterr().out
    args = module.parse_args(["--epochs", "5"])
    module.default_epochs(args, "cpu")
    assert args.epochs == 5


def test_offline_first_run_is_one_line_naming_every_file(tmp_path):
    """No data, no network: the message names the four MNIST files (plain or .gz), where they go and
    --data; nothing is left behind in the empty data root."""
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, out, err = run_example("train_mnist", ["--device", "cpu"], empty, tmp_path)
    line = assert_user_error(rc, out, err, "offline first run")
    for part in ("train-images-idx3-ubyte(.gz)", "train-labels-idx1-ubyte(.gz)", "t10k-images-idx3-ubyte(.gz)",
                 "t10k-labels-idx1-ubyte(.gz)", str(empty / "MNIST" / "raw"), "--data"):
        assert part in line, (part, line)
    assert "root=" not in line
    assert list(empty.iterdir()) == [], "the failed download left folders behind"


# ------------------------------------------------------------------------------------------------
# --help, and the README's figures against the defaults
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXAMPLES)
def test_help_shows_every_default(name, capsys):
    module = load_example(name)
    with pytest.raises(SystemExit) as info:
        module.parse_args(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert "--limit-batches" in text and "evaluation" in text
    assert not re.search(r"\bNone\b", text), [line for line in text.splitlines() if "None" in line]


# README row (the first cell's command) -> the committed log of that run, and its options.
# The device matters where an example picks its defaults by device (train_mnist.py: fewer epochs on a CPU).
README_RUNS = {
    "`train_mnist.py` (CNN": ("mnist_cnn_gpu.log", "train_mnist", [], "cuda"),
    "`train_mnist.py` on a CPU": ("mnist_cnn_cpu_2core.log", "train_mnist", [], "cpu"),
    "`train_mnist.py --model mlp": ("mnist_mlp_cpu_2core.log", "train_mnist", ["--model", "mlp"], "cpu"),
    "`char_rnn.py`": ("char_rnn_lstm_gpu.log", "char_rnn", [], "cuda"),
    "`char_rnn.py --amp`": ("char_rnn_amp_fp16_7c7528e.log", "char_rnn", ["--amp"], "cuda"),
    "`ptb_lm.py`": ("ptb_lm_gpu.log", "ptb_lm", [], "cuda"),
    "`ptb_lm.py --amp`": ("ptb_lm_amp_fp16_9f8fd1a.log", "ptb_lm", ["--amp"], "cuda"),
    "`train_cifar10.py` (defaults": (None, "train_cifar10", [], "cuda"),
    "`char_gpt.py --amp --amp-dtype bfloat16`": ("char_gpt_h100_bf16_graphed_5d01e5c.log", "char_gpt",
                                                 ["--amp", "--amp-dtype", "bfloat16"], "cuda"),
}


def readme_rows():
    table = README.split("**Example trainings**", 1)[1].split("\n\n", 2)[1]
    return [line for line in table.splitlines() if line.startswith("| `")]


def test_every_readme_training_row_is_checked():
    rows = [row for row in readme_rows() if "--epochs" not in row.split("|")[1]]
    unchecked = [row[:60] for row in rows if not any(row[2:].startswith(key) for key in README_RUNS)]
    assert not unchecked, f"README rows with a default epoch count and no check here: {unchecked}"


@pytest.mark.parametrize("key", list(README_RUNS))
def test_readme_figures_are_what_the_defaults_give(key):
    log_name, example, options, device = README_RUNS[key]
    row = next(row for row in readme_rows() if row[2:].startswith(key))
    command, result = row.split("|")[1], row.split("|")[2]
    epochs = int(re.search(r"(\d+) epochs", command).group(1))
    module = load_example(example)
    args = module.parse_args(options)
    if hasattr(module, "default_epochs"):
        module.default_epochs(args, device)
    default = args.epochs
    assert epochs == default, f"README says {epochs} epochs for {key}, the default is {default}"
    if log_name is None:  # several seeds: its own table (benchmarks/results/cifar10_seeds_*.md)
        return
    log = (RUNS / log_name).read_text().strip().splitlines()
    trained = [int(m.group(1)) for m in (re.match(r"epoch (\d+):", line) for line in log) if m]
    assert trained and trained[-1] == default, f"{log_name} trained {trained[-1:]} epochs, the default is {default}"
    figure = re.search(r"(\d+\.\d+)", result).group(1)
    last_epoch = max(i for i, line in enumerate(log) if re.match(r"epoch \d+:", line))
    assert figure in "\n".join(log[last_epoch:]), f"README's {figure} is not what {log_name}'s last epoch gives"


def test_readme_install_lines_name_real_extras_and_scripts():
    """Every `pip install -e ".[extra]"` in the READMEs names an extra of pyproject.toml, the
    notebooks extra has JupyterLab, and the quick start's scripts exist."""
    text = (ROOT / "pyproject.toml").read_text()
    block = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    extras = dict(re.findall(r"^(\w+) = (\[.*?\])", block, flags=re.M | re.S))
    readmes = README + (ROOT / "tutorials" / "README.md").read_text()
    named = set(re.findall(r"""pip install -e ["']?\.\[(\w+)\]""", readmes))
    assert {"cuda13", "vision", "notebooks"} <= named, named
    assert named <= set(extras), f"README names extras that pyproject.toml lacks: {named - set(extras)}"
    assert "jupyterlab" in extras["notebooks"] and "pillow" in extras["vision"]
    for script in re.findall(r"(?:python|bash) ((?:examples|scripts)/[\w/]+\.(?:py|sh))", README):
        assert (ROOT / script).is_file(), script


@pytest.mark.parametrize("name, bad", [
    ("char_rnn", ["--dropout", "1.5"]), ("char_rnn", ["--lr", "-1"]), ("char_rnn", ["--bptt", "0"]),
    ("ptb_lm", ["--hidden-size", "0"]), ("train_cifar10", ["--width", "0"]), ("char_gpt", ["--temperature", "0"]),
    ("char_gpt", ["--n-embd", "10", "--n-head", "3"]), ("train_mnist", ["--lr", "nan"]),
])
def test_bad_numeric_options_are_one_line(name, bad, capsys):
    """A bad size, rate or probability stops at parse time with argparse's one-line error (exit 2)."""
    with pytest.raises(SystemExit) as info:
        load_example(name).parse_args(bad)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert bad[0] in err and "error:" in err, err
