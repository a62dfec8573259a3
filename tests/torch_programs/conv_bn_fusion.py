"""In the style of PyTorch's tutorial "Fusing Convolution and Batch Norm using Custom Function": a Conv2D and a
BatchNorm custom Function checked with gradcheck, a fused conv+BN Function that saves only its input and recomputes
the convolution in its backward (its conv gradients through torch.nn.grad.conv2d_input / conv2d_weight, as the
tutorial's first version did), then a small network trained with it and without it on synthetic digits."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd.function import once_differentiable


def convolution_backward(grad_out, X, weight):
    grad_input = F.conv2d(X.transpose(0, 1), grad_out.transpose(0, 1)).transpose(0, 1)
    grad_X = F.conv_transpose2d(grad_out, weight)
    return grad_X, grad_input


class Conv2D(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, weight):
        ctx.save_for_backward(X, weight)
        return F.conv2d(X, weight)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        X, weight = ctx.saved_tensors
        return convolution_backward(grad_out, X, weight)


torch.manual_seed(0)
weight = torch.rand(5, 3, 3, 3, requires_grad=True, dtype=torch.double)
X = torch.rand(10, 3, 7, 7, requires_grad=True, dtype=torch.double)
print("Conv2D gradcheck:", torch.autograd.gradcheck(Conv2D.apply, (X, weight)))


def unsqueeze_all(t):
    return t[None, :, None, None]


def batch_norm_backward(grad_out, X, sum, sqrt_var, N, eps):
    tmp = -((X - unsqueeze_all(sum) / N) * grad_out).sum(dim=(0, 2, 3))
    d_denom = tmp / (sqrt_var + eps) ** 2
    d_var = d_denom / (2 * sqrt_var)
    d_mean_dx = grad_out / unsqueeze_all(sqrt_var + eps)
    d_mean_dx = unsqueeze_all(-d_mean_dx.sum(dim=(0, 2, 3)) / N)
    grad_input = X * unsqueeze_all(d_var * N)
    grad_input += unsqueeze_all(-d_var * sum)
    grad_input *= 2 / ((N - 1) * N)
    grad_input += d_mean_dx
    grad_input *= unsqueeze_all(sqrt_var + eps)
    grad_input += grad_out
    grad_input /= unsqueeze_all(sqrt_var + eps)
    return grad_input


class BatchNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, eps=1e-3):
        sum = X.sum(dim=(0, 2, 3))
        var = X.var(unbiased=True, dim=(0, 2, 3))
        N = X.numel() / X.size(1)
        sqrt_var = torch.sqrt(var)
        ctx.save_for_backward(X)
        ctx.eps, ctx.sum, ctx.N, ctx.sqrt_var = eps, sum, N, sqrt_var
        return (X - unsqueeze_all(sum / N)) / unsqueeze_all(sqrt_var + eps)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        X, = ctx.saved_tensors
        return batch_norm_backward(grad_out, X, ctx.sum, ctx.sqrt_var, ctx.N, ctx.eps)


a = torch.rand(1, 2, 3, 4, requires_grad=True, dtype=torch.double)
print("BatchNorm gradcheck:", torch.autograd.gradcheck(BatchNorm.apply, (a,), fast_mode=False))


class FusedConvBN2DFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, conv_weight, eps=1e-3):
        assert X.ndim == 4
        ctx.save_for_backward(X, conv_weight)
        X = F.conv2d(X, conv_weight)
        sum = X.sum(dim=(0, 2, 3))
        var = X.var(unbiased=True, dim=(0, 2, 3))
        N = X.numel() / X.size(1)
        sqrt_var = torch.sqrt(var)
        ctx.eps, ctx.sum, ctx.N, ctx.sqrt_var = eps, sum, N, sqrt_var
        out = X - unsqueeze_all(sum / N)
        out /= unsqueeze_all(sqrt_var + eps)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        X, conv_weight, = ctx.saved_tensors
        X_conv_out = F.conv2d(X, conv_weight)
        grad_out = batch_norm_backward(grad_out, X_conv_out, ctx.sum, ctx.sqrt_var, ctx.N, ctx.eps)
        grad_X = torch.nn.grad.conv2d_input(X.shape, conv_weight, grad_out)
        grad_weight = torch.nn.grad.conv2d_weight(X, conv_weight.shape, grad_out)
        return grad_X, grad_weight, None


class FusedConvBN(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, eps=1e-3, device=None, dtype=None):
        super().__init__()
        factory_kwargs = {"device": device, "dtype": dtype}
        self.conv_weight = nn.Parameter(torch.empty(out_channels, in_channels, kernel_size, kernel_size,
                                                    **factory_kwargs))
        self.eps = eps
        nn.init.kaiming_uniform_(self.conv_weight, a=math.sqrt(5))

    def forward(self, X):
        return FusedConvBN2DFunction.apply(X, self.conv_weight, self.eps)


weight = torch.rand(5, 3, 3, 3, requires_grad=True, dtype=torch.double)
X = torch.rand(2, 3, 4, 4, requires_grad=True, dtype=torch.double)
print("FusedConvBN2DFunction gradcheck:", torch.autograd.gradcheck(FusedConvBN2DFunction.apply, (X, weight)))
print("nn.grad against autograd:", all(
    torch.allclose(g, h) for g, h in zip(
        (torch.nn.grad.conv2d_input(X.shape, weight, torch.ones(2, 5, 2, 2, dtype=torch.double)),
         torch.nn.grad.conv2d_weight(X, weight.shape, torch.ones(2, 5, 2, 2, dtype=torch.double))),
        torch.autograd.grad(F.conv2d(X, weight).sum(), (X, weight)))))


class Net(nn.Module):
    def __init__(self, fused=True):
        super().__init__()
        self.fused = fused
        if fused:
            self.convbn1 = FusedConvBN(1, 8, 3)
        else:
            self.conv1 = nn.Conv2d(1, 8, 3, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(8, affine=False, track_running_stats=False, eps=1e-3)
        self.fc = nn.Linear(8 * 5 * 5, 4)

    def forward(self, x):
        x = self.convbn1(x) if self.fused else self.bn1(self.conv1(x))
        x = F.max_pool2d(F.relu(x), 2)
        return F.log_softmax(self.fc(x.flatten(1)), dim=1)


def deterministic_(model):
    """The same starting weights on every framework (their random generators differ): a fixed pattern per tensor."""
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            k = torch.arange(p.numel(), dtype=torch.double)
            p.copy_((torch.sin(k * 0.37 + i) * 0.2).reshape(p.shape))
    return model


digits = (torch.sin(torch.arange(64 * 144, dtype=torch.double) * 0.113) * 0.5 + 0.5).reshape(64, 1, 12, 12)
labels = (digits.mean(dim=(1, 2, 3)) * 40).long() % 4
for fused in (True, False):
    model = deterministic_(Net(fused=fused).double())
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    for epoch in range(3):
        optimizer.zero_grad()
        loss = F.nll_loss(model(digits), labels)
        loss.backward()
        optimizer.step()
        scheduler.step()
        print(f"fused={fused} epoch {epoch} loss {loss.item():.6f}")
