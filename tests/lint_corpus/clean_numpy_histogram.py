import numpy as np
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        h = x * 3
        stats = np.histogram(h.detach().numpy(), bins=4)
        return h + 1, stats
