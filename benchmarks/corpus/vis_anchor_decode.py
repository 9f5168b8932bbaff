"""RetinaNet-style dense detection head with anchor generation and box decoding.

Post-processing follows torchvision's RetinaNet: per level, threshold the
sigmoid scores, keep the top-k candidates, decode the corresponding anchors and
clip them to the image.
"""
import math
from typing import List, Sequence, Tuple

import torch
import torch.nn as nn

BBOX_XFORM_CLIP = math.log(1000.0 / 16)


class AnchorGenerator(nn.Module):
    def __init__(self, sizes: Sequence[int] = (16, 32), aspect_ratios: Sequence[float] = (0.5, 1.0, 2.0), scales=(1.0, 1.26)):
        super().__init__()
        self.sizes = sizes
        self.cell_anchors = [self._base_anchors(s, aspect_ratios, scales) for s in sizes]

    @staticmethod
    def _base_anchors(size, aspect_ratios, scales):
        ratios = torch.as_tensor(aspect_ratios, dtype=torch.float32)
        scales = torch.as_tensor(scales, dtype=torch.float32) * size
        h_ratios = torch.sqrt(ratios)
        w_ratios = 1 / h_ratios
        ws = (w_ratios[:, None] * scales[None, :]).view(-1)
        hs = (h_ratios[:, None] * scales[None, :]).view(-1)
        return torch.stack([-ws, -hs, ws, hs], dim=1) / 2

    @property
    def num_anchors_per_location(self):
        return self.cell_anchors[0].shape[0]

    def forward(self, image_size: Tuple[int, int], feature_shapes: List[Tuple[int, int]]):
        anchors = []
        for (fh, fw), base in zip(feature_shapes, self.cell_anchors):
            stride_h, stride_w = image_size[0] // fh, image_size[1] // fw
            shifts_x = torch.arange(0, fw, dtype=torch.float32) * stride_w
            shifts_y = torch.arange(0, fh, dtype=torch.float32) * stride_h
            sy, sx = torch.meshgrid(shifts_y, shifts_x, indexing="ij")
            shifts = torch.stack((sx.reshape(-1), sy.reshape(-1), sx.reshape(-1), sy.reshape(-1)), dim=1)
            anchors.append((shifts.view(-1, 1, 4) + base.view(1, -1, 4)).reshape(-1, 4))
        return anchors


def decode_boxes(rel_codes, anchors, weights=(1.0, 1.0, 1.0, 1.0)):
    widths = anchors[:, 2] - anchors[:, 0]
    heights = anchors[:, 3] - anchors[:, 1]
    ctr_x = anchors[:, 0] + 0.5 * widths
    ctr_y = anchors[:, 1] + 0.5 * heights
    wx, wy, ww, wh = weights
    dx, dy = rel_codes[:, 0] / wx, rel_codes[:, 1] / wy
    dw = (rel_codes[:, 2] / ww).clamp(max=BBOX_XFORM_CLIP)
    dh = (rel_codes[:, 3] / wh).clamp(max=BBOX_XFORM_CLIP)
    pred_ctr_x = dx * widths + ctr_x
    pred_ctr_y = dy * heights + ctr_y
    pred_w = torch.exp(dw) * widths
    pred_h = torch.exp(dh) * heights
    return torch.stack([pred_ctr_x - 0.5 * pred_w, pred_ctr_y - 0.5 * pred_h,
                        pred_ctr_x + 0.5 * pred_w, pred_ctr_y + 0.5 * pred_h], dim=1)


class RetinaHead(nn.Module):
    def __init__(self, in_channels, num_anchors, num_classes, num_convs=2, prior_prob=0.01):
        super().__init__()
        self.num_classes = num_classes
        cls, reg = [], []
        for _ in range(num_convs):
            cls += [nn.Conv2d(in_channels, in_channels, 3, padding=1), nn.ReLU()]
            reg += [nn.Conv2d(in_channels, in_channels, 3, padding=1), nn.ReLU()]
        self.cls_tower = nn.Sequential(*cls)
        self.reg_tower = nn.Sequential(*reg)
        self.cls_logits = nn.Conv2d(in_channels, num_anchors * num_classes, 3, padding=1)
        self.bbox_reg = nn.Conv2d(in_channels, num_anchors * 4, 3, padding=1)
        nn.init.constant_(self.cls_logits.bias, -math.log((1 - prior_prob) / prior_prob) * 0.1)

    def forward(self, features):
        logits, deltas = [], []
        for f in features:
            n, _, h, w = f.shape
            lg = self.cls_logits(self.cls_tower(f)).view(n, -1, self.num_classes, h, w)
            dl = self.bbox_reg(self.reg_tower(f)).view(n, -1, 4, h, w)
            logits.append(lg.permute(0, 3, 4, 1, 2).reshape(n, -1, self.num_classes))
            deltas.append(dl.permute(0, 3, 4, 1, 2).reshape(n, -1, 4))
        return logits, deltas


class RetinaNetPostProcess(nn.Module):
    def __init__(self, in_channels=32, num_classes=5, score_thresh=0.3, topk_candidates=100, image_size=(64, 64)):
        super().__init__()
        self.image_size = image_size
        self.anchor_generator = AnchorGenerator()
        self.head = RetinaHead(in_channels, self.anchor_generator.num_anchors_per_location, num_classes)
        self.score_thresh = score_thresh
        self.topk_candidates = topk_candidates
        self.num_classes = num_classes

    def postprocess_image(self, logits_per_level, deltas_per_level, anchors_per_level):
        all_boxes, all_scores, all_labels = [], [], []
        for logits, deltas, anchors in zip(logits_per_level, deltas_per_level, anchors_per_level):
            scores = torch.sigmoid(logits).flatten()
            keep_idxs = scores > self.score_thresh
            scores = scores[keep_idxs]
            topk_idxs = torch.nonzero(keep_idxs).squeeze(1)
            num_topk = min(self.topk_candidates, topk_idxs.size(0))
            scores, idxs = scores.topk(num_topk)
            topk_idxs = topk_idxs[idxs]
            anchor_idxs = torch.div(topk_idxs, self.num_classes, rounding_mode="floor")
            labels = topk_idxs % self.num_classes
            boxes = decode_boxes(deltas[anchor_idxs], anchors[anchor_idxs])
            boxes[:, 0::2] = boxes[:, 0::2].clamp(0, self.image_size[1])
            boxes[:, 1::2] = boxes[:, 1::2].clamp(0, self.image_size[0])
            all_boxes.append(boxes)
            all_scores.append(scores)
            all_labels.append(labels)
        return torch.cat(all_boxes), torch.cat(all_scores), torch.cat(all_labels)

    def forward(self, features: List[torch.Tensor]):
        logits, deltas = self.head(features)
        anchors = self.anchor_generator(self.image_size, [f.shape[-2:] for f in features])
        out_boxes, out_scores, out_labels, out_batch = [], [], [], []
        for i in range(features[0].shape[0]):
            boxes, scores, labels = self.postprocess_image(
                [l[i] for l in logits], [d[i] for d in deltas], anchors)
            out_boxes.append(boxes)
            out_scores.append(scores)
            out_labels.append(labels)
            out_batch.append(torch.full_like(labels, i))
        return {
            "boxes": torch.cat(out_boxes),
            "scores": torch.cat(out_scores),
            "labels": torch.cat(out_labels),
            "batch_idx": torch.cat(out_batch),
        }


def build():
    torch.manual_seed(0)
    model = RetinaNetPostProcess().eval()
    feats = [torch.randn(2, 32, 8, 8), torch.randn(2, 32, 4, 4)]
    return model, (feats,)
