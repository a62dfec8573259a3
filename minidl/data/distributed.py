"""DistributedSampler: each process of a data-parallel job visits its own share of the dataset (torch's).

With N processes, the (shuffled) indices are padded to a multiple of N by repeating the first ones (or cut
to one, with drop_last=True), and rank r takes every N-th index from position r. Every rank draws the same
permutation, from seed + epoch, so the shares are disjoint and together cover the dataset: call
set_epoch(epoch) at the start of each epoch, or every epoch repeats the same order.
"""
from __future__ import annotations

import math

import numpy as np

from .sampler import Sampler


class DistributedSampler(Sampler):
    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        if num_replicas is None or rank is None:
            from .. import distributed as dist

            if not dist.is_initialized():
                raise RuntimeError(
                    "DistributedSampler: pass num_replicas and rank, or call minidl.distributed.init_process_group() "
                    "first (their defaults are the world size and this process's rank)")
            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        if not isinstance(num_replicas, (int, np.integer)) or num_replicas < 1:
            raise ValueError(f"DistributedSampler: num_replicas must be a positive integer, got {num_replicas!r}")
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank = dataset, int(num_replicas), int(rank)
        self.epoch, self.drop_last, self.shuffle, self.seed = 0, drop_last, shuffle, seed
        n = len(dataset)
        if drop_last and n % self.num_replicas != 0:
            self.num_samples = math.ceil((n - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = math.ceil(n / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            indices = np.random.default_rng(self.seed + self.epoch).permutation(n).tolist()
        else:
            indices = list(range(n))
        if not self.drop_last:
            padding = self.total_size - len(indices)
            if padding <= len(indices):
                indices += indices[:padding]
            else:
                indices += (indices * math.ceil(padding / len(indices)))[:padding]
        else:
            indices = indices[:self.total_size]
        assert len(indices) == self.total_size
        indices = indices[self.rank:self.total_size:self.num_replicas]
        assert len(indices) == self.num_samples
        return iter(indices)

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Make the next __iter__ draw epoch's permutation (the same on every rank)."""
        self.epoch = epoch
