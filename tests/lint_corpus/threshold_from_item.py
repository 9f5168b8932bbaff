import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        h = x.tanh()
        threshold = h.max().item()  # break
        return torch.where(h > threshold * 0.5, h, torch.zeros_like(h))
