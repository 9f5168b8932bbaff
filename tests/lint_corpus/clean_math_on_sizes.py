import math

from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.dim = 8

    def forward(self, x):
        scale = 1 / math.sqrt(self.dim)
        head = int(x.shape[-1] // 2)
        steps = max(x.shape[0], 2)
        h = x * scale
        return h[:head] * steps, float(self.dim)
