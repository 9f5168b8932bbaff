import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        h = x * 2
        if isinstance(h, torch.Tensor) and h.dim() == 1:
            h = h + 1
        name = type(h).__name__
        return h, name
