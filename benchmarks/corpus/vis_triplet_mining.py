"""Metric-learning embedding net with online batch-hard / semi-hard triplet mining.

Loss from Hermans et al., "In Defense of the Triplet Loss" (2017); semi-hard
variant from FaceNet. Batches are P classes x K samples.
"""
import logging
from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger(__name__)


def pairwise_distances(emb: torch.Tensor, squared: bool = False) -> torch.Tensor:
    dot = emb @ emb.t()
    sq = dot.diagonal()
    d = (sq.unsqueeze(0) - 2.0 * dot + sq.unsqueeze(1)).clamp(min=0.0)
    if not squared:
        zero = (d == 0.0).float()
        d = (d + zero * 1e-16).sqrt() * (1.0 - zero)
    return d


def get_masks(labels: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    same = labels.unsqueeze(0) == labels.unsqueeze(1)
    eye = torch.eye(labels.shape[0], dtype=torch.bool, device=labels.device)
    return same & ~eye, ~same


class TripletMiningLoss(nn.Module):
    def __init__(self, margin: float = 0.2, mining: str = "semihard", squared: bool = False):
        super().__init__()
        self.margin = margin
        self.mining = mining
        self.squared = squared

    def forward(self, embeddings, labels):
        dist = pairwise_distances(embeddings, self.squared)
        pos_mask, neg_mask = get_masks(labels)

        valid_anchor = pos_mask.any(dim=1)
        if not valid_anchor.any():
            return embeddings.new_zeros(()), embeddings.new_zeros(())

        d_ap = (dist * pos_mask.float()).max(dim=1).values
        max_d = dist.max(dim=1, keepdim=True).values
        d_an_hard = (dist + max_d * (~neg_mask).float()).min(dim=1).values

        if self.mining == "semihard":
            semi = neg_mask & (dist > d_ap.unsqueeze(1)) & (dist < d_ap.unsqueeze(1) + self.margin)
            d_an_semi = torch.where(semi, dist, torch.full_like(dist, float("inf"))).min(dim=1).values
            has_semi = semi.any(dim=1)
            d_an = torch.where(has_semi, d_an_semi, d_an_hard)
        else:
            d_an = d_an_hard

        losses = F.relu(d_ap - d_an + self.margin)
        losses = losses[valid_anchor]
        active = torch.masked_select(losses, losses > 1e-16)
        logger.debug("active triplets %d/%d, hardest: %s", active.numel(), losses.numel(),
                     [round(v, 3) for v in losses.topk(min(3, losses.numel())).values.tolist()])
        loss = active.mean() if active.numel() > 0 else losses.sum() * 0.0
        frac_active = active.numel() / max(losses.numel(), 1)
        return loss, torch.tensor(frac_active)


class EmbeddingNet(nn.Module):
    def __init__(self, in_ch=3, emb_dim=32, width=16):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_ch, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, width * 2, 3, padding=1), nn.BatchNorm2d(width * 2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width * 2, width * 4, 3, padding=1), nn.BatchNorm2d(width * 4), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.embed = nn.Linear(width * 4, emb_dim)

    def forward(self, x):
        return F.normalize(self.embed(self.features(x)), dim=-1)


class TripletModel(nn.Module):
    def __init__(self, margin=0.2):
        super().__init__()
        self.net = EmbeddingNet()
        self.criterion = TripletMiningLoss(margin=margin)

    def forward(self, images, labels):
        emb = self.net(images)
        loss, frac = self.criterion(emb, labels)
        return emb, loss, frac


def build():
    torch.manual_seed(0)
    model = TripletModel().eval()
    P, K = 4, 4
    images = torch.randn(P * K, 3, 16, 16)
    labels = torch.arange(P).repeat_interleave(K)
    return model, (images, labels)
