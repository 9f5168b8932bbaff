"""Small U-Net for semantic segmentation trained with CE + soft Dice.

The Dice term is averaged only over the classes that actually appear in the
ground truth of the batch (common trick for datasets where most classes are
absent from most crops, e.g. medical/ADE-style labels).
"""
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


class DoubleConv(nn.Module):
    def __init__(self, in_ch, out_ch, mid_ch: Optional[int] = None):
        super().__init__()
        mid_ch = mid_ch or out_ch
        self.block = nn.Sequential(
            nn.Conv2d(in_ch, mid_ch, 3, padding=1, bias=False), nn.BatchNorm2d(mid_ch), nn.ReLU(inplace=True),
            nn.Conv2d(mid_ch, out_ch, 3, padding=1, bias=False), nn.BatchNorm2d(out_ch), nn.ReLU(inplace=True),
        )

    def forward(self, x):
        return self.block(x)


class Down(nn.Module):
    def __init__(self, in_ch, out_ch):
        super().__init__()
        self.pool_conv = nn.Sequential(nn.MaxPool2d(2), DoubleConv(in_ch, out_ch))

    def forward(self, x):
        return self.pool_conv(x)


class Up(nn.Module):
    def __init__(self, in_ch, out_ch):
        super().__init__()
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
        self.conv = DoubleConv(in_ch, out_ch, in_ch // 2)

    def forward(self, x1, x2):
        x1 = self.up(x1)
        dy, dx = x2.size(2) - x1.size(2), x2.size(3) - x1.size(3)
        x1 = F.pad(x1, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])
        return self.conv(torch.cat([x2, x1], dim=1))


class UNet(nn.Module):
    def __init__(self, n_channels=3, n_classes=6, base=8):
        super().__init__()
        self.inc = DoubleConv(n_channels, base)
        self.down1 = Down(base, base * 2)
        self.down2 = Down(base * 2, base * 4)
        self.up1 = Up(base * 6, base * 2)
        self.up2 = Up(base * 3, base)
        self.outc = nn.Conv2d(base, n_classes, 1)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x = self.up1(x3, x2)
        x = self.up2(x, x1)
        return self.outc(x)


def dice_loss_present_classes(logits, target, valid, smooth=1.0):
    probs = logits.softmax(dim=1) * valid.unsqueeze(1)
    target_1h = F.one_hot(target).permute(0, 3, 1, 2).float() * valid.unsqueeze(1)
    present = torch.unique(target)
    probs = probs[:, present]
    target_1h = target_1h[:, present]
    dims = (0, 2, 3)
    inter = (probs * target_1h).sum(dims)
    card = probs.sum(dims) + target_1h.sum(dims)
    return 1.0 - ((2.0 * inter + smooth) / (card + smooth)).mean()


class SegmentationModel(nn.Module):
    def __init__(self, n_classes=6, ignore_index=255, dice_weight=0.5):
        super().__init__()
        self.net = UNet(n_classes=n_classes)
        self.ignore_index = ignore_index
        self.dice_weight = dice_weight

    def forward(self, images, masks):
        logits = self.net(images)
        ce = F.cross_entropy(logits, masks, ignore_index=self.ignore_index)
        valid = masks != self.ignore_index
        masks = masks.clone()
        masks[~valid] = 0
        dice = dice_loss_present_classes(logits, masks, valid)
        loss = ce + self.dice_weight * dice
        return logits, loss


def build():
    torch.manual_seed(0)
    model = SegmentationModel().eval()
    images = torch.randn(2, 3, 32, 32)
    masks = torch.randint(0, 4, (2, 32, 32))
    masks[:, :2] = 255
    return model, (images, masks)
