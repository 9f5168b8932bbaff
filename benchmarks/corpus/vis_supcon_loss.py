"""Supervised contrastive learning (Khosla et al., 2020): encoder + projection + SupConLoss.

The loss follows the reference implementation: features are (bsz, n_views, dim),
positives are all other samples sharing the label, the anchor itself is masked out.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class SupConLoss(nn.Module):
    def __init__(self, temperature=0.07, contrast_mode="all", base_temperature=0.07):
        super().__init__()
        self.temperature = temperature
        self.contrast_mode = contrast_mode
        self.base_temperature = base_temperature

    def forward(self, features, labels=None):
        if features.dim() < 3:
            raise ValueError("`features` needs to be [bsz, n_views, ...]")
        if features.dim() > 3:
            features = features.view(features.shape[0], features.shape[1], -1)
        batch_size = features.shape[0]
        if labels is None:
            mask = torch.eye(batch_size, dtype=torch.float32, device=features.device)
        else:
            labels = labels.contiguous().view(-1, 1)
            if labels.shape[0] != batch_size:
                raise ValueError("Num of labels does not match num of features")
            mask = torch.eq(labels, labels.T).float()

        contrast_count = features.shape[1]
        contrast_feature = torch.cat(torch.unbind(features, dim=1), dim=0)
        if self.contrast_mode == "one":
            anchor_feature = features[:, 0]
            anchor_count = 1
        elif self.contrast_mode == "all":
            anchor_feature = contrast_feature
            anchor_count = contrast_count
        else:
            raise ValueError(f"Unknown mode: {self.contrast_mode}")

        anchor_dot_contrast = torch.matmul(anchor_feature, contrast_feature.T) / self.temperature
        logits_max, _ = torch.max(anchor_dot_contrast, dim=1, keepdim=True)
        logits = anchor_dot_contrast - logits_max.detach()

        mask = mask.repeat(anchor_count, contrast_count)
        n = batch_size * anchor_count
        logits_mask = torch.ones_like(mask).scatter_(1, torch.arange(n, device=mask.device).view(-1, 1), 0)
        mask = mask * logits_mask

        exp_logits = torch.exp(logits) * logits_mask
        log_prob = logits - torch.log(exp_logits.sum(1, keepdim=True))
        mask_pos_pairs = mask.sum(1)
        mask_pos_pairs = torch.where(mask_pos_pairs < 1e-6, torch.ones_like(mask_pos_pairs), mask_pos_pairs)
        mean_log_prob_pos = (mask * log_prob).sum(1) / mask_pos_pairs

        loss = -(self.temperature / self.base_temperature) * mean_log_prob_pos
        return loss.view(anchor_count, batch_size).mean()


class SupConModel(nn.Module):
    def __init__(self, in_ch=3, feat_dim=32, width=32):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(in_ch, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width * 2, 3, stride=2, padding=1), nn.BatchNorm2d(width * 2), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.head = nn.Sequential(nn.Linear(width * 2, width * 2), nn.ReLU(inplace=True), nn.Linear(width * 2, feat_dim))
        self.criterion = SupConLoss(temperature=0.1)

    def forward(self, view1, view2, labels):
        bsz = labels.shape[0]
        images = torch.cat([view1, view2], dim=0)
        feats = F.normalize(self.head(self.encoder(images)), dim=1)
        f1, f2 = torch.split(feats, [bsz, bsz], dim=0)
        features = torch.cat([f1.unsqueeze(1), f2.unsqueeze(1)], dim=1)
        loss = self.criterion(features, labels)
        return loss, features


def build():
    torch.manual_seed(0)
    model = SupConModel().eval()
    v1 = torch.randn(8, 3, 16, 16)
    v2 = v1 + 0.1 * torch.randn(8, 3, 16, 16)
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 3, 3])
    return model, (v1, v2, labels)
