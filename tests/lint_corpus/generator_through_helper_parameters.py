import torch
from torch import nn


def noise_like(t, generator):
    return torch.randn(t.shape, generator=generator)  # break


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def sample(self, mean, generator=None):
        return mean + noise_like(mean, generator)

    def forward(self, x):
        g = None
        if not self.training:
            g = torch.Generator().manual_seed(0)  # break
        return self.sample(self.proj(x), g)
