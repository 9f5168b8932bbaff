from torch import nn


class Model(nn.Module):
    def forward(self, x):
        candidates = x.unbind(0)
        choice = (x.sum() > 0).long()
        return candidates[choice] * 2  # break
