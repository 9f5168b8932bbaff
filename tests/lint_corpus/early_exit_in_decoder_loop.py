import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.step = nn.Linear(8, 8)

    def forward(self, x):
        h = x
        for _ in range(4):
            h = torch.tanh(self.step(h))
            if h.abs().max() < 1e-3:  # break
                break
        return h
