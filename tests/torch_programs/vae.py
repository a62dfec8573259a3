# Follows PyTorch's examples/vae/main.py (BSD-3-Clause): a fully connected variational autoencoder with the
# reparameterization trick and the binary cross-entropy + KL loss, trained here on synthetic 28x28 "strokes"
# (no download) for a few epochs; it prints the example's log lines and samples from the prior.
import torch
import torch.utils.data
from torch import nn, optim
from torch.nn import functional as F

torch.manual_seed(1)
device = torch.device("cpu")


def strokes(n):
    x = torch.zeros(n, 1, 28, 28)
    for i in range(n):
        r, c = torch.randint(4, 20, (2,)).tolist()
        if i % 2:
            x[i, 0, r, c - 3:c + 5] = 1.0
        else:
            x[i, 0, r - 3:r + 5, c] = 1.0
    return x


train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(strokes(512), torch.zeros(512)),
                                           batch_size=64, shuffle=True)


class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()
        self.fc1 = nn.Linear(784, 200)
        self.fc21 = nn.Linear(200, 10)
        self.fc22 = nn.Linear(200, 10)
        self.fc3 = nn.Linear(10, 200)
        self.fc4 = nn.Linear(200, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


model = VAE().to(device)
optimizer = optim.Adam(model.parameters(), lr=1e-3)


def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction='sum')
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


for epoch in range(1, 6):
    model.train()
    train_loss = 0
    for batch_idx, (data, _) in enumerate(train_loader):
        data = data.to(device)
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        train_loss += loss.item()
        optimizer.step()
    print('====> Epoch: {} Average loss: {:.4f}'.format(epoch, train_loss / len(train_loader.dataset)))
with torch.no_grad():
    sample = torch.randn(64, 10).to(device)
    sample = model.decode(sample).cpu()
    print("samples", tuple(sample.view(64, 1, 28, 28).shape), "mean intensity %.3f" % sample.mean().item())
