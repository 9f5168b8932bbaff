from torch import nn


class Model(nn.Module):
    def forward(self, x):
        parts = x.chunk(2)
        sizes = [p.sum().item() for p in parts]  # break
        return x * sizes[0]
