from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

    def forward(self, x):
        outs = [expert(x) for expert in self.experts]
        best = max(outs, key=lambda o: o.sum())  # break
        return best * 2
