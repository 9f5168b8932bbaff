"""ATSS label assignment (Zhang et al., CVPR 2020) + focal/GIoU loss for a one-stage head.

For each ground-truth box we take the top-k closest anchors on every pyramid
level, set the IoU threshold to mean + std of their IoUs and keep candidates whose
centre lies inside the box. Loss is computed in forward so the whole training step
can be wrapped by the trainer.
"""
import logging
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger(__name__)

INF = 1e8


def box_iou(a, b):
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt = torch.max(a[:, None, :2], b[None, :, :2])
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    return inter / (area_a[:, None] + area_b[None] - inter)


def giou_loss(pred, target, eps=1e-7):
    lt = torch.max(pred[:, :2], target[:, :2])
    rb = torch.min(pred[:, 2:], target[:, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    ap = (pred[:, 2:] - pred[:, :2]).prod(-1)
    at = (target[:, 2:] - target[:, :2]).prod(-1)
    union = ap + at - inter + eps
    iou = inter / union
    elt = torch.min(pred[:, :2], target[:, :2])
    erb = torch.max(pred[:, 2:], target[:, 2:])
    enclose = (erb - elt).clamp(min=0).prod(-1) + eps
    return 1 - (iou - (enclose - union) / enclose)


class ATSSAssigner:
    def __init__(self, topk=9, num_classes=3):
        self.topk = topk
        self.num_classes = num_classes

    def __call__(self, anchors: torch.Tensor, num_per_level: List[int], gt_boxes, gt_labels):
        num_gt, num_anchors = gt_boxes.shape[0], anchors.shape[0]
        ious = box_iou(anchors, gt_boxes)  # (A, G)
        gt_ctr = (gt_boxes[:, :2] + gt_boxes[:, 2:]) / 2
        an_ctr = (anchors[:, :2] + anchors[:, 2:]) / 2
        distances = (an_ctr[:, None, :] - gt_ctr[None, :, :]).pow(2).sum(-1).sqrt()

        candidate_idxs = []
        start = 0
        for n in num_per_level:
            end = start + n
            k = min(self.topk, n)
            _, idx = distances[start:end].topk(k, dim=0, largest=False)
            candidate_idxs.append(idx + start)
            start = end
        candidate_idxs = torch.cat(candidate_idxs, dim=0)  # (K, G)

        candidate_ious = ious[candidate_idxs, torch.arange(num_gt)]
        iou_thresh = candidate_ious.mean(0) + candidate_ious.std(0)
        is_pos = candidate_ious >= iou_thresh[None, :]

        cand_ctr = an_ctr[candidate_idxs]  # (K, G, 2)
        l = cand_ctr[..., 0] - gt_boxes[:, 0]
        t = cand_ctr[..., 1] - gt_boxes[:, 1]
        r = gt_boxes[:, 2] - cand_ctr[..., 0]
        b = gt_boxes[:, 3] - cand_ctr[..., 1]
        is_in_gt = torch.stack([l, t, r, b], dim=-1).min(dim=-1).values > 0.01
        is_pos = is_pos & is_in_gt

        ious_inf = torch.full_like(ious, -INF).t().contiguous().view(-1)
        flat_idx = (candidate_idxs + torch.arange(num_gt) * num_anchors).view(-1)
        index = flat_idx[is_pos.view(-1)]
        ious_inf[index] = ious.t().contiguous().view(-1)[index]
        ious_inf = ious_inf.view(num_gt, -1).t()

        max_iou, matched_gt = ious_inf.max(dim=1)
        labels = gt_labels[matched_gt]
        labels[max_iou == -INF] = self.num_classes
        return labels, gt_boxes[matched_gt]


class ATSSHead(nn.Module):
    def __init__(self, in_ch=16, num_classes=3, strides=(8, 16), anchor_scale=4.0, topk=9):
        super().__init__()
        self.num_classes = num_classes
        self.strides = strides
        self.anchor_scale = anchor_scale
        self.tower = nn.Sequential(nn.Conv2d(in_ch, in_ch, 3, padding=1), nn.GroupNorm(4, in_ch), nn.ReLU())
        self.cls = nn.Conv2d(in_ch, num_classes, 3, padding=1)
        self.reg = nn.Conv2d(in_ch, 4, 3, padding=1)
        self.assigner = ATSSAssigner(topk=topk, num_classes=num_classes)

    def anchors_for(self, feat, stride):
        h, w = feat.shape[-2:]
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        cx = (xs.reshape(-1).float() + 0.5) * stride
        cy = (ys.reshape(-1).float() + 0.5) * stride
        half = self.anchor_scale * stride / 2
        return torch.stack([cx - half, cy - half, cx + half, cy + half], dim=1)

    def forward(self, feats: List[torch.Tensor], gt_boxes: torch.Tensor, gt_labels: torch.Tensor):
        cls_out, reg_out, anchors = [], [], []
        for f, s in zip(feats, self.strides):
            x = self.tower(f)
            cls_out.append(self.cls(x)[0].flatten(1).t())
            reg_out.append(F.relu(self.reg(x)[0]).flatten(1).t() * s)
            anchors.append(self.anchors_for(f, s))
        num_per_level = [a.shape[0] for a in anchors]
        cls_logits, reg_ltrb, anchors = torch.cat(cls_out), torch.cat(reg_out), torch.cat(anchors)

        labels, matched_boxes = self.assigner(anchors, num_per_level, gt_boxes, gt_labels)
        pos_mask = labels < self.num_classes
        num_pos = max(pos_mask.sum().item(), 1.0)
        logger.debug("positives per level: %s", [int(m.sum()) for m in torch.split(pos_mask, num_per_level)])

        targets = F.one_hot(labels, self.num_classes + 1)[:, : self.num_classes].float()
        p = cls_logits.sigmoid()
        ce = F.binary_cross_entropy_with_logits(cls_logits, targets, reduction="none")
        p_t = p * targets + (1 - p) * (1 - targets)
        loss_cls = (ce * (1 - p_t) ** 2 * (0.25 * targets + 0.75 * (1 - targets))).sum() / num_pos

        ctr = (anchors[:, :2] + anchors[:, 2:]) / 2
        pred_boxes = torch.cat([ctr - reg_ltrb[:, :2], ctr + reg_ltrb[:, 2:]], dim=1)
        loss_box = (giou_loss(pred_boxes, matched_boxes) * pos_mask.float()).sum() / num_pos
        return {"loss_cls": loss_cls, "loss_box": loss_box, "num_pos": pos_mask.sum()}


def build():
    torch.manual_seed(0)
    model = ATSSHead().eval()
    feats = [torch.randn(1, 16, 8, 8), torch.randn(1, 16, 4, 4)]
    gt_boxes = torch.tensor([[4.0, 6.0, 30.0, 40.0], [20.0, 18.0, 60.0, 58.0], [40.0, 2.0, 62.0, 20.0]])
    gt_labels = torch.tensor([0, 2, 1])
    return model, (feats, gt_boxes, gt_labels)
