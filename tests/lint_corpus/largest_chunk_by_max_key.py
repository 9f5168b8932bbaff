from torch import nn


class Model(nn.Module):
    def forward(self, x):
        parts = list(x.chunk(4))
        longest = max(parts, key=lambda p: p.numel())  # break
        return longest * 2
