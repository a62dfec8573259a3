# Follows PyTorch's DCGAN tutorial (beginner_source/dcgan_faces_tutorial.py, BSD-3-Clause, by Nathan Inkawhich),
# scaled down to 16x16 single-channel images of random bright squares so it runs in seconds on a CPU: the same
# generator/discriminator shapes (ConvTranspose2d / Conv2d with batch norm), weights_init through Module.apply,
# BCELoss with real/fake labels, and the two Adam optimizers with betas=(0.5, 0.999).
import torch
import torch.nn as nn
import torch.optim as optim

torch.manual_seed(999)
nz, ngf, ndf, nc, image = 8, 8, 8, 1, 16
batch_size, num_steps = 32, 60


def real_batch(n):
    x = -torch.ones(n, nc, image, image)
    for i in range(n):
        r, c = torch.randint(0, image - 6, (2,)).tolist()
        x[i, :, r:r + 6, c:c + 6] = 1.0
    return x


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find('BatchNorm') != -1:
        nn.init.normal_(m.weight.data, 1.0, 0.02)
        nn.init.constant_(m.bias.data, 0)


class Generator(nn.Module):
    def __init__(self):
        super(Generator, self).__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),   # 4x4
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),  # 8x8
            nn.ConvTranspose2d(ngf * 2, nc, 4, 2, 1, bias=False), nn.Tanh())   # 16x16

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),   # 8x8
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),  # 4x4
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False), nn.Sigmoid())

    def forward(self, input):
        return self.main(input)


netG, netD = Generator(), Discriminator()
netG.apply(weights_init)
netD.apply(weights_init)
criterion = nn.BCELoss()
fixed_noise = torch.randn(16, nz, 1, 1)
real_label, fake_label = 1., 0.
optimizerD = optim.Adam(netD.parameters(), lr=2e-3, betas=(0.5, 0.999))
optimizerG = optim.Adam(netG.parameters(), lr=2e-3, betas=(0.5, 0.999))
G_losses, D_losses = [], []
for i in range(num_steps):
    # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
    netD.zero_grad()
    real_cpu = real_batch(batch_size)
    b_size = real_cpu.size(0)
    label = torch.full((b_size,), real_label, dtype=torch.float)
    output = netD(real_cpu).view(-1)
    errD_real = criterion(output, label)
    errD_real.backward()
    D_x = output.mean().item()
    noise = torch.randn(b_size, nz, 1, 1)
    fake = netG(noise)
    label.fill_(fake_label)
    output = netD(fake.detach()).view(-1)
    errD_fake = criterion(output, label)
    errD_fake.backward()
    D_G_z1 = output.mean().item()
    errD = errD_real + errD_fake
    optimizerD.step()
    # (2) Update G network: maximize log(D(G(z)))
    netG.zero_grad()
    label.fill_(real_label)
    output = netD(fake).view(-1)
    errG = criterion(output, label)
    errG.backward()
    D_G_z2 = output.mean().item()
    optimizerG.step()
    G_losses.append(errG.item())
    D_losses.append(errD.item())
    if i % 20 == 0:
        print('[%d/%d]\tLoss_D: %.4f\tLoss_G: %.4f\tD(x): %.4f\tD(G(z)): %.4f / %.4f'
              % (i, num_steps, errD.item(), errG.item(), D_x, D_G_z1, D_G_z2))
with torch.no_grad():
    fake = netG(fixed_noise).detach().cpu()
bright = (fake > 0).float().mean().item()
print(f"generated images {tuple(fake.shape)}, range [{fake.min().item():.2f}, {fake.max().item():.2f}], "
      f"bright fraction {bright:.3f} (real: {36 / 256:.3f})")
