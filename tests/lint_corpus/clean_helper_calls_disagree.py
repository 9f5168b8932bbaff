from torch import nn


def halve(v):
    if v > 4:
        return v // 2
    return v


class Model(nn.Module):
    def forward(self, x):
        n = halve(x.shape[0])
        if self.training:
            x = x * halve(x)
        return x[:n] * 2
