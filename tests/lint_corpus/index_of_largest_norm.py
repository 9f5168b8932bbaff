from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

    def forward(self, x):
        norms = []
        h = x
        for block in self.blocks:
            h = block(h)
            norms.append(h.norm())
        best = norms.index(max(norms))  # break
        return h, best
