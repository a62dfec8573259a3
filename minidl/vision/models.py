"""torchvision.models' classic architectures, built from minidl.nn with torchvision's module names, so that
their state dicts have torchvision's keys and shapes (a torchvision checkpoint loads into them):

    resnet18 ... resnet152             ResNet (He et al. 2015): BasicBlock / Bottleneck stages
    resnext50_32x4d, resnext101_32x8d  ResNeXt (Xie et al. 2017): grouped 3x3 convolutions in the bottleneck
    wide_resnet50_2, wide_resnet101_2  Wide ResNet (Zagoruyko & Komodakis 2016): twice the bottleneck width
    vgg11, vgg13, vgg16, vgg19 (+ _bn) VGG (Simonyan & Zisserman 2014)
    alexnet                            AlexNet (Krizhevsky et al. 2012), torchvision's variant
    mobilenet_v2                       MobileNetV2 (Sandler et al. 2018): inverted residuals, depthwise convs
    vit_b_16, vit_b_32, vit_l_16,      the Vision Transformer (Dosovitskiy et al. 2020): patches by a strided
    vit_l_32, vit_h_14                 convolution, a class token, nn.MultiheadAttention encoder blocks

Pretrained weights are not included: torchvision downloads them from the internet, minidl never does for
weights. `weights=None` (the default) builds a freshly initialised model, initialised as torchvision does;
any other `weights=` (or `pretrained=True`) raises a clear error saying how to load weights you have.
"""
from __future__ import annotations

import math
from collections import OrderedDict

from .. import nn
from ..nn import init
from ..ops.creation import zeros

__all__ = ["ResNet", "BasicBlock", "Bottleneck", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
           "resnext50_32x4d", "resnext101_32x8d", "wide_resnet50_2", "wide_resnet101_2", "VGG", "vgg11", "vgg11_bn",
           "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn", "AlexNet", "alexnet", "MobileNetV2",
           "mobilenet_v2", "VisionTransformer", "vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32", "vit_h_14", "get_model", "list_models"]


def _no_pretrained(name, weights, kwargs):
    pretrained = kwargs.pop("pretrained", False)
    kwargs.pop("progress", None)
    if weights is not None or pretrained:
        raise ValueError(
            f"{name}: minidl has no pretrained weights (torchvision downloads them; minidl does not download "
            f"weights). Build the model with weights=None, then load a state dict you have: "
            f"model.load_state_dict(minidl.load('weights.pt'))")
    return kwargs


# ------------------------------------------------------------------------------------------------
# ResNet
# ------------------------------------------------------------------------------------------------



def _init_conv_bn_linear(model):
    """torchvision's initialisation of VGG and MobileNetV2: convolutions Kaiming-normal (fan_out, ReLU's
    gain), batch norms 1 and 0, linear layers N(0, 0.01) and 0; biases 0."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            init.ones_(m.weight)
            init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            init.normal_(m.weight, 0, 0.01)
            init.zeros_(m.bias)

class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64):
        super().__init__()
        if groups != 1 or base_width != 64:
            raise ValueError("BasicBlock only supports groups=1 and base_width=64 (as torchvision's)")
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64):
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups   # (ResNeXt's grouped and Wide ResNet's wider 3x3)
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes=1000, zero_init_residual=False, groups=1, width_per_group=64):
        super().__init__()
        self.inplanes, self.groups, self.base_width = 64, groups, width_per_group
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                init.ones_(m.weight)
                init.zeros_(m.bias)
        if zero_init_residual:
            for m in self.modules():
                last = getattr(m, "bn3", None) if isinstance(m, Bottleneck) else getattr(m, "bn2", None)
                if isinstance(m, (BasicBlock, Bottleneck)):
                    init.zeros_(last.weight)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride=stride, bias=False),
                                       nn.BatchNorm2d(planes * block.expansion))
        shape = dict(groups=self.groups, base_width=self.base_width)
        layers = [block(self.inplanes, planes, stride, downsample, **shape)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes, **shape) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).flatten(1))


def _resnet(name, block, layers, groups=1, width_per_group=64):
    """torchvision's builder `name`(*, weights=None, **kwargs) of a ResNet of this shape."""
    def build(*, weights=None, **kwargs):
        kwargs = _no_pretrained(name, weights, kwargs)
        kwargs.setdefault("groups", groups)
        kwargs.setdefault("width_per_group", width_per_group)
        return ResNet(block, layers, **kwargs)

    build.__name__ = build.__qualname__ = name
    return build


resnet18 = _resnet("resnet18", BasicBlock, [2, 2, 2, 2])
resnet34 = _resnet("resnet34", BasicBlock, [3, 4, 6, 3])
resnet50 = _resnet("resnet50", Bottleneck, [3, 4, 6, 3])
resnet101 = _resnet("resnet101", Bottleneck, [3, 4, 23, 3])
resnet152 = _resnet("resnet152", Bottleneck, [3, 8, 36, 3])
resnext50_32x4d = _resnet("resnext50_32x4d", Bottleneck, [3, 4, 6, 3], groups=32, width_per_group=4)
resnext101_32x8d = _resnet("resnext101_32x8d", Bottleneck, [3, 4, 23, 3], groups=32, width_per_group=8)
wide_resnet50_2 = _resnet("wide_resnet50_2", Bottleneck, [3, 4, 6, 3], width_per_group=128)
wide_resnet101_2 = _resnet("wide_resnet101_2", Bottleneck, [3, 4, 23, 3], width_per_group=128)


# ------------------------------------------------------------------------------------------------
# VGG and AlexNet
# ------------------------------------------------------------------------------------------------

_VGG_CFGS = {
    "A": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "B": [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "D": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "E": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"],
}


class VGG(nn.Module):
    def __init__(self, features, num_classes=1000, init_weights=True, dropout=0.5):
        super().__init__()
        self.features = features
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(p=dropout),
            nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(p=dropout),
            nn.Linear(4096, num_classes))
        if init_weights:
            _init_conv_bn_linear(self)

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)).flatten(1))


def _vgg_features(cfg, batch_norm):
    layers, channels = [], 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            continue
        layers.append(nn.Conv2d(channels, v, kernel_size=3, padding=1))
        if batch_norm:
            layers.append(nn.BatchNorm2d(v))
        layers.append(nn.ReLU(inplace=True))
        channels = v
    return nn.Sequential(*layers)


def _vgg(name, cfg, batch_norm):
    """torchvision's builder `name`(*, weights=None, **kwargs) of a VGG of configuration cfg."""
    def build(*, weights=None, **kwargs):
        return VGG(_vgg_features(_VGG_CFGS[cfg], batch_norm), **_no_pretrained(name, weights, kwargs))

    build.__name__ = build.__qualname__ = name
    return build


vgg11, vgg11_bn = _vgg("vgg11", "A", False), _vgg("vgg11_bn", "A", True)
vgg13, vgg13_bn = _vgg("vgg13", "B", False), _vgg("vgg13_bn", "B", True)
vgg16, vgg16_bn = _vgg("vgg16", "D", False), _vgg("vgg16_bn", "D", True)
vgg19, vgg19_bn = _vgg("vgg19", "E", False), _vgg("vgg19_bn", "E", True)


class AlexNet(nn.Module):
    def __init__(self, num_classes=1000, dropout=0.5):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(64, 192, kernel_size=5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(192, 384, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2))
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(inplace=True),
            nn.Dropout(p=dropout), nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Linear(4096, num_classes))

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)).flatten(1))


def alexnet(*, weights=None, **kwargs):
    return AlexNet(**_no_pretrained("alexnet", weights, kwargs))


# ------------------------------------------------------------------------------------------------
# MobileNetV2
# ------------------------------------------------------------------------------------------------


def _make_divisible(v, divisor=8, min_value=None):
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def _conv_bn_relu6(in_channels, out_channels, kernel_size=3, stride=1, groups=1):
    """conv -> batch norm -> ReLU6: torchvision.ops.Conv2dNormActivation as MobileNetV2 builds it (vision/ops.py)."""
    from .ops import Conv2dNormActivation

    return Conv2dNormActivation(in_channels, out_channels, kernel_size, stride, groups=groups,
                                norm_layer=nn.BatchNorm2d, activation_layer=nn.ReLU6)


class InvertedResidual(nn.Module):
    def __init__(self, inp, oup, stride, expand_ratio):
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers = [_conv_bn_relu6(inp, hidden, kernel_size=1)] if expand_ratio != 1 else []
        layers += [_conv_bn_relu6(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, oup, 1, 1, 0, bias=False), nn.BatchNorm2d(oup)]
        self.conv = nn.Sequential(*layers)
        self.out_channels = oup

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes=1000, width_mult=1.0, round_nearest=8, dropout=0.2):
        super().__init__()
        settings = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
                    [6, 320, 1, 1]]
        input_channel = _make_divisible(32 * width_mult, round_nearest)
        self.last_channel = _make_divisible(1280 * max(1.0, width_mult), round_nearest)
        features = [_conv_bn_relu6(3, input_channel, stride=2)]
        for t, c, n, s in settings:
            output_channel = _make_divisible(c * width_mult, round_nearest)
            for i in range(n):
                features.append(InvertedResidual(input_channel, output_channel, s if i == 0 else 1, t))
                input_channel = output_channel
        features.append(_conv_bn_relu6(input_channel, self.last_channel, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), nn.Linear(self.last_channel, num_classes))
        _init_conv_bn_linear(self)   # kaiming's default nonlinearity (leaky_relu, a=0) has ReLU's gain

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(x.flatten(1))


def mobilenet_v2(*, weights=None, **kwargs):
    return MobileNetV2(**_no_pretrained("mobilenet_v2", weights, kwargs))


# ------------------------------------------------------------------------------------------------
# Vision Transformer
# ------------------------------------------------------------------------------------------------


class MLPBlock(nn.Sequential):
    """Linear, GELU, Dropout, Linear, Dropout (torchvision.ops.MLP as the ViT uses it: keys mlp.0 and mlp.3)."""

    def __init__(self, in_dim, mlp_dim, dropout):
        super().__init__(nn.Linear(in_dim, mlp_dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(mlp_dim, in_dim),
                         nn.Dropout(dropout))
        for m in self.modules():
            if isinstance(m, nn.Linear):
                init.xavier_uniform_(m.weight)
                init.normal_(m.bias, std=1e-6)


class EncoderBlock(nn.Module):
    """x + attention(ln_1(x)), then + mlp(ln_2(.)) (pre-norm)."""

    def __init__(self, num_heads, hidden_dim, mlp_dim, dropout, attention_dropout):
        super().__init__()
        self.num_heads = num_heads
        self.ln_1 = nn.LayerNorm(hidden_dim, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(hidden_dim, num_heads, dropout=attention_dropout, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.ln_2 = nn.LayerNorm(hidden_dim, eps=1e-6)
        self.mlp = MLPBlock(hidden_dim, mlp_dim, dropout)

    def forward(self, input):
        if input.ndim != 3:
            raise ValueError(f"EncoderBlock: expected (batch_size, seq_length, hidden_dim), got {tuple(input.shape)}")
        x = self.ln_1(input)
        x, _ = self.self_attention(x, x, x, need_weights=False)
        x = self.dropout(x) + input
        return x + self.mlp(self.ln_2(x))


class Encoder(nn.Module):
    def __init__(self, seq_length, num_layers, num_heads, hidden_dim, mlp_dim, dropout, attention_dropout):
        super().__init__()
        self.pos_embedding = nn.Parameter(zeros(1, seq_length, hidden_dim))
        init.normal_(self.pos_embedding, std=0.02)
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.Sequential(OrderedDict(
            (f"encoder_layer_{i}", EncoderBlock(num_heads, hidden_dim, mlp_dim, dropout, attention_dropout))
            for i in range(num_layers)))
        self.ln = nn.LayerNorm(hidden_dim, eps=1e-6)

    def forward(self, input):
        return self.ln(self.layers(self.dropout(input + self.pos_embedding)))


class VisionTransformer(nn.Module):
    """torchvision.models.VisionTransformer: image -> (patches by a patch_size-strided convolution) -> a class token
    and position embeddings -> the encoder -> the class token's features -> heads."""

    def __init__(self, image_size, patch_size, num_layers, num_heads, hidden_dim, mlp_dim, dropout=0.0,
                 attention_dropout=0.0, num_classes=1000, representation_size=None):
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"VisionTransformer: input shape indivisible by patch size ({image_size}, {patch_size})")
        self.image_size, self.patch_size, self.hidden_dim = image_size, patch_size, hidden_dim
        self.mlp_dim, self.attention_dropout, self.dropout = mlp_dim, attention_dropout, dropout
        self.num_classes, self.representation_size = num_classes, representation_size
        self.conv_proj = nn.Conv2d(3, hidden_dim, kernel_size=patch_size, stride=patch_size)
        seq_length = (image_size // patch_size) ** 2 + 1   # (+ the class token)
        self.class_token = nn.Parameter(zeros(1, 1, hidden_dim))
        self.encoder = Encoder(seq_length, num_layers, num_heads, hidden_dim, mlp_dim, dropout, attention_dropout)
        self.seq_length = seq_length
        heads = OrderedDict()
        if representation_size is None:
            heads["head"] = nn.Linear(hidden_dim, num_classes)
        else:
            heads["pre_logits"] = nn.Linear(hidden_dim, representation_size)
            heads["act"] = nn.Tanh()
            heads["head"] = nn.Linear(representation_size, num_classes)
        self.heads = nn.Sequential(heads)
        fan_in = 3 * patch_size * patch_size
        init.trunc_normal_(self.conv_proj.weight, std=math.sqrt(1 / fan_in))
        init.zeros_(self.conv_proj.bias)
        if representation_size is not None:
            init.trunc_normal_(self.heads.pre_logits.weight, std=math.sqrt(1 / hidden_dim))
            init.zeros_(self.heads.pre_logits.bias)
        init.zeros_(self.heads.head.weight)
        init.zeros_(self.heads.head.bias)

    def _process_input(self, x):
        n, _, h, w = x.shape
        if h != self.image_size or w != self.image_size:
            raise ValueError(f"VisionTransformer: wrong image size: expected {self.image_size}, got {h} x {w}")
        x = self.conv_proj(x)                                   # (n, hidden_dim, h / p, w / p)
        return x.reshape(n, self.hidden_dim, -1).permute(0, 2, 1)

    def forward(self, x):
        x = self._process_input(x)
        from ..ops.joining import cat

        x = cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)
        return self.heads(self.encoder(x)[:, 0])


def _vit(name, patch_size, num_layers, num_heads, hidden_dim, mlp_dim):
    """torchvision's builder `name`(*, weights=None, **kwargs) of a ViT of this size (image_size 224 unless given)."""
    def build(*, weights=None, **kwargs):
        kwargs = _no_pretrained(name, weights, kwargs)
        image_size = kwargs.pop("image_size", 224)
        return VisionTransformer(image_size, patch_size, num_layers, num_heads, hidden_dim, mlp_dim, **kwargs)

    build.__name__ = build.__qualname__ = name
    return build


vit_b_16 = _vit("vit_b_16", 16, 12, 12, 768, 3072)
vit_b_32 = _vit("vit_b_32", 32, 12, 12, 768, 3072)
vit_l_16 = _vit("vit_l_16", 16, 24, 16, 1024, 4096)
vit_l_32 = _vit("vit_l_32", 32, 24, 16, 1024, 4096)
vit_h_14 = _vit("vit_h_14", 14, 32, 16, 1280, 5120)


def list_models(module=None, include=None, exclude=None):
    """The names of the models get_model builds, sorted (torchvision.models.list_models; include / exclude:
    fnmatch patterns)."""
    import fnmatch

    names = sorted(n for n in __all__ if n[0].islower() and n not in ("get_model", "list_models"))
    if include is not None:
        names = [n for n in names if any(fnmatch.fnmatch(n, p) for p in ([include] if isinstance(include, str)
                                                                        else include))]
    if exclude is not None:
        names = [n for n in names if not any(fnmatch.fnmatch(n, p) for p in ([exclude] if isinstance(exclude, str)
                                                                            else exclude))]
    return names


def get_model(name, **config):
    """The model `name` built with config (torchvision.models.get_model("resnet50", weights=None, num_classes=10))."""
    name = name.lower()
    if name not in list_models():
        raise ValueError(f"get_model: unknown model {name!r}; minidl.vision.models has {', '.join(list_models())}")
    return globals()[name](**config)


def __getattr__(name):
    raise AttributeError(
        f"minidl.vision.models has no {name!r} (torchvision.models.{name}); it has "
        + ", ".join(n for n in __all__ if n[0].islower()) + ". docs/TORCH_COMPAT.md lists what exists.")



