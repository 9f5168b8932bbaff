import math

import torch
from torch import nn


class Rotary(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8)))

    def forward(self, x):
        seq = x.shape[0]
        scale = math.sqrt(x.abs().max())  # break
        t = torch.arange(seq, dtype=torch.float32) * scale
        freqs = torch.outer(t, self.inv_freq)
        return torch.cat([freqs.sin(), freqs.cos()], dim=-1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rotary = Rotary()

    def forward(self, x):
        return self.rotary(x)
