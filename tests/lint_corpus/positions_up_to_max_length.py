import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        lengths = (x.abs() * 4).long() + 1
        positions = torch.arange(lengths.max())  # break
        return positions.float().mean() + x
