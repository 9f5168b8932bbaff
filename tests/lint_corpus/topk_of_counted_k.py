from torch import nn


class Model(nn.Module):
    def forward(self, x):
        scores = x.softmax(-1)
        k = (scores > 0.1).sum()
        values, _ = scores.topk(k)  # break
        return values.sum()
