from torch import nn


class Model(nn.Module):
    def forward(self, x):
        h = x + 1
        desc = repr(h)  # break
        tag = f"{h.shape[0]} rows"
        return h * 2, desc, tag
