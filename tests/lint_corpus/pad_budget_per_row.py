import torch
from torch import nn


class Model(nn.Module):
    """Pads each row up to the batch's largest activation mass: the budgets are tensors."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        h = self.proj(x)
        longest = h.abs().sum(-1).max()
        budgets = [longest - row.size(0) for row in h]
        out = []
        for i, (row, budget) in enumerate(zip(h, budgets)):
            if budget > 3:  # break
                out.append(row * (i + 1))
            else:
                out.append(row)
        return torch.stack(out)


def make_inputs(call):
    return (torch.randn(4, 8),)
