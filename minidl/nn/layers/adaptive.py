"""nn.AdaptiveLogSoftmaxWithLoss (Grave et al., "Efficient softmax approximation for GPUs", 2017): a softmax over a
large vocabulary split by frequency. The `cutoffs` split the classes into a head (the most frequent classes, plus one
entry per tail cluster) and tail clusters; each tail cluster projects the input down (by div_value per cluster)
before its own softmax. log p(class in cluster k) = log p_head(cluster k) + log p_cluster_k(class). torch's parameter
names (head, tail.{i}.0/1), so a torch state_dict loads; forward returns (output, loss) as torch's namedtuple."""
from __future__ import annotations

from ...autograd import return_types
from ...ops.joining import cat
from .. import functional as F
from ..module import Module
from .container import ModuleList, Sequential
from .linear import Linear

_ASMoutput = return_types.namedtuple("_ASMoutput", ["output", "loss"])


class AdaptiveLogSoftmaxWithLoss(Module):
    def __init__(self, in_features, n_classes, cutoffs, div_value=4.0, head_bias=False, device=None, dtype=None):
        super().__init__()
        cutoffs = list(cutoffs)
        if len(cutoffs) == 0:
            raise ValueError("cutoffs should be a sequence of length larger than 0")
        if (cutoffs != sorted(cutoffs) or min(cutoffs) <= 0 or max(cutoffs) > (n_classes - 1)
                or len(set(cutoffs)) != len(cutoffs) or any(int(c) != c for c in cutoffs)):
            raise ValueError("cutoffs should be a sequence of unique, positive integers sorted in an increasing "
                             "order, where each value is between 1 and n_classes-1")
        self.in_features, self.n_classes, self.div_value, self.head_bias = in_features, n_classes, div_value, head_bias
        self.cutoffs = cutoffs + [n_classes]
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        kw = {"device": device, "dtype": dtype}
        self.head = Linear(in_features, self.head_size, bias=head_bias, **kw)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hsz = int(in_features // (div_value ** (i + 1)))
            osz = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(Sequential(Linear(in_features, hsz, bias=False, **kw), Linear(hsz, osz, bias=False, **kw)))

    def reset_parameters(self):
        self.head.reset_parameters()
        for cluster in self.tail:
            for layer in cluster:
                layer.reset_parameters()

    def forward(self, input, target):
        """(output, loss): output[i] = log p(target[i] | input[i]); loss = -output.mean()."""
        unbatched = input.ndim == 1
        if unbatched:
            if target.ndim != 0:
                raise RuntimeError("AdaptiveLogSoftmaxWithLoss: a 1-D input takes a 0-D target")
            input, target = input.unsqueeze(0), target.unsqueeze(0)
        elif input.ndim != 2 or target.ndim != 1:
            raise RuntimeError(f"AdaptiveLogSoftmaxWithLoss: expects a 2-D input (batch, in_features) and a 1-D "
                               f"target, got {tuple(input.shape)} and {tuple(target.shape)}")
        if input.shape[0] != target.shape[0]:
            raise RuntimeError(f"AdaptiveLogSoftmaxWithLoss: input and target should have the same size in the "
                               f"batch dimension, got {input.shape[0]} and {target.shape[0]}")
        if input.shape[1] != self.in_features:
            raise RuntimeError(f"AdaptiveLogSoftmaxWithLoss: input has {input.shape[1]} features, the module "
                               f"{self.in_features}")
        host = target.detach()._host_array()
        if host.size and (host.min() < 0 or host.max() >= self.n_classes):
            raise RuntimeError(f"AdaptiveLogSoftmaxWithLoss: target values should be in [0, {self.n_classes - 1}], "
                               f"got [{int(host.min())}, {int(host.max())}]")
        head_logprob = F.log_softmax(self.head(input), dim=1)
        # the head's column each row reads: its class (shortlist) or its cluster's entry
        column = target.clone()
        output = input.new_zeros(input.shape[0])
        bounds = [0] + self.cutoffs
        for i in range(1, len(bounds) - 1):
            low, high = bounds[i], bounds[i + 1]
            mask = (target >= low) & (target < high)
            rows = mask.nonzero().reshape(-1)
            if rows.numel() == 0:
                continue
            column = column.index_fill(0, rows, self.shortlist_size + i - 1)
            cluster_logprob = F.log_softmax(self.tail[i - 1](input.index_select(0, rows)), dim=1)
            local = cluster_logprob.gather(1, (target.index_select(0, rows) - low).unsqueeze(1)).squeeze(1)
            output = output.index_copy(0, rows, local)
        output = output + head_logprob.gather(1, column.unsqueeze(1)).squeeze(1)
        loss = (-output).mean()
        return _ASMoutput(output.squeeze(0) if unbatched else output, loss)

    def _full_log_prob(self, input, head_output):
        head_logprob = F.log_softmax(head_output, dim=1)
        parts = [head_logprob[:, :self.shortlist_size]]
        for i in range(self.n_clusters):
            cluster_logprob = F.log_softmax(self.tail[i](input), dim=1)
            parts.append(cluster_logprob + head_logprob[:, self.shortlist_size + i].unsqueeze(1))
        return cat(parts, 1)

    def log_prob(self, input):
        """log p(class | input) for every class: (batch, n_classes), or (n_classes,) for a 1-D input."""
        batched = input if input.ndim == 2 else input.unsqueeze(0)
        out = self._full_log_prob(batched, self.head(batched))
        return out if input.ndim == 2 else out.squeeze(0)

    def predict(self, input):
        """The most likely class of each row (the argmax of log_prob)."""
        return self.log_prob(input).argmax(dim=-1)
