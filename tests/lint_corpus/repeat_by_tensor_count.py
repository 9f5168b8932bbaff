from torch import nn


class Model(nn.Module):
    def forward(self, x):
        reps = (x.abs().sum() > 1).long() + 1
        return x.repeat(reps)  # break
