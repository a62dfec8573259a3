# Source of tutorials/09_attention.ipynb (percent format: `# %%` code cells,
# `# %% [markdown]` text cells). Edit here, then: python tutorials/build.py 09

# %% [markdown]
# # 9. Attention on the GPU
#
# Tutorial 6 read text with an LSTM: one step per character, each step waiting for the one before.
# The model that replaced it, the **Transformer** (Vaswani et al. 2017), reads every position at once:
# each position asks a question (a *query*), every position offers a *key* and a *value*, and a
# position's output is the average of the values, weighted by how well its query matches each key:
#
#     attention(Q, K, V) = softmax(Q Kᵀ / √d) V
#
# In this notebook we
# 1. write attention in NumPy and check it against `minidl.nn.functional.scaled_dot_product_attention`;
# 2. count the bytes the plain algorithm moves, and see why it is **memory-bound**;
# 3. derive the **online softmax**, which computes the same result one block of keys at a time;
# 4. build FlashAttention's tiled algorithm from it in NumPy, forward and backward, and read our CUDA
#    kernel (`kernels/attention.cu`) beside it;
# 5. train a small character-level **GPT** on Tiny Shakespeare next to tutorial 6's LSTM;
# 6. time our fused kernel against PyTorch's SDPA backends (FlashAttention-2, cuDNN).

# %% [markdown]
# **Running it on a CPU.** Small mode (the default) takes about 25 s on a 2-core CPU: the NumPy parts run
# at full size where they are cheap, the GPT and the LSTM are small and train for a few hundred steps, and
# the speed section reads the table measured on an H100 (`benchmarks/results/gpu_attention.md`). Full mode
# on a GPU trains larger models in bfloat16 on the fused kernel and times the kernel against PyTorch live
# (when torch with CUDA is installed). The saved outputs are a full-mode run on an H100.

# %%
import tutorial_utils as tu   # next to the notebooks: the mode, device label, tables, figure stamps
MODE, USE_GPU, DEVICE, WHY_NOT_GPU = tu.setup(precompile=["attention", "layer_norm"])

import tempfile
import time
from pathlib import Path

import numpy as np
import matplotlib.pyplot as plt
from tqdm.auto import tqdm

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
import minidl.primitives as P
from minidl.data import CharCorpus

FULL = MODE == "full"
dev = "cuda" if USE_GPU else "cpu"
rng = np.random.default_rng(0)

# %% [markdown]
# ## 9.1 Attention in NumPy
#
# Q is (L, d): L queries of d numbers; K and V are (S, d): S keys and their values. The score of query i
# against key j is their dot product, divided by √d so that the scores keep a unit scale whatever d is;
# a softmax over the keys turns each query's scores into weights that sum to 1; the output is the
# weighted average of the values. A **causal** mask hides key j from query i when j > i: a language
# model predicting character i+1 must not read characters after i. Hidden scores become -∞, so their
# weight is exp(-∞) = 0.
#
# Several **heads** do this in parallel on slices of the model's width, and a batch of sequences adds
# another leading dimension: (B, H, L, d).

# %%
def attention_numpy(q, k, v, causal=False):
    """softmax(q k^T / sqrt(d)) v over the last two dims; causal hides key j from query i > ... j > i."""
    d = q.shape[-1]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d)            # (..., L, S)
    if causal:
        L, S = scores.shape[-2:]
        scores = np.where(np.tri(L, S, dtype=bool), scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)         # exp never overflows
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ v

q, k, v = (rng.standard_normal((2, 4, 16, 8)) for _ in range(3))
ours = attention_numpy(q, k, v, causal=True)
theirs = F.scaled_dot_product_attention(minidl.tensor(q), minidl.tensor(k), minidl.tensor(v), is_causal=True)
print("NumPy vs minidl, relative error:", tu.rel_err(ours, theirs.numpy()))

# %% [markdown]
# The causal weights of one head, drawn: each row is a query and sums to 1; everything above the diagonal
# is 0.

# %%
d = q.shape[-1]
w = q[0, 0] @ k[0, 0].T / np.sqrt(d)
w = np.where(np.tri(16, dtype=bool), w, -np.inf)
w = np.exp(w - w.max(1, keepdims=True))
w /= w.sum(1, keepdims=True)
fig, ax = plt.subplots(figsize=(4.2, 3.6))
im = ax.imshow(w, cmap="viridis")
ax.set_xlabel("key j"), ax.set_ylabel("query i"), ax.set_title("causal attention weights, one head")
fig.colorbar(im, ax=ax)
tu.stamp(fig, DEVICE, MODE)
plt.show()

# %% [markdown]
# ## 9.2 Why the plain algorithm is memory-bound
#
# Per head, the plain algorithm writes the L x S scores to memory, reads them back for the softmax,
# writes the probabilities P, and reads P again for P V; the backward pass reads and writes matrices of
# that size again. The arithmetic is 4d FLOPs per score (two products over d); counted below, the plain
# forward moves 16 bytes per score (three fp32 passes over S, two bfloat16 passes over P), so for d = 64 it
# does about 256 / 16 = 16 FLOPs per byte (the table's "plain FLOP/byte", a little less at small L).
# An H100 does ~990 TFLOP/s of bf16 tensor-core math and moves ~3.35 TB/s: it needs ~300 FLOPs per byte
# to keep its tensor cores busy. So the plain algorithm waits on memory, and its memory grows as L².
#
# A **fused** kernel keeps S and P on chip: it reads Q, K, V once and writes O once (plus one number per
# query, see 9.3). Counted for issue 25's problem, forward only:

# %%
def attention_bytes(B, H, L, d, itemsize=2, causal=True):
    """(plain, fused) bytes of one forward pass: the plain one writes and reads S and P (L x L per head,
    fp32 for S as PyTorch's math path keeps it, itemsize for P), plus Q, K, V, O; the fused one Q, K, V, O
    and the log-sum-exp."""
    qkvo = 4 * B * H * L * d * itemsize
    scores = B * H * L * L * (0.5 if causal else 1.0)
    plain = qkvo + scores * (4 + 4 + 4 + itemsize + itemsize)   # write S, read S, ... write P, read P
    fused = qkvo + B * H * L * 4
    return plain, fused

rows = []
for L in (256, 1024, 4096, 16384):
    plain, fused = attention_bytes(8, 12, L, 64)
    flops = 4 * 8 * 12 * L * L * 64 * 0.5
    rows.append([L, f"{plain / 1e9:.2f}", f"{fused / 1e9:.3f}", f"{plain / fused:.0f}x",
                 f"{flops / plain:.0f}", f"{flops / fused:.0f}"])
tu.Table(["L", "plain GB", "fused GB", "ratio", "plain FLOP/byte", "fused FLOP/byte"], rows,
         title="causal attention forward, B=8, H=12, d=64, bfloat16 (H100 ridge: ~300 FLOP/byte)")

# %% [markdown]
# ## 9.3 The online softmax
#
# The softmax of a row needs its maximum (for stability) and the sum of the exponentials, over the
# whole row, before any weight is known. FlashAttention (Dao et al. 2022, 2023) does not wait: it reads
# the keys in blocks and keeps, per query, a running maximum m, a running sum l and a running output o.
# When a new block of scores s arrives:
#
#     m' = max(m, max_j s_j)
#     l' = l · e^(m - m') + Σ_j e^(s_j - m')
#     o' = o · e^(m - m') + Σ_j e^(s_j - m') v_j
#
# The factor e^(m - m') rescales what was summed against the old maximum to the new one, so at every
# step l and o are exactly the sum and the weighted sum of the rows seen so far, relative to their
# maximum. After the last block, o / l is the softmax-weighted average: the same number, not an
# approximation. The backward pass needs P again; it recomputes it from the **log-sum-exp**
# LSE = m + log l (one number per query): P_ij = e^(s_ij - LSE_i).
#
# Checked on one query against a full softmax, block by block:

# %%
s_row = rng.standard_normal(200) * 3
v_rows = rng.standard_normal((200, 8))
m, l, o = -np.inf, 0.0, np.zeros(8)
history = []
for start in range(0, 200, 32):                     # blocks of 32 keys
    block = s_row[start:start + 32]
    m_new = max(m, block.max())
    scale = np.exp(m - m_new)                       # 0 on the first block (m = -inf)
    p = np.exp(block - m_new)
    l = l * scale + p.sum()
    o = o * scale + p @ v_rows[start:start + 32]
    m = m_new
    history.append((start + len(block), m, l))
full = np.exp(s_row - s_row.max())
full /= full.sum()
print("online o / l vs softmax(s) @ v, max abs difference:", np.abs(o / l - full @ v_rows).max())
print("LSE:", m + np.log(l), " log(sum(exp(s))):", np.log(np.exp(s_row).sum()))

fig, ax = plt.subplots(1, 2, figsize=(9, 3))
ax[0].plot([h[0] for h in history], [h[1] for h in history], "o-")
ax[0].set_xlabel("keys seen"), ax[0].set_title("running maximum m")
ax[1].plot([h[0] for h in history], [h[2] for h in history], "o-", color="C1")
ax[1].set_xlabel("keys seen"), ax[1].set_title("running sum l (relative to m)")
tu.stamp(fig, DEVICE, MODE)
plt.show()

# %% [markdown]
# ## 9.4 FlashAttention, tiled, in NumPy
#
# The kernel's algorithm in NumPy: a block of 128 queries (one CUDA thread block) stays put; the keys and
# values stream past in blocks of 64 (through shared memory, on the GPU). Nothing of size L x S is
# ever formed. The same blocking gives the backward pass: recompute each block of P from Q, K and the
# saved LSE, then
#
#     dV = Pᵀ dO,   dP = dO Vᵀ,   dS = P ∘ (dP - Δ),   dQ = dS K / √d,   dK = dSᵀ Q / √d,
#
# with Δ_i = Σ_j P_ij dP_ij = dO_i · O_i, one number per query computed before the loop.

# %%
def flash_forward(q, k, v, causal=False, bm=128, bn=64):
    """One head: q (L, d), k and v (S, d) -> (o, lse), in blocks, with the online softmax."""
    L, d = q.shape
    S = k.shape[0]
    o, lse = np.zeros_like(q), np.zeros(L)
    for i0 in range(0, L, bm):                                   # one thread block
        qi = q[i0:i0 + bm] / np.sqrt(d)
        m = np.full(len(qi), -np.inf)
        l, acc = np.zeros(len(qi)), np.zeros((len(qi), v.shape[1]))
        for j0 in range(0, S, bn):                               # K, V stream through shared memory
            if causal and j0 > i0 + len(qi) - 1:
                break                                            # the block is all above the diagonal
            s = qi @ k[j0:j0 + bn].T                             # on chip: never written to memory
            if causal:
                s = np.where(np.arange(j0, j0 + s.shape[1])[None] <= np.arange(i0, i0 + len(qi))[:, None],
                             s, -np.inf)
            m_new = np.maximum(m, s.max(axis=1))
            alpha = np.exp(m - m_new)
            p = np.exp(s - m_new[:, None])
            l = l * alpha + p.sum(axis=1)
            acc = acc * alpha[:, None] + p @ v[j0:j0 + bn]
            m = m_new
        o[i0:i0 + bm] = acc / l[:, None]
        lse[i0:i0 + bm] = m + np.log(l)
    return o, lse


def flash_backward(q, k, v, o, do, lse, causal=False, bm=64, bn=64):
    """dq, dk, dv of one head, recomputing P block by block from the LSE."""
    L, d = q.shape
    S = k.shape[0]
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    delta = (do * o).sum(axis=1)
    for j0 in range(0, S, bn):                                   # one thread block: 64 keys
        for i0 in range(0, L, bm):
            s = q[i0:i0 + bm] @ k[j0:j0 + bn].T / np.sqrt(d)
            if causal:
                s = np.where(np.arange(j0, j0 + s.shape[1])[None] <= np.arange(i0, i0 + s.shape[0])[:, None],
                             s, -np.inf)
            p = np.exp(s - lse[i0:i0 + bm, None])
            dv[j0:j0 + bn] += p.T @ do[i0:i0 + bm]
            dp = do[i0:i0 + bm] @ v[j0:j0 + bn].T
            ds = p * (dp - delta[i0:i0 + bm, None])
            dq[i0:i0 + bm] += ds @ k[j0:j0 + bn] / np.sqrt(d)    # the kernel: atomic adds in fp32
            dk[j0:j0 + bn] += ds.T @ q[i0:i0 + bm] / np.sqrt(d)
    return dq, dk, dv

L_demo = 300
q1, k1, v1, do1 = (rng.standard_normal((L_demo, 64)) for _ in range(4))
o1, lse1 = flash_forward(q1, k1, v1, causal=True)
print("forward vs plain NumPy:", tu.rel_err(o1, attention_numpy(q1, k1, v1, causal=True)))
t = [minidl.tensor(a, requires_grad=True) for a in (q1, k1, v1)]
out = F.scaled_dot_product_attention(*t, is_causal=True)
out.backward(minidl.tensor(do1))
for name, mine, ref in zip(("dQ", "dK", "dV"), flash_backward(q1, k1, v1, o1, do1, lse1, causal=True), t):
    print(f"{name} vs minidl's gradient: {tu.rel_err(mine, ref.grad.numpy()):.1e}")

# %% [markdown]
# ## 9.5 The kernel beside the NumPy
#
# `kernels/attention.cu` is the same loop in CUDA. A thread block owns 128 queries; each warp (32
# threads) owns 16 or 32 of them. The products Q Kᵀ and P V run on the tensor cores with `mma.sync`
# (tutorial 7): the fp32 scores come out in registers, spread over the warp's 32 threads, 4 values of a
# 16 x 8 tile each. Two things make it fast:
#
# * The scores' register layout **is** the layout the next product wants for its left operand: P is
#   rounded to bfloat16 and fed straight back to the tensor cores, never stored.
# * While the tensor cores work on one block of keys, `cp.async` copies the next block into the other
#   half of a double buffer in shared memory.
#
# The online softmax of one block, in the kernel (each thread holds two rows; the row maximum is
# finished across the 4 threads that share a row with two shuffles), beside the NumPy:

# %%
kernel_text = tu.kernel_source("attention")
start = kernel_text.index("        // scale, mask, online softmax")
end = kernel_text.index("        // O += P V")
tu.SideBySide("flash_forward (NumPy)", tu.python_source(flash_forward),
              "kernels/attention.cu, attention_forward_impl", kernel_text[start:end].rstrip())

# %% [markdown]
# The kernel checks itself against the NumPy reference of the attention primitive
# (`minidl/primitives/cpu/attention.py`, the plain algorithm with the same name and arguments) in
# `tests/gpu/test_attention_kernel_gpu.py`: fp16 and bf16, head dims 32-128, lengths that are not
# multiples of the blocks, causal and explicit masks, grouped-query attention and dropout (the kernel
# draws the reference's Philox mask, bit for bit). On the GPU, here:

# %%
if USE_GPU:
    import cupy

    B_, H_, L_, D_ = 2, 4, 333, 64
    arrays = [rng.standard_normal((B_, H_, L_, D_)).astype(minidl.bfloat16) for _ in range(4)]
    qg, kg, vg, dog = (cupy.asarray(a) for a in arrays)
    o_g, lse_g = P.attention_forward(qg, kg, vg, causal=True)
    grads_g = P.attention_backward(qg, kg, vg, o_g, dog, lse_g, causal=True)
    ref64 = [a.astype(np.float64) for a in arrays]
    o_r, lse_r = P.attention_forward(*ref64[:3], causal=True)
    grads_r = P.attention_backward(*ref64[:3], o_r, ref64[3], lse_r, causal=True)
    rows = [[name, f"{tu.rel_err(a.get().astype(np.float64), b):.1e}"]
            for name, a, b in zip(("O", "dQ", "dK", "dV"), (o_g, *grads_g), (o_r, *grads_r))]
    display(tu.Table(["output", "relative error vs float64"], rows,
                     title="fused bf16 kernel vs the float64 reference (B=2, H=4, L=333, d=64, causal)"))
else:
    print("GPU cell skipped:", WHY_NOT_GPU)

# %% [markdown]
# ## 9.6 A small GPT next to the LSTM
#
# A decoder-only Transformer ("GPT") for characters, built from minidl's layers with PyTorch's names:
# token and position embeddings, then blocks of `x + attention(layer_norm(x))` and
# `x + mlp(layer_norm(x))`, and a final layer norm and linear layer to logits. Attention is
# `F.scaled_dot_product_attention(q, k, v, is_causal=True)`, which runs the fused kernel on the GPU
# (under bfloat16 autocast) and the reference on the CPU. `examples/char_gpt.py` is the full-size
# version of this model. Its rival is tutorial 6's character LSTM, of a similar size (the next cell prints
# both parameter counts), trained on the same windows with the same optimizer.

# %%
def synthetic_chars():
    return CharCorpus(tu.write_synthetic_text(Path(tempfile.mkdtemp()) / "synthetic", 60_000))

corpus, REAL_TEXT = tu.load_dataset(MODE, "Tiny Shakespeare", lambda download: CharCorpus(download=download),
                                    synthetic_chars)
split = int(0.9 * len(corpus.data))
train_ids, val_ids = corpus.data[:split], corpus.data[split:]
print(f"{len(corpus.data):,} characters, vocabulary {corpus.vocab_size}")


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.reshape(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)       # (B, heads, T, C / heads)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, d, heads, layers, block_size):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block_size, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, ids):                                   # (B, T) -> (B, T, vocab)
        positions = minidl.arange(ids.shape[1], device=ids.device)
        return self.head(self.ln(self.blocks(self.tok(ids) + self.pos(positions))))


class CharLSTM(nn.Module):
    def __init__(self, vocab, d, layers):
        super().__init__()
        self.embed, self.rnn, self.head = nn.Embedding(vocab, d), nn.LSTM(d, d, layers, batch_first=True), nn.Linear(d, vocab)

    def forward(self, ids):
        return self.head(self.rnn(self.embed(ids))[0])


if FULL and USE_GPU:
    CFG = dict(d=256, heads=4, layers=4, block=128, batch=64, steps=1500, lstm_d=512, lstm_layers=2)
else:
    CFG = dict(d=64, heads=2, layers=2, block=32, batch=16, steps=150, lstm_d=96, lstm_layers=1)
n_params = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
minidl.manual_seed(0)
gpt = GPT(corpus.vocab_size, CFG["d"], CFG["heads"], CFG["layers"], CFG["block"]).to(dev)
lstm = CharLSTM(corpus.vocab_size, CFG["lstm_d"], CFG["lstm_layers"]).to(dev)
print(f"GPT: {n_params(gpt):,} parameters; LSTM: {n_params(lstm):,} parameters; config {CFG}")

# %% [markdown]
# Both train on random windows of `block` characters (every position predicts its next character), with
# AdamW, for the same number of steps; on the GPU both run under bfloat16 autocast. The loss is in nats per
# character (a uniform guess over the vocabulary is log 65 ≈ 4.17).

# %%
def windows(ids, block, batch, gen):
    starts = gen.integers(0, len(ids) - block - 1, batch)
    idx = starts[:, None] + np.arange(block + 1)[None]
    chunk = minidl.tensor(ids[idx], device=dev)
    return chunk[:, :-1], chunk[:, 1:]


def evaluate(model, batches=8):
    gen = np.random.default_rng(123)
    model.eval()
    with minidl.no_grad(), minidl.autocast("cuda", dtype=minidl.bfloat16, enabled=USE_GPU):
        losses = [F.cross_entropy(model(x).reshape(-1, corpus.vocab_size).float(), y.reshape(-1)).item()
                  for x, y in (windows(val_ids, CFG["block"], CFG["batch"], gen) for _ in range(batches))]
    model.train()
    return float(np.mean(losses))


def train(model, name):
    opt = minidl.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    gen = np.random.default_rng(0)
    curve, t0 = [], time.perf_counter()
    for step in tqdm(range(CFG["steps"]), desc=name):
        x, y = windows(train_ids, CFG["block"], CFG["batch"], gen)
        with minidl.autocast("cuda", dtype=minidl.bfloat16, enabled=USE_GPU):
            loss = F.cross_entropy(model(x).reshape(-1, corpus.vocab_size).float(), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % max(1, CFG["steps"] // 15) == 0 or step == CFG["steps"] - 1:
            curve.append((step + 1, time.perf_counter() - t0, evaluate(model)))
    return curve

curves = {"GPT": train(gpt, "GPT"), "LSTM": train(lstm, "LSTM")}
rows = [[name, f"{c[-1][2]:.3f}", f"{c[-1][1]:.1f}", f"{1e3 * c[-1][1] / CFG['steps']:.1f}"] for name, c in curves.items()]
tu.Table(["model", "validation loss (nats/char)", "training seconds", "ms / step (incl. evaluations)"], rows,
         title=f"{CFG['steps']} steps of {CFG['batch']} x {CFG['block']} characters, {DEVICE}")

# %%
fig, ax = plt.subplots(1, 2, figsize=(10, 3.4))
for name, c in curves.items():
    ax[0].plot([p[0] for p in c], [p[2] for p in c], "o-", label=name)
    ax[1].plot([p[1] for p in c], [p[2] for p in c], "o-", label=name)
ax[0].set_xlabel("step"), ax[1].set_xlabel("seconds"), ax[0].set_ylabel("validation loss (nats/char)")
ax[0].legend(), ax[0].set_title("per step"), ax[1].set_title("per second of training")
tu.stamp(fig, DEVICE, MODE)
plt.show()

# %% [markdown]
# Samples: the prompt "\n", then each model's next characters, drawn at temperature 0.8. The GPT reads its
# whole context window at every step; the LSTM carries everything it knows in its hidden state.

# %%
def generate(model, length=300, temperature=0.8, seed=0):
    gen = np.random.default_rng(seed)
    ids = [int(corpus.encode("\n")[0])]
    model.eval()
    with minidl.no_grad(), minidl.autocast("cuda", dtype=minidl.bfloat16, enabled=USE_GPU):
        for _ in range(length):
            context = minidl.tensor(np.array([ids[-CFG["block"]:]]), device=dev)
            logits = model(context)[0, -1].float().cpu().numpy() / temperature
            p = np.exp(logits - logits.max())
            ids.append(int(gen.choice(len(p), p=p / p.sum())))
    model.train()
    return corpus.decode(np.array(ids[1:]))

for name, model in (("GPT", gpt), ("LSTM", lstm)):
    print(f"--- {name} ---\n{generate(model)}\n")

# %% [markdown]
# ## 9.7 Speed against PyTorch
#
# The fused kernel (forward + backward, all three input gradients), causal, against PyTorch's
# `scaled_dot_product_attention` with each of its backends, in the same process on the same GPU. Full
# mode on a GPU with torch measures it here; otherwise the table is the one measured on an H100 by
# `benchmarks/bench_attention.py` (its file says the date, commit and device).

# %%
import importlib.util
have_torch_cuda = USE_GPU and importlib.util.find_spec("torch") is not None
if have_torch_cuda:
    import torch
    have_torch_cuda = torch.cuda.is_available()
if have_torch_cuda:
    import sys
    sys.path.insert(0, str(tu.REPO_ROOT))
    from benchmarks import bench_attention as ba
    rows = []
    for case in (("bfloat16", True, 8, 12, 1024, 64), ("bfloat16", True, 8, 12, 4096, 64)):
        r = ba.bench_attention(case, warmup=3, repeats=10)
        flash, cudnn = r.get("flash"), r.get("cudnn")
        rows.append([f"B8 H12 T{case[4]} d64", f"{r['ours'][1]:.3f}",
                     f"{flash[1]:.3f}" if isinstance(flash, tuple) else "n/a",
                     f"{cudnn[1]:.3f}" if isinstance(cudnn, tuple) else "n/a",
                     f"{r['ours'][1] / flash[1]:.2f}" if isinstance(flash, tuple) else "n/a"])
    display(tu.Table(["causal bf16 problem", "minidl ms", "torch flash ms", "torch cuDNN ms", "minidl / flash"],
                     rows, title=f"forward + backward, measured now on {DEVICE}"))
else:
    text = (tu.REPO_ROOT / "benchmarks/results/gpu_attention.md").read_text()
    print("\n".join(line for line in text.splitlines()[:14] if line.strip()))

# %% [markdown]
# What the table says: the fused kernel replaces the plain algorithm's memory-bound chain (PyTorch's
# unfused "math" backend, in `benchmarks/results/gpu_attention.md`, is 7-9x slower at T = 1024) with
# one compute-bound kernel, and comes within 1.5x of FlashAttention-2 (1.25x and 1.44x in the H100 run
# saved here). cuDNN's fused attention is faster still on Hopper: it uses `wgmma` (Hopper's warpgroup MMA)
# and TMA, where the kernel timed above used the Ampere-era `mma.sync` that tutorial 7 describes.
#
# Since that run, on an H100/H200 the 16-bit forward pass at head dims 64 and 128 runs on `wgmma`
# (`kernels/attention_wgmma.cu`): the four warps of a warpgroup issue one 64 x 64 x 16 product together, the
# tensor cores read Q and K straight from shared memory (no `ldmatrix`), and P goes from the registers
# that hold S into the product P V, as here; at head dim 64 the backward's five products run on `wgmma`
# too. In the latest run of `benchmarks/results/gpu_attention.md` (an H200, not this notebook's run), against
# the `mma.sync` kernels timed in the same rounds, the forward takes 0.69-0.83x their time and forward +
# backward at T = 4096 0.75x; forward + backward is 1.14-1.40x FlashAttention-2's time there, and cuDNN's
# fused attention (TMA, warp specialisation) is still 1.5-2.4x faster than ours.
