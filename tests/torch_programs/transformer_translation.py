"""Sequence-to-sequence translation with nn.Transformer, in the style of PyTorch's "Language Translation with
nn.Transformer" tutorial (written for minidl's tests, not a copy): token embeddings scaled by sqrt(d), a
sinusoidal PositionalEncoding buffer, nn.Transformer (sequence-first), square subsequent masks built with
torch.triu and masked_fill, key padding masks for source, target and memory, CrossEntropyLoss with
ignore_index, Adam with betas (0.9, 0.98) and eps 1e-9, and greedy decoding with model.encode / decode.

The torchtext Multi30k data is replaced by a synthetic language: a "sentence" is 2-6 random words, and its
translation is the same words reversed and shifted by one in the vocabulary, so a model that attends
correctly learns it exactly.

    python transformer_translation.py                    # PyTorch
    python -m minidl.run transformer_translation.py      # the same program on minidl
"""
import argparse
import math
import random

import torch
import torch.nn as nn
from torch import Tensor
from torch.nn import Transformer

PAD_IDX, BOS_IDX, EOS_IDX = 0, 1, 2
FIRST_WORD = 3


class PositionalEncoding(nn.Module):
    def __init__(self, emb_size: int, dropout: float, maxlen: int = 64):
        super().__init__()
        den = torch.exp(- torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        pos_embedding = pos_embedding.unsqueeze(-2)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pos_embedding", pos_embedding)

    def forward(self, token_embedding: Tensor):
        return self.dropout(token_embedding + self.pos_embedding[:token_embedding.size(0), :])


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, emb_size):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.emb_size = emb_size

    def forward(self, tokens: Tensor):
        return self.embedding(tokens.long()) * math.sqrt(self.emb_size)


class Seq2SeqTransformer(nn.Module):
    def __init__(self, num_encoder_layers, num_decoder_layers, emb_size, nhead, src_vocab_size, tgt_vocab_size,
                 dim_feedforward=128, dropout=0.1):
        super().__init__()
        self.transformer = Transformer(d_model=emb_size, nhead=nhead, num_encoder_layers=num_encoder_layers,
                                       num_decoder_layers=num_decoder_layers, dim_feedforward=dim_feedforward,
                                       dropout=dropout)
        self.generator = nn.Linear(emb_size, tgt_vocab_size)
        self.src_tok_emb = TokenEmbedding(src_vocab_size, emb_size)
        self.tgt_tok_emb = TokenEmbedding(tgt_vocab_size, emb_size)
        self.positional_encoding = PositionalEncoding(emb_size, dropout=dropout)

    def forward(self, src, trg, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, memory_key_padding_mask):
        src_emb = self.positional_encoding(self.src_tok_emb(src))
        tgt_emb = self.positional_encoding(self.tgt_tok_emb(trg))
        outs = self.transformer(src_emb, tgt_emb, src_mask, tgt_mask, None, src_padding_mask, tgt_padding_mask,
                                memory_key_padding_mask)
        return self.generator(outs)

    def encode(self, src: Tensor, src_mask: Tensor):
        return self.transformer.encoder(self.positional_encoding(self.src_tok_emb(src)), src_mask)

    def decode(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor):
        return self.transformer.decoder(self.positional_encoding(self.tgt_tok_emb(tgt)), memory, tgt_mask)


def generate_square_subsequent_mask(sz, device):
    mask = (torch.triu(torch.ones((sz, sz), device=device)) == 1).transpose(0, 1)
    mask = mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, float(0.0))
    return mask


def create_mask(src, tgt, device):
    src_seq_len, tgt_seq_len = src.shape[0], tgt.shape[0]
    tgt_mask = generate_square_subsequent_mask(tgt_seq_len, device)
    src_mask = torch.zeros((src_seq_len, src_seq_len), device=device).type(torch.bool)
    src_padding_mask = (src == PAD_IDX).transpose(0, 1)
    tgt_padding_mask = (tgt == PAD_IDX).transpose(0, 1)
    return src_mask, tgt_mask, src_padding_mask, tgt_padding_mask


def make_pair(rng, vocab):
    words = [rng.randrange(FIRST_WORD, vocab) for _ in range(rng.randint(2, 6))]
    translation = [FIRST_WORD + (w - FIRST_WORD + 1) % (vocab - FIRST_WORD) for w in reversed(words)]
    return words, translation


def collate(pairs):
    """Sequence-first (T, B) tensors with BOS/EOS, padded with PAD_IDX (pad_sequence's layout)."""
    src = [torch.tensor([BOS_IDX] + s + [EOS_IDX]) for s, _ in pairs]
    tgt = [torch.tensor([BOS_IDX] + t + [EOS_IDX]) for _, t in pairs]
    return (nn.utils.rnn.pad_sequence(src, padding_value=PAD_IDX),
            nn.utils.rnn.pad_sequence(tgt, padding_value=PAD_IDX))


def greedy_decode(model, src, src_mask, max_len, start_symbol, device):
    src, src_mask = src.to(device), src_mask.to(device)
    memory = model.encode(src, src_mask)
    ys = torch.ones(1, 1).fill_(start_symbol).type(torch.long).to(device)
    for _ in range(max_len - 1):
        memory = memory.to(device)
        tgt_mask = (generate_square_subsequent_mask(ys.size(0), device).type(torch.bool)).to(device)
        out = model.decode(ys, memory, tgt_mask)
        out = out.transpose(0, 1)
        prob = model.generator(out[:, -1])
        _, next_word = torch.max(prob, dim=1)
        next_word = next_word.item()
        ys = torch.cat([ys, torch.ones(1, 1).type_as(src.data).fill_(next_word)], dim=0)
        if next_word == EOS_IDX:
            break
    return ys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=16)
    parser.add_argument("--emb", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = Seq2SeqTransformer(2, 2, args.emb, 4, args.vocab, args.vocab).to(device)
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=PAD_IDX)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.98), eps=1e-9)

    model.train()
    for step in range(1, args.steps + 1):
        src, tgt = collate([make_pair(rng, args.vocab) for _ in range(args.batch_size)])
        src, tgt = src.to(device), tgt.to(device)
        tgt_input = tgt[:-1, :]
        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input, device)
        logits = model(src, tgt_input, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, src_padding_mask)
        optimizer.zero_grad()
        tgt_out = tgt[1:, :]
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
        loss.backward()
        optimizer.step()
        if step % 50 == 0 or step == 1:
            print(f"step {step}: train loss {loss.item():.4f}")

    model.eval()
    correct, shown = 0, 0
    test_rng = random.Random(1234)
    for _ in range(20):
        words, translation = make_pair(test_rng, args.vocab)
        src = torch.tensor([BOS_IDX] + words + [EOS_IDX]).view(-1, 1)
        num_tokens = src.shape[0]
        src_mask = (torch.zeros(num_tokens, num_tokens)).type(torch.bool)
        with torch.no_grad():
            out = greedy_decode(model, src, src_mask, max_len=num_tokens + 5, start_symbol=BOS_IDX,
                                device=device).flatten().tolist()
        got = [t for t in out if t not in (BOS_IDX, EOS_IDX, PAD_IDX)]
        correct += got == translation
        if shown < 3:
            print(f"source {words} -> {got} (want {translation})")
            shown += 1
    print(f"exact translations: {correct} / 20")


if __name__ == "__main__":
    main()
