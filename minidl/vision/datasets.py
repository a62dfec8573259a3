"""torchvision.datasets' names: MNIST, FashionMNIST, CIFAR10 (minidl.data's datasets, same signatures:
`MNIST(root, train=True, transform=None, target_transform=None, download=False)`), ImageFolder / DatasetFolder
(a folder per class) and FakeData."""
import numpy as np

from ..data.datasets import CIFAR10, CIFAR100, MNIST, FashionMNIST  # noqa: F401
from ..data.dataset import Dataset  # noqa: F401


IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def pil_loader(path):
    """The image at path as an RGB PIL image (torchvision's default loader)."""
    try:
        from PIL import Image
    except ImportError:
        raise ImportError("ImageFolder needs Pillow to read images: pip install pillow (the project's `vision` "
                          "extra)") from None
    with open(path, "rb") as f:
        return Image.open(f).convert("RGB")


default_loader = pil_loader


class DatasetFolder(Dataset):
    """Samples in root/<class>/.../<file>: the classes are the sorted subfolder names, class_to_idx their indices,
    samples (path, class index) pairs in sorted order, targets the indices (torchvision.datasets.DatasetFolder)."""

    def __init__(self, root, loader, extensions=None, transform=None, target_transform=None, is_valid_file=None,
                 allow_empty=False):
        import os

        self.root, self.loader = os.fspath(root), loader
        self.transform, self.target_transform = transform, target_transform
        if (extensions is None) == (is_valid_file is None):
            raise ValueError("DatasetFolder: both extensions and is_valid_file cannot be None or not None at the "
                             "same time")
        if is_valid_file is None:
            suffixes = tuple(e.lower() for e in extensions)
            is_valid_file = lambda path: path.lower().endswith(suffixes)   # noqa: E731
        if not os.path.isdir(self.root):
            raise FileNotFoundError(f"DatasetFolder: {self.root} is not a folder (expected root/<class>/<files>)")
        self.classes = sorted(e.name for e in os.scandir(self.root) if e.is_dir())
        if not self.classes:
            raise FileNotFoundError(f"Couldn't find any class folder in {self.root}.")
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.samples = []
        for c in self.classes:
            found = 0
            for folder, _, files in sorted(os.walk(os.path.join(self.root, c), followlinks=True)):
                for name in sorted(files):
                    path = os.path.join(folder, name)
                    if is_valid_file(path):
                        self.samples.append((path, self.class_to_idx[c]))
                        found += 1
            if not found and not allow_empty:
                raise FileNotFoundError(f"Found no valid file for the class {c}. Supported extensions are: "
                                        f"{', '.join(extensions or ())}")
        self.imgs = self.samples
        self.targets = [t for _, t in self.samples]

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        path, target = self.samples[index]
        sample = self.loader(path)
        if self.transform is not None:
            sample = self.transform(sample)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target


class ImageFolder(DatasetFolder):
    """Images in root/<class>/<image>: torchvision.datasets.ImageFolder (RGB PIL images through Pillow, which the
    transforms take as they are)."""

    def __init__(self, root, transform=None, target_transform=None, loader=default_loader, is_valid_file=None,
                 allow_empty=False):
        super().__init__(root, loader, IMG_EXTENSIONS if is_valid_file is None else None, transform,
                         target_transform, is_valid_file, allow_empty)


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
        f"minidl.vision.datasets has no {name!r} (torchvision.datasets.{name}); minidl has MNIST, FashionMNIST, CIFAR10, CIFAR100, FakeData, ImageFolder and DatasetFolder. "
        "docs/TORCH_COMPAT.md lists what exists. A torchvision dataset object (when torchvision is installed) "
        "works with minidl's DataLoader as it is."
    )
