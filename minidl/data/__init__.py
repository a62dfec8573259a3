"""minidl.data: datasets, the DataLoader, and batch transforms (PyTorch's torch.utils.data names).

    train = MNIST(train=True)                       # uint8 (N, 28, 28) + int64 labels
    x, y = train.as_arrays(normalize=True)          # float32 (N, 1, 28, 28)
    loader = DataLoader(TensorDataset(x, y), batch_size=128, shuffle=True, generator=0, device="cuda")
    for xb, yb in loader: ...                       # minidl Tensors, cut on the GPU
"""
from . import transforms
from .dataloader import DataLoader, default_collate, default_convert
from ._workers import get_worker_info
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler,
                      WeightedRandomSampler)
from .dataset import (ArrayDataset, ChainDataset, ConcatDataset, Dataset, IterableDataset, StackDataset, Subset,
                      TensorDataset, random_split)
from .distributed import DistributedSampler  # noqa: F401,E402
from .datasets import (CIFAR10, MNIST, BPTTIterator, CharCorpus, DatasetNotFoundError, UnsafePickleError,
                       WordCorpus, batchify, data_root)

__all__ = ["transforms", "DataLoader", "default_collate", "default_convert", "get_worker_info", "Sampler", "SequentialSampler",
           "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler", "BatchSampler", "ArrayDataset", "Dataset", "Subset",
           "ConcatDataset", "ChainDataset", "StackDataset", "IterableDataset", "TensorDataset", "random_split", "CIFAR10", "MNIST", "BPTTIterator", "CharCorpus",
           "DatasetNotFoundError", "UnsafePickleError", "WordCorpus", "batchify", "data_root"]
