import copy

import torch
from torch import nn


def make_grid(n):
    steps = torch.arange(n)
    return torch.stack([steps, steps.flip(0)]).float()


class Model(nn.Module):
    def forward(self, x):
        grid = make_grid(4)
        start = copy.deepcopy(grid)  # break
        return x + (grid - start).sum()
