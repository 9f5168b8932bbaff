from torch import nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        lengths = (x > 0).sum()
        target = int(lengths) + 1  # break
        pad = target - x.shape[0] % 4
        return F.pad(x, (0, 4)) * pad
