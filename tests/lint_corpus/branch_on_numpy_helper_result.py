from torch import nn


def above(values, limit):
    return values > limit


class Model(nn.Module):
    def forward(self, x):
        h = x * 2
        peaks = above(h.detach().numpy(), 0.5)
        if peaks.any():  # break
            return h * 2
        return h
