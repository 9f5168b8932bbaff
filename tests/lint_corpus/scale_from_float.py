from torch import nn


class Model(nn.Module):
    def forward(self, x):
        norm = x.norm()
        scale = float(norm)  # break
        return x / (scale + 1e-6)
