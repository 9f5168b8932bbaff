from torch import nn


class Model(nn.Module):
    def forward(self, x):
        has_pad = bool((x == 0).any())  # break
        h = x + 1
        return h, has_pad
