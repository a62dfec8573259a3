"""A character-level GPT (a decoder-only Transformer) on Tiny Shakespeare, with minidl: char_rnn.py's
task with attention instead of recurrence.

    python examples/char_gpt.py                          # 6 layers, 6 heads, d=384, 256 characters of context
    python examples/char_gpt.py --n-layer 4 --n-embd 128 --block-size 64 --epochs 4   # small, CPU-sized
    python examples/char_gpt.py --resume                 # continue an interrupted run (same --epochs)

The model (the size of nanoGPT's "shakespeare_char" configuration by default):
    token embedding (vocab -> d) + position embedding (block_size -> d) - dropout
    n_layer blocks, each   x + attention(layer_norm(x))   then   x + mlp(layer_norm(x))     (pre-norm)
        attention: q, k, v = one linear (d -> 3d), split into n_head heads of d / n_head;
                   F.scaled_dot_product_attention(q, k, v, is_causal=True): position t sees 0..t only
        mlp:       linear (d -> 4d) - GELU - linear (4d -> d) - dropout
    layer_norm - linear (d -> vocab) logits, its weight shared with the token embedding (weight tying)

Unlike the RNN, nothing is carried between windows: each training example is a random window of
block_size + 1 characters; the model predicts characters 1..T from 0..T-1 at once (every position is a
training example, and the causal mask keeps each from seeing its future). An "epoch" here is
--steps-per-epoch such batches of random windows (the windows are drawn by (seed, epoch), so a resumed
run sees the same ones), not a pass over the text.

AdamW (lr 1e-3, betas 0.9/0.99, weight decay 0.1 on matrices only), a linear warm-up over the first
100 steps then cosine to lr/10, gradients clipped to norm 1, dropout 0.2. The loss is the cross-entropy
in nats per character over the validation text (the last 10%), in non-overlapping windows; a uniform
guess over 65 characters is 4.17, and char_rnn's LSTM reaches <= 1.50.

Attention is F.scaled_dot_product_attention: on the GPU with --amp, minidl's fused FlashAttention-2 kernel
(kernels/attention.cu: the T x T scores never leave the chip); elsewhere the plain algorithm.
The text is small and the model overfits it after a few epochs (as nanoGPT's does): each epoch that improves
the validation loss also saves its weights to <checkpoint>.best.mdl. On the GPU the forward and backward pass
replay from a CUDA graph after 3 eager steps (clipping and AdamW run eagerly after each replay; --no-graph: every
step eager). Measured on one H100 with --amp --amp-dtype bfloat16: best validation loss 1.4690 nats/char at
epoch 4 (1.73 at epoch 10), 6.1 s/epoch (eagerly: 1.4665, ~20 s/epoch).
Data: as char_rnn.py (--data, $MINIDL_DATA or ~/.cache/minidl; downloaded when missing).
"""
from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for _common, when imported from elsewhere

import _common  # noqa: E402,F401  (first: it picks NumPy's BLAS thread count before NumPy loads)

import numpy as np  # noqa: E402

import minidl  # noqa: E402
import minidl.nn as nn  # noqa: E402
import minidl.nn.functional as F  # noqa: E402
from minidl.data import CharCorpus  # noqa: E402

from _common import (  # noqa: E402
    add_sampling_options, resolve_prime,
    MixedPrecision, RunningLoss, Timer, announce_resume, base_parser, check_checkpoint_path, check_limit,
    check_schedule_length, epoch_range, epoch_rng, load_checkpoint, load_data, parameter_count, pick_device,
    progress, save_checkpoint, add_graph_option, make_train_step,
)


class CausalSelfAttention(nn.Module):
    def __init__(self, d, n_head, dropout):
        super().__init__()
        if d % n_head:
            raise ValueError(f"--n-embd {d} must be divisible by --n-head {n_head}")
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.n_head, self.dropout = n_head, dropout
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x):                                         # (B, T, d)
        B, T, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (t.reshape(B, T, self.n_head, d // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, h, T, hd)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(B, T, d)                    # heads side by side again
        return self.resid_drop(self.proj(y))


class Block(nn.Module):
    def __init__(self, d, n_head, dropout):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d), CausalSelfAttention(d, n_head, dropout)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class CharGPT(nn.Module):
    """(B, T) int64 character ids -> (B, T, vocab) logits."""

    def __init__(self, vocab_size, block_size=256, n_layer=6, n_head=6, n_embd=384, dropout=0.2):
        super().__init__()
        self.block_size = block_size
        self.tok, self.pos = nn.Embedding(vocab_size, n_embd), nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([Block(n_embd, n_head, dropout) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)
        self.head.weight = self.tok.weight                        # weight tying: one (vocab, d) matrix
        for name, p in self.named_parameters():                  # GPT-2's initialisation
            if p.ndim == 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith(("attn.proj.weight", "mlp.2.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, ids):
        T = ids.shape[1]
        if T > self.block_size:
            raise ValueError(f"CharGPT: a window of {T} characters is longer than the context ({self.block_size})")
        x = self.drop(self.tok(ids) + self.pos(minidl.arange(T, device=ids.device)))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def best_path(checkpoint: str) -> str:
    """Where the weights of the best validation loss go: checkpoints/char_gpt.mdl -> checkpoints/char_gpt.best.mdl."""
    root, ext = os.path.splitext(checkpoint)
    return f"{root}.best{ext or '.mdl'}"


def random_windows(data: np.ndarray, block_size: int, batch_size: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """batch_size random windows: inputs (B, T) and their next characters (B, T)."""
    starts = rng.integers(0, len(data) - block_size - 1, size=batch_size)
    idx = starts[:, None] + np.arange(block_size + 1)[None, :]
    chunk = data[idx]
    return chunk[:, :-1], chunk[:, 1:]


def evaluate(model, data: np.ndarray, block_size: int, device, *, batch_size=32, limit=None, disable=True):
    """Mean cross-entropy (nats per character) over non-overlapping windows of the text (the first `limit`
    batches when given); summed on the device, read once."""
    n = (len(data) - 1) // block_size
    starts = np.arange(n) * block_size
    batches = [starts[i:i + batch_size] for i in range(0, n, batch_size)]
    if limit is not None:
        batches = batches[:limit]
    model.eval()
    total, count = None, 0
    with minidl.no_grad():
        for s in progress(batches, total=len(batches), desc="evaluating", disable=disable):
            idx = s[:, None] + np.arange(block_size + 1)[None, :]
            chunk = minidl.tensor(data[idx], device=device)
            logits = model(chunk[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1), reduction="sum")
            total = loss if total is None else total + loss
            count += chunk.shape[0] * block_size
    model.train()
    return float(total.item()) / count


def sample(model, corpus, device, *, prime="\n", length=300, temperature=0.8, top_k=None, rng=None):
    """Generate `length` characters after `prime`: the model's distribution over the next character
    (logits / temperature, optionally only the top_k), sampled, appended, the window slid."""
    rng = rng if rng is not None else np.random.default_rng(0)
    model.eval()
    ids = list(corpus.encode(prime))
    start = len(ids)
    with minidl.no_grad():
        for _ in range(length):
            window = minidl.tensor(np.array(ids[-model.block_size:])[None, :], device=device)
            logits = model(window)[0, -1].float().cpu().numpy().astype(np.float64) / temperature
            if top_k is not None:
                logits[logits < np.sort(logits)[-top_k]] = -np.inf
            p = np.exp(logits - logits.max())
            ids.append(int(rng.choice(len(p), p=p / p.sum())))
    model.train()
    return prime + corpus.decode(ids[start:])


def lr_at(step, total, warmup, lr):
    """Linear warm-up over `warmup` steps, then cosine from lr to lr / 10 at `total`."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress_ = min(1.0, (step - warmup) / max(1, total - warmup))
    return lr / 10 + (lr - lr / 10) * 0.5 * (1 + math.cos(math.pi * progress_))


def parse_args(argv=None):
    p = base_parser(__doc__, epochs=10, batch_size=64, lr=1e-3, checkpoint="checkpoints/char_gpt.mdl")
    p.add_argument("--block-size", type=int, default=256, help="characters of context (default 256)")
    p.add_argument("--n-layer", type=int, default=6, help="default 6")
    p.add_argument("--n-head", type=int, default=6, help="default 6")
    p.add_argument("--n-embd", type=int, default=384, help="default 384")
    p.add_argument("--dropout", type=float, default=0.2, help="default 0.2")
    p.add_argument("--weight-decay", type=float, default=0.1, help="on weight matrices only (default 0.1)")
    p.add_argument("--steps-per-epoch", type=int, default=500, help="random-window batches per epoch (default 500)")
    p.add_argument("--warmup", type=int, default=100, help="warm-up steps (default 100)")
    p.add_argument("--clip", type=float, default=1.0, help="max gradient norm (default 1)")
    p.add_argument("--top-k", type=int, default=None, help="sample only from the k likeliest characters")
    add_sampling_options(p)
    add_graph_option(p)
    args = p.parse_args(argv)
    check_limit(p, args)   # every size >= 1, --dropout in [0, 1), --lr/--clip/--temperature > 0
    if args.n_embd % args.n_head:
        p.error(f"--n-embd ({args.n_embd}) must be divisible by --n-head ({args.n_head})")
    return args


def main(argv=None):
    """Train; returns {"history": [per-epoch dicts], "model", "optimizer", "samples", "train_step"}."""
    args = parse_args(argv)
    device = pick_device(args.device)
    check_checkpoint_path(args.checkpoint, args.resume)
    minidl.manual_seed(args.seed)

    corpus = load_data(CharCorpus, args.data, download=True)
    train, val = np.asarray(corpus.train_data, np.int64), np.asarray(corpus.val_data, np.int64)
    if len(val) < args.block_size + 2 or len(train) < args.block_size + 2:
        sys.exit(f"--block-size {args.block_size}: the text is too short for it ({len(train)} training and "
                 f"{len(val)} validation characters)")
    model = CharGPT(corpus.vocab_size, args.block_size, args.n_layer, args.n_head, args.n_embd,
                    args.dropout).to(device)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = minidl.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                    {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.99))
    amp = MixedPrecision(args, device)
    total_steps = args.epochs * args.steps_per_epoch
    start_epoch = 0
    if args.resume:
        state = load_checkpoint(args.checkpoint, model=model, optimizer=optimizer, scaler=amp.scaler, device=device)
        check_schedule_length(state, args.epochs, args.steps_per_epoch, hint=" (the cosine schedule spans --epochs)")
        announce_resume(args.checkpoint, state)
        start_epoch = state["epoch"]

    print(f"minidl {minidl.__version__}: char-GPT on {device}, {parameter_count(model)} parameters "
          f"({args.n_layer} layers, {args.n_head} heads, d={args.n_embd}, context {args.block_size}), "
          f"vocabulary {corpus.vocab_size}, {len(train)} training characters")
    prime = resolve_prime(args.prime, corpus)
    sample_rng = np.random.default_rng(args.seed)
    steps = args.steps_per_epoch if args.limit_batches is None else min(args.steps_per_epoch, args.limit_batches)
    vocab = corpus.vocab_size

    def loss_fn(logits, y):
        return F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))

    # zero_grad, forward and loss under autocast, backward, clipping, AdamW; on the GPU the forward and backward
    # pass replay from a CUDA graph after 3 eager steps (--no-graph: eager), clipping and AdamW run eagerly
    train_step = make_train_step(model, optimizer, loss_fn, device=device, graph=not args.no_graph, amp=amp,
                                 max_norm=args.clip)
    history, samples = [], []
    best = {"val_loss": float("inf"), "epoch": 0}
    if args.resume:
        best = state["extra"].get("best", best)
    for epoch in epoch_range(start_epoch, args):
        rng = epoch_rng(args.seed, epoch)
        bar = progress(range(steps), total=steps, desc=f"epoch {epoch + 1}", disable=args.no_progress)
        running = RunningLoss(bar)
        with Timer(device) as timer:
            for i in bar:
                step = epoch * args.steps_per_epoch + i
                for group in optimizer.param_groups:
                    group["lr"] = lr_at(step, total_steps, args.warmup, args.lr)
                x, y = random_windows(train, args.block_size, args.batch_size, rng)
                x, y = minidl.tensor(x, device=device), minidl.tensor(y, device=device)
                running.add(train_step(x, y))
        val_loss = evaluate(model, val, args.block_size, device, limit=args.limit_batches, disable=args.no_progress)
        record = {"epoch": epoch + 1, "train_loss": running.mean(), "val_loss": val_loss,
                  "train_seconds": timer.seconds, "steps": running.count}
        history.append(record)
        text = sample(model, corpus, device, prime=prime, length=args.sample_length, temperature=args.temperature,
                      top_k=args.top_k, rng=sample_rng)
        samples.append(text)
        print(f"epoch {epoch + 1}: train loss {record['train_loss']:.4f}, val loss {val_loss:.4f} nats/char, "
              f"train time {timer.seconds:.1f} s\n--- sample (temperature {args.temperature}) ---\n{text}\n---")
        improved = val_loss < best["val_loss"]
        if improved:
            best = {"val_loss": val_loss, "epoch": epoch + 1}
        save_checkpoint(args.checkpoint, model=model, optimizer=optimizer, scaler=amp.scaler, epoch=epoch + 1,
                        schedule_epochs=args.epochs, schedule_steps_per_epoch=args.steps_per_epoch,
                        val_loss=val_loss, vocab="".join(corpus.chars), best=best)
        if improved:   # a small text overfits: keep the weights of the best validation loss too, as nanoGPT does
            save_checkpoint(best_path(args.checkpoint), model=model, optimizer=optimizer, scaler=amp.scaler,
                            epoch=epoch + 1, schedule_epochs=args.epochs, schedule_steps_per_epoch=args.steps_per_epoch,
                            val_loss=val_loss, vocab="".join(corpus.chars), best=best)
    print(f"checkpoint: {args.checkpoint}; best validation loss {best['val_loss']:.4f} nats/char at epoch "
          f"{best['epoch']} ({best_path(args.checkpoint)})")
    return {"history": history, "model": model, "optimizer": optimizer, "samples": samples, "train_step": train_step}


if __name__ == "__main__":
    main()
