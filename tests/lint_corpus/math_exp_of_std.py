import math

from torch import nn


class Model(nn.Module):
    def forward(self, x):
        temperature = x.std()
        factor = math.exp(-temperature)  # break
        return x * factor
