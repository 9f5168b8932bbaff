from torch import nn


class Model(nn.Module):
    def forward(self, x):
        h = x.relu()
        if (h > 0.5).any():  # break
            h = h * 2
        return h
