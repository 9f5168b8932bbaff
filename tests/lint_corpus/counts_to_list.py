from torch import nn


class Model(nn.Module):
    def forward(self, x):
        counts = (x > 0).long()
        values = counts.tolist()  # break
        return x * 2, values
