"""The epilogue after an MLP's first linear layer: bias, exact GELU, dropout (identity in eval)."""

import torch
import torch.nn.functional as F
from torch import nn


class BiasGeluDropout(nn.Module):
    def __init__(self, hidden: int, p: float = 0.1):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(hidden) * 0.02)
        self.dropout = nn.Dropout(p)

    def forward(self, x):
        h = F.gelu(x + self.bias)
        return self.dropout(h)
