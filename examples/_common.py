"""What every example script shares: command-line options, checkpoints, the progress bar, timing.

Each example stays readable on its own: the model, the data and the training step are written out
in the example; only this plumbing lives here.

Reproducible resume. A run interrupted after epoch k and resumed with --resume must continue exactly
as if it had not stopped. So everything random is tied to (seed, epoch) or saved:
- each epoch's shuffling and augmentation draw from `epoch_rng(seed, epoch)`, not from one stream
  that would have to be replayed;
- the checkpoint holds the model, the optimizer (momentum buffers, Adam moments, step counts, the
  current lr), the scheduler, the state of minidl's global CPU generator and the (seed, offset) of
  each device's dropout generator (minidl.random.get_philox_states).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from tqdm import tqdm

import minidl
import minidl.nn.functional as F
import minidl.random
from minidl.data import BPTTIterator


def base_parser(doc: str, *, epochs: int, batch_size: int, lr: float | None, checkpoint: str):
    """The options every example has; an example adds its own to the returned parser."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--epochs", type=int, default=epochs,
                   help=f"total epochs (default {epochs}); --resume continues up to this many")
    p.add_argument("--batch-size", type=int, default=batch_size, help=f"default {batch_size}")
    p.add_argument("--lr", type=float, default=lr, help=f"learning rate (default {lr})")
    p.add_argument("--data", default=None, help="data root (default: $MINIDL_DATA or ~/.cache/minidl)")
    p.add_argument("--checkpoint", default=checkpoint, help=f"checkpoint file (default {checkpoint})")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit-batches", type=int, default=None,
                   help="stop each training epoch after N batches (smoke tests, benchmarks)")
    p.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    p.add_argument("--stop-after", type=int, default=None, metavar="EPOCH",
                   help="stop after this epoch, as if interrupted (the lr schedule still spans --epochs)")
    return p


def add_graph_option(p):
    """--no-graph: the GPU training step runs eagerly instead of from a CUDA graph."""
    p.add_argument("--no-graph", action="store_true",
                   help="on the GPU, run every training step eagerly (default: after 3 eager steps the step "
                        "is captured in a CUDA graph and replayed)")
    return p


def make_train_step(model, optimizer, loss_fn, *, device: str, graph: bool = True):
    """The examples' training step: step(x, y) -> loss, doing zero_grad, forward, loss, backward and
    optimizer.step().

    On the GPU with graph=True it is replayed from a CUDA graph (minidl.cuda.CUDAGraphStep) after three
    eager steps. The whole step is captured when the optimizer keeps its learning rate and step count
    on the device (minidl._graphs._optimizer_is_capturable); otherwise forward and backward are
    captured and optimizer.step() runs eagerly after each replay, because a scheduler's lr and Adam's
    step count are host values a graph would freeze. A batch of another shape (the last, partial
    batch of an epoch) runs eagerly: it is not dropped.
    """

    def forward_backward(x, y):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        return loss

    def eager(x, y):
        loss = forward_backward(x, y)
        optimizer.step()
        return loss

    if not graph or not str(device).startswith("cuda"):
        return eager
    from minidl._graphs import _optimizer_is_capturable

    whole = _optimizer_is_capturable(optimizer)
    if whole:
        graphed = minidl.cuda.CUDAGraphStep(eager, optimizers=optimizer)
    else:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        graphed = minidl.cuda.CUDAGraphStep(forward_backward, params=params)

    state = {"graph": True}

    def step(x, y):
        static = graphed.static_inputs
        if not state["graph"] or (static is not None and (x.shape != static[0].shape or y.shape != static[1].shape)):
            return eager(x, y)
        if graphed.calls == graphed.warmup and not whole:
            # The capture comes next. Should the model hold an op that cannot be captured (the error
            # names it), say so once and go on eagerly: a failed forward+backward capture has run
            # nothing and changed no host state the eager step relies on.
            try:
                loss = graphed(x, y)
            except RuntimeError as e:
                print(f"CUDA graph: {e}\n-> training eagerly from here (--no-graph skips the attempt)")
                state["graph"] = False
                return eager(x, y)
        else:
            loss = graphed(x, y)
        if not whole:
            optimizer.step()
        return loss

    step.graphed = graphed
    return step


def epoch_range(start_epoch: int, args):
    """The 0-based epochs this run trains: from the checkpoint's (or 0) to --epochs or --stop-after."""
    stop = args.epochs if args.stop_after is None else min(args.epochs, args.stop_after)
    return range(start_epoch, stop)


def check_schedule_length(state: dict, epochs: int) -> None:
    """A resumed lr schedule must span the same number of epochs as the run that wrote the checkpoint."""
    saved = state["extra"].get("schedule_epochs")
    if saved is not None and saved != epochs:
        sys.exit(f"--resume: the checkpoint's lr schedule spans {saved} epochs but --epochs is {epochs}; "
                 f"resume with --epochs {saved}")


def pick_device(name: str | None) -> str:
    if name is None:
        return "cuda" if minidl.cuda.is_available() else "cpu"
    if name not in ("cpu", "cuda"):
        sys.exit(f"--device must be cpu or cuda, got {name!r}")
    if name == "cuda" and not minidl.cuda.is_available():
        sys.exit("--device cuda: no usable GPU or CuPy (pip install -e '.[cuda13]')")
    return name


def synchronize(device: str) -> None:
    """Wait for the GPU before reading a clock: kernels run asynchronously."""
    if device != "cpu":
        minidl.cuda.synchronize()


def epoch_rng(seed: int, epoch: int, stream: int = 0) -> np.random.Generator:
    """The generator of one epoch's shuffling (stream 0) or augmentation (stream 1, 2, ...)."""
    return np.random.default_rng([seed, epoch, stream])


def steps_per_epoch(num_batches: int, limit: int | None) -> int:
    return num_batches if limit is None else min(num_batches, limit)


def progress(iterable, *, total: int, desc: str, disable: bool):
    """A tqdm bar over at most `total` items of `iterable` (it stops there even if there are more)."""
    def limited():
        for i, item in enumerate(iterable):
            if i >= total:
                return
            yield item

    return tqdm(limited(), total=total, desc=desc, leave=False, disable=disable, dynamic_ncols=True)


class RunningLoss:
    """The mean training loss of an epoch, summed on the device: no host sync per step.

    `show_every` steps the bar shows the latest loss; that one .item() is a sync, so it is rare.
    """

    def __init__(self, bar, show_every: int = 50):
        self.bar, self.show_every = bar, show_every
        self.total, self.count = None, 0

    def add(self, loss) -> None:
        value = loss.detach()
        self.total = value if self.total is None else self.total + value
        self.count += 1
        if self.count % self.show_every == 1 or self.show_every == 1:
            self.bar.set_postfix(loss=f"{loss.item():.4f}")

    def mean(self) -> float:
        return float("nan") if self.count == 0 else self.total.item() / self.count


def save_checkpoint(path: str, *, model, optimizer, epoch: int, scheduler=None, **extra) -> None:
    """Write everything a resumed run needs (atomically: a crash never leaves half a file)."""
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "epoch": int(epoch),
        "rng": minidl.random.cpu_generator().bit_generator.state,
        "philox": {k: list(v) for k, v in minidl.random.get_philox_states().items()},
        "extra": extra,
    }
    minidl.save(state, path)


def load_checkpoint(path: str, *, model, optimizer, scheduler=None, device: str) -> dict:
    """Restore model, optimizer, scheduler and the global generator; returns the checkpoint dict."""
    if not os.path.exists(path):
        sys.exit(f"--resume: no checkpoint at {path}")
    state = minidl.load(path, map_location=device)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and state.get("scheduler") is not None:
        scheduler.load_state_dict(state["scheduler"])
    minidl.random.cpu_generator().bit_generator.state = state["rng"]
    minidl.random.set_philox_states(state.get("philox", {}))
    print(f"resumed from {path} after epoch {state['epoch']}")
    return state


class Timer:
    """Wall time of a block, waiting for the device at the end: `with Timer(device) as t: ...; t.seconds`."""

    def __init__(self, device: str):
        self.device = device
        self.seconds = 0.0

    def __enter__(self):
        synchronize(self.device)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        synchronize(self.device)
        self.seconds = time.perf_counter() - self._start
        return False


def parameter_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


# ------------------------------------------------------------------------------------------------
# Language models (char_rnn.py, ptb_lm.py)
# ------------------------------------------------------------------------------------------------


def detach_hidden(hidden):
    """Keep the state's values for the next window, drop its history (truncated BPTT)."""
    if isinstance(hidden, tuple):
        return tuple(h.detach() for h in hidden)
    return hidden.detach()


def evaluate_lm(model, data, bptt):
    """Mean cross-entropy per token (nats) over a batchified stream; summed on the device, read once.

    `model(x, hidden)` returns (logits (T * B, vocab), hidden)."""
    model.eval()
    total, count, hidden = None, 0, None
    with minidl.no_grad():
        for x, y in BPTTIterator(data, bptt):
            logits, hidden = model(x, hidden)
            loss = F.cross_entropy(logits, y.reshape(-1), reduction="sum")
            total = loss if total is None else total + loss
            count += y.numel()
    model.train()
    return float(total.item()) / count
