from torch import nn


class Model(nn.Module):
    def forward(self, x):
        h = x * 2
        kind = type(h).__name__
        return h + 1, kind
