"""torchvision's augmentations and transforms.functional on minidl (vision/augment.py, vision/functional.py), and
ImageFolder. torchvision itself cannot be imported next to the CPU torch here, so the checks are the operations'
defining properties on known images: exact flips and quarter turns, the colour operations' fixed points and
torchvision's formulas (luma 0.2989 / 0.587 / 0.114, blends clamped to the range), crops of the asked size and
area, and the dataset's classes and files."""
import numpy as np
import pytest

import minidl
from minidl.vision import datasets, transforms
from minidl.vision import functional as F

RNG = np.random.default_rng(0)
IMG = RNG.integers(0, 256, (6, 6, 3), dtype=np.uint8)


def test_flips_and_quarter_turns_are_exact():
    np.testing.assert_array_equal(F.hflip(IMG), IMG[:, ::-1])
    np.testing.assert_array_equal(F.vflip(IMG), IMG[::-1])
    t = transforms.ToTensor()(IMG)
    np.testing.assert_array_equal(F.vflip(t).numpy(), t.numpy()[:, ::-1])
    # torchvision rotates counter-clockwise, about the centre: a square image by 90 degrees is np.rot90
    np.testing.assert_array_equal(F.rotate(IMG, 90), np.rot90(IMG, 1))
    np.testing.assert_array_equal(F.rotate(t, -90).numpy(), np.rot90(t.numpy(), -1, axes=(1, 2)))
    np.testing.assert_array_equal(F.affine(IMG, 90, (0, 0), 1.0, 0.0), np.rot90(IMG, -1))   # affine: clockwise
    shifted = F.affine(IMG, 0, (2, 1), 1.0, 0.0)
    np.testing.assert_array_equal(shifted[1:, 2:], IMG[:-1, :-2])   # translate (right 2, down 1)
    corner = F.rotate(np.full((5, 5, 1), 200, np.uint8), 45, fill=7)
    assert corner[0, 0, 0] == 7 and corner[2, 2, 0] == 200   # outside pixels get the fill


def test_colour_operations_have_their_fixed_points_and_formulas():
    t = transforms.ToTensor()(IMG)
    gray = F.rgb_to_grayscale(t).numpy()
    x = t.numpy()
    np.testing.assert_allclose(gray[0], 0.2989 * x[0] + 0.587 * x[1] + 0.114 * x[2], rtol=1e-6)
    assert F.rgb_to_grayscale(IMG, 3).shape == (6, 6, 3)
    np.testing.assert_array_equal(F.adjust_brightness(IMG, 0.0), np.zeros_like(IMG))
    np.testing.assert_allclose(F.adjust_brightness(t, 2.0).numpy(), np.clip(2 * x, 0, 1), rtol=1e-6)
    flat = F.adjust_contrast(t, 0.0).numpy()
    np.testing.assert_allclose(flat, np.full_like(x, gray.mean()), rtol=1e-5)   # contrast 0: the mean luma
    np.testing.assert_allclose(F.adjust_saturation(t, 0.0).numpy(), np.repeat(gray, 3, 0), rtol=1e-5)
    np.testing.assert_allclose(F.adjust_hue(t, 0.0).numpy(), x, atol=1e-6)
    np.testing.assert_allclose(F.adjust_hue(F.adjust_hue(t, 0.25), -0.25).numpy(), x, atol=1e-5)
    red = minidl.tensor(np.array([1.0, 0.0, 0.0], np.float32).reshape(3, 1, 1))
    np.testing.assert_allclose(F.adjust_hue(red, 1 / 3).numpy().ravel(), [0, 1, 0], atol=1e-6)   # red -> green
    with pytest.raises(ValueError, match="hue_factor"):
        F.adjust_hue(t, 0.7)


def test_blur_crops_erasing_and_dtype_conversion():
    flat = np.full((7, 7, 3), 90, np.uint8)
    np.testing.assert_array_equal(F.gaussian_blur(flat, 5, 1.5), flat)   # a constant image stays constant
    blurred = F.gaussian_blur(transforms.ToTensor()(IMG), 3, 1.0).numpy()
    assert blurred.std() < transforms.ToTensor()(IMG).numpy().std()
    minidl.manual_seed(0)
    big = RNG.integers(0, 256, (40, 50, 3), dtype=np.uint8)
    for _ in range(20):
        top, left, h, w = transforms.RandomResizedCrop.get_params(big, (0.08, 1.0), (3 / 4, 4 / 3))
        assert 0 <= top and top + h <= 40 and 0 <= left and left + w <= 50 and h * w >= 0.08 * 2000 * 0.5
    assert transforms.RandomResizedCrop((12, 10))(big).shape == (12, 10, 3)
    t = transforms.ToTensor()(big)
    erased = transforms.RandomErasing(p=1.0, value=0.25)(t).numpy()
    changed = erased != t.numpy()
    assert changed.any() and np.all(erased[changed] == 0.25)
    u8 = minidl.tensor(np.array([[[0, 255]]], np.uint8))
    np.testing.assert_allclose(transforms.ConvertImageDtype(minidl.float32)(u8).numpy(), [[[0.0, 1.0]]])
    back = transforms.ConvertImageDtype(minidl.uint8)(minidl.tensor(np.array([[[0.0, 1.0]]], np.float32)))
    assert back.tolist() == [[[0, 255]]]
    pil = transforms.ToPILImage()(transforms.ToTensor()(IMG))
    np.testing.assert_array_equal(np.asarray(pil), IMG)


def test_random_transforms_compose_and_keep_shapes():
    minidl.manual_seed(1)
    pipeline = transforms.Compose([
        transforms.RandomApply([transforms.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), transforms.RandomGrayscale(0.2),
        transforms.RandomAffine(10, translate=(0.1, 0.1), scale=(0.9, 1.1)), transforms.RandomOrder(
            [transforms.RandomVerticalFlip(), transforms.RandomHorizontalFlip()]),
        transforms.RandomChoice([transforms.GaussianBlur(3), transforms.Lambda(lambda x: x)]), transforms.ToTensor()])
    for _ in range(5):
        out = pipeline(IMG)
        assert tuple(out.shape) == (3, 6, 6) and 0 <= float(out.min()) and float(out.max()) <= 1


def test_image_folder_lists_classes_and_files(tmp_path):
    pil = pytest.importorskip("PIL.Image")
    for c in ("dog", "cat"):
        (tmp_path / c / "sub").mkdir(parents=True)
        for k in range(2):
            pil.fromarray(IMG).save(tmp_path / c / f"{k}.png")
        pil.fromarray(IMG).save(tmp_path / c / "sub" / "deep.jpg")
    (tmp_path / "cat" / "notes.txt").write_text("not an image")
    ds = datasets.ImageFolder(tmp_path, transform=transforms.ToTensor())
    assert ds.classes == ["cat", "dog"] and ds.class_to_idx == {"cat": 0, "dog": 1}
    assert len(ds) == 6 and ds.targets == [0, 0, 0, 1, 1, 1]
    x, y = ds[0]
    assert tuple(x.shape) == (3, 6, 6) and y == 0
    np.testing.assert_allclose(x.numpy(), transforms.ToTensor()(IMG).numpy())   # PNG is lossless
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="Found no valid file for the class empty"):
        datasets.ImageFolder(tmp_path)


def test_transforms_v2_converts_images_and_dtypes():
    from minidl.vision import transforms_v2 as v2

    image = v2.ToImage()(IMG)
    assert image.dtype == np.uint8 and tuple(image.shape) == (3, 6, 6)
    np.testing.assert_array_equal(image.numpy(), np.moveaxis(IMG, 2, 0))
    scaled = v2.ToDtype(minidl.float32, scale=True)(image)
    np.testing.assert_allclose(scaled.numpy(), np.moveaxis(IMG, 2, 0) / 255.0, rtol=1e-6)
    assert v2.ToDtype(minidl.float32)(image).numpy().max() == IMG.max()   # (no scale: the values as they are)
    pipeline = v2.Compose([v2.ToImage(), v2.RandomResizedCrop((4, 4)), v2.ToDtype({minidl.Tensor: minidl.float32,
                                                                                    "others": None}, scale=True)])
    out = pipeline(IMG)
    assert tuple(out.shape) == (3, 4, 4) and out.dtype == np.float32
