from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.stats = {}

    def forward(self, x):
        h = x.relu()
        self.stats["sparsity"] = (h == 0).float().mean().item()  # break
        return h * 2
