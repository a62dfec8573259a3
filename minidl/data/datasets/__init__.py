"""Standard datasets, read from the data root (root=, else $MINIDL_DATA, else ~/.cache/minidl)."""
from ._download import DatasetNotFoundError, data_root, download_file, md5sum
from .cifar10 import CIFAR10, CIFAR10_MEAN, CIFAR10_STD, UnsafePickleError
from .cifar100 import CIFAR100
from .mnist import MNIST, MNIST_MEAN, MNIST_STD, FashionMNIST, read_idx
from .text import BPTTIterator, CharCorpus, WordCorpus, batchify

__all__ = ["DatasetNotFoundError", "data_root", "download_file", "md5sum", "CIFAR10", "CIFAR100", "CIFAR10_MEAN",
           "CIFAR10_STD", "UnsafePickleError", "MNIST", "FashionMNIST", "MNIST_MEAN", "MNIST_STD", "read_idx",
           "BPTTIterator", "CharCorpus", "WordCorpus", "batchify"]
