# Follows PyTorch's "NLP From Scratch: Translation with a Sequence to Sequence Network and Attention" tutorial
# (intermediate_source/seq2seq_translation_tutorial.py, BSD-3-Clause, by Sean Robertson), on a synthetic task:
# reverse a sequence of tokens. EncoderRNN (GRU), AttnDecoderRNN with Bahdanau attention, teacher forcing,
# NLLLoss, and greedy decoding with topk.
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim

random.seed(0)
torch.manual_seed(0)
SOS_token, EOS_token, VOCAB, MAX_LENGTH, device = 0, 1, 12, 8, torch.device("cpu")


def pair():
    n = random.randint(3, 6)
    src = [random.randint(2, VOCAB - 1) for _ in range(n)]
    return src + [EOS_token], src[::-1] + [EOS_token]


def to_batch(pairs):
    inp = torch.zeros(len(pairs), MAX_LENGTH, dtype=torch.long)
    tgt = torch.zeros(len(pairs), MAX_LENGTH, dtype=torch.long)
    for i, (s, t) in enumerate(pairs):
        inp[i, :len(s)] = torch.tensor(s)
        tgt[i, :len(t)] = torch.tensor(t)
    return inp, tgt


class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size, dropout_p=0.1):
        super(EncoderRNN, self).__init__()
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input):
        embedded = self.dropout(self.embedding(input))
        output, hidden = self.gru(embedded)
        return output, hidden


class BahdanauAttention(nn.Module):
    def __init__(self, hidden_size):
        super(BahdanauAttention, self).__init__()
        self.Wa = nn.Linear(hidden_size, hidden_size)
        self.Ua = nn.Linear(hidden_size, hidden_size)
        self.Va = nn.Linear(hidden_size, 1)

    def forward(self, query, keys):
        scores = self.Va(torch.tanh(self.Wa(query) + self.Ua(keys)))
        scores = scores.squeeze(2).unsqueeze(1)
        weights = F.softmax(scores, dim=-1)
        context = torch.bmm(weights, keys)
        return context, weights


class AttnDecoderRNN(nn.Module):
    def __init__(self, hidden_size, output_size, dropout_p=0.1):
        super(AttnDecoderRNN, self).__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.attention = BahdanauAttention(hidden_size)
        self.gru = nn.GRU(2 * hidden_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, output_size)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, encoder_outputs, encoder_hidden, target_tensor=None):
        batch_size = encoder_outputs.size(0)
        decoder_input = torch.empty(batch_size, 1, dtype=torch.long, device=device).fill_(SOS_token)
        decoder_hidden = encoder_hidden
        decoder_outputs, attentions = [], []
        for i in range(MAX_LENGTH):
            decoder_output, decoder_hidden, attn_weights = self.forward_step(decoder_input, decoder_hidden,
                                                                             encoder_outputs)
            decoder_outputs.append(decoder_output)
            attentions.append(attn_weights)
            if target_tensor is not None:
                decoder_input = target_tensor[:, i].unsqueeze(1)  # Teacher forcing
            else:
                _, topi = decoder_output.topk(1)
                decoder_input = topi.squeeze(-1).detach()
        decoder_outputs = torch.cat(decoder_outputs, dim=1)
        decoder_outputs = F.log_softmax(decoder_outputs, dim=-1)
        attentions = torch.cat(attentions, dim=1)
        return decoder_outputs, decoder_hidden, attentions

    def forward_step(self, input, hidden, encoder_outputs):
        embedded = self.dropout(self.embedding(input))
        query = hidden.permute(1, 0, 2)
        context, attn_weights = self.attention(query, encoder_outputs)
        input_gru = torch.cat((embedded, context), dim=2)
        output, hidden = self.gru(input_gru, hidden)
        output = self.out(output)
        return output, hidden, attn_weights


hidden_size = 32
encoder, decoder = EncoderRNN(VOCAB, hidden_size).to(device), AttnDecoderRNN(hidden_size, VOCAB).to(device)
encoder_optimizer = optim.Adam(encoder.parameters(), lr=0.01)
decoder_optimizer = optim.Adam(decoder.parameters(), lr=0.01)
criterion = nn.NLLLoss()
for epoch in range(1, 151):
    input_tensor, target_tensor = to_batch([pair() for _ in range(32)])
    encoder_optimizer.zero_grad()
    decoder_optimizer.zero_grad()
    encoder_outputs, encoder_hidden = encoder(input_tensor)
    decoder_outputs, _, _ = decoder(encoder_outputs, encoder_hidden, target_tensor)
    loss = criterion(decoder_outputs.view(-1, decoder_outputs.size(-1)), target_tensor.view(-1))
    loss.backward()
    encoder_optimizer.step()
    decoder_optimizer.step()
    if epoch % 50 == 0:
        print(f"epoch {epoch} loss {loss.item():.4f}")
encoder.eval()
decoder.eval()
with torch.no_grad():
    pairs = [pair() for _ in range(64)]
    inp, tgt = to_batch(pairs)
    out, _, attn = decoder(*encoder(inp))
    _, topi = out.topk(1)
    decoded = topi.squeeze(-1)
    exact = sum(int(torch.equal(decoded[i, :len(t)], tgt[i, :len(t)])) for i, (_, t) in enumerate(pairs))
print(f"reversed exactly: {exact}/64; attention {tuple(attn.shape)}")
