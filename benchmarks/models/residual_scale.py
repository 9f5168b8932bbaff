"""A residual connection with a scaled branch (LayerScale / DeepNet style)."""

from torch import nn


class ResidualScale(nn.Module):
    def __init__(self, alpha: float = 0.5):
        super().__init__()
        self.alpha = alpha

    def forward(self, x, y):
        return x + self.alpha * y
