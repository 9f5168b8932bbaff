"""GPT-2's GELU written out by hand: eight eager kernels for one pointwise function."""

import math

import torch
from torch import nn


class TanhGelu(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
