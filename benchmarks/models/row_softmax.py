"""Scaled softmax over the last dim (attention probabilities without the matmuls)."""

import torch
from torch import nn


class RowSoftmax(nn.Module):
    def __init__(self, head_dim: int = 64):
        super().__init__()
        self.scale = head_dim**-0.5

    def forward(self, scores):
        return torch.softmax(scores * self.scale, dim=-1)
