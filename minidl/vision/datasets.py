"""torchvision.datasets' names: MNIST, FashionMNIST, CIFAR10 (minidl.data's datasets, same signatures:
`MNIST(root, train=True, transform=None, target_transform=None, download=False)`), and FakeData."""
import numpy as np

from ..data.datasets import CIFAR10, MNIST, FashionMNIST  # noqa: F401
from ..data.dataset import Dataset  # noqa: F401


class FakeData(Dataset):
    """size random images of image_size (C, H, W) with random labels below num_classes (torchvision.datasets.FakeData:
    the ImageNet example's --dummy). Item i is the same every time it is read (drawn from a generator seeded with
    i + random_offset). An image is a uint8 array (H, W, C) as minidl's other datasets give, so ToTensor and the
    other transforms apply; the pixels are not torchvision's (its come from torch's generator)."""

    def __init__(self, size=1000, image_size=(3, 224, 224), num_classes=10, transform=None, target_transform=None,
                 random_offset=0):
        if len(tuple(image_size)) != 3:
            raise ValueError(f"FakeData: image_size must be (C, H, W), got {image_size!r}")
        self.size, self.image_size, self.num_classes = int(size), tuple(image_size), int(num_classes)
        self.transform, self.target_transform, self.random_offset = transform, target_transform, int(random_offset)

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        if not -self.size <= index < self.size:
            raise IndexError(f"FakeData: index {index} out of range for {self.size} images")
        index %= self.size
        rng = np.random.default_rng(index + self.random_offset)
        c, h, w = self.image_size
        img = rng.integers(0, 256, size=(h, w, c), dtype=np.uint8)
        img = img[:, :, 0] if c == 1 else img
        target = int(rng.integers(0, self.num_classes))
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target


def __getattr__(name):
    raise AttributeError(
        f"minidl.vision.datasets has no {name!r} (torchvision.datasets.{name}); minidl has MNIST, FashionMNIST, CIFAR10 and FakeData. "
        "docs/TORCH_COMPAT.md lists what exists. A torchvision dataset object (when torchvision is installed) "
        "works with minidl's DataLoader as it is."
    )
