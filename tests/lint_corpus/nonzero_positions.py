import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        idx = torch.nonzero(x > 0)  # break
        return x.sum() + idx.numel()
