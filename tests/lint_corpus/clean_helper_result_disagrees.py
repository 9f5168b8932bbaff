import copy

import torch
from torch import nn


def initial_scale(learned):
    if learned:
        return torch.ones(1)
    return 0.5


class Model(nn.Module):
    def forward(self, x):
        scale = initial_scale(False)
        kept = copy.deepcopy(scale)
        return x * kept
