"""A word-level LSTM language model on the Penn Treebank, with minidl (Zaremba et al. 2014, "medium").

    python examples/ptb_lm.py                             # 2 x 650 LSTM, SGD lr 20, GPU
    python examples/ptb_lm.py --optimizer adam --lr 1e-3
    python examples/ptb_lm.py --resume --epochs 40

The model, as PyTorch's word_language_model example (which reports test perplexity ~81 with it):
    embedding (10k -> 650) - dropout 0.5 - LSTM (2 layers, 650 units, dropout 0.5 between layers)
    - dropout 0.5 - linear (650 -> 10k) logits           (--tied shares the embedding and output weights)
Training: truncated BPTT over 35 words of 20 parallel streams, the hidden state carried from window
to window (detached); plain SGD at lr 20 with the gradient norm clipped to 0.25 (clip_grad_norm_, on
the device); after every epoch whose validation loss does not improve, the lr is divided by 4.

Perplexity = exp(mean cross-entropy per word): the model is as unsure as a uniform choice among
that many words. The target here is test perplexity <= 120. PyTorch's example reports ~81 after 40 epochs with
this recipe; minidl's default 30 epochs give 81.6 on an H200 (~12 s per epoch;
benchmarks/results/runs/ptb_lm_gpu.log): by then the lr has been divided by 4 four times and the
validation perplexity has stopped moving. --epochs 40 continues (also with --resume).

Data: --data is a folder with ptb/ptb.{train,valid,test}.txt, ptb.*.txt or {train,valid,test}.txt
(any corpus in that form works); default $MINIDL_DATA or ~/.cache/minidl, downloaded when missing.
"""
from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for _common, when imported from elsewhere

import _common  # noqa: E402,F401  (first: it picks NumPy's BLAS thread count before NumPy loads)

import minidl  # noqa: E402
import minidl.nn as nn  # noqa: E402
import minidl.nn.functional as F  # noqa: E402
from minidl.data import BPTTIterator, WordCorpus, batchify  # noqa: E402

from _common import (  # noqa: E402
    announce_resume, check_checkpoint_path,
    MixedPrecision, Depends, RunningLoss, Timer, base_parser, check_limit, detach_hidden, epoch_range, evaluate_lm,
    load_checkpoint, load_data, parameter_count, pick_device, progress, save_checkpoint, steps_per_epoch,
    DataParallel, DATA_PARALLEL_EPILOG,
)



class WordLM(nn.Module):
    """(T, B) int64 word ids -> ((T * B, vocab) logits, (h, c))."""

    def __init__(self, vocab_size, embed_size=650, hidden_size=650, num_layers=2, dropout=0.5, tied=False):
        super().__init__()
        if tied and embed_size != hidden_size:
            raise ValueError(f"WordLM: --tied needs embed_size == hidden_size, got {embed_size} and {hidden_size}")
        self.embed = nn.Embedding(vocab_size, embed_size)
        self.drop = nn.Dropout(dropout)
        self.rnn = nn.LSTM(embed_size, hidden_size, num_layers, dropout=dropout if num_layers > 1 else 0.0)
        self.fc = nn.Linear(hidden_size, vocab_size)
        # Small uniform init of the embedding and the output layer, as Zaremba et al.
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        nn.init.uniform_(self.fc.weight, -0.1, 0.1)
        nn.init.zeros_(self.fc.bias)
        if tied:  # one matrix is both the input embedding and the output projection (Press & Wolf 2017)
            self.fc.weight = self.embed.weight

    def forward(self, ids, hidden=None):
        x = self.drop(self.embed(ids))                        # (T, B, embed)
        y, hidden = self.rnn(x, hidden)                        # (T, B, hidden)
        y = self.drop(y)
        return self.fc(y.reshape(-1, y.shape[-1])), hidden     # (T * B, vocab)


def perplexity(loss: float) -> float:
    return math.exp(min(loss, 50.0))  # exp overflows long before a loss that large means anything


def parse_args(argv=None):
    p = base_parser(__doc__, epochs=30, batch_size=20, lr=Depends("20 with --optimizer sgd, 1e-3 with adam"),
                    checkpoint="checkpoints/ptb_lm.mdl")
    p.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd", help="default sgd")
    p.add_argument("--embed-size", type=int, default=650, help="default 650")
    p.add_argument("--hidden-size", type=int, default=650, help="default 650")
    p.add_argument("--num-layers", type=int, default=2, help="default 2")
    p.add_argument("--dropout", type=float, default=0.5, help="default 0.5")
    p.add_argument("--tied", action="store_true", help="tie the embedding and output weights")
    p.add_argument("--bptt", type=int, default=35, help="words per training window (default 35)")
    p.add_argument("--clip", type=float, default=0.25, help="max gradient norm (default 0.25)")
    p.add_argument("--eval-batch-size", type=int, default=10, help="default 10")
    p.epilog = DATA_PARALLEL_EPILOG.format(name="ptb_lm.py") + (
        " Here the global batch is --batch-size parallel streams of text: each process carries its share of them.")
    args = p.parse_args(argv)
    check_limit(p, args)
    if args.lr is None:
        args.lr = 20.0 if args.optimizer == "sgd" else 1e-3
    return args


def main(argv=None):
    """Train; returns {"history": [per-epoch dicts], "model", "optimizer", "test_perplexity"}."""
    args = parse_args(argv)
    device = pick_device(args.device)
    dp = DataParallel(device, args)     # under minidl.distributed.run: one process per GPU, else nothing
    check_checkpoint_path(args.checkpoint, args.resume)
    minidl.manual_seed(args.seed)

    corpus = load_data(WordCorpus, args.data, download=True)
    streams = batchify(corpus.train, args.batch_size)             # (time, batch_size streams)
    if dp.enabled:                      # this process's share of the streams (the global batch is unchanged)
        dp.local_batch(args.batch_size)
        streams = streams[:, dp.rank::dp.world].copy()
    train_windows = BPTTIterator(streams, args.bptt, device=device)
    val_data = minidl.tensor(batchify(corpus.valid, args.eval_batch_size), device=device)
    test_data = minidl.tensor(batchify(corpus.test, args.eval_batch_size), device=device)

    model = WordLM(corpus.vocab_size, args.embed_size, args.hidden_size, args.num_layers, args.dropout,
                   args.tied).to(device)
    if args.optimizer == "sgd":
        optimizer = minidl.optim.SGD(model.parameters(), lr=args.lr)
    else:
        optimizer = minidl.optim.Adam(model.parameters(), lr=args.lr)
    amp = MixedPrecision(args, device)
    trained = dp.wrap(model)            # DistributedDataParallel(model) when data-parallel
    start_epoch, best_val = 0, math.inf
    if args.resume:
        state = load_checkpoint(args.checkpoint, model=model, optimizer=optimizer, scaler=amp.scaler, device=device)
        start_epoch, best_val = state["epoch"], state["extra"]["best_val_loss"]
        announce_resume(args.checkpoint, state)

    print(f"minidl {minidl.__version__}: PTB word LSTM on {device}, {parameter_count(model)} parameters, "
          f"vocabulary {corpus.vocab_size}, {len(corpus.train)} training words")
    history = []
    for epoch in epoch_range(start_epoch, args):
        bar = progress(train_windows, total=steps_per_epoch(len(train_windows), args.limit_batches),
                       desc=f"epoch {epoch + 1}", disable=args.no_progress)
        running = RunningLoss(bar)
        hidden = None
        with Timer(device) as timer:
            for x, y in bar:
                with amp.autocast():
                    logits, hidden = trained(x, hidden)
                    loss = F.cross_entropy(logits, y.reshape(-1))
                hidden = detach_hidden(hidden)  # truncated BPTT: keep values, cut history
                optimizer.zero_grad()
                amp.backward_and_step(loss, optimizer, model.parameters(), args.clip)
                running.add(loss)
        val_loss = evaluate_lm(model, val_data, args.bptt, limit=args.limit_batches, disable=args.no_progress)
        val_loss = dp.agree(val_loss)   # rank 0's, so that every rank anneals the lr alike
        lr = optimizer.param_groups[0]["lr"]
        if val_loss < best_val:
            best_val = val_loss
        else:
            # Anneal on a plateau (the lr is saved with the optimizer's state, so a resume keeps it).
            for group in optimizer.param_groups:
                group["lr"] = group["lr"] / 4.0
        record = {"epoch": epoch + 1, "train_loss": running.mean(), "val_loss": val_loss,
                  "val_perplexity": perplexity(val_loss), "lr": lr, "train_seconds": timer.seconds,
                  "steps": running.count}
        history.append(record)
        words_per_s = running.count * args.batch_size * args.bptt / max(timer.seconds, 1e-9)
        print(f"epoch {epoch + 1}: lr {lr:g}, train ppl {perplexity(record['train_loss']):.1f}, "
              f"val ppl {record['val_perplexity']:.1f}, train time {timer.seconds:.1f} s ({words_per_s:.0f} words/s)")
        save_checkpoint(args.checkpoint, model=model, optimizer=optimizer, scaler=amp.scaler, epoch=epoch + 1,
                        best_val_loss=best_val,
                        val_loss=val_loss)
    test_loss = evaluate_lm(model, test_data, args.bptt, limit=args.limit_batches, desc="test",
                            disable=args.no_progress)
    print(f"test perplexity {perplexity(test_loss):.1f} (test loss {test_loss:.4f}); checkpoint: {args.checkpoint}")
    dp.close()
    return {"history": history, "model": model, "optimizer": optimizer, "test_perplexity": perplexity(test_loss)}


if __name__ == "__main__":
    main()
