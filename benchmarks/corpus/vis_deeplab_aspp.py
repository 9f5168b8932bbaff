"""DeepLabV3+ style segmentation head with ASPP on a tiny backbone."""
from typing import Dict, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F


def conv_bn_relu(cin, cout, k=3, stride=1, dilation=1):
    pad = dilation * (k - 1) // 2
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, stride=stride, padding=pad, dilation=dilation, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class TinyBackbone(nn.Module):
    """Returns a low-level (stride 4) and a high-level (stride 16) feature map."""

    def __init__(self, in_ch=3, widths=(16, 24, 32, 48)):
        super().__init__()
        self.layer1 = nn.Sequential(conv_bn_relu(in_ch, widths[0], stride=2), conv_bn_relu(widths[0], widths[1], stride=2))
        self.layer2 = conv_bn_relu(widths[1], widths[2], stride=2)
        self.layer3 = conv_bn_relu(widths[2], widths[3], stride=2)
        self.low_channels = widths[1]
        self.out_channels = widths[3]

    def forward(self, x) -> Dict[str, torch.Tensor]:
        low = self.layer1(x)
        high = self.layer3(self.layer2(low))
        return {"low_level": low, "out": high}


class ASPPPooling(nn.Sequential):
    def __init__(self, in_channels, out_channels):
        super().__init__(
            nn.AdaptiveAvgPool2d(1),
            nn.Conv2d(in_channels, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(),
        )

    def forward(self, x):
        size = x.shape[-2:]
        for mod in self:
            x = mod(x)
        return F.interpolate(x, size=size, mode="bilinear", align_corners=False)


class ASPP(nn.Module):
    def __init__(self, in_channels: int, atrous_rates: Sequence[int], out_channels: int = 32):
        super().__init__()
        modules = [conv_bn_relu(in_channels, out_channels, k=1)]
        for rate in atrous_rates:
            modules.append(conv_bn_relu(in_channels, out_channels, k=3, dilation=rate))
        modules.append(ASPPPooling(in_channels, out_channels))
        self.convs = nn.ModuleList(modules)
        self.project = nn.Sequential(
            conv_bn_relu(len(self.convs) * out_channels, out_channels, k=1),
            nn.Dropout(0.5),
        )

    def forward(self, x):
        res = [conv(x) for conv in self.convs]
        return self.project(torch.cat(res, dim=1))


class DeepLabV3Plus(nn.Module):
    def __init__(self, num_classes=21, aspp_rates=(2, 4, 6), aspp_channels=32, low_proj=12):
        super().__init__()
        self.backbone = TinyBackbone()
        self.aspp = ASPP(self.backbone.out_channels, aspp_rates, aspp_channels)
        self.low_proj = conv_bn_relu(self.backbone.low_channels, low_proj, k=1)
        self.decoder = nn.Sequential(
            conv_bn_relu(aspp_channels + low_proj, aspp_channels),
            conv_bn_relu(aspp_channels, aspp_channels),
        )
        self.classifier = nn.Conv2d(aspp_channels, num_classes, 1)

    def forward(self, images):
        input_shape = images.shape[-2:]
        feats = self.backbone(images)
        x = self.aspp(feats["out"])
        low = self.low_proj(feats["low_level"])
        x = F.interpolate(x, size=low.shape[-2:], mode="bilinear", align_corners=False)
        x = self.decoder(torch.cat([x, low], dim=1))
        x = self.classifier(x)
        logits = F.interpolate(x, size=input_shape, mode="bilinear", align_corners=False)
        return {"out": logits, "aux": x}


def build():
    torch.manual_seed(0)
    model = DeepLabV3Plus().eval()
    images = torch.randn(2, 3, 64, 64)
    return model, (images,)
