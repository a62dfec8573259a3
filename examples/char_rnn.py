"""A character-level language model (Karpathy's char-rnn) on Tiny Shakespeare, with minidl.

    python examples/char_rnn.py                          # 2-layer LSTM, 512 units, GPU
    python examples/char_rnn.py --cell gru --sample-every 200 --temperature 0.8
    python examples/char_rnn.py --resume                 # continue an interrupted run (same --epochs)

The model reads one character at a time and predicts the next:
    embedding (vocab -> 128) - dropout - LSTM or GRU (2 layers, 512 units, dropout between layers)
    - dropout - linear (512 -> vocab) logits
Training is truncated backpropagation through time: the text is cut into `batch-size` parallel
streams (batchify), and each step reads a window of `bptt` characters from every stream, predicts
each next character, and backpropagates through that window only. The hidden state is carried over
to the next window (detached: its values flow on, its gradient stops), so the model still sees an
unbroken text. Gradients are clipped to norm 5 (clip_grad_norm_, computed on the device).

Adam, lr 2e-3, cosine-annealed to lr/10 over the epochs. The loss is the cross-entropy in nats per
character; a good model reaches a validation loss <= 1.50 (a uniform guess over 65 characters is 4.17).

Sampling: from a prime text, the model's softmax over the next character, sharpened or flattened by
the temperature (logits / T), is sampled, fed back, and so on. --sample-every N prints a sample every
N training steps; a sample is always printed after each epoch.

Data: --data is a text file or a folder with tinyshakespeare/input.txt (default: $MINIDL_DATA or
~/.cache/minidl; downloaded when missing). The first 90% is training text, the last 10% validation.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for _common, when imported from elsewhere

import _common  # noqa: E402,F401  (first: it picks NumPy's BLAS thread count before NumPy loads)

import numpy as np  # noqa: E402

import minidl  # noqa: E402
import minidl.nn as nn  # noqa: E402
import minidl.nn.functional as F  # noqa: E402
from minidl.data import BPTTIterator, CharCorpus, batchify  # noqa: E402

from _common import (  # noqa: E402
    add_sampling_options, resolve_prime,
    announce_resume, check_checkpoint_path,
    MixedPrecision, RunningLoss, Timer, base_parser, check_limit, check_schedule_length, detach_hidden, epoch_range,
    evaluate_lm, load_checkpoint, load_data, parameter_count, pick_device, progress, save_checkpoint,
    steps_per_epoch,
)



class CharRNN(nn.Module):
    """(T, B) int64 character ids -> ((T * B, vocab) logits, hidden state)."""

    def __init__(self, vocab_size, embed_size=128, hidden_size=512, num_layers=2, cell="lstm", dropout=0.2):
        super().__init__()
        rnn_class = nn.LSTM if cell == "lstm" else nn.GRU
        self.embed = nn.Embedding(vocab_size, embed_size)
        self.drop = nn.Dropout(dropout)
        self.rnn = rnn_class(embed_size, hidden_size, num_layers, dropout=dropout if num_layers > 1 else 0.0)
        self.fc = nn.Linear(hidden_size, vocab_size)

    def forward(self, ids, hidden=None):
        x = self.drop(self.embed(ids))                       # (T, B, embed)
        y, hidden = self.rnn(x, hidden)                       # (T, B, hidden)
        y = self.drop(y)
        return self.fc(y.reshape(-1, y.shape[-1])), hidden    # (T * B, vocab)


def sample(model, corpus, device, *, prime="\n", length=300, temperature=1.0, rng=None):
    """Generate `length` characters after `prime`, one at a time (each step reads the GPU: it is a loop
    over characters by nature)."""
    rng = rng if rng is not None else np.random.default_rng(0)
    model.eval()
    out = []
    with minidl.no_grad():
        ids = minidl.tensor(corpus.encode(prime)[:, None], device=device)      # (T, 1)
        logits, hidden = model(ids)
        for _ in range(length):
            probs = F.softmax(logits[-1:] / temperature, dim=1).cpu().numpy()[0].astype(np.float64)
            next_id = int(rng.choice(len(probs), p=probs / probs.sum()))
            out.append(next_id)
            logits, hidden = model(minidl.tensor([[next_id]], device=device), hidden)
    model.train()
    return prime + corpus.decode(out)


def parse_args(argv=None):
    p = base_parser(__doc__, epochs=20, batch_size=64, lr=2e-3, checkpoint="checkpoints/char_rnn.mdl")
    p.add_argument("--cell", choices=["lstm", "gru"], default="lstm", help="default lstm")
    p.add_argument("--hidden-size", type=int, default=512, help="default 512")
    p.add_argument("--embed-size", type=int, default=128, help="default 128")
    p.add_argument("--num-layers", type=int, default=2, help="default 2")
    p.add_argument("--dropout", type=float, default=0.2, help="default 0.2")
    p.add_argument("--bptt", type=int, default=100, help="characters per training window (default 100)")
    p.add_argument("--clip", type=float, default=5.0, help="max gradient norm (default 5)")
    p.add_argument("--sample-every", type=int, default=0,
                   help="print a sample every N steps (default 0: per epoch only)")
    add_sampling_options(p)
    args = p.parse_args(argv)
    check_limit(p, args)
    return args


def main(argv=None):
    """Train; returns {"history": [per-epoch dicts], "model", "optimizer", "scheduler", "samples"}."""
    args = parse_args(argv)
    device = pick_device(args.device)
    check_checkpoint_path(args.checkpoint, args.resume)
    minidl.manual_seed(args.seed)

    corpus = load_data(CharCorpus, args.data, download=True)
    train_data = batchify(corpus.train_data, args.batch_size)
    val_data = batchify(corpus.val_data, min(args.batch_size, 16))
    train_windows = BPTTIterator(train_data, args.bptt, device=device)
    val_data = minidl.tensor(val_data, device=device)

    model = CharRNN(corpus.vocab_size, args.embed_size, args.hidden_size, args.num_layers, args.cell,
                    args.dropout).to(device)
    optimizer = minidl.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = minidl.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs, eta_min=args.lr / 10)
    amp = MixedPrecision(args, device)
    start_epoch = 0
    if args.resume:
        state = load_checkpoint(args.checkpoint, model=model, optimizer=optimizer, scheduler=scheduler,
                                scaler=amp.scaler, device=device)
        check_schedule_length(state, args.epochs, hint=" (the cosine schedule spans --epochs)")
        announce_resume(args.checkpoint, state)
        start_epoch = state["epoch"]

    print(f"minidl {minidl.__version__}: char-{args.cell.upper()} on {device}, {parameter_count(model)} parameters, "
          f"vocabulary {corpus.vocab_size}, {len(corpus.train_data)} training characters")
    args.prime = resolve_prime(args.prime, corpus)
    sample_rng = np.random.default_rng(args.seed)  # its own generator: sampling never shifts training's
    history, samples, step = [], [], 0
    for epoch in epoch_range(start_epoch, args):
        bar = progress(train_windows, total=steps_per_epoch(len(train_windows), args.limit_batches),
                       desc=f"epoch {epoch + 1}", disable=args.no_progress)
        running = RunningLoss(bar)
        hidden = None
        with Timer(device) as timer:
            for x, y in bar:
                with amp.autocast():
                    logits, hidden = model(x, hidden)
                    loss = F.cross_entropy(logits, y.reshape(-1))
                hidden = detach_hidden(hidden)
                optimizer.zero_grad()
                amp.backward_and_step(loss, optimizer, model.parameters(), args.clip)
                running.add(loss)
                step += 1
                if args.sample_every and step % args.sample_every == 0:
                    bar.write(sample(model, corpus, device, prime=args.prime, length=args.sample_length,
                                     temperature=args.temperature, rng=sample_rng))
        scheduler.step()
        val_loss = evaluate_lm(model, val_data, args.bptt, limit=args.limit_batches, disable=args.no_progress)
        record = {"epoch": epoch + 1, "train_loss": running.mean(), "val_loss": val_loss,
                  "train_seconds": timer.seconds, "steps": running.count}
        history.append(record)
        text = sample(model, corpus, device, prime=args.prime, length=args.sample_length,
                      temperature=args.temperature, rng=sample_rng)
        samples.append(text)
        print(f"epoch {epoch + 1}: train loss {record['train_loss']:.4f}, val loss {val_loss:.4f} nats/char, "
              f"train time {timer.seconds:.1f} s\n--- sample (temperature {args.temperature}) ---\n{text}\n---")
        save_checkpoint(args.checkpoint, model=model, optimizer=optimizer, scheduler=scheduler, scaler=amp.scaler,
                        epoch=epoch + 1,
                        schedule_epochs=args.epochs,
                        val_loss=val_loss, vocab="".join(corpus.chars))
    print(f"checkpoint: {args.checkpoint}")
    return {"history": history, "model": model, "optimizer": optimizer, "scheduler": scheduler, "samples": samples}


if __name__ == "__main__":
    main()
