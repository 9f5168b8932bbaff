from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        key = str(x.shape[0])
        self.cache[key] = x.detach()
        return x * 2
