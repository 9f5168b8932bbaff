from torch import nn


class Model(nn.Module):
    def forward(self, x):
        active = (x > 0).nonzero(as_tuple=True)[0]  # break
        count = len(active)
        return x * count
