"""The torch.nn.modules internals that real code subclasses or tests with isinstance: a focal loss on
nn.modules.loss._Loss (with the legacy size_average / reduce flags), _BatchNorm / _ConvNd / _DropoutNd to find layers,
nn.modules.utils._pair, the same classes through torch.nn.modules.conv and .module. Fixed values."""
import torch, torch.nn as nn
from torch.nn.modules.utils import _pair, _single
from torch.nn.modules.loss import _Loss
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.conv import _ConvNd
import torch.nn.modules.loss
class FocalLoss(nn.modules.loss._Loss):
    def __init__(self, gamma=2.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.gamma = gamma
    def forward(self, x, t):
        p = torch.nn.functional.cross_entropy(x, t, reduction="none")
        l = (1 - torch.exp(-p)) ** self.gamma * p
        return l.mean() if self.reduction == "mean" else l.sum()
m = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.InstanceNorm2d(2), nn.Dropout(0.1), nn.Flatten(), nn.Linear(2 * 4 * 4, 3))
print([type(x).__name__ for x in m.modules() if isinstance(x, _BatchNorm)], [isinstance(x, _ConvNd) for x in m][:2])
print(_pair(3), _pair((1, 2)), _single(4), isinstance(m[3], torch.nn.modules.dropout._DropoutNd))
print(FocalLoss(reduce=False).reduction, isinstance(nn.KLDivLoss(), _Loss), isinstance(nn.CrossEntropyLoss(), torch.nn.modules.loss._WeightedLoss))
print(torch.nn.modules.conv.Conv2d is nn.Conv2d, torch.nn.modules.module.Module is nn.Module)
x = torch.ones(2, 1, 6, 6); t = torch.tensor([0, 2])
print(round(FocalLoss()(m(x), t).item() * 0 + 1, 1))
