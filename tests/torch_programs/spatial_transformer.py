# Follows PyTorch's "Spatial Transformer Networks" tutorial (intermediate_source/spatial_transformer_tutorial.py,
# BSD-3-Clause, by Ghassen Hamrouni): a localisation network predicts an affine map (F.affine_grid), the input
# is resampled through it (F.grid_sample), then an MNIST classifier. Here on synthetic 28x28 digits-like images
# (a class-dependent bar, shifted at random) so it runs anywhere.
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

torch.manual_seed(1)


def make_data(n):
    x = torch.zeros(n, 1, 28, 28)
    y = torch.randint(0, 4, (n,))
    shifts = torch.randint(-4, 5, (n, 2))
    for i in range(n):
        r, c = 10 + int(shifts[i, 0]), 10 + int(shifts[i, 1])
        k = int(y[i])
        if k == 0:
            x[i, 0, r:r + 8, c + 3] = 1.0
        elif k == 1:
            x[i, 0, r + 3, c:c + 8] = 1.0
        elif k == 2:
            x[i, 0, r:r + 8, c:c + 8] = torch.eye(8)
        else:
            x[i, 0, r:r + 8, c:c + 8] = torch.eye(8).flip(1)
    return x + 0.05 * torch.randn_like(x), y


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 4)
        # Spatial transformer localization-network
        self.localization = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=7), nn.MaxPool2d(2, stride=2), nn.ReLU(True),
            nn.Conv2d(8, 10, kernel_size=5), nn.MaxPool2d(2, stride=2), nn.ReLU(True))
        # Regressor for the 3 * 2 affine matrix
        self.fc_loc = nn.Sequential(nn.Linear(10 * 3 * 3, 32), nn.ReLU(True), nn.Linear(32, 3 * 2))
        # Initialize the weights/bias with identity transformation
        self.fc_loc[2].weight.data.zero_()
        self.fc_loc[2].bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))

    def stn(self, x):
        xs = self.localization(x)
        xs = xs.view(-1, 10 * 3 * 3)
        theta = self.fc_loc(xs)
        theta = theta.view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        x = F.grid_sample(x, grid, align_corners=False)
        return x

    def forward(self, x):
        x = self.stn(x)
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


model = Net()
optimizer = optim.Adam(model.parameters(), lr=2e-3)
train_x, train_y = make_data(512)
test_x, test_y = make_data(256)
for epoch in range(1, 7):
    model.train()
    perm = torch.randperm(512)
    for i in range(0, 512, 64):
        idx = perm[i:i + 64]
        optimizer.zero_grad()
        loss = F.nll_loss(model(train_x[idx]), train_y[idx])
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        out = model(test_x)
        test_loss = F.nll_loss(out, test_y, reduction="sum").item() / 256
        correct = out.max(1, keepdim=True)[1].eq(test_y.view_as(out.max(1, keepdim=True)[1])).sum().item()
    print(f"Epoch {epoch}: train loss {loss.item():.4f}, test loss {test_loss:.4f}, accuracy {correct}/256")
with torch.no_grad():
    moved = model.stn(test_x[:4])
print("transformed batch", tuple(moved.shape), "theta changed from identity:",
      bool((model.fc_loc[2].bias.data - torch.tensor([1, 0, 0, 0, 1, 0.0])).abs().sum() > 0))
