import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 8**-0.5

    def forward(self, x):
        keep = x > 0
        h = torch.where(keep, x, torch.zeros_like(x)) * self.scale
        n = keep.sum().clamp(min=1)
        total = h.sum() / n
        widths = sorted([3, 1, 2])
        return h + total, widths[0]
