from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ratio = 0.5

    def forward(self, x):
        scores = x.softmax(-1)
        k = max(1, int(x.shape[-1] * self.ratio))
        values, indices = scores.topk(k)
        return values.sum() + indices.float().mean()
