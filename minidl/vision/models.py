"""torchvision.models' classic architectures, built from minidl.nn with torchvision's module names, so that
their state dicts have torchvision's keys and shapes (a torchvision checkpoint loads into them):

    resnet18, resnet34, resnet50       ResNet (He et al. 2015): BasicBlock / Bottleneck stages
    vgg11, vgg16 (and *_bn)            VGG (Simonyan & Zisserman 2014)
    alexnet                            AlexNet (Krizhevsky et al. 2012), torchvision's variant
    mobilenet_v2                       MobileNetV2 (Sandler et al. 2018): inverted residuals, depthwise convs

Pretrained weights are not included: torchvision downloads them from the internet, minidl never does for
weights. `weights=None` (the default) builds a freshly initialised model, initialised as torchvision does;
any other `weights=` (or `pretrained=True`) raises a clear error saying how to load weights you have.
"""
from __future__ import annotations



from .. import nn
from ..nn import init

__all__ = ["ResNet", "BasicBlock", "Bottleneck", "resnet18", "resnet34", "resnet50", "VGG", "vgg11", "vgg11_bn",
           "vgg16", "vgg16_bn", "AlexNet", "alexnet", "MobileNetV2", "mobilenet_v2"]


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

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
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

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
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
    def __init__(self, block, layers, num_classes=1000, zero_init_residual=False):
        super().__init__()
        self.inplanes = 64
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
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).flatten(1))


def resnet18(*, weights=None, **kwargs):
    return ResNet(BasicBlock, [2, 2, 2, 2], **_no_pretrained("resnet18", weights, kwargs))


def resnet34(*, weights=None, **kwargs):
    return ResNet(BasicBlock, [3, 4, 6, 3], **_no_pretrained("resnet34", weights, kwargs))


def resnet50(*, weights=None, **kwargs):
    return ResNet(Bottleneck, [3, 4, 6, 3], **_no_pretrained("resnet50", weights, kwargs))


# ------------------------------------------------------------------------------------------------
# VGG and AlexNet
# ------------------------------------------------------------------------------------------------

_VGG_CFGS = {
    "A": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "D": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
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


def _vgg(name, cfg, batch_norm, weights, kwargs):
    return VGG(_vgg_features(_VGG_CFGS[cfg], batch_norm), **_no_pretrained(name, weights, kwargs))


def vgg11(*, weights=None, **kwargs):
    return _vgg("vgg11", "A", False, weights, kwargs)


def vgg11_bn(*, weights=None, **kwargs):
    return _vgg("vgg11_bn", "A", True, weights, kwargs)


def vgg16(*, weights=None, **kwargs):
    return _vgg("vgg16", "D", False, weights, kwargs)


def vgg16_bn(*, weights=None, **kwargs):
    return _vgg("vgg16_bn", "D", True, weights, kwargs)


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


class Conv2dNormActivation(nn.Sequential):
    """conv -> batch norm -> ReLU6 (torchvision.ops.misc.Conv2dNormActivation, as MobileNetV2 uses it)."""

    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, groups=1):
        padding = (kernel_size - 1) // 2
        super().__init__(nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, groups=groups, bias=False),
                         nn.BatchNorm2d(out_channels), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    def __init__(self, inp, oup, stride, expand_ratio):
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers = [Conv2dNormActivation(inp, hidden, kernel_size=1)] if expand_ratio != 1 else []
        layers += [Conv2dNormActivation(hidden, hidden, stride=stride, groups=hidden),
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
        features = [Conv2dNormActivation(3, input_channel, stride=2)]
        for t, c, n, s in settings:
            output_channel = _make_divisible(c * width_mult, round_nearest)
            for i in range(n):
                features.append(InvertedResidual(input_channel, output_channel, s if i == 0 else 1, t))
                input_channel = output_channel
        features.append(Conv2dNormActivation(input_channel, self.last_channel, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), nn.Linear(self.last_channel, num_classes))
        _init_conv_bn_linear(self)   # kaiming's default nonlinearity (leaky_relu, a=0) has ReLU's gain

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(x.flatten(1))


def mobilenet_v2(*, weights=None, **kwargs):
    return MobileNetV2(**_no_pretrained("mobilenet_v2", weights, kwargs))


def __getattr__(name):
    raise AttributeError(
        f"minidl.vision.models has no {name!r} (torchvision.models.{name}); it has "
        + ", ".join(n for n in __all__ if n[0].islower()) + ". docs/TORCH_COMPAT.md lists what exists.")



