# Source of tutorials/06_rnns_on_text.ipynb (percent format: `# %%` code cells,
# `# %% [markdown]` text cells). Edit here, then: python tutorials/build.py 06

# %% [markdown]
# # 6. Recurrent networks on text: LSTM and GRU
#
# A **language model** reads text one token at a time and predicts the next one. A recurrent neural
# network (RNN) does this with a **hidden state**, a vector it updates at every token and that
# summarises what it has read so far. This tutorial trains
#
# 1. a character-level LSTM and GRU on Tiny Shakespeare (Karpathy's char-rnn), sampling text from
#    them as they train;
# 2. a word-level LSTM on the Penn Treebank, measured by its **perplexity**;
#
# and then opens the LSTM cell: how its pointwise work is **fused into one CUDA kernel**, and how
# many bytes of memory traffic that saves over a chain of separate elementwise operations; and the
# whole step loop: how a **persistent kernel** keeps the recurrent weights on chip for the whole
# sequence, with a barrier across the GPU between time steps.

# %% [markdown]
# **Running it on a CPU.** Small mode (the default) takes ~25 s on a 2-core CPU: one-layer models
# of 64 units, 40 steps each (on synthetic text when Tiny Shakespeare or PTB is not on disk; their
# figures then say SYNTHETIC). Full mode trains 2 x 512 LSTM and GRU models for 5 epochs and a PTB
# model for 6: about a minute on an H200, but hours on a CPU (an epoch of the char-level LSTM alone
# takes ~3 minutes on 16 cores, benchmarks/results/examples.md): stay in small mode without a GPU.
# **The saved outputs below are a full-mode run on an H200** (65 s, at commit 1335945).

# %%
import tutorial_utils as tu   # next to the notebooks: the mode, device label, tables, figure stamps
MODE, USE_GPU, DEVICE, WHY_NOT_GPU = tu.setup(precompile="all")   # compile every kernel now: no timing below may include NVRTC

import math
import tempfile
import time
from pathlib import Path

import numpy as np
import matplotlib.pyplot as plt
from tqdm.auto import tqdm

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from minidl.data import BPTTIterator, CharCorpus, WordCorpus, batchify, data_root
from minidl.nn.utils import clip_grad_norm_
from minidl.primitives.cpu import rnn as cpu_rnn

TRAIN_DEVICE = "cuda" if USE_GPU else "cpu"

rel_err = tu.rel_err   # ||a - b|| / ||b|| in float64 (tutorial_utils.py)

# %% [markdown]
# ## 6.1 Text as a stream of token ids
#
# `CharCorpus` reads Tiny Shakespeare (1.1 million characters of plays) from the data root: the
# vocabulary is the set of characters (65 of them), and the text becomes an array of their ids. The
# first 90% is for training, the last 10% for validation.

# %%
def synthetic_chars():
    return CharCorpus(tu.write_synthetic_text(Path(tempfile.mkdtemp()) / "synthetic", 60_000))

corpus, REAL_TEXT = tu.load_dataset(MODE, "Tiny Shakespeare", lambda download: CharCorpus(download=download),
                                    synthetic_chars)
print("data root:", data_root(), "| file:", corpus.path)
print(f"{len(corpus.text):,} characters, vocabulary of {corpus.vocab_size}: {''.join(corpus.chars)!r}")
print("the text starts:\n" + corpus.text[:200])
print("as ids:", corpus.data[:20])

# %% [markdown]
# **Batching a stream.** One long text cannot be shuffled into independent samples as images are:
# every character depends on the ones before it. Instead `batchify` cuts the stream into `B` equal
# pieces and stands them side by side as the columns of a (L/B, B) array; column b is a contiguous
# run of text. Training walks down the rows `bptt` at a time (**truncated backpropagation through
# time**): the inputs are rows t..t+bptt-1, the targets the same rows shifted by one (the next
# character). The hidden state is carried from one window to the next, so the model reads each
# column as one unbroken text; but the gradient stops at the window's start (`detach`), so a step
# costs `bptt` time steps of backward, not the whole history. On a tiny example:

# %%
demo = batchify(corpus.encode(corpus.text[:48]), 4)           # (12, 4)
print("the stream:", repr(corpus.text[:48]))
for b in range(4):
    print(f"column {b}: {corpus.decode(demo[:, b])!r}")
x, y = next(iter(BPTTIterator(demo, bptt=5)))
print("first window, input rows 0-4, column 0: ", repr(corpus.decode(x.numpy()[:, 0])))
print("                target rows 1-5, column 0:", repr(corpus.decode(y.numpy()[:, 0])))

# %% [markdown]
# ## 6.2 The model
#
# Embedding (each id becomes a learned vector), a recurrent layer, and a linear layer that turns each
# hidden state into logits over the vocabulary. The recurrent layer is an **LSTM** or a **GRU**:
#
# * LSTM (Hochreiter & Schmidhuber 1997): a cell state `c` next to `h`, and gates that decide what to
#   forget, what to write and what to show: `i, f, o = sigmoid(...)`, `g = tanh(...)`,
#   `c' = f * c + i * g`, `h' = o * tanh(c')`. The additive update of `c` lets gradients flow over
#   many steps without vanishing.
# * GRU (Cho et al. 2014): no separate cell; a reset gate `r` and an update gate `z`,
#   `n = tanh(x_n + r * h_n)`, `h' = (1 - z) * n + z * h`. Three gate blocks instead of four: 25% less
#   work per step.
#
# In minidl, `nn.LSTM` and `nn.GRU` over a whole sequence are ONE autograd `Function` over the
# `rnn_forward` / `rnn_backward` primitives, as cuDNN does it: one big GEMM for the input projections
# of all time steps, then per time step one small recurrent GEMM and one fused cell kernel (the
# standard algorithm; on the GPU a persistent kernel runs the whole step loop where it fits, section
# 6.6). The tape holds one node, not thousands:

# %% tags=["listing"]
print(tu.python_source(F.recurrent.RNNSequence))

# %%
class CharRNN(nn.Module):
    """(T, B) int64 ids -> ((T * B, vocab) logits, hidden state)."""

    def __init__(self, vocab_size, embed_size, hidden_size, num_layers=1, cell="lstm", dropout=0.0):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_size)
        rnn_class = nn.LSTM if cell == "lstm" else nn.GRU
        self.rnn = rnn_class(embed_size, hidden_size, num_layers, dropout=dropout if num_layers > 1 else 0.0)
        self.drop = nn.Dropout(dropout)
        self.fc = nn.Linear(hidden_size, vocab_size)

    def forward(self, ids, hidden=None):
        x = self.drop(self.embed(ids))                       # (T, B, embed)
        y, hidden = self.rnn(x, hidden)                       # (T, B, hidden)
        y = self.drop(y)
        return self.fc(y.reshape(-1, y.shape[-1])), hidden    # (T * B, vocab)

def detach_hidden(hidden):
    """Keep the state's values for the next window, cut its history (truncated BPTT)."""
    return tuple(h.detach() for h in hidden) if isinstance(hidden, tuple) else hidden.detach()

# %% [markdown]
# **Sampling.** To generate text, feed a prime text, turn the last logits into probabilities with a
# softmax (divided by a **temperature**: below 1 sharpens the distribution, above 1 flattens it),
# draw a character, feed it back, and repeat. This is sequential by nature: one character per call.

# %%
def sample(model, corpus, device, prime="\n", length=200, temperature=0.8, seed=0):
    rng = np.random.default_rng(seed)
    model.eval()
    out = []
    with minidl.no_grad():
        logits, hidden = model(minidl.tensor(corpus.encode(prime)[:, None], device=device))
        for _ in range(length):
            probs = F.softmax(logits[-1:] / temperature, dim=1).cpu().numpy()[0].astype(np.float64)
            next_id = int(rng.choice(len(probs), p=probs / probs.sum()))
            out.append(next_id)
            logits, hidden = model(minidl.tensor([[next_id]], device=device), hidden)
    model.train()
    return prime + corpus.decode(out)

def evaluate(model, data, bptt):
    """Mean cross-entropy per token (nats) over a batchified stream, in eval mode."""
    model.eval()
    total, count, hidden = 0.0, 0, None
    with minidl.no_grad():
        for x, y in BPTTIterator(data, bptt):
            logits, hidden = model(x, hidden)
            total += float(F.cross_entropy(logits, y.reshape(-1), reduction="sum").item())
            count += y.numel()
    model.train()
    return total / count

# %% [markdown]
# ## 6.3 Training the LSTM and the GRU, sampling as they go
#
# Adam, gradient norms clipped to 5 (an RNN's gradient can explode when it is multiplied by the same
# recurrent matrix step after step; clipping rescales it when its norm is too large). The loss is in
# nats per character: a uniform guess over the vocabulary costs `log(vocab)` (4.17 for 65
# characters); a good char-rnn reaches about 1.4 on Tiny Shakespeare after many epochs. A sample is
# printed every `SAMPLE_EVERY` steps: watch it go from noise to words and speaker names.

# %%
if MODE == "small":
    CFG = dict(embed=32, hidden=64, layers=1, dropout=0.0, batch=16, bptt=32, steps=40, sample_every=20,
               train_chars=40_000, sample_length=120)
else:
    CFG = dict(embed=128, hidden=512, layers=2, dropout=0.2, batch=64, bptt=100, steps=None, epochs=5,
               sample_every=200, train_chars=None, sample_length=300)

train_text = corpus.train_data if CFG["train_chars"] is None else corpus.train_data[:CFG["train_chars"]]
val_text = corpus.val_data if CFG["train_chars"] is None else corpus.val_data[:CFG["train_chars"] // 8]
char_train = batchify(train_text, CFG["batch"])
char_val = minidl.tensor(batchify(val_text, 16), device=TRAIN_DEVICE)
prime = "\n" if "\n" in corpus.stoi else corpus.text[0]

def train_char_model(cell):
    minidl.manual_seed(0)
    model = CharRNN(corpus.vocab_size, CFG["embed"], CFG["hidden"], CFG["layers"], cell, CFG["dropout"]).to(TRAIN_DEVICE)
    optimizer = minidl.optim.Adam(model.parameters(), lr=3e-3)
    windows = BPTTIterator(char_train, CFG["bptt"], device=TRAIN_DEVICE)
    epochs = CFG.get("epochs", 1)
    total = epochs * len(windows) if CFG["steps"] is None else CFG["steps"]
    losses, samples, step, start = [], [], 0, time.perf_counter()
    bar = tqdm(total=total, desc=cell.upper(), leave=False)
    while step < total:
        hidden = None                                     # each epoch starts from a zero state
        for x, y in windows:
            logits, hidden = model(x, hidden)
            hidden = detach_hidden(hidden)
            loss = F.cross_entropy(logits, y.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            losses.append(loss.detach())
            step += 1
            bar.update()
            if step % CFG["sample_every"] == 0 or step == total:
                text = sample(model, corpus, TRAIN_DEVICE, prime, CFG["sample_length"], seed=step)
                samples.append((step, text))
                print(f"--- {cell.upper()} after {step} steps (loss {loss.item():.3f}) ---\n{text}\n")
            if step == total:
                break
    bar.close()
    if TRAIN_DEVICE == "cuda":
        minidl.cuda.synchronize()
    seconds = time.perf_counter() - start
    losses = [float(v) for v in minidl.stack(losses).cpu().numpy()]
    val = evaluate(model, char_val, CFG["bptt"])
    params = sum(p.numel() for p in model.parameters())
    print(f"{cell.upper()}: {params:,} parameters, {step} steps in {seconds:.1f} s (sampling included); "
          f"train loss {np.mean(losses[:5]):.3f} -> {np.mean(losses[-5:]):.3f}, validation loss {val:.3f} nats/char")
    return {"losses": losses, "val": val, "seconds": seconds, "params": params, "samples": samples}

char_runs = {cell: train_char_model(cell) for cell in ("lstm", "gru")}

# %%
fig, ax = plt.subplots(figsize=(8, 3.6))
for cell, run in char_runs.items():
    losses = np.array(run["losses"])
    window = max(1, min(25, len(losses) // 8))
    ax.plot(np.arange(window - 1, len(losses)), np.convolve(losses, np.ones(window) / window, mode="valid"),
            label=f"{cell.upper()} ({run['params']:,} params): validation {run['val']:.2f}")
ax.axhline(math.log(corpus.vocab_size), color="0.5", ls=":", label=f"uniform guess, log {corpus.vocab_size}")
ax.set_xlabel("step"); ax.set_ylabel("nats / character"); ax.legend(fontsize=8)
ax.set_title("character-level language models: training loss (moving average)" + ("" if REAL_TEXT else " (SYNTHETIC text)"))
fig.tight_layout(rect=(0, 0.04, 1, 1))   # room for the stamp below
tu.stamp(fig, DEVICE, MODE)
plt.show()
for cell in char_runs:
    assert np.mean(char_runs[cell]["losses"][-5:]) < np.mean(char_runs[cell]["losses"][:5]), f"{cell}: the loss must fall"

# %% [markdown]
# ## 6.4 Perplexity on the Penn Treebank
#
# Word-level models are compared by **perplexity**, `exp(mean cross-entropy per word)`: the model is
# as uncertain as a uniform choice among that many words. Two baselines put a number in context: a
# uniform guess over the 10,000-word vocabulary has perplexity 10,000; a **unigram** model that
# ignores context and always predicts the training frequencies has `exp(entropy of the word
# frequencies)`, several hundred on PTB. An LSTM must beat that by using the context; Zaremba et al.'s
# small 2 x 200 LSTM reaches about 115 after 13 epochs.
#
# The recipe is theirs: plain SGD with a large learning rate (20), gradient norms clipped to 0.25,
# and the learning rate divided by 4 whenever the validation loss stops improving.

# %%
def synthetic_words():
    return WordCorpus(tu.write_synthetic_ptb(Path(tempfile.mkdtemp()) / "synthetic_ptb"))

words, REAL_PTB = tu.load_dataset(MODE, "PTB", lambda download: WordCorpus(download=download), synthetic_words)
print(f"vocabulary {words.vocab_size:,} words; train {len(words.train):,}, valid {len(words.valid):,}, "
      f"test {len(words.test):,} tokens")
print("a training sentence:", words.decode(words.train[:25]))

counts = np.bincount(words.train, minlength=words.vocab_size).astype(np.float64)
p_unigram = counts / counts.sum()
with np.errstate(divide="ignore"):
    unigram_ppl = math.exp(-np.mean(np.log(np.maximum(p_unigram[words.test], 1e-12))))
print(f"baselines on the test set: uniform perplexity {words.vocab_size:,}, unigram perplexity {unigram_ppl:.0f}")

# %%
if MODE == "small":
    WCFG = dict(embed=64, hidden=64, layers=1, dropout=0.0, batch=16, bptt=20, epochs=1, steps=40,
                train_words=20_000, eval_words=2_000)
else:
    WCFG = dict(embed=200, hidden=200, layers=2, dropout=0.0, batch=20, bptt=35, epochs=6, steps=None,
                train_words=None, eval_words=None)

def cut(ids, n):
    return ids if n is None else ids[:n]

word_train = BPTTIterator(batchify(cut(words.train, WCFG["train_words"]), WCFG["batch"]), WCFG["bptt"], device=TRAIN_DEVICE)
word_val = minidl.tensor(batchify(cut(words.valid, WCFG["eval_words"]), 10), device=TRAIN_DEVICE)
word_test = minidl.tensor(batchify(cut(words.test, WCFG["eval_words"]), 10), device=TRAIN_DEVICE)

minidl.manual_seed(0)
word_model = CharRNN(words.vocab_size, WCFG["embed"], WCFG["hidden"], WCFG["layers"], "lstm", WCFG["dropout"]).to(TRAIN_DEVICE)
for p in (word_model.embed.weight, word_model.fc.weight):
    nn.init.uniform_(p, -0.1, 0.1)                           # Zaremba et al.'s small uniform init
optimizer = minidl.optim.SGD(word_model.parameters(), lr=20.0)
history, best_val, step = [], math.inf, 0
start = time.perf_counter()
for epoch in range(WCFG["epochs"]):
    hidden, losses = None, []
    for x, y in tqdm(word_train, desc=f"PTB epoch {epoch + 1}", leave=False):
        logits, hidden = word_model(x, hidden)
        hidden = detach_hidden(hidden)
        loss = F.cross_entropy(logits, y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        clip_grad_norm_(word_model.parameters(), 0.25)
        optimizer.step()
        losses.append(loss.detach())
        step += 1
        if WCFG["steps"] is not None and step >= WCFG["steps"]:
            break
    train_loss = float(minidl.stack(losses).mean().item())
    val_loss = evaluate(word_model, word_val, WCFG["bptt"])
    history.append((train_loss, val_loss))
    lr = optimizer.param_groups[0]["lr"]
    print(f"epoch {epoch + 1}: lr {lr:g}, train perplexity {math.exp(train_loss):.1f}, "
          f"validation perplexity {math.exp(val_loss):.1f}")
    if val_loss < best_val:
        best_val = val_loss
    else:
        for group in optimizer.param_groups:
            group["lr"] /= 4.0
ptb_seconds = time.perf_counter() - start
test_ppl = math.exp(evaluate(word_model, word_test, WCFG["bptt"]))
print(f"test perplexity {test_ppl:.1f} after {step} steps ({ptb_seconds:.1f} s); "
      f"unigram baseline {unigram_ppl:.0f}, uniform {words.vocab_size:,}")

fig, ax = plt.subplots(figsize=(6, 3.4))
epochs = np.arange(1, len(history) + 1)
ax.plot(epochs, [math.exp(t) for t, _ in history], "o-", label="train")
ax.plot(epochs, [math.exp(v) for _, v in history], "o-", label="validation")
ax.axhline(unigram_ppl, color="0.5", ls=":", label=f"unigram baseline {unigram_ppl:.0f}")
ax.set_yscale("log"); ax.set_xlabel("epoch"); ax.set_ylabel("perplexity"); ax.legend(fontsize=8)
ax.set_title(f"word LSTM on {'PTB' if REAL_PTB else 'SYNTHETIC text'}: test perplexity {test_ppl:.0f}", fontsize=10)
fig.tight_layout(rect=(0, 0.04, 1, 1))   # room for the stamp below
tu.stamp(fig, DEVICE, MODE)
plt.show()

# %% [markdown]
# Read the line above against the baseline. In full mode the LSTM ends far below the unigram
# perplexity: it uses the context. **Small mode is too short to show that**: its 40-odd steps on a
# CPU leave the LSTM still learning the word frequencies themselves, and it usually ends above the
# unigram baseline; that is a statement about the length of the run, not about LSTMs. Run the
# notebook with `MINIDL_TUTORIAL_MODE=full` (a GPU makes it minutes) to see the LSTM win.

# %% [markdown]
# ## 6.5 Inside the LSTM step: one fused kernel
#
# Per time step, after the recurrent GEMM `gates_h = h @ W_hh^T`, an LSTM has only pointwise work
# left: add the biases, four gate activations, a few products and sums. On the left, the CUDA kernel
# of kernels/rnn.cu that does all of it; on the right, the NumPy reference of the same name. The
# kernel gives one thread to each (batch row, hidden unit): it reads that unit's four gate
# pre-activations and its old cell state, computes everything in registers, and writes the new
# `c`, `h`, the layer output `y[t]` and the four gate values that backward needs.

# %% tags=["listing"]
kernel_file, lstm_kernel = tu.find_cuda_function("lstm_cell_forward", missing_ok=True)
display(tu.SideBySide(f"kernels/{kernel_file}: lstm_cell_forward (CUDA, one thread per (b, j))", lstm_kernel,
                      "minidl/primitives/cpu/rnn.py: lstm_cell_forward (NumPy)",
                      tu.python_source(cpu_rnn._sigmoid, cpu_rnn.lstm_cell_forward)))

# %% [markdown]
# Without fusion, a framework runs each pointwise operation as its own kernel, and every kernel
# reads its inputs from GPU memory and writes its result back. The chain below is the LSTM cell
# written that way, one operation per line; `ByteCounter` runs the operations one at a time and
# counts the bytes each one moves through memory (inputs read, output written). The slices
# `gates[:, k*H:(k+1)*H]` are views: a kernel reading one reads B x H elements.

# %%
class ByteCounter:
    """Run operations one at a time, as unfused kernels, and record (name, bytes read, bytes written)."""

    def __init__(self):
        self.rows = []

    def __call__(self, name, fn, *inputs):
        out = fn(*inputs)
        self.rows.append((name, sum(a.nbytes for a in inputs), out.nbytes))
        return out

def lstm_cell_unfused(gates_x, gates_h, b_ih, b_hh, c, run, sigmoid, tanh, y_out):
    H = c.shape[1]
    pre = run("pre = gates_x + b_ih", lambda a, b: a + b, gates_x, b_ih)
    pre = run("pre = pre + gates_h", lambda a, b: a + b, pre, gates_h)
    pre = run("pre = pre + b_hh", lambda a, b: a + b, pre, b_hh)
    i = run("i = sigmoid(pre_i)", sigmoid, pre[:, 0 * H:1 * H])
    f = run("f = sigmoid(pre_f)", sigmoid, pre[:, 1 * H:2 * H])
    g = run("g = tanh(pre_g)", tanh, pre[:, 2 * H:3 * H])
    o = run("o = sigmoid(pre_o)", sigmoid, pre[:, 3 * H:4 * H])
    fc = run("fc = f * c", lambda a, b: a * b, f, c)
    ig = run("ig = i * g", lambda a, b: a * b, i, g)
    c_new = run("c' = fc + ig", lambda a, b: a + b, fc, ig)
    tanh_c = run("tc = tanh(c')", tanh, c_new)
    h_new = run("h' = o * tc", lambda a, b: a * b, o, tanh_c)
    run("y[t] = h'  (copy into the output sequence)", copy_into(y_out), h_new)
    return h_new, c_new

def copy_into(destination):
    """An operation that copies its input into `destination` (the layer's output y[t]) and returns it."""
    def copy(a):
        destination[...] = a
        return destination
    return copy

B, H = 64, 512                                   # char-rnn's sizes: batch 64, 512 hidden units
rng = np.random.default_rng(0)
gates_x, gates_h = (rng.standard_normal((B, 4 * H)).astype(np.float32) for _ in range(2))
b_ih, b_hh = (rng.standard_normal(4 * H).astype(np.float32) for _ in range(2))
c_prev = rng.standard_normal((B, H)).astype(np.float32)

counter = ByteCounter()
h_unfused, c_unfused = lstm_cell_unfused(gates_x, gates_h, b_ih, b_hh, c_prev, counter,
                                         cpu_rnn._sigmoid, np.tanh, np.empty((B, H), np.float32))
h_ref, c_ref, _ = cpu_rnn.lstm_cell_forward(gates_x + b_ih, gates_h + b_hh, c_prev)
print(f"unfused chain vs the reference: h rel. error {rel_err(h_unfused, h_ref):.1e}, c {rel_err(c_unfused, c_ref):.1e}")
unfused_rows = [[name, r / 1e6, w / 1e6] for name, r, w in counter.rows]
unfused_bytes = sum(r + w for _, r, w in counter.rows)
display(tu.Table(["unfused kernel", "MB read", "MB written"], unfused_rows,
                 title=f"B={B}, H={H}: {len(counter.rows)} kernels, {unfused_bytes / 1e6:.2f} MB in all"))

# %% [markdown]
# The fused kernel touches each array once: it reads the two gate pre-activations, the two biases
# and the old cell state, and writes the new cell state, the new hidden state, `y[t]` and the four
# gate activations that backward needs (the unfused chain left those in memory too: `i, f, g, o`).
# Everything in between lives in registers.

# %%
f32 = 4
fused_traffic = [("gates_x (B, 4H)", B * 4 * H * f32, 0), ("gates_h (B, 4H)", B * 4 * H * f32, 0),
                 ("b_ih, b_hh (4H each)", 2 * 4 * H * f32, 0), ("c_prev (B, H)", B * H * f32, 0),
                 ("c_next, h_next, y[t] (B, H each)", 0, 3 * B * H * f32), ("acts = [i, f, g, o] (B, 4H)", 0, B * 4 * H * f32)]
fused_bytes = sum(r + w for _, r, w in fused_traffic)
display(tu.Table(["fused kernel: array", "MB read", "MB written"], [[n, r / 1e6, w / 1e6] for n, r, w in fused_traffic],
                 title=f"1 kernel, {fused_bytes / 1e6:.2f} MB in all: {unfused_bytes / fused_bytes:.1f}x less traffic"))

# %% [markdown]
# Per element of the (B, H) state that is 16 floats moved by the fused kernel against about 52 by the
# chain, and 1 launch against 13. Both matter: at B = 64, H = 512 the fused kernel moves 2 MB, which an
# H200 (about 4.8 TB/s) streams in well under a microsecond, while each launch costs a few
# microseconds of fixed overhead. A 2-layer char-rnn over 100 characters runs 200 such steps forward
# and 200 backward for every training batch. On the GPU (full mode) we time both: the chain with
# CuPy's elementwise kernels (a one-kernel sigmoid is written for it, so that each line above is
# exactly one kernel), and the fused kernel launched directly.

# %%
gpu_times = None
if USE_GPU:
    import cupy
    from minidl.primitives.cuda._compile import get_kernel

    sigmoid_gpu = cupy.ElementwiseKernel("float32 a", "float32 y", "y = 1.0f / (1.0f + expf(-a))", "sigmoid_unfused")
    d_gx, d_gh, d_bih, d_bhh, d_c = (cupy.asarray(a) for a in (gates_x, gates_h, b_ih, b_hh, c_prev))
    d_y = cupy.empty((B, H), cupy.float32)
    run_gpu = lambda name, fn, *inputs: fn(*inputs)               # the same chain, without the counting
    unfused_call = lambda: lstm_cell_unfused(d_gx, d_gh, d_bih, d_bhh, d_c, run_gpu, sigmoid_gpu, cupy.tanh, d_y)

    kernel = get_kernel("rnn", "lstm_cell_forward")
    d_h_prev = cupy.zeros((B, H), cupy.float32)
    d_h_next, d_c_next = cupy.empty((B, H), cupy.float32), cupy.empty((B, H), cupy.float32)
    d_acts = cupy.empty((B, 4 * H), cupy.float32)
    no_lengths = np.uint64(0)                                      # nullptr: every sequence is full length
    fused_call = lambda: kernel(((B * H + 255) // 256,), (256,),
                                (d_gx, d_gh, d_bih, d_bhh, d_h_prev, d_c, d_h_next, d_c_next, d_y,
                                 np.int64(H), d_acts, no_lengths, np.int32(0), np.int32(B), np.int32(H)))
    fused_call()
    cupy.cuda.Device().synchronize()
    print(f"fused kernel vs the NumPy reference: h rel. error {rel_err(cupy.asnumpy(d_h_next), h_ref):.1e}, "
          f"c {rel_err(cupy.asnumpy(d_c_next), c_ref):.1e}")
    gpu_times = {"unfused (13 kernels)": tu.time_gpu_ms(unfused_call, repeats=200),
                 "fused (1 kernel)": tu.time_gpu_ms(fused_call, repeats=200)}
    rows = [[name, 1e3 * ms, nbytes / (ms * 1e-3) / 1e9]
            for (name, ms), nbytes in zip(gpu_times.items(), (unfused_bytes, fused_bytes))]
    display(tu.Table(["LSTM cell step", "us", "effective GB/s"], rows, title=f"B={B}, H={H}, {DEVICE}"))
else:
    print("GPU timing skipped:", WHY_NOT_GPU)

# %%
fig, axes = plt.subplots(1, 2 if gpu_times else 1, figsize=(11 if gpu_times else 6, 3.6), squeeze=False)
ax = axes[0, 0]
bottom = 0.0
for name, r, w in counter.rows:
    ax.bar(0, (r + w) / 1e6, bottom=bottom, color="tab:blue", edgecolor="white", linewidth=0.5)
    bottom += (r + w) / 1e6
ax.bar(1, fused_bytes / 1e6, color="tab:orange")
ax.set_xticks([0, 1]); ax.set_xticklabels([f"unfused\n({len(counter.rows)} kernels)", "fused\n(1 kernel)"])
ax.set_ylabel("MB read + written per step"); ax.set_title(f"memory traffic of one LSTM cell step (B={B}, H={H})", fontsize=10)
if gpu_times:
    ax2 = axes[0, 1]
    bars = ax2.bar(list(gpu_times), [1e3 * ms for ms in gpu_times.values()], color=["tab:blue", "tab:orange"])
    ax2.bar_label(bars, labels=[f"{1e3 * ms:.1f} us" for ms in gpu_times.values()])
    ax2.set_ylabel("microseconds per step"); ax2.set_title("measured on the GPU", fontsize=10)
fig.tight_layout(rect=(0, 0.04, 1, 1))   # room for the stamp below
tu.stamp(fig, DEVICE if gpu_times else tu.device_label(False), MODE)
plt.show()

# %% [markdown]
# ## 6.6 Keeping the weights on chip: the persistent algorithm
#
# Section 6.5 fused the pointwise half of a step. The other half, `gates_h = h @ W_hh^T`, is a GEMM
# that the **standard algorithm** launches once per time step (kernels/rnn.cu and one GEMM per step,
# as cuDNN's `CUDNN_RNN_ALGO_STANDARD`). It is a skinny GEMM: B x 4H x H, with a batch of 32 or 64
# rows. Every launch reads all of `W_hh` again, and does little arithmetic per byte it reads:

# %%
rows = []
for B_ in (32, 64):
    for H_ in (256, 512, 1024):
        w_bytes = 4 * H_ * H_ * 4                 # W_hh, float32
        flops = 2 * B_ * 4 * H_ * H_
        h_bytes = B_ * H_ * 4                     # what actually changes from step to step
        rows.append([B_, H_, w_bytes / 1e6, flops / 1e6, flops / (w_bytes + 2 * h_bytes), w_bytes / h_bytes])
display(tu.Table(["batch", "hidden", "W_hh MB read per step", "MFLOP per step", "FLOP per byte", "W_hh bytes / h bytes"],
                 rows, title="the recurrent GEMM of one LSTM step (float32)"))

# %% [markdown]
# At 16-32 FLOP per byte the GEMM is memory-bound on any GPU (an H100 needs ~20 FLOP per byte of HBM
# traffic to keep its CUDA cores busy, ~300 for its tensor cores), and 4 MB at a few TB/s is a
# microsecond or two, about what the launch itself costs. And the weights are the same at every
# step: only `h` (B x H, 64 KB at B = 32) changes.
#
# The **persistent algorithm** (Diamos et al., *Persistent RNNs*, 2016; cuDNN's
# `CUDNN_RNN_ALGO_PERSIST_STATIC`) launches ONE kernel for the whole sequence of a layer
# (kernels/rnn_persistent.cu). Each of its CTAs (one per SM) owns a slice of U hidden units and keeps
# the `4U` rows of `W_hh` that produce their gates in **shared memory** for all T steps. A step is then:
#
# 1. read the whole `h_{t-1}` (written by every CTA at the last step) from L2 into shared memory;
# 2. multiply it by the CTA's rows of `W_hh` on the tensor cores (the gates of its own units);
# 3. run the fused cell for its own units (all four gates of a unit are in the same CTA), and write
#    its slice of `h_t`;
# 4. wait at a **grid-wide barrier** until every CTA has written its slice: then `h_t` is complete.
#
# In NumPy, with the "CTAs" run one after another, the same decomposition gives the same numbers as
# the reference:

# %%
def lstm_layer_persistent_numpy(gates_x, w_hh, b, h0, c0, units):
    """One LSTM layer as the persistent kernel splits it: 'CTA' c owns hidden units c*units ... and the
    4*units rows of W_hh for their gates; a step ends when every CTA has written its slice of h."""
    T, B, G4 = gates_x.shape
    H = G4 // 4
    h, c = h0.copy(), c0.copy()
    ys = []
    for t in range(T):
        h_new = np.empty_like(h)                  # the exchanged state, complete only after the barrier
        for j0 in range(0, H, units):             # each CTA, independently
            js = np.arange(j0, min(j0 + units, H))
            rows = np.concatenate([g * H + js for g in range(4)])    # its rows of W_hh, "in shared memory"
            pre = gates_x[t][:, rows] + b[rows] + h @ w_hh[rows].T   # every CTA reads ALL of h_{t-1}
            i, f, g, o = np.split(pre, 4, axis=1)
            sig = lambda a: 1 / (1 + np.exp(-a))
            c[:, js] = sig(f) * c[:, js] + sig(i) * np.tanh(g)       # c never leaves its CTA
            h_new[:, js] = sig(o) * np.tanh(c[:, js])
        h = h_new                                 # <- the grid-wide barrier
        ys.append(h)
    return np.stack(ys), h, c

rng = np.random.default_rng(1)
T_, B_, H_ = 7, 5, 24
desc = minidl.primitives.RNNDescriptor("lstm", H_, H_)
(w_ih, w_hh, b_ih, b_hh), = [tuple(rng.uniform(-0.3, 0.3, s.shape) for s in e) for e in desc.weight_shapes()]
x = rng.standard_normal((T_, B_, H_))
y_ref, h_ref, c_ref, _ = cpu_rnn.rnn_forward(x, None, None, [(w_ih, w_hh, b_ih, b_hh)], desc, None, False)
for units in (1, 5, 8):
    y_p, h_p, c_p = lstm_layer_persistent_numpy(x @ w_ih.T, w_hh, b_ih + b_hh, np.zeros((B_, H_)), np.zeros((B_, H_)), units)
    print(f"units per CTA {units}: {-(-H_ // units)} CTAs, y rel. error vs the reference {rel_err(y_p, y_ref):.1e}")

# %% [markdown]
# **The barrier.** CUDA gives a block `__syncthreads()`, but nothing waits for *other* blocks: the
# kernel builds its own. Each CTA adds 1 to a counter in global memory (one per direction of a
# bidirectional layer) and spins until the counter reaches (its direction's number of CTAs) x
# (barrier number + 1). Two details make it correct. The add is a *release* (`red.release.gpu`: the CTA's
# writes of `h_t` become visible to the others before they can see its arrival; the spinning load is the
# matching *acquire*). The listing saved below is from 2026-11-26, when the release was a `__threadfence()`
# followed by a plain `atomicAdd`: the same ordering in two instructions. And the reads of `h` go to L2
# (`cp.async.cg`, never the per-SM L1, which is not coherent between SMs). Every CTA must also be
# **resident at once**: a CTA waiting for one that was never scheduled would wait forever. The launcher
# (minidl/primitives/cuda/rnn_persistent.py) keeps the grid at one CTA per SM, and the kernel traps after
# ~30 s instead of hanging.

# %% tags=["listing"]
barrier_file, barrier_source = tu.find_cuda_function("grid_barrier", missing_ok=True)
stage_file, stage_source = tu.find_cuda_function("issue_chunk", missing_ok=True)
display(tu.SideBySide(f"kernels/{barrier_file}: grid_barrier (every CTA of the grid)", barrier_source,
                      f"kernels/{stage_file}: issue_chunk (reading the new h from L2 after it)", stage_source))

# %% [markdown]
# What fits: the rows of `W_hh` for U units are 4U x H floats per CTA, and a CTA has ~227 KB of shared
# memory. At H = 512 on 132 SMs, U = 4 (128 CTAs, 33 KB of weights each); at H = 1024, U = 8 (132 KB),
# which leaves room for the staging buffers of a batch of 32 but not of 64. Past that, `algo="auto"` (the default of
# `RNNDescriptor`) runs the standard algorithm; `algo="persistent"` says why it cannot. On the GPU
# (full mode) we time both algorithms on the char model's layer shape over several sequence lengths:
# the slope of each line is the cost of one time step, forward and backward.

# %%
persistent_rows = None
if USE_GPU:
    import cupy
    from minidl.primitives import RNNDescriptor, rnn_backward, rnn_forward
    from minidl.primitives.cuda import rnn_persistent

    H_ = 512
    lengths_T = (8, 32, 64, 100)
    weights_host = [tuple((rng.uniform(-1, 1, s.shape) / np.sqrt(H_)).astype(np.float32) for s in e)
                    for e in RNNDescriptor("lstm", H_, H_).weight_shapes()]
    weights_gpu = [tuple(cupy.asarray(w) for w in e) for e in weights_host]
    per_T = {}
    for B_ in (32, 64):
        print(f"persistent plan for batch {B_} on {DEVICE}: {rnn_persistent.plan('lstm', B_, H_, 1)[0]}")
        for algo in ("standard", "persistent"):
            d = RNNDescriptor("lstm", H_, H_, algo=algo)
            for T_ in lengths_T:
                x_gpu = cupy.asarray(rng.standard_normal((T_, B_, H_)).astype(np.float32))
                dy_gpu = cupy.asarray(rng.standard_normal((T_, B_, H_)).astype(np.float32))

                def train_step():
                    _, _, _, reserve = rnn_forward(x_gpu, None, None, weights_gpu, d)
                    rnn_backward(dy_gpu, None, None, reserve)

                per_T[B_, algo, T_] = tu.time_gpu_ms(train_step, repeats=20)
    persistent_rows = [[B_, T_, per_T[B_, "standard", T_], per_T[B_, "persistent", T_],
                        per_T[B_, "standard", T_] / per_T[B_, "persistent", T_]]
                       for B_ in (32, 64) for T_ in lengths_T]
    display(tu.Table(["batch", "steps T", "standard ms", "persistent ms", "speed-up"], persistent_rows,
                     title=f"one LSTM layer, H={H_}, forward + backward, float32, {DEVICE}"))
    for B_ in (32, 64):
        slopes = {algo: 1e3 * np.polyfit(lengths_T, [per_T[B_, algo, T_] for T_ in lengths_T], 1)[0]
                  for algo in ("standard", "persistent")}
        print(f"batch {B_}: one time step (forward + backward) costs {slopes['standard']:.1f} us with the standard "
              f"algorithm and {slopes['persistent']:.1f} us with the persistent one")
else:
    print("GPU timing skipped:", WHY_NOT_GPU)

# %%
if persistent_rows:
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    for ax, B_ in zip(axes, (32, 64)):
        for algo, label, color in (("standard", "standard: 2 launches per step", "tab:blue"),
                                   ("persistent", "persistent: 1 launch per layer", "tab:orange")):
            times = [per_T[B_, algo, T_] for T_ in lengths_T]
            slope = 1e3 * np.polyfit(lengths_T, times, 1)[0]
            ax.plot(lengths_T, times, "o-", color=color, label=f"{label} ({slope:.1f} us per step)")
        ax.set_xlabel("time steps T"); ax.set_title(f"one LSTM layer, H={H_}, batch {B_}", fontsize=10)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("ms, forward + backward")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    tu.stamp(fig, DEVICE, MODE)
    plt.show()

# %% [markdown]
# Read the slopes printed above the plot. In the saved run (full mode, H200) the persistent step is
# about a third cheaper than the standard one at batch 32, and only a few percent cheaper at batch 64.
# A persistent step has a floor that does not shrink with the batch: the barrier, the wait for `h` to
# arrive from L2, the cell, and the three TF32 products that give float32 accuracy (`block_product`);
# the standard step pays two launches and a GEMM that reads all of `W_hh`. The larger the batch, the
# more arithmetic a step has and the less the launches count, so the gap closes. cuDNN chooses between
# its algorithms by shape; `algo="auto"` here does not yet: it takes the persistent kernel wherever it
# fits, which both batches above support.

# %% [markdown]
# The whole table against cuDNN, for LSTM and GRU at several shapes and in each math mode, is
# benchmarks/results/gpu_rnn.md (`python3 benchmarks/bench_gpu_rnn.py`), and
# benchmarks/profile_rnn_persistent.py splits a persistent step into its parts by switching each off
# (the barrier, the staging of `h`, the product). The figures of this cell come from that file, measured on
# an H100 (not from this notebook's saved outputs, a full-mode run on an H200). In bf16 (one LSTM layer of 512,
# batch 32) a forward step took 5.7 µs and a backward step 12.3 µs; without the barrier 4.9 and 11.2,
# without the staging 5.7 and 9.3, without the product 4.5 and 8.5. The forward hides its staging behind
# the product; the backward cannot: each CTA needs all of `dgates` (B x 4H floats, 256 KB a step, 32 MB
# through L2 for the 128 CTAs). Since the bf16 product rounds its operands to bfloat16 anyway, the cell
# that makes `dgates` now also writes it rounded, and the CTAs stage that copy, half the bytes: the same
# bits reach the tensor cores, and, staged in chunks twice as wide (half the CTA's barriers), the backward step
# drops from 13.7 to 8.5 µs (same run). The forward does the same with `h` from its second step: 6.8 -> 5.4 µs.
#
# A caution the same file records: called eagerly, the persistent kernels take 0.33-1.07x the time of cuDNN's
# eager RNN calls, but most of cuDNN's eager time is host time. Replayed from a CUDA graph, cuDNN's kernels alone are
# faster than ours (bf16: ours take 1.75-2.7x as long), because its small per-step kernels from the two layers
# overlap (layer 1 at step t beside layer 0 at step t + 1), while our persistent kernel runs one layer at a time on
# every SM. Keeping the weights on chip removes launches and weight traffic; it does not remove the chain of steps.
#
# The next step, taken since: **the wavefront**. Two stacked layers of one direction now run in one launch, half the
# CTAs for each (`rnn_persistent.forward_wave`). In its first version the upper layer's CTAs did not join the lower
# layer's barrier; they waited on its counter until every lower CTA was past step t, then multiplied
# `[y_lower[t] | h]` by `[W_ih | W_hh]`, so layer 1's step t ran beside layer 0's step t + 1 and layer 1's input
# projection was no GEMM of its own ("Who projects whose input", below, says how that changed). The lower
# layer never waits for the upper one. Backward it was the other way round (`backward_wave`: the lower layer added
# the upper layer's `dgates_x[t] @ W_ih` to its product; the GRU's still does). Measured on an H200 (benchmarks/results/gpu_rnn.md, by
# `benchmarks/bench_rnn_wavefront.py`; not this notebook's saved run), a 2x512 LSTM in bf16 at batch 32: forward
# 0.679 -> 0.605 ms, backward 0.871 -> 0.714; the vanilla RNN's backward 18-28% faster, its forward 2-21%. Each
# layer now has half the SMs, so a step whose time is its product (fp32, TF32) gains less or nothing. Against
# cuDNN's kernels alone (both graphed), bf16 went from 1.75-2.7x to 1.44-2.02x: closer, not there.
#
# **The backward by partial sums.** A backward step needs, for each unit j, `dh[b, j] = sum_k dgates[b, k] *
# W_hh[k, j]`, a sum over all 4H gates. There are two ways to split that sum over the CTAs.
# - **Staged** (the first backward kernel): each CTA keeps the U *columns* of `W_hh` for its units. It then has to
#   stage all of `dgates`, B x 4H floats, in every CTA at every step: 256 KB a CTA at B = 32, H = 512 in fp32.
# - **Partial sums** (`persistent_backward_partial`): each CTA keeps the same 4U *rows* the forward keeps. Right
#   after its cell it multiplies its own gate gradients, which never left it, by those rows. That gives a partial
#   `dh` for all H units, which it writes where each unit's owner will read it.
#   - After the barrier each CTA adds up, in a fixed order, the partials for its own units: U floats a row from each
#     CTA, 64 KB a CTA a step in every math. The fixed order keeps the result the same bits run to run.
#   - The sum is the same as the staged one, regrouped.
#
# Measured on an H200 (benchmarks/results/gpu_rnn.md, `profile_rnn_persistent.py`; not this notebook's run), one
# LSTM layer of 512 at batch 32, staged against partial sums:
#
# | math | staged | partial sums |
# | --- | ---: | ---: |
# | fp32 | 16.6 µs a step | 7.9 µs |
# | TF32 | 15.2 µs | 7.4 µs |
# | bf16 | 9.9 µs | 7.6 µs |
#
# The first layout of the partials, by the CTA that *wrote* them, was no faster in bf16. Each reader then gathered 16
# bytes from each of 128 places. Laid out by the CTA that *reads* them, one contiguous block each, every math gained:
# how data lies in memory decides what a transfer costs. The vanilla RNN keeps the staged backward. Its `dgates` is
# B x H, exactly the bytes the partials would write and then read again.
#
# This notebook's saved outputs (full mode, H200, commit 1335945) predate the wavefront, the split barrier and the
# partial sums: the persistent times printed above are those of the staged backward, one launch per layer. The
# kernels as they are now were measured by the benchmarks (benchmarks/results/gpu_rnn.md), not by this notebook.
#
# The two paragraphs below quote benchmarks/results/gpu_rnn.md (its session 12 section, measured on an H200 with
# `benchmarks/bench_rnn_wavefront.py`, `benchmarks/bench_gpu_rnn.py` and torch's profiler), not the outputs printed
# in this notebook, whose saved run (full mode) predates the kernels they describe.
#
# **A policy is a measurement, and it goes stale.** Once the split barrier made each step cheaper, the LSTM's
# forward measured 3-13% faster one launch per layer than as a wavefront, timed alone and eagerly. Replayed from a
# CUDA graph together with its backward, the way a training step runs, the per-layer forward was no faster in fp32 and
# TF32, and 7% slower in bf16. In bf16 a step's product is cheap, so its time is the barrier's, and overlapping the
# two layers is what pays. So the policy (`rnn_persistent.wave_plan`) took one launch per layer for the fp32 and
# TF32 forward, and kept the wavefront for bf16, until the wavefront itself changed (below). Measure a choice where
# it will run, and measure it again when what it chooses between changes.
#
# **Why cuDNN still wins in bf16.** Summed kernel by kernel (torch's profiler, which sees CuPy's kernels too), our
# bf16 forward and backward take 1.13x cuDNN's. In fp32 and TF32 they take 0.52x and 0.65x. But cuDNN's kernels add up
# to 35-50% more than the wall time of its graphed step. It runs a small GEMM and a cell kernel per layer and step,
# on several streams, so layer 1's step t runs beside layer 0's step t + 1. Our persistent kernels hold every SM for
# the whole sequence, so nothing runs beside them. The wavefront buys back that overlap for two layers.
#
# **A step's timeline.** Where do a persistent step's ~6-7 µs go, if not to the product?
# `benchmarks/trace_rnn_persistent.py` compiles the kernels with `-DPERSIST_TRACE`: thread 0 of every CTA reads its
# SM's clock (`clock64()`) at each phase of each step, and the script prints the median of each phase. This table is
# its output on an H200 (benchmarks/results/gpu_rnn.md, session 20), not this notebook's: the outputs saved above are
# a full-mode run on an H200 at 1335945, older than these kernels, and print no phases. One LSTM layer of 512 in bf16
# at batch 32, µs, in the order a step runs (the phases add up to 6.34 µs; the rest of the whole step is the marks' own
# stores at its end):
#
# | phase | forward step | what it is |
# | --- | ---: | --- |
# | entry | 0.82 | the product's setup, to its first `__syncthreads` |
# | first chunk of `h` landed | 1.41 | an L2 round trip (cp.async) |
# | rest of the product | 1.11 | the mma steps and the second chunk |
# | k slices summed | 0.39 | 16 warps split K four ways; their partial sums meet in shared memory |
# | cell | 0.99 | one thread's chain of loads and `expf`/`tanhf` |
# | arrive | 0.42 | fence, then the atomic add on the counter |
# | other outputs | 0.41 | hs, cs, y, the gate record |
# | barrier wait | 0.79 | until every CTA has arrived |
# | **whole step** | **6.64** | |
#
# No single phase dominates: a step is a chain of sub-microsecond latencies, each paid in full because the next
# needs its result. Removing integer divisions from the entry, reading the biases from shared memory and running
# the wavefront's bf16 backward with 8 warps instead of 16 (less fixed work a step) made the bf16 rows 1.5-8.6%
# faster; to beat cuDNN's overlapped kernels by a wide margin the chain itself has to get shorter. (Since session
# 24 the 8-warp backward runs only up to batch 16: once its step loop compiled without spills, 16 warps won at 32.)
#
# **The exchange alone.** The arrive, the barrier wait and the staging of `h` add up to the state's trip from the
# CTAs that computed it to every CTA. `benchmarks/probe_rnn_exchange.py` runs just that, with no product and no cell,
# in eight designs, and checks every staged element. On an H200 (session 24, batch 32, 128 CTAs, µs a step):
#
# | design | µs a step |
# | --- | ---: |
# | the kernels' own: a counter, then `cp.async` of all of `h` | 4.58 |
# | its barrier alone / its staging alone | 1.52 / 1.86 |
# | the arrival as one release reduction | 4.26 |
# | a counter for each staged chunk | 3.95 |
# | Hopper's bulk copy, multicast to clusters of 2 CTAs | 4.36 |
# | a flag in every 8-byte word of `h` (NCCL's "LL" protocol) | 16.18 |
#
# Three things to read from it:
# - The exchange is most of a 7 µs step.
# - Staging right after the barrier, when every SM asks L2 for lines other SMs have just written, costs more than
#   the barrier and the staging would separately.
# - The designs that look cleverer on paper are no faster, or much slower: polling flags in the data floods L2.
#   Fewer round trips on paper is not fewer microseconds.
# - Even the one that won alone (a counter for each chunk) made the real forward 6-19% slower once built into it.
#   A probe isolates a part, but the kernel pays for the part *in place*: its other work and its registers
#   (ptxas spilled more there). So every change is measured in the kernels, with the old build beside it.
#
# (Figures from `benchmarks/results/gpu_rnn.md`, session 24, not from this notebook's saved run.)
#
# **Splitting the batch.** The recurrence of one sequence never reads another's state, so the batch can be cut
# into independent groups of CTAs, each running its rows with the same weights on a share of the SMs and meeting
# only its own barrier. A CTA then owns more units but stages the state of fewer rows a step, and staging (not the
# product) is what a backward step waits on. The figures here quote benchmarks/results/gpu_rnn.md (session 21, an
# H200, `benchmarks/trace_rnn_persistent.py --batch-groups`), not this notebook's saved outputs: those are a full-mode
# run on an H200 from before batch groups, and the plans printed there are the one-group plans `plan` makes (a
# launch splits the batch after it; a rerun prints `groups=1` in each `Pass`). With groups of
# 16 rows or more the backward passes of a 2x512 layer pair got 8-46% faster from batch 32 (LSTM fp32 at batch 64:
# 1.145 -> 0.743 ms). The forward, whose staging hides behind its product, gained only for the GRU in bf16. Replayed
# from a CUDA graph, fp32 went from 0.82-1.33x to 0.76-1.09x of cuDNN's time, and bf16 from 1.39-2.06x to 1.31-1.79x.
# One choice depends on how the step runs. Eagerly, at these sizes, the host is the bottleneck, so one launch for two
# layers beats two faster launches. In a graph, only the kernels' time counts, so the faster launches win. The
# launcher asks whether the stream is being captured (`rnn_persistent.wave_plan`).
#
# **Who projects whose input.** The first wavefront gave the upper layer twice the work of the lower one: its CTAs
# staged `y_lower[t]` and `h` and multiplied both. The step timeline showed it (session 20): 7.4 µs a step for the
# lower layer, 10.5 for the upper, which set the pace. Yet the lower layer's CTAs already stage
# `h_lower[s - 1] = y_lower[s - 1]` at their step s, for their own product. So now they also keep the upper layer's
# `W_ih` rows for their units beside their `W_hh` rows, multiply what they staged by both, and write that part of the
# upper layer's `gates_x[s - 1]` (`DirForward::gx_up` in kernels/rnn_persistent.cu). The upper layer's step is then an
# ordinary one-layer step that reads its `gates_x[t]` once the lower layer is past step t + 1. The operand is staged
# once and used twice. The backward turns the same idea around: the upper layer stages its `dgates` anyway, so it also
# writes the lower layer's `dy = dgates @ W_ih` (LSTM and vanilla RNN; the GRU's upper layer stages `dgates_h`, which
# is not the `dgates_x` that `dy` needs). The figures here quote benchmarks/results/gpu_rnn.md (session 22, an H200),
# not this notebook's saved outputs, which come from an older full-mode run. With the change the two layers' steps
# take 7.47 and 7.52 µs. The forward of a 2x512 LSTM in bf16 at batch 32, replayed from a CUDA graph, went from 0.409
# to 0.349 ms. The wavefront now pays in every math, so the policy takes it wherever it fits, the GRU's forward
# included. Against cuDNN's graphed kernels the fwd+bwd rows moved to 0.70-1.06x in fp32, 0.76-1.08x in TF32 and
# 1.15-1.69x in bf16, and four of the 27 cells meet the 0.8x target.
#
# One more lesson came from the compiler, not the algorithm. A thread of these kernels may use at most 128 registers
# (512 threads a CTA, 65,536 registers an SM). Where the step loop needs more, ptxas *spills*: it keeps values in
# local memory, which is per-thread DRAM behind the L1 cache, and every step pays for the loads. The backward's step
# loop had been inlined into its kernel beside the partial-sum backward and the struct copies, and ptxas spilled ~280
# bytes a thread there (`nvcc -Xptxas -v` prints this). Made a called function (`__noinline__`), the one-layer loop
# spills nothing (the wavefront's, 8 bytes), and the kernel time of the bidirectional LSTM's bf16 backward went from
# 1.855 to 1.520 ms. The forward's loop, treated the same way, got slower, so the rule is "measure", not "never
# inline". The graphed rows now read 0.70-1.06x in fp32, 0.77-1.06x in TF32 and 1.17-1.62x in bf16. These figures,
# too, quote benchmarks/results/gpu_rnn.md (session 23, an H200), not this notebook's saved outputs (a full-mode run
# on an H200 of 2026-11-26, before the change).

# %% [markdown]
# ## Exercises
#
# 1. Sample from the trained char-LSTM at temperatures 0.2, 0.8 and 1.5. Describe what changes, and
#    explain it from `softmax(logits / T)`.
# 2. Train the char model with `bptt` 8 and 100. Which learns longer-range structure (matching
#    quotes, speaker names at line starts)? What does the shorter window cost in time per character?
# 3. Remove `detach_hidden`. What happens to the memory and time per step, and why does the error
#    appear only in the second window?
# 4. Train the PTB model with Adam at lr 1e-3 instead of SGD at 20, and with the clipping at 5
#    instead of 0.25. Plot validation perplexity per epoch for each.
# 5. Extend `ByteCounter`'s table to the LSTM backward cell (`cpu_rnn.lstm_cell_backward`): write it
#    as unfused operations, count its bytes, and compare with what `lstm_cell_backward` in
#    kernels/rnn.cu reads and writes.
# 6. Do the same count for the GRU cell (`gru_cell_forward`). Why must the GRU keep `h_n = W_hn h + b_hn`
#    separate from `x_n` instead of adding the two gate pre-activations first, as the LSTM does?
# 7. `lstm_layer_persistent_numpy` reads all of `h` in every "CTA". Count the bytes all CTAs read per
#    step for B = 64, H = 512 and 128 CTAs, and compare them with the bytes of `W_hh` the standard
#    algorithm reads. Which algorithm moves more, and why is the persistent one faster anyway?
# 8. Write the backward pass of `lstm_layer_persistent_numpy` both ways kernels/rnn_persistent.cu splits it. Staged:
#    each "CTA" keeps the columns of `W_hh` for its units and reads all of `dgates`. Partial sums: each keeps its
#    rows, writes a partial `dh` for every unit, and sums the partials of its own units. Check that both give the
#    reference's `dh`, and count the floats each way moves between CTAs per step for B = 32, H = 512, 128 CTAs.
# 9. Split the batch of exercise 8's staged backward between 1, 2 and 4 groups of "CTAs" (each group its own rows,
#    the same 128 CTAs in all, so each owns 4, 8 or 16 units). Count the bytes one CTA stages per step at B = 32 and
#    64, and the mma tiles (16 rows x 8 units) it computes. Which count shrinks, which stays, and why do groups of 8 rows
#    lose although they stage least? (The measured answer: benchmarks/results/gpu_rnn.md, session 21.)
# 10. Write `lstm_wavefront_numpy(x, layer0, layer1, units)`: two stacked layers as the wavefront runs them now. At
#    step s each "CTA" of layer 0 multiplies the `h` it reads (`h0[s - 1]`, which is layer 0's `y[s - 1]`) by its rows
#    of layer 0's `W_hh` and by the same units' rows of layer 1's `W_ih`. It keeps the first product for its own cell
#    and writes the second into layer 1's `gates_x[s - 1]`. Layer 1 runs `lstm_layer_persistent_numpy`'s step on that
#    `gates_x`, two steps behind. Check `y` against the two layers run one after the other. Then count, per step and
#    CTA, the floats each layer stages and the multiply-adds it does, for this split and for the first wavefront's
#    (layer 1 multiplying `[y0[t] | h1]` by `[W_ih | W_hh]`) at B = 32, H = 512, 64 CTAs a layer. Which layer set the
#    pace before, and which does now? (Measured: benchmarks/results/gpu_rnn.md, session 22.)
