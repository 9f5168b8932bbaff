"""ESRGAN generator (RRDBNet, Wang et al. 2018), reduced width, with tiled inference.

Large inputs are split into overlapping tiles that are super-resolved
independently and stitched back. `dump_dir` lets us keep the trunk features of
the last call around for the feature-visualisation notebook.
"""
import os
import tempfile
from typing import Iterator, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_layer(block, n_layers, **kwargs):
    return nn.Sequential(*[block(**kwargs) for _ in range(n_layers)])


class ResidualDenseBlock(nn.Module):
    def __init__(self, nf=16, gc=8):
        super().__init__()
        self.conv1 = nn.Conv2d(nf, gc, 3, 1, 1)
        self.conv2 = nn.Conv2d(nf + gc, gc, 3, 1, 1)
        self.conv3 = nn.Conv2d(nf + 2 * gc, gc, 3, 1, 1)
        self.conv4 = nn.Conv2d(nf + 3 * gc, gc, 3, 1, 1)
        self.conv5 = nn.Conv2d(nf + 4 * gc, nf, 3, 1, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, a=0, mode="fan_in")
                m.weight.data *= 0.1
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x1 = self.lrelu(self.conv1(x))
        x2 = self.lrelu(self.conv2(torch.cat((x, x1), 1)))
        x3 = self.lrelu(self.conv3(torch.cat((x, x1, x2), 1)))
        x4 = self.lrelu(self.conv4(torch.cat((x, x1, x2, x3), 1)))
        x5 = self.conv5(torch.cat((x, x1, x2, x3, x4), 1))
        return x5 * 0.2 + x


class RRDB(nn.Module):
    def __init__(self, nf, gc=8):
        super().__init__()
        self.rdb1 = ResidualDenseBlock(nf, gc)
        self.rdb2 = ResidualDenseBlock(nf, gc)
        self.rdb3 = ResidualDenseBlock(nf, gc)

    def forward(self, x):
        return self.rdb3(self.rdb2(self.rdb1(x))) * 0.2 + x


def iter_tiles(h: int, w: int, tile: int, overlap: int) -> Iterator[Tuple[int, int, int, int]]:
    stride = tile - overlap
    for y in range(0, max(h - overlap, 1), stride):
        for x in range(0, max(w - overlap, 1), stride):
            y0, x0 = min(y, max(h - tile, 0)), min(x, max(w - tile, 0))
            yield y0, min(y0 + tile, h), x0, min(x0 + tile, w)


class RRDBNet(nn.Module):
    def __init__(self, in_nc=3, out_nc=3, nf=16, nb=2, gc=8, scale=4, tile=0, tile_overlap=4,
                 dump_dir: Optional[str] = None):
        super().__init__()
        self.scale, self.tile, self.tile_overlap = scale, tile, tile_overlap
        self.dump_dir = dump_dir
        self.conv_first = nn.Conv2d(in_nc, nf, 3, 1, 1)
        self.body = make_layer(RRDB, nb, nf=nf, gc=gc)
        self.conv_body = nn.Conv2d(nf, nf, 3, 1, 1)
        self.conv_up1 = nn.Conv2d(nf, nf, 3, 1, 1)
        self.conv_up2 = nn.Conv2d(nf, nf, 3, 1, 1)
        self.conv_hr = nn.Conv2d(nf, nf, 3, 1, 1)
        self.conv_last = nn.Conv2d(nf, out_nc, 3, 1, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    def _forward_single(self, x):
        feat = self.conv_first(x)
        body_feat = self.conv_body(self.body(feat))
        if self.dump_dir is not None:
            torch.save({"trunk": body_feat.detach().cpu(), "shallow": feat.detach().cpu()},
                       os.path.join(self.dump_dir, "rrdb_features.pt"))
        feat = feat + body_feat
        feat = self.lrelu(self.conv_up1(F.interpolate(feat, scale_factor=2, mode="nearest")))
        feat = self.lrelu(self.conv_up2(F.interpolate(feat, scale_factor=2, mode="nearest")))
        return self.conv_last(self.lrelu(self.conv_hr(feat)))

    def forward(self, lr):
        b, c, h, w = lr.shape
        if self.tile <= 0 or (h <= self.tile and w <= self.tile):
            sr = self._forward_single(lr)
        else:
            s = self.scale
            sr = lr.new_zeros(b, c, h * s, w * s)
            weight = lr.new_zeros(1, 1, h * s, w * s)
            for y0, y1, x0, x1 in iter_tiles(h, w, self.tile, self.tile_overlap):
                sr[..., y0 * s:y1 * s, x0 * s:x1 * s] += self._forward_single(lr[..., y0:y1, x0:x1])
                weight[..., y0 * s:y1 * s, x0 * s:x1 * s] += 1
            sr = sr / weight
        if sr.min() < 0 or sr.max() > 1:
            sr = sr.clamp(0, 1)
        return sr


def build():
    torch.manual_seed(0)
    model = RRDBNet(tile=8, dump_dir=tempfile.gettempdir()).eval()
    lr = torch.rand(1, 3, 12, 12)
    return model, (lr,)
