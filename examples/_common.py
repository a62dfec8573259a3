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


def _default_blas_threads() -> None:
    """NumPy's BLAS (OpenBLAS) starts a thread per core and spins them on every GEMM. On a 2-core machine
    that also runs anything else, that was 4x slower than one thread (issue 26); on an idle one, two threads
    gained ~13% (train_mnist.py, one CNN epoch: 70.5 s with 2 threads, 81.1 s with 1). We choose half the
    cores, at most 4: robust when the machine is busy. OMP_NUM_THREADS / OPENBLAS_NUM_THREADS set by the
    user win. It must run before NumPy is imported: this module is imported before minidl."""
    if "numpy" in sys.modules or "OMP_NUM_THREADS" in os.environ or "OPENBLAS_NUM_THREADS" in os.environ:
        return
    os.environ["OPENBLAS_NUM_THREADS"] = str(min(4, max(1, (os.cpu_count() or 2) // 2)))


_default_blas_threads()

import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

import minidl  # noqa: E402
import minidl.nn.functional as F  # noqa: E402
import minidl.random  # noqa: E402
from minidl.data import BPTTIterator  # noqa: E402


class Depends(str):
    """A default that depends on other options, as --help says it: `lr=Depends("0.4 with --norm bn,
    0.05 with --norm lrn")`. The option's parsed default is None and the example fills it in."""


def base_parser(doc: str, *, epochs, batch_size: int, lr, checkpoint):
    """The options every example has; an example adds its own to the returned parser.

    `epochs`, `lr` and `checkpoint` are the defaults, or Depends(sentence) where the default depends
    on other options: --help then shows the sentence, never "None".
    """
    # allow_abbrev=False: argparse would otherwise read a mistyped --epoch as --epochs, silently
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)

    def default(value):
        return None if isinstance(value, Depends) else value

    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--epochs", type=int, default=default(epochs),
                   help=f"total epochs (default {epochs}); --resume continues up to this many")
    p.add_argument("--batch-size", type=int, default=batch_size, help=f"default {batch_size}")
    p.add_argument("--lr", type=float, default=default(lr), help=f"learning rate (default {lr})")
    p.add_argument("--data", default=None, help="data root (default: $MINIDL_DATA or ~/.cache/minidl)")
    p.add_argument("--checkpoint", default=default(checkpoint), help=f"checkpoint file (default {checkpoint})")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--seed", type=int, default=0, help="default 0")
    p.add_argument("--limit-batches", type=int, default=None, metavar="N",
                   help="stop each training epoch and each evaluation after N batches (smoke tests, "
                        "benchmarks; accuracies are then over those batches only)")
    p.add_argument("--no-progress", action="store_true", help="no tqdm progress bars")
    p.add_argument("--stop-after", type=int, default=None, metavar="EPOCH",
                   help="stop after this epoch, as if interrupted (the lr schedule still spans --epochs)")
    p.add_argument("--amp", action="store_true",
                   help="mixed precision: forward pass and loss under minidl.autocast, loss scaling for float16")
    p.add_argument("--amp-dtype", choices=["float16", "bfloat16"], default="float16",
                   help="the lower precision of --amp (default float16, with a GradScaler; bfloat16 needs none)")
    p.add_argument("--no-fuse", action="store_true",
                   help="on the GPU, keep BN/ReLU and conv/ReLU unfused (default: nn.utils.fuse_modules)")
    return p


def add_graph_option(p):
    """--no-graph: the GPU training step runs eagerly instead of from a CUDA graph."""
    p.add_argument("--no-graph", action="store_true",
                   help="on the GPU, run every training step eagerly (default: after 3 eager steps the step "
                        "is captured in a CUDA graph and replayed)")
    return p


def make_train_step(model, optimizer, loss_fn, *, device: str, graph: bool = True, amp=None, max_norm=None):
    """The examples' training step: step(x, y) -> loss, doing zero_grad, forward, loss, backward and
    optimizer.step(). With `amp` (a MixedPrecision, --amp), the forward pass and the loss run under
    autocast, backward starts from the scaled loss and the step goes through the GradScaler. With
    `max_norm`, the gradients are clipped to that total norm before the step (unscaled first).

    On the GPU with graph=True it is replayed from a CUDA graph (minidl.cuda.CUDAGraphStep) after three
    eager steps. The whole step is captured when the optimizer keeps its learning rate and step count
    on the device (minidl._graphs._optimizer_is_capturable); otherwise forward and backward are
    captured and optimizer.step() runs eagerly after each replay, because a scheduler's lr and Adam's
    step count are host values a graph would freeze. A batch of another shape (the last, partial
    batch of an epoch) runs eagerly: it is not dropped.
    """

    amp = amp if amp is not None else MixedPrecision(None, device)

    def forward_backward(x, y):
        optimizer.zero_grad()
        with amp.autocast():
            loss = loss_fn(model(x), y)
        amp.scaler.scale(loss).backward()
        return loss

    params = [p for group in optimizer.param_groups for p in group["params"]]

    def eager(x, y):
        loss = forward_backward(x, y)
        amp.step(optimizer, params, max_norm)
        return loss

    if not graph or not str(device).startswith("cuda"):
        return eager
    from minidl._graphs import _optimizer_is_capturable

    # With --amp the GradScaler's step and update run eagerly after each replay (its scale and growth
    # tracker are device arrays updated in place, so the captured backward reads the current scale).
    # Clipping runs eagerly after each replay too (its norm is a device value, but it reads the gradients the
    # replay wrote, and the optimizer it feeds is eager whenever a host learning rate schedule drives it).
    whole = _optimizer_is_capturable(optimizer) and not amp.enabled and max_norm is None
    if whole:
        graphed = minidl.cuda.CUDAGraphStep(eager, optimizers=optimizer)
    else:
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
            amp.step(optimizer, params, max_norm)
        return loss

    step.graphed = graphed
    return step


def add_sampling_options(p, temperature=0.8):
    """--sample-length, --temperature and --prime: the text-generating examples' sampling options."""
    p.add_argument("--sample-length", type=int, default=300, help="default 300")
    p.add_argument("--temperature", type=float, default=temperature, help=f"default {temperature}")
    p.add_argument("--prime", default=None, help="text the samples start from (default: a newline)")
    return p


def resolve_prime(prime, corpus) -> str:
    """The text samples start from: --prime, or a newline (the corpus's first character if it has none);
    characters outside the corpus's vocabulary are one line and exit status 1."""
    if prime is None:
        prime = "\n" if "\n" in corpus.stoi else corpus.text[0]
    unknown = sorted(set(prime) - set(corpus.stoi))
    if unknown:
        sys.exit(f"--prime: characters {unknown!r} are not in the corpus's vocabulary")
    return prime


def check_limit(parser, args) -> None:
    """--limit-batches, --epochs and --batch-size must be positive: 0 would train nothing and divide
    by zero later (argparse's error: a usage line, one message, exit status 2)."""
    if args.batch_size < 1:
        parser.error(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.limit_batches is not None and args.limit_batches < 1:
        parser.error(f"--limit-batches must be >= 1, got {args.limit_batches}")
    if args.epochs is not None and args.epochs < 1:
        parser.error(f"--epochs must be >= 1, got {args.epochs}")
    # The numeric options the examples share: a bad value is one line now, not a traceback (or a silent
    # nonsense run: --dropout 1.5, --lr -1) minutes later.
    def flag(name):
        return "--" + name.replace("_", "-")

    for name in ("hidden_size", "embed_size", "num_layers", "bptt", "width", "eval_batch_size", "ema_every",
                 "sample_length", "block_size", "n_layer", "n_head", "n_embd", "steps_per_epoch"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            parser.error(f"{flag(name)} must be >= 1, got {value}")
    for name in ("cutout", "warmup", "sample_every"):
        value = getattr(args, name, None)
        if value is not None and value < 0:
            parser.error(f"{flag(name)} must be >= 0, got {value}")
    for name in ("lr", "clip", "temperature"):
        value = getattr(args, name, None)
        if value is not None and not value > 0:   # also refuses NaN
            parser.error(f"{flag(name)} must be > 0, got {value}")
    dropout = getattr(args, "dropout", None)
    if dropout is not None and not 0.0 <= dropout < 1.0:
        parser.error(f"--dropout must be in [0, 1), got {dropout}")


def load_data(load, *args, **kwargs):
    """load(*args, **kwargs), with a missing dataset (offline, or not where --data points) or a missing
    decoder (Pillow) reported as one line and exit status 1: a user's situation, not a bug."""
    from minidl.data import DatasetNotFoundError

    try:
        return load(*args, **kwargs)
    except DatasetNotFoundError as e:
        sys.exit(f"error: {e.short('--data')}")
    except ImportError as e:
        if "Pillow" not in str(e):
            raise
        sys.exit(f"error: {e}")


class MixedPrecision:
    """--amp in a training step: autocast() around the forward pass and the loss, then
    backward_and_step(loss, optimizer), which scales the loss, unscales before clipping, steps (skipping
    a step whose gradients overflowed) and updates the scale. Without --amp (args None or
    args.amp False) all of it is plain fp32: no cast, no scaling, optimizer.step()."""

    def __init__(self, args, device: str):
        self.device_type = minidl.device(str(device)).type
        self.enabled = bool(getattr(args, "amp", False))
        self.dtype = minidl.bfloat16 if getattr(args, "amp_dtype", "float16") == "bfloat16" else minidl.float16
        # bfloat16 has float32's exponent range: its gradients do not underflow, so no scaling.
        self.scaler = minidl.amp.GradScaler(self.device_type, enabled=self.enabled and self.dtype == minidl.float16)

    def autocast(self):
        return minidl.autocast(self.device_type, dtype=self.dtype, enabled=self.enabled)

    def backward_and_step(self, loss, optimizer, clip_parameters=None, max_norm=None):
        self.scaler.scale(loss).backward()
        self.step(optimizer, clip_parameters, max_norm)

    def step(self, optimizer, clip_parameters=None, max_norm=None):
        if max_norm is not None:
            from minidl.nn.utils import clip_grad_norm_

            self.scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
            clip_grad_norm_(clip_parameters, max_norm)
        self.scaler.step(optimizer)
        self.scaler.update()


def maybe_fuse(model, device: str, args):
    """On the GPU, fused kernels for BN -> ReLU and conv -> ReLU (same parameters and state_dict keys,
    same results: nn.utils.fuse_modules), unless --no-fuse. The CPU path keeps the plain modules."""
    if device == "cuda" and not getattr(args, "no_fuse", False):
        minidl.nn.utils.fuse_modules(model)
    return model


def epoch_range(start_epoch: int, args):
    """The 0-based epochs this run trains: from the checkpoint's (or 0) to --epochs or --stop-after."""
    stop = args.epochs if args.stop_after is None else min(args.epochs, args.stop_after)
    if start_epoch >= stop:
        print(f"the checkpoint has already trained {start_epoch} epochs (--epochs {args.epochs}"
              + ("" if args.stop_after is None else f", --stop-after {args.stop_after}") + "): nothing to train")
    return range(start_epoch, stop)


def check_schedule_length(state: dict, epochs: int, steps_per_epoch: int | None = None, hint: str = "") -> None:
    """A resumed lr schedule must span what the run that wrote the checkpoint planned: the same
    number of epochs (and, where it is per step, of steps per epoch); otherwise one line and exit 1."""
    saved = state["extra"].get("schedule_epochs")
    if saved is not None and saved != epochs:
        sys.exit(f"--resume: the checkpoint's lr schedule spans {saved} epoch{'s' * (saved != 1)} but --epochs "
                 f"is {epochs}; "
                 f"resume with --epochs {saved}{hint}")
    saved_steps = state["extra"].get("schedule_steps_per_epoch")
    if saved_steps is not None and steps_per_epoch is not None and saved_steps != steps_per_epoch:
        sys.exit(f"--resume: the checkpoint's lr schedule has {saved_steps} steps per epoch but this run has "
                 f"{steps_per_epoch}; resume with the --batch-size and --limit-batches it was trained with")


def pick_device(name: str | None) -> str:
    if name is None:
        return "cuda" if minidl.cuda.is_available() else "cpu"
    if name not in ("cpu", "cuda"):
        sys.exit(f"--device must be cpu or cuda, got {name!r}")
    if name == "cuda" and not minidl.cuda.is_available():
        sys.exit(f"--device cuda: {minidl.cuda.unavailable_reason()}")
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


def eval_batches(num_batches: int, limit: int | None) -> int:
    """How many batches an evaluation reads: all, or --limit-batches (it limits evaluation too)."""
    return num_batches if limit is None else min(num_batches, limit)


class RunningLoss:
    """The mean training loss of an epoch, summed on the device: no host sync per step.

    The bar shows the epoch's mean loss so far, refreshed every `show_every` steps (each refresh
    reads the device once, a sync, so it is rare) and at the last step; `show_every` defaults to a
    tenth of the epoch (at most 50 steps), so that a short run shows more than its first step.
    """

    def __init__(self, bar, show_every: int | None = None):
        total = getattr(bar, "total", None) or 0
        self.bar = bar
        self.show_every = show_every or max(1, min(50, total // 10))
        self.last = total
        self.total, self.count = None, 0

    def add(self, loss) -> None:
        value = loss.detach()
        # a copy to start the sum, never the loss itself: a graphed step returns the same static tensor every
        # step, which the next replay overwrites
        self.total = value.clone() if self.total is None else self.total + value
        self.count += 1
        if getattr(self.bar, "disable", False):
            return  # no bar (--no-progress): no reason to read the device
        if self.count % self.show_every == 0 or self.count == self.last:
            self.bar.set_postfix(mean_loss=f"{self.total.item() / self.count:.4f}")

    def mean(self) -> float:
        return float("nan") if self.count == 0 else self.total.item() / self.count


def save_checkpoint(path: str, *, model, optimizer, epoch: int, scheduler=None, scaler=None, **extra) -> None:
    """Write everything a resumed run needs (atomically: a crash never leaves half a file). In a data-parallel
    run only rank 0 writes (every rank holds the same weights)."""
    if os.environ.get("RANK", "0") != "0":
        return
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "scaler": None if scaler is None else scaler.state_dict(),
        "epoch": int(epoch),
        "rng": minidl.random.cpu_generator().bit_generator.state,
        "philox": {k: list(v) for k, v in minidl.random.get_philox_states().items()},
        "extra": extra,
    }
    minidl.save(state, path)


def load_checkpoint(path: str, *, model, optimizer, scheduler=None, scaler=None, device: str) -> dict:
    """Restore model, optimizer, scheduler and the global generator; returns the checkpoint dict."""
    if not os.path.exists(path):
        sys.exit(f"--resume: no checkpoint at {path}")
    try:
        state = minidl.load(path, map_location=device)
    except (OSError, ValueError) as e:
        sys.exit(f"--resume: cannot read {path}: {e}")
    needed = ("model", "optimizer", "epoch", "rng")
    if not isinstance(state, dict) or any(k not in state for k in needed):
        found = sorted(map(str, state))[:6] if isinstance(state, dict) else type(state).__name__
        sys.exit(
            f"--resume: {path} is not a training checkpoint of these examples (they hold {', '.join(needed)}; "
            f"this one holds {found}). A bare model state dict (minidl.save(model.state_dict(), ...)) has no "
            "optimizer or epoch to resume from: load it with model.load_state_dict(minidl.load(path)) instead."
        )
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if scheduler is not None and state.get("scheduler") is not None:
            scheduler.load_state_dict(state["scheduler"])
        if scaler is not None and scaler.is_enabled() and state.get("scaler"):
            scaler.load_state_dict(state["scaler"])
    except (KeyError, ValueError, RuntimeError) as e:
        why = " ".join(line.strip() for line in str(e).splitlines() if line.strip()) or type(e).__name__
        sys.exit(f"--resume: {path} was written by a different model or optimizer ({why[:300]}); "
                 f"resume with the options it was trained with, or pass another --checkpoint")
    minidl.random.cpu_generator().bit_generator.state = state["rng"]
    minidl.random.set_philox_states(state.get("philox", {}))
    return state


def announce_resume(path: str, state: dict) -> None:
    """Said once the checkpoint is known to fit this run (after check_schedule_length), never before."""
    print(f"resumed from {path} after epoch {state['epoch']}")


def check_checkpoint_path(path: str, resume: bool) -> None:
    """Before any training: can the checkpoint be written where it is asked for? (Learning it after an
    epoch, from a PermissionError about a temporary file, costs the epoch.) One line, exit status 1.
    A checkpoint already there from an earlier run is about to be replaced: say so (--resume continues it)."""
    if os.path.isdir(path):
        sys.exit(f"error: the checkpoint path {path} is a folder; pass a file name, e.g. --checkpoint {path}/run.mdl")
    folder = os.path.dirname(path) or "."
    try:
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, f".minidl-write-test-{os.getpid()}")
        with open(probe, "wb"):
            pass
        os.remove(probe)
    except OSError as e:
        sys.exit(f"error: cannot write the checkpoint {path}: {e.strerror or e} "
                 "(choose a writable place with --checkpoint PATH)")
    if os.path.exists(path) and not resume:
        print(f"note: {path} holds an earlier run's checkpoint; this run replaces it after its first epoch "
              "(--resume continues that run; --checkpoint PATH keeps both)")


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


def evaluate_lm(model, data, bptt, *, limit: int | None = None, desc: str = "evaluating", disable: bool = True):
    """Mean cross-entropy per token (nats) over a batchified stream (its first `limit` windows when
    given); summed on the device, read once. A progress bar unless `disable`.

    `model(x, hidden)` returns (logits (T * B, vocab), hidden)."""
    model.eval()
    total, count, hidden = None, 0, None
    windows = BPTTIterator(data, bptt)
    with minidl.no_grad():
        for x, y in progress(windows, total=eval_batches(len(windows), limit), desc=desc, disable=disable):
            logits, hidden = model(x, hidden)
            loss = F.cross_entropy(logits, y.reshape(-1), reduction="sum")
            total = loss if total is None else total + loss
            count += y.numel()
    model.train()
    return float(total.item()) / count


# ------------------------------------------------------------------------------------------------
# Data-parallel training: python -m minidl.distributed.run --nproc-per-node N examples/<example>.py ...
# ------------------------------------------------------------------------------------------------

DATA_PARALLEL_EPILOG = (
    "Data-parallel: python -m minidl.distributed.run --nproc-per-node N examples/{name} [options] trains on N GPUs "
    "(one process each, NCCL) or, with --device cpu, N CPU processes (MPI). --batch-size stays the global batch: "
    "each process takes 1/N of every batch, so the result matches one GPU at the same batch size.")


class DataParallel:
    """The examples' data-parallel mode. Under the launcher (RANK and WORLD_SIZE set, WORLD_SIZE > 1) it joins
    the process group (NCCL on GPUs, each process on GPU LOCAL_RANK; MPI on CPUs), wraps the model in
    DistributedDataParallel and splits each batch; ranks other than 0 are quiet (no prints, no progress bars,
    no checkpoints). Run plainly it does nothing, and the example is exactly the one-process program."""

    def __init__(self, device: str, args):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.enabled = "RANK" in os.environ and self.world > 1
        if not self.enabled:
            return
        import minidl.distributed as dist

        if device == "cuda":
            minidl.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group("nccl")
        else:
            dist.init_process_group("mpi")
        if self.rank != 0:
            args.no_progress = True
            sys.stdout = open(os.devnull, "w")

    def local_batch(self, batch_size: int) -> int:
        """This process's share of a global batch of batch_size."""
        if not self.enabled:
            return batch_size
        if batch_size % self.world:
            sys.exit(f"--batch-size {batch_size} must be a multiple of the {self.world} processes (each takes an "
                     "equal share)")
        return batch_size // self.world

    def wrap(self, model, sync_bn: bool = False):
        """The model to train: DistributedDataParallel(model) when data-parallel (batch norm converted to
        SyncBatchNorm with sync_bn), else the model itself."""
        if not self.enabled:
            return model
        if sync_bn:
            model = minidl.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        return minidl.nn.parallel.DistributedDataParallel(model)

    def agree(self, value: float) -> float:
        """Rank 0's value of a host number (a validation loss that drives the lr), so that every rank decides
        the same."""
        if not self.enabled:
            return value
        import minidl.distributed as dist

        device = f"cuda:{minidl.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
        t = minidl.tensor([float(value)], dtype=minidl.float64, device=device)
        dist.broadcast(t, 0)
        return float(t.item())

    def close(self):
        if self.enabled:
            import minidl.distributed as dist

            dist.barrier()
            dist.destroy_process_group()
