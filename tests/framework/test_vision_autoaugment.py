"""AutoAugment, RandAugment and TrivialAugmentWide (vision/autoaugment.py), the operations they are made of
(vision/functional.py). torchvision cannot be imported beside the CPU torch here; its PIL path is the oracle for
the uint8 operations instead (torchvision's tensor formulas were written to match PIL's): invert, posterize,
solarize, autocontrast and equalize must equal PIL's ImageOps exactly, sharpness PIL's ImageEnhance within one
level. The policies are checked by forcing their random draws. Also v2's MixUp / CutMix on a batch and
models.get_model / list_models."""
import math

import numpy as np
import pytest
from PIL import Image, ImageEnhance, ImageOps

import minidl
from minidl.vision import autoaugment as AA
from minidl.vision import functional as F
from minidl.vision import transforms

IMG = np.random.default_rng(0).integers(0, 256, (16, 20, 3), dtype=np.uint8)
LOW_CONTRAST = (np.random.default_rng(1).integers(60, 140, (16, 20, 3))).astype(np.uint8)


@pytest.mark.parametrize("img", [IMG, LOW_CONTRAST, IMG[..., 0]], ids=["rgb", "low-contrast", "gray"])
def test_uint8_operations_equal_pils(img):
    pil = Image.fromarray(img)
    np.testing.assert_array_equal(F.invert(img), np.asarray(ImageOps.invert(pil)))
    for bits in (1, 4, 7, 8):
        np.testing.assert_array_equal(F.posterize(img, bits), np.asarray(ImageOps.posterize(pil, bits)))
    for threshold in (0, 100, 128, 255):
        np.testing.assert_array_equal(F.solarize(img, threshold), np.asarray(ImageOps.solarize(pil, threshold)))
    np.testing.assert_array_equal(F.autocontrast(img), np.asarray(ImageOps.autocontrast(pil)))
    np.testing.assert_array_equal(F.equalize(img), np.asarray(ImageOps.equalize(pil)))
    for factor in (0.0, 0.5, 1.0, 1.9):
        ours = F.adjust_sharpness(img, factor).astype(int)
        theirs = np.asarray(ImageEnhance.Sharpness(pil).enhance(factor)).astype(int)
        assert np.abs(ours - theirs).max() <= 1, factor
        np.testing.assert_array_equal(ours[0], img[0])   # the border is kept


def test_operations_on_tensors_keep_their_kind_and_refuse_what_torchvision_refuses():
    t = minidl.tensor(np.moveaxis(IMG, 2, 0).copy())
    np.testing.assert_array_equal(F.equalize(t).numpy(), np.moveaxis(F.equalize(IMG), 2, 0))
    np.testing.assert_array_equal(F.invert(t).numpy(), 255 - t.numpy())
    x = transforms.ToTensor()(IMG)
    np.testing.assert_allclose(F.invert(x).numpy(), 1 - x.numpy(), rtol=1e-6)
    np.testing.assert_allclose(F.solarize(x, 0.5).numpy(), np.where(x.numpy() >= 0.5, 1 - x.numpy(), x.numpy()))
    np.testing.assert_allclose(F.adjust_gamma(x, 2.0).numpy(), x.numpy() ** 2, rtol=1e-6)
    with pytest.raises(TypeError, match="only uint8 images"):
        F.posterize(x, 4)
    with pytest.raises(TypeError, match="threshold"):
        F.solarize(x, 128)
    assert F.get_image_size(IMG) == [20, 16] and F.get_dimensions(t) == [3, 16, 20]


def test_shear_is_about_the_upper_left_corner_as_torchvisions():
    """ShearX by m (torchvision's center=[0, 0], the image's corner): output (x, y) samples input
    (x + m (y + 1/2), y), pixel centres at half-integers from the corner. A column-index image shows the source."""
    cols = np.tile(np.arange(20, dtype=np.uint8), (16, 1))
    out = AA.apply_op(cols, "ShearX", 0.3)
    for r in range(16):
        src = np.arange(20) + 0.3 * (r + 0.5)
        inside = np.round(src) < 20
        np.testing.assert_array_equal(out[r][inside], np.round(src[inside]).astype(np.uint8))
        assert (out[r][~inside] == 0).all()   # the fill
    rows = cols.T.copy()   # (20, 16), rows' index
    np.testing.assert_array_equal(AA.apply_op(rows, "ShearY", 0.3).T, AA.apply_op(cols, "ShearX", 0.3)[:16, :20])


def test_magnitude_tables_are_torchvisions():
    table, signed = AA.magnitudes("Posterize", 10, (32, 32))
    assert table.tolist() == [8, 8, 7, 7, 6, 6, 5, 5, 4, 4] and not signed
    table, _ = AA.magnitudes("Posterize", 31, (0, 0), wide=True)
    assert table[0] == 8 and table[-1] == 2
    table, signed = AA.magnitudes("TranslateX", 10, (16, 20))   # TranslateX scales with the width
    assert signed and math.isclose(table[-1], 150.0 / 331.0 * 20)
    assert math.isclose(AA.magnitudes("TranslateY", 10, (16, 20))[0][-1], 150.0 / 331.0 * 16)
    assert AA.magnitudes("Solarize", 10, (1, 1))[0].tolist()[::9] == [255.0, 0.0]
    assert AA.magnitudes("Rotate", 31, (1, 1), wide=True)[0][-1] == 135.0
    assert AA.magnitudes("Equalize", 10, (1, 1)) == (None, False)


def test_autoaugment_applies_the_drawn_sub_policy(monkeypatch):
    """CIFAR-10's sub-policy 1 is (Rotate 0.7 bin 2, TranslateX 0.3 bin 9); with both probabilities drawn 0 and signs
    (1, 0) it is a rotation by +30 * 2 / 9 degrees, then a translation by -int(150 / 331 * width)."""
    t = transforms.AutoAugment(transforms.AutoAugmentPolicy.CIFAR10)
    monkeypatch.setattr(AA.AutoAugment, "get_params", staticmethod(lambda n: (1, np.zeros(2), np.array([1, 0]))))
    want = F.affine(F.rotate(IMG, 30.0 * 2 / 9), 0.0, (-int(150 / 331 * 20), 0), 1.0, (0.0, 0.0))
    np.testing.assert_array_equal(t(IMG), want)
    monkeypatch.setattr(AA.AutoAugment, "get_params", staticmethod(lambda n: (1, np.ones(2), np.array([1, 0]))))
    np.testing.assert_array_equal(t(IMG), IMG)   # probabilities drawn above p: nothing applied
    imagenet = transforms.AutoAugment()
    monkeypatch.setattr(AA.AutoAugment, "get_params", staticmethod(lambda n: (2, np.zeros(2), np.zeros(2))))
    np.testing.assert_array_equal(imagenet(IMG), F.equalize(F.equalize(IMG)))   # (Equalize 0.8, Equalize 0.6)


def test_policies_run_on_every_image_kind_and_explain_float_input():
    minidl.manual_seed(0)
    pil, t = Image.fromarray(IMG), minidl.tensor(np.moveaxis(IMG, 2, 0).copy())
    for aug in (transforms.AutoAugment(), transforms.AutoAugment("svhn"), transforms.RandAugment(num_ops=3),
                transforms.TrivialAugmentWide(), transforms.RandAugment(fill=128)):
        for _ in range(20):
            assert aug(IMG).shape == IMG.shape and aug(pil).dtype == np.uint8   # a PIL image comes back as an array
            out = aug(t)
            assert out.shape == t.shape and out.dtype == minidl.uint8
    with pytest.raises(TypeError, match="put it before ToTensor"):
        transforms.TrivialAugmentWide()(transforms.ToTensor()(IMG))
    with pytest.raises(ValueError, match="magnitude"):
        transforms.RandAugment(magnitude=31)
    pipeline = transforms.Compose([transforms.RandAugment(), transforms.ToTensor()])
    assert pipeline(IMG).shape == (3, 16, 20)


def test_rand_augment_draws_its_operations_uniformly():
    """Over many single-operation draws, each of the 14 operations is chosen about 1/14 of the time (recorded
    through apply_op)."""
    seen = []
    real = AA.apply_op
    AA.apply_op = lambda img, op, *a, **k: seen.append(op) or img
    try:
        minidl.manual_seed(0)
        aug = transforms.RandAugment(num_ops=1)
        for _ in range(2800):
            aug(IMG[:4, :4])
    finally:
        AA.apply_op = real
    counts = np.array([seen.count(op) for op in AA._RAND_OPS])
    assert counts.sum() == 2800 and counts.min() > 140 and counts.max() < 260   # 200 expected, ~4 sigma


def test_mixup_mixes_images_and_one_hot_labels_by_one_ratio(monkeypatch):
    from minidl.vision import transforms_v2 as v2

    x, y = minidl.rand(6, 3, 5, 5), minidl.tensor([0, 1, 2, 3, 0, 1])
    monkeypatch.setattr(v2._BatchMix, "_lam", lambda self: 0.3)
    xm, ym = v2.MixUp(alpha=0.2, num_classes=4)(x, y)
    xs, onehot = x.numpy(), np.eye(4, dtype=np.float32)[y.numpy()]
    np.testing.assert_allclose(xm.numpy(), 0.3 * xs + 0.7 * np.roll(xs, 1, axis=0), rtol=1e-6)
    np.testing.assert_allclose(ym.numpy(), 0.3 * onehot + 0.7 * np.roll(onehot, 1, axis=0), rtol=1e-6)
    loss = minidl.nn.functional.cross_entropy(minidl.zeros(6, 4), ym)   # soft targets: log 4 for uniform logits
    assert abs(float(loss) - np.log(4)) < 1e-6
    with pytest.raises(ValueError, match="num_classes is needed"):
        v2.MixUp()(x, y)
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        v2.MixUp(num_classes=4)(x[0], y)


def test_cutmix_pastes_one_box_and_weights_the_labels_by_its_area():
    from minidl.vision import transforms_v2 as v2

    minidl.manual_seed(3)
    x = minidl.tensor(np.arange(4.0).reshape(4, 1, 1, 1) * np.ones((4, 1, 8, 10)))   # image i is all i
    y = minidl.tensor([0, 1, 2, 3])
    for _ in range(20):
        xm, ym = v2.CutMix(num_classes=4)(x, y)
        for i in range(4):
            img = xm.numpy()[i, 0]
            pasted = img == (i - 1) % 4
            assert ((img == i) | pasted).all()
            if pasted.any():   # one rectangle
                rows, cols = np.nonzero(pasted.any(1))[0], np.nonzero(pasted.any(0))[0]
                assert pasted[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1].all()
            share = pasted.mean()
            np.testing.assert_allclose(ym.numpy()[i, (i - 1) % 4], share, atol=1e-6)
            np.testing.assert_allclose(ym.numpy()[i, i], 1 - share, atol=1e-6)
    pick = v2.RandomChoice([v2.MixUp(num_classes=4), v2.CutMix(num_classes=4)])
    assert pick(x, y)[1].shape == (4, 4)


def test_get_model_and_list_models_as_torchvisions():
    from minidl.vision import models

    assert "resnet18" in models.list_models() and models.list_models(include="vgg1?") == ["vgg11", "vgg13",
                                                                                          "vgg16", "vgg19"]
    assert "vgg11_bn" not in models.list_models(exclude="*_bn")
    net = models.get_model("ResNet18", weights=None, num_classes=7)
    assert net.fc.out_features == 7
    with pytest.raises(ValueError, match="unknown model 'resnet7'"):
        models.get_model("resnet7")
    with pytest.raises(ValueError, match="no pretrained weights"):
        models.get_model("alexnet", weights="DEFAULT")


def test_augmix_mixes_its_chains_with_the_original_convexly(monkeypatch):
    """With every operation an inversion, each chain of odd or even length gives 255 - x or x; whatever the draws,
    the result is x mixed convexly with 255 - x: out = a + b x with a = 127.5 (1 - b), truncated to uint8."""
    gray = np.arange(256, dtype=np.uint8).reshape(16, 16)
    monkeypatch.setattr(AA, "apply_op", lambda img, op, *a, **k: F.invert(img))
    minidl.manual_seed(1)
    for _ in range(10):
        out = transforms.AugMix(chain_depth=1)(gray).astype(float).ravel()
        b, a = np.polyfit(gray.astype(float).ravel(), out, 1)
        assert np.abs(out - (a + b * gray.ravel())).max() < 1.0 and abs(a - 127.5 * (1 - b)) < 1.0
    monkeypatch.setattr(AA, "apply_op", lambda img, *a, **k: img)
    np.testing.assert_allclose(transforms.AugMix()(gray), gray, atol=1)   # identity chains: the image back
    with pytest.raises(ValueError, match="severity"):
        transforms.AugMix(severity=11)
    assert AA.AugMix._table("TranslateX", (16, 30))[0][-1] == 10.0 and AA.AugMix._table("Posterize", (1, 1))[0][0] == 4


def test_random_colour_operations_apply_with_their_probability():
    minidl.manual_seed(0)
    for t, op in ((transforms.RandomInvert(), F.invert), (transforms.RandomEqualize(), F.equalize),
                  (transforms.RandomAutocontrast(), F.autocontrast), (transforms.RandomPosterize(3), lambda i:
                  F.posterize(i, 3)), (transforms.RandomSolarize(100), lambda i: F.solarize(i, 100)),
                  (transforms.RandomAdjustSharpness(2.0), lambda i: F.adjust_sharpness(i, 2.0))):
        outs = [t(IMG) for _ in range(200)]
        applied = sum(not np.array_equal(o, IMG) for o in outs)
        assert 70 < applied < 130, (t, applied)   # p = 0.5
        assert all(np.array_equal(o, IMG) or np.array_equal(o, op(IMG)) for o in outs)
    assert np.array_equal(transforms.RandomInvert(p=1.0)(IMG), 255 - IMG)
    assert repr(transforms.RandomEqualize(p=0.3)) == "RandomEqualize(p=0.3)"


def test_perspective_maps_the_corners_and_reduces_to_its_special_cases():
    start = [[0, 0], [19, 0], [19, 15], [0, 15]]
    np.testing.assert_array_equal(F.perspective(IMG, start, start, "nearest"), IMG)   # identity
    shifted = [[x + 2, y + 1] for x, y in start]   # a translation: affine's
    np.testing.assert_array_equal(F.perspective(IMG, start, shifted, "nearest"), F.affine(IMG, 0, (2, 1), 1.0, 0.0))
    end = [[3, 1], [17, 2], [18, 14], [1, 13]]
    cols = np.tile(np.arange(20, dtype=np.float64), (16, 1))[..., None]
    rows = np.tile(np.arange(16, dtype=np.float64)[:, None], (1, 20))[..., None]
    for (ex, ey), (sx, sy) in zip(end, start):   # each moved corner reads its original corner (nearest: at the
        assert F.perspective(cols, start, end, "nearest")[ey, ex, 0] == sx   # border a bilinear read mixes in the fill)
        assert F.perspective(rows, start, end, "nearest")[ey, ex, 0] == sy
    minidl.manual_seed(0)
    for _ in range(10):
        s, e = transforms.RandomPerspective.get_params(20, 16, 0.5)
        assert s == start and all(0 <= x < 20 and 0 <= y < 16 for x, y in e)
        assert e[0][0] <= 5 and e[1][0] >= 14   # within distortion_scale of half the side
    assert transforms.RandomPerspective(p=1.0)(IMG).shape == IMG.shape


def test_perspective_against_torchvision_where_it_imports():
    TF = pytest.importorskip("torchvision.transforms.functional")
    import torch

    x = np.random.default_rng(2).uniform(size=(3, 16, 20)).astype(np.float32)
    start, end = [[0, 0], [19, 0], [19, 15], [0, 15]], [[3, 1], [17, 2], [18, 14], [1, 13]]
    for mode in ("nearest", "bilinear"):
        theirs = TF.perspective(torch.tensor(x), start, end, interpolation=TF.InterpolationMode(mode), fill=0).numpy()
        ours = F.perspective(minidl.tensor(x), start, end, mode, 0).numpy()
        agree = np.isclose(ours, theirs, atol=1e-3).mean()
        assert agree > (0.97 if mode == "nearest" else 0.99), (mode, agree)   # (torchvision rounds its map to fp32)


def test_affine_and_rotate_against_torchvision_where_they_import():
    TF = pytest.importorskip("torchvision.transforms.functional")
    import torch

    x = np.random.default_rng(3).uniform(size=(3, 16, 20)).astype(np.float32)
    for mode in ("nearest", "bilinear"):
        im = TF.InterpolationMode(mode)
        for fill in (None, 0.0, 0.5):
            theirs = TF.affine(torch.tensor(x), angle=17.0, translate=[2, -1], scale=0.9, shear=[5.0, 3.0],
                               interpolation=im, fill=fill).numpy()
            ours = F.affine(minidl.tensor(x), 17.0, (2, -1), 0.9, (5.0, 3.0), mode, fill).numpy()
            assert np.isclose(ours, theirs, atol=1e-4).mean() > 0.98, (mode, fill)
            theirs = TF.rotate(torch.tensor(x), 33.0, interpolation=im, fill=fill).numpy()
            ours = F.rotate(minidl.tensor(x), 33.0, mode, fill=fill).numpy()
            assert np.isclose(ours, theirs, atol=1e-4).mean() > 0.98, ("rotate", mode, fill)


@pytest.mark.parametrize("interpolation,pil", [("bilinear", Image.BILINEAR), ("bicubic", Image.BICUBIC)])
def test_resize_antialiased_like_pils(interpolation, pil):
    """Shrinking a uint8 image: Resize's default antialiasing gives PIL's resampling (within one level: PIL rounds
    in fixed point); without it, a strided image's aliasing shows."""
    big = np.random.default_rng(4).integers(0, 256, (90, 70, 3)).astype(np.uint8)
    ours = transforms.Resize((23, 17), interpolation=interpolation)(big).astype(int)
    theirs = np.asarray(Image.fromarray(big).resize((17, 23), pil)).astype(int)
    assert np.abs(ours - theirs).max() <= 1
    plain = transforms.Resize((23, 17), interpolation=interpolation, antialias=False)(big).astype(int)
    assert np.abs(plain - theirs).max() > 10
