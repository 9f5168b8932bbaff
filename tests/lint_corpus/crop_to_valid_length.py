from torch import nn


class Model(nn.Module):
    def forward(self, x):
        mask = x > -0.5
        valid = mask.sum()
        h = x.cumsum(0)
        return h[:valid] * 2  # break
