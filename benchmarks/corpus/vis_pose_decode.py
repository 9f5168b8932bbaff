"""Top-down human pose estimation: SimpleBaseline-style deconv head + heatmap decoding.

Decoding follows the reference HRNet/SimpleBaseline code: argmax per joint,
quarter-pixel shift towards the higher neighbour, then mapping back from
heatmap coordinates to the original box. The shift step works on numpy arrays,
like the original `get_final_preds`.
"""
import math
from dataclasses import dataclass
from typing import Tuple

import numpy as np
import torch
import torch.nn as nn


@dataclass
class PoseConfig:
    num_joints: int = 17
    backbone_width: int = 32
    deconv_filters: Tuple[int, ...] = (32, 32)
    input_size: Tuple[int, int] = (64, 48)  # h, w
    heatmap_stride: int = 4


class TinyBackbone(nn.Module):
    def __init__(self, width):
        super().__init__()
        layers, ch = [], 3
        for i in range(4):
            out = width if i < 3 else width * 2
            layers += [nn.Conv2d(ch, out, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU(inplace=True)]
            ch = out
        self.net = nn.Sequential(*layers)
        self.out_channels = ch

    def forward(self, x):
        return self.net(x)


class DeconvHead(nn.Module):
    def __init__(self, in_ch, filters, num_joints):
        super().__init__()
        layers = []
        for f in filters:
            layers += [nn.ConvTranspose2d(in_ch, f, 4, stride=2, padding=1, bias=False), nn.BatchNorm2d(f), nn.ReLU(inplace=True)]
            in_ch = f
        self.deconv = nn.Sequential(*layers)
        self.final = nn.Conv2d(in_ch, num_joints, 1)

    def forward(self, x):
        return self.final(self.deconv(x))


def get_max_preds(heatmaps: torch.Tensor):
    n, k, h, w = heatmaps.shape
    flat = heatmaps.reshape(n, k, -1)
    maxvals, idx = flat.max(dim=2, keepdim=True)
    preds = torch.cat([(idx % w).float(), torch.div(idx, w, rounding_mode="floor").float()], dim=2)
    preds = preds * (maxvals > 0.0).float()
    return preds, maxvals


def transform_preds(coords, center, scale, heatmap_size):
    """Map heatmap coords back to image coords for a box given by center/scale (pixels)."""
    hw, hh = heatmap_size
    out = np.zeros_like(coords)
    out[:, 0] = coords[:, 0] * scale[0] / hw + center[0] - scale[0] * 0.5
    out[:, 1] = coords[:, 1] * scale[1] / hh + center[1] - scale[1] * 0.5
    return out


class SimpleBaseline(nn.Module):
    def __init__(self, cfg: PoseConfig):
        super().__init__()
        self.cfg = cfg
        self.backbone = TinyBackbone(cfg.backbone_width)
        self.head = DeconvHead(self.backbone.out_channels, cfg.deconv_filters, cfg.num_joints)

    def get_final_preds(self, heatmaps, center, scale):
        coords, maxvals = get_max_preds(heatmaps)
        torch._dynamo.graph_break()
        hm = heatmaps.detach().cpu().numpy()
        coords = coords.detach().cpu().numpy()
        n_img, n_joints, heatmap_height, heatmap_width = hm.shape
        for n in range(n_img):
            for p in range(n_joints):
                px = int(math.floor(coords[n][p][0] + 0.5))
                py = int(math.floor(coords[n][p][1] + 0.5))
                if 1 < px < heatmap_width - 1 and 1 < py < heatmap_height - 1:
                    diff = np.array([hm[n][p][py][px + 1] - hm[n][p][py][px - 1],
                                     hm[n][p][py + 1][px] - hm[n][p][py - 1][px]])
                    coords[n][p] += np.sign(diff) * 0.25
        preds = coords.copy()
        c, s = center.cpu().numpy(), scale.cpu().numpy()
        for i in range(n_img):
            preds[i] = transform_preds(coords[i], c[i], s[i], (heatmap_width, heatmap_height))
        return torch.from_numpy(preds).to(heatmaps.device), maxvals

    def forward(self, images, center, scale):
        heatmaps = self.head(self.backbone(images))
        preds, maxvals = self.get_final_preds(heatmaps, center, scale)
        # per-instance score: mean confidence of the confident joints, down-weighted for small boxes
        vis = (maxvals.squeeze(-1) > 0.2).float()
        box_score = (maxvals.squeeze(-1) * vis).sum(1) / vis.sum(1).clamp(min=1)
        area = scale[:, 0] * scale[:, 1]
        box_score = box_score * min(1.0, math.sqrt(area.mean()) / 64.0)
        return heatmaps, preds, maxvals, box_score


def build():
    torch.manual_seed(0)
    cfg = PoseConfig()
    model = SimpleBaseline(cfg).eval()
    images = torch.randn(2, 3, *cfg.input_size)
    center = torch.tensor([[120.0, 90.0], [300.0, 210.0]])
    scale = torch.tensor([[96.0, 128.0], [60.0, 80.0]])
    return model, (images, center, scale)
