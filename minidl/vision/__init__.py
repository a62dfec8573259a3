"""minidl.vision: torchvision's per-sample names (`minidl.vision.transforms`, `minidl.vision.datasets`).

Two kinds of transforms live in minidl, for two jobs:
- `minidl.vision.transforms` (this package): torchvision's per-sample transforms. A dataset calls
  them on one image at a time in `__getitem__` (`MNIST(root, transform=Compose([ToTensor(),
  Normalize(...)]))`), as in every torchvision program; with `DataLoader(num_workers=N)` they run in
  worker processes. Use them to run PyTorch programs unchanged and for small data.
- `minidl.data.transforms`: batch transforms on whole (N, C, H, W) arrays, on the GPU when the
  DataLoader holds the dataset there; no Python loop per sample. Use them to train fast (the
  examples and tutorials 04/05 do).
"""
from . import datasets, models, ops, transforms, utils  # noqa: F401
