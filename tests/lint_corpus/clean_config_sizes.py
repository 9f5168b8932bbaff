import math

from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = 2
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        head_dim = x.shape[-1] // self.heads
        scale = 1.0 / math.sqrt(head_dim)
        q = self.proj(x).view(self.heads, head_dim) * scale
        order = sorted(range(self.heads), key=lambda i: -i)
        return q[order[0]], min(q.shape[0], 4)
