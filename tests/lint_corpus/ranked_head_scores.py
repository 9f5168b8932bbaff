from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([nn.Linear(8, 4) for _ in range(3)])

    def forward(self, x):
        scores = []
        for head in self.heads:
            scores.append(head(x).mean())
        ranked = sorted(scores, reverse=True)  # break
        return ranked[0] * x
