from torch import nn


class Model(nn.Module):
    def forward(self, x):
        n = (x > 0).sum()
        acc = x * 0
        for _ in range(n):  # break
            acc = acc + x
        return acc
