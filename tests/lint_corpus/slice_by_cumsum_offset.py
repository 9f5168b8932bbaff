import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        lengths = torch.tensor([3, 5])
        offsets = lengths.cumsum(0)
        first = x[: offsets[0]]  # break
        return first.sum()
