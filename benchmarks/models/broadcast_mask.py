"""Scaled attention scores with a padding mask broadcast over heads and queries."""

import torch
from torch import nn


class BroadcastMask(nn.Module):
    def __init__(self, head_dim: int = 64):
        super().__init__()
        self.scale = head_dim**-0.5

    def forward(self, scores, mask):
        return torch.where(mask, scores * self.scale, -1e4)
