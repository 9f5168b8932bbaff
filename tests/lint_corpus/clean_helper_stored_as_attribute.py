from torch import nn


def cap(v):
    if v > 4:
        return 4
    return v


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.limit = cap

    def forward(self, x):
        if self.training:
            x = x * cap(x)
        return x[: self.limit(x.shape[0])] * 2
