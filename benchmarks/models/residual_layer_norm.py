"""A transformer block's residual add and the layer norm after it (BERT's `LayerNorm(h + input)`)."""

from torch import nn


class ResidualLayerNorm(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x, y):
        return self.norm(x + y)
