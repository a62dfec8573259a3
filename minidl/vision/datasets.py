"""torchvision.datasets' names: MNIST, FashionMNIST, CIFAR10 (minidl.data's datasets, same signatures:
`MNIST(root, train=True, transform=None, target_transform=None, download=False)`)."""
from ..data.datasets import CIFAR10, MNIST, FashionMNIST  # noqa: F401
from ..data.dataset import Dataset  # noqa: F401


def __getattr__(name):
    raise AttributeError(
        f"minidl.vision.datasets has no {name!r} (torchvision.datasets.{name}); minidl has MNIST, FashionMNIST and CIFAR10. "
        "docs/TORCH_COMPAT.md lists what exists. A torchvision dataset object (when torchvision is installed) "
        "works with minidl's DataLoader as it is."
    )
