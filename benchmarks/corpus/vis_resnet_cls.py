"""Small ResNet for CIFAR-style image classification.

Follows the pre-activation variant from He et al., "Identity Mappings in Deep
Residual Networks" (2016), with a configurable width multiplier so the same
code can be used for the tiny ablation runs.
"""
from dataclasses import dataclass, field
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ResNetConfig:
    in_channels: int = 3
    num_classes: int = 10
    stem_width: int = 16
    widths: List[int] = field(default_factory=lambda: [16, 32, 64])
    depths: List[int] = field(default_factory=lambda: [2, 2, 2])
    drop_rate: float = 0.1
    zero_init_residual: bool = True


class PreActBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.shortcut = None
        if stride != 1 or in_planes != planes * self.expansion:
            self.shortcut = nn.Conv2d(in_planes, planes * self.expansion, 1, stride=stride, bias=False)

    def forward(self, x):
        out = F.relu(self.bn1(x))
        shortcut = self.shortcut(out) if self.shortcut is not None else x
        out = self.conv1(out)
        out = self.conv2(F.relu(self.bn2(out)))
        return out + shortcut


class PreActResNet(nn.Module):
    def __init__(self, cfg: ResNetConfig):
        super().__init__()
        self.cfg = cfg
        self.stem = nn.Conv2d(cfg.in_channels, cfg.stem_width, 3, padding=1, bias=False)
        in_planes = cfg.stem_width
        stages = []
        for i, (w, d) in enumerate(zip(cfg.widths, cfg.depths)):
            stride = 1 if i == 0 else 2
            blocks = []
            for j in range(d):
                blocks.append(PreActBlock(in_planes, w, stride if j == 0 else 1))
                in_planes = w * PreActBlock.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.ModuleList(stages)
        self.bn_final = nn.BatchNorm2d(in_planes)
        self.dropout = nn.Dropout(cfg.drop_rate)
        self.fc = nn.Linear(in_planes, cfg.num_classes)
        self._init_weights()

    def _init_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if self.cfg.zero_init_residual:
            for m in self.modules():
                if isinstance(m, PreActBlock):
                    nn.init.zeros_(m.conv2.weight)

    def forward_features(self, x):
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        return F.relu(self.bn_final(x))

    def forward(self, x):
        feats = self.forward_features(x)
        pooled = F.adaptive_avg_pool2d(feats, 1).flatten(1)
        logits = self.fc(self.dropout(pooled))
        return logits


def build():
    torch.manual_seed(0)
    model = PreActResNet(ResNetConfig()).eval()
    x = torch.randn(2, 3, 32, 32)
    return model, (x,)
