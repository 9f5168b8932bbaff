from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def confidence(self, x):
        return self.proj(x).sigmoid().mean()

    def forward(self, x):
        score = self.confidence(x)
        if score > 0.5:  # break
            return x * 2
        return x
