import random

from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(8, 8)

    def forward(self, x):
        if random.random() < 0.0:  # break
            return x
        return self.layer(x)
