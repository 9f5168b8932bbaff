"""YOLO-style detection output layer with a pure-PyTorch class-aware NMS.

Written without torchvision so it can be exported/debugged anywhere; the NMS is
the classic greedy "pick the best, drop everything overlapping it" loop.
"""
from dataclasses import dataclass
from typing import List

import torch
import torch.nn as nn


@dataclass
class YoloHeadConfig:
    in_channels: int = 32
    num_classes: int = 4
    anchors: tuple = ((10, 13), (16, 30), (33, 23))
    stride: int = 8
    conf_thresh: float = 0.25
    iou_thresh: float = 0.45
    max_det: int = 50


def box_iou(box1: torch.Tensor, box2: torch.Tensor) -> torch.Tensor:
    area1 = (box1[:, 2] - box1[:, 0]) * (box1[:, 3] - box1[:, 1])
    area2 = (box2[:, 2] - box2[:, 0]) * (box2[:, 3] - box2[:, 1])
    lt = torch.max(box1[:, None, :2], box2[None, :, :2])
    rb = torch.min(box1[:, None, 2:], box2[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(dim=2)
    return inter / (area1[:, None] + area2[None, :] - inter + 1e-9)


def xywh2xyxy(x):
    y = x.clone()
    y[..., 0] = x[..., 0] - x[..., 2] / 2
    y[..., 1] = x[..., 1] - x[..., 3] / 2
    y[..., 2] = x[..., 0] + x[..., 2] / 2
    y[..., 3] = x[..., 1] + x[..., 3] / 2
    return y


def greedy_nms(boxes: torch.Tensor, scores: torch.Tensor, iou_thresh: float) -> torch.Tensor:
    order = scores.argsort(descending=True)
    keep: List[int] = []
    while order.numel() > 0:
        i = order[0].item()
        keep.append(i)
        if order.numel() == 1:
            break
        ious = box_iou(boxes[i].unsqueeze(0), boxes[order[1:]]).squeeze(0)
        order = order[1:][ious <= iou_thresh]
    return torch.as_tensor(keep, dtype=torch.long)


class YoloDetect(nn.Module):
    def __init__(self, cfg: YoloHeadConfig):
        super().__init__()
        self.cfg = cfg
        self.na = len(cfg.anchors)
        self.no = cfg.num_classes + 5
        self.register_buffer("anchor_grid", torch.tensor(cfg.anchors, dtype=torch.float32).view(1, self.na, 1, 1, 2))
        self.m = nn.Conv2d(cfg.in_channels, self.na * self.no, 1)

    def _make_grid(self, nx, ny):
        yv, xv = torch.meshgrid(torch.arange(ny), torch.arange(nx), indexing="ij")
        return torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2).float()

    def decode(self, x):
        bs, _, ny, nx = x.shape
        x = self.m(x).view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
        y = x.sigmoid()
        grid = self._make_grid(nx, ny)
        xy = (y[..., 0:2] * 2 - 0.5 + grid) * self.cfg.stride
        wh = (y[..., 2:4] * 2) ** 2 * self.anchor_grid
        y = torch.cat((xy, wh, y[..., 4:]), -1)
        return y.view(bs, -1, self.no)

    def non_max_suppression(self, prediction):
        cfg = self.cfg
        output = []
        for xi, x in enumerate(prediction):
            x = x[x[:, 4] > cfg.conf_thresh]
            if not x.shape[0]:
                output.append(torch.zeros((0, 6)))
                continue
            x[:, 5:] *= x[:, 4:5]
            box = xywh2xyxy(x[:, :4])
            conf, j = x[:, 5:].max(1, keepdim=True)
            x = torch.cat((box, conf, j.float()), 1)[conf.view(-1) > cfg.conf_thresh]
            per_class = []
            for c in j.unique():
                xc = x[x[:, 5] == c]
                keep = greedy_nms(xc[:, :4], xc[:, 4], cfg.iou_thresh)
                per_class.append(xc[keep])
            per_class = sorted(per_class, key=lambda d: d[:, 4].max(), reverse=True)
            dets = torch.cat(per_class) if per_class else torch.zeros((0, 6))
            output.append(dets[: cfg.max_det])
        return output

    def forward(self, feats):
        pred = self.decode(feats)
        dets = self.non_max_suppression(pred)
        return pred, dets


def build():
    torch.manual_seed(0)
    model = YoloDetect(YoloHeadConfig()).eval()
    feats = torch.randn(2, 32, 6, 6)
    return model, (feats,)
