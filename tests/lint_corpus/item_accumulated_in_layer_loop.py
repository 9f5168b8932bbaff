from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(2)])

    def forward(self, x):
        h = x
        total = 0.0
        for layer in self.layers:
            h = layer(h)
            total += h.mean().item()  # break
        return h * total
