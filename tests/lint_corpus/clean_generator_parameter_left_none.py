import torch
from torch import nn


def jitter(t, generator=None):
    return t + 0.01 * torch.randn(t.shape, generator=generator)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        h = self.proj(x)
        return jitter(h) + jitter(h, None)
