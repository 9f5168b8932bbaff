import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        batch = x.shape[0]
        half = batch // 2
        h = self.proj(x)
        parts = h.split([half, batch - half])
        widest = max(range(len(parts)), key=lambda i: -i)
        pad = [0] * half
        windows = torch.zeros(half, 2) + torch.arange(half).unsqueeze(1)
        ranked = sorted(parts, key=lambda p: p.shape[0])
        return h[:half] * 2, h.narrow(0, 0, half), windows, ranked[0], pad, widest
