"""Karpathy's makemore, part 3 (the MLP with hand-written Linear / BatchNorm1d / Tanh layers), in its style, on a
small list of names: a torch.Generator for every draw, embedding by indexing C[Xb], parameters as a plain list with
requires_grad set by hand and updated through p.data, retain_grad() on every layer's output for the gradient
statistics, the update-to-data ratios, the running statistics under no_grad, then sampling with multinomial."""
import torch, torch.nn.functional as F, random
words = ["emma","olivia","ava","isabella","sophia","charlotte","mia","amelia","harper","evelyn","abigail","emily","elizabeth","mila","ella","avery","sofia","camila","aria","scarlett"] * 20
chars = sorted(list(set(''.join(words))))
stoi = {s:i+1 for i,s in enumerate(chars)}; stoi['.'] = 0
itos = {i:s for s,i in stoi.items()}
vocab_size = len(itos)
block_size = 3
def build_dataset(words):
    X, Y = [], []
    for w in words:
        context = [0] * block_size
        for ch in w + '.':
            ix = stoi[ch]; X.append(context); Y.append(ix); context = context[1:] + [ix]
    return torch.tensor(X), torch.tensor(Y)
random.seed(42); random.shuffle(words)
n1 = int(0.8*len(words))
Xtr, Ytr = build_dataset(words[:n1]); Xdev, Ydev = build_dataset(words[n1:])
class Linear:
    def __init__(self, fan_in, fan_out, bias=True):
        self.weight = torch.randn((fan_in, fan_out), generator=g) / fan_in**0.5
        self.bias = torch.zeros(fan_out) if bias else None
    def __call__(self, x):
        self.out = x @ self.weight
        if self.bias is not None: self.out += self.bias
        return self.out
    def parameters(self): return [self.weight] + ([] if self.bias is None else [self.bias])
class BatchNorm1d:
    def __init__(self, dim, eps=1e-5, momentum=0.1):
        self.eps = eps; self.momentum = momentum; self.training = True
        self.gamma = torch.ones(dim); self.beta = torch.zeros(dim)
        self.running_mean = torch.zeros(dim); self.running_var = torch.ones(dim)
    def __call__(self, x):
        if self.training:
            xmean = x.mean(0, keepdim=True); xvar = x.var(0, keepdim=True)
        else:
            xmean = self.running_mean; xvar = self.running_var
        xhat = (x - xmean) / torch.sqrt(xvar + self.eps)
        self.out = self.gamma * xhat + self.beta
        if self.training:
            with torch.no_grad():
                self.running_mean = (1 - self.momentum) * self.running_mean + self.momentum * xmean
                self.running_var = (1 - self.momentum) * self.running_var + self.momentum * xvar
        return self.out
    def parameters(self): return [self.gamma, self.beta]
class Tanh:
    def __call__(self, x): self.out = torch.tanh(x); return self.out
    def parameters(self): return []
n_embd = 10; n_hidden = 64
g = torch.Generator().manual_seed(2147483647)
C = torch.randn((vocab_size, n_embd), generator=g)
layers = [Linear(n_embd * block_size, n_hidden, bias=False), BatchNorm1d(n_hidden), Tanh(),
          Linear(n_hidden, n_hidden, bias=False), BatchNorm1d(n_hidden), Tanh(),
          Linear(n_hidden, vocab_size, bias=False), BatchNorm1d(vocab_size)]
with torch.no_grad():
    layers[-1].gamma *= 0.1
    for layer in layers[:-1]:
        if isinstance(layer, Linear): layer.weight *= 5/3
parameters = [C] + [p for layer in layers for p in layer.parameters()]
print(sum(p.nelement() for p in parameters))
for p in parameters: p.requires_grad = True
max_steps = 300; batch_size = 32; lossi = []; ud = []
for i in range(max_steps):
    ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
    Xb, Yb = Xtr[ix], Ytr[ix]
    emb = C[Xb]; x = emb.view(emb.shape[0], -1)
    for layer in layers: x = layer(x)
    loss = F.cross_entropy(x, Yb)
    for layer in layers: layer.out.retain_grad()
    for p in parameters: p.grad = None
    loss.backward()
    lr = 0.1 if i < 150 else 0.01
    for p in parameters: p.data += -lr * p.grad
    if i % 100 == 0: print(f'{i:7d}/{max_steps:7d}: {loss.item():.4f}')
    lossi.append(loss.log10().item())
    with torch.no_grad():
        ud.append([((lr*p.grad).std() / p.data.std()).log10().item() for p in parameters])
for i, layer in enumerate(layers[:-1]):
    if isinstance(layer, Tanh):
        t = layer.out.grad
        print('layer %d (%10s): mean %+f, std %e' % (i, layer.__class__.__name__, t.mean(), t.std()))
        t = layer.out
        print('layer %d (%10s): mean %+.2f, std %.2f, saturated: %.2f%%' % (i, layer.__class__.__name__, t.mean(), t.std(), (t.abs() > 0.97).float().mean()*100))
@torch.no_grad()
def split_loss(split):
    x, y = {'train': (Xtr, Ytr), 'val': (Xdev, Ydev)}[split]
    emb = C[x]; x = emb.view(emb.shape[0], -1)
    for layer in layers: x = layer(x)
    loss = F.cross_entropy(x, y)
    print(split, loss.item())
for layer in layers: layer.training = False
split_loss('train'); split_loss('val')
g = torch.Generator().manual_seed(2147483647 + 10)
for _ in range(5):
    out = []; context = [0] * block_size
    while True:
        emb = C[torch.tensor([context])]; x = emb.view(emb.shape[0], -1)
        for layer in layers: x = layer(x)
        probs = F.softmax(x, dim=1)
        ix = torch.multinomial(probs, num_samples=1, generator=g).item()
        context = context[1:] + [ix]; out.append(ix)
        if ix == 0: break
    print(''.join(itos[i] for i in out))
