import torch
from torch import nn


class Router(nn.Module):
    """Top-1 routing that looks each chosen expert up by its formatted index."""

    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(8, 4)
        self.experts = nn.ModuleDict({f"ffn_{e}": nn.Linear(8, 8) for e in range(4)})

    def forward(self, x):
        scores = self.gate(x).softmax(-1)
        best = scores.mean(0).argmax()
        expert = self.experts[f"ffn_{best}"]  # break
        name = f"ffn_{x.shape[-1] % 4}"
        return expert(x) * scores.max() + self.experts[name](x)


Model = Router


def make_inputs(call):
    return (torch.randn(3, 8),)
