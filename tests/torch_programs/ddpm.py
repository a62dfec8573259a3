"""A denoising diffusion model (Ho et al. 2020, DDPM) in the style of the small PyTorch implementations: a U-Net of
GroupNorm / SiLU / strided and nearest-upsampling convolutions with a sinusoidal timestep embedding, the forward
noising q(x_t | x_0) from cumprod'ed alphas, the noise-prediction MSE, AdamW with clipping, an EMA copy through
torch.optim.swa_utils.AveragedModel(get_ema_multi_avg_fn), and ancestral sampling under no_grad."""
import math, copy, torch, torch.nn as nn, torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
class ResBlock(nn.Module):
    def __init__(self, cin, cout, tdim):
        super().__init__()
        self.n1 = nn.GroupNorm(8, cin); self.c1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.t = nn.Linear(tdim, cout); self.n2 = nn.GroupNorm(8, cout); self.c2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity(); self.drop = nn.Dropout(0.1)
    def forward(self, x, temb):
        h = self.c1(F.silu(self.n1(x))); h = h + self.t(F.silu(temb))[:, :, None, None]
        h = self.c2(self.drop(F.silu(self.n2(h))))
        return h + self.skip(x)
class UNet(nn.Module):
    def __init__(self, ch=32, tdim=64):
        super().__init__()
        self.tdim = tdim; self.temb = nn.Sequential(nn.Linear(tdim, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.inc = nn.Conv2d(1, ch, 3, padding=1)
        self.d1 = ResBlock(ch, ch, tdim); self.down = nn.Conv2d(ch, ch, 3, stride=2, padding=1)
        self.mid = ResBlock(ch, 2 * ch, tdim)
        self.up = nn.Upsample(scale_factor=2, mode="nearest"); self.u1 = ResBlock(3 * ch, ch, tdim)
        self.out = nn.Sequential(nn.GroupNorm(8, ch), nn.SiLU(), nn.Conv2d(ch, 1, 3, padding=1))
    def forward(self, x, t):
        temb = self.temb(timestep_embedding(t, self.tdim))
        h0 = self.d1(self.inc(x), temb); h = self.mid(self.down(h0), temb)
        h = self.u1(torch.cat([self.up(h), h0], dim=1), temb)
        return self.out(h)
T = 100
betas = torch.linspace(1e-4, 0.02, T); alphas = 1 - betas; abar = torch.cumprod(alphas, dim=0)
def q_sample(x0, t, noise): return abar[t].sqrt()[:, None, None, None] * x0 + (1 - abar[t]).sqrt()[:, None, None, None] * noise
torch.manual_seed(0)
data = torch.zeros(64, 1, 16, 16); data[:, :, 4:12, 4:12] = 1.0; data = data * 2 - 1
model = UNet(); ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.99))
opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
for step in range(60):
    idx = torch.randint(0, 64, (16,)); x0 = data[idx]
    t = torch.randint(0, T, (16,)); noise = torch.randn_like(x0)
    loss = F.mse_loss(model(q_sample(x0, t, noise), t), noise)
    opt.zero_grad(set_to_none=True); loss.backward(); nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); ema.update_parameters(model)
    if step % 20 == 0: print(step, loss.item())
@torch.no_grad()
def sample(m, n=4):
    x = torch.randn(n, 1, 16, 16)
    for i in reversed(range(T)):
        t = torch.full((n,), i, dtype=torch.long)
        eps = m(x, t)
        mean = (x - betas[i] / (1 - abar[i]).sqrt() * eps) / alphas[i].sqrt()
        x = mean + (betas[i].sqrt() * torch.randn_like(x) if i > 0 else 0)
    return x.clamp(-1, 1)
s = sample(ema.module)
print("sample", tuple(s.shape), float(s.mean()))
