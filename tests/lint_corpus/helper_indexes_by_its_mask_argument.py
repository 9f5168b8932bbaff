from torch import nn


def masked_mean(values, mask):
    return values[mask].mean()  # break


class Model(nn.Module):
    def forward(self, x):
        h = x * 2
        return h - masked_mean(h, h > 0)
