"""A transformer block's residual add and the layer norm after it: both results are used."""

from torch import nn


class ResidualLayerNorm(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x, y):
        residual = x + y
        normed = self.norm(residual)
        return residual, normed
