from typing import Tuple

import torch
from torch import nn


def pair_masks(labels: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    same = labels.unsqueeze(0) == labels.unsqueeze(1)
    return same, ~same


class Model(nn.Module):
    def forward(self, x):
        labels = (x * 3).long() % 2
        positive, negative = pair_masks(labels)
        has_pair = positive.any(dim=1)
        if not has_pair.any():  # break
            return x
        return x + negative.float().sum()
