"""A character-level model in the LLaMA style, written for minidl's tests (after the structure of Meta's reference
model, not a copy): RMSNorm, rotary position embeddings applied as complex products (torch.polar,
view_as_complex, view_as_real), grouped-query attention (keys and values repeated per query head), causal
scaled_dot_product_attention, a SwiGLU feed-forward, no biases, AdamW with a cosine schedule and gradient
clipping, greedy decoding.

    python llama_char.py --data input.txt --steps 100          # PyTorch
    python -m minidl.run llama_char.py --data input.txt ...    # the same program on minidl
"""
import argparse
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Args:
    dim: int = 32
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    vocab_size: int = 64
    multiple_of: int = 16
    norm_eps: float = 1e-5
    max_seq_len: int = 32


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        norm = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return norm.type_as(x) * self.weight


def rotation_table(head_dim, length, theta=10000.0):
    """e^{i t w_k} for positions t < length and the head_dim / 2 frequencies w_k, as complex64."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    angles = torch.outer(torch.arange(length), freqs).float()
    return torch.polar(torch.ones_like(angles), angles)


def rotate(x, table):
    """x (batch, time, heads, head_dim): consecutive pairs of features taken as complex numbers and multiplied by
    the position's rotation."""
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    table = table.view(1, pairs.shape[1], 1, pairs.shape[-1])
    return torch.view_as_real(pairs * table).flatten(3).type_as(x)


def repeat_kv(x, n_rep):
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim).reshape(bs, slen, n_kv_heads * n_rep,
                                                                                     head_dim)


class Attention(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.n_heads, self.n_kv_heads = args.n_heads, args.n_kv_heads
        self.head_dim = args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

    def forward(self, x, table):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.n_heads, self.head_dim)
        k = self.wk(x).view(B, T, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.head_dim)
        q, k = rotate(q, table), rotate(k, table)
        rep = self.n_heads // self.n_kv_heads
        k, v = repeat_kv(k, rep), repeat_kv(v, rep)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).contiguous().view(B, T, -1))


class FeedForward(nn.Module):
    def __init__(self, dim, multiple_of):
        super().__init__()
        hidden = int(2 * (4 * dim) / 3)
        hidden = multiple_of * ((hidden + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, args.multiple_of)
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x, table):
        h = x + self.attention(self.attention_norm(x), table)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList([Block(args) for _ in range(args.n_layers)])
        self.norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        self.register_buffer("table", torch.view_as_real(rotation_table(args.dim // args.n_heads, args.max_seq_len)),
                             persistent=False)

    def forward(self, tokens, targets=None):
        T = tokens.shape[1]
        h = self.tok_embeddings(tokens)
        table = torch.view_as_complex(self.table[:T].contiguous())
        for layer in self.layers:
            h = layer(h, table)
        logits = self.output(self.norm(h)).float()
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=24)
    p.add_argument("--lr", type=float, default=3e-3)
    args = p.parse_args()
    torch.manual_seed(1)
    text = open(args.data).read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    cfg = Args(vocab_size=len(chars), max_seq_len=args.seq_len)
    model = Transformer(cfg)
    print(f"parameters: {sum(p.numel() for p in model.parameters())}")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
    for step in range(args.steps):
        ix = torch.randint(len(data) - args.seq_len - 1, (args.batch_size,))
        x = torch.stack([data[i:i + args.seq_len] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + args.seq_len] for i in ix])
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 20 == 0 or step == args.steps - 1:
            print(f"step {step}: loss {loss.item():.4f}")
    model.eval()
    out = data[:4].view(1, -1)
    with torch.no_grad():
        for _ in range(20):
            logits, _ = model(out[:, -cfg.max_seq_len:])
            out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    print("sample:", repr("".join(chars[i] for i in out[0].tolist())))
    assert math.isfinite(loss.item())


if __name__ == "__main__":
    main()
