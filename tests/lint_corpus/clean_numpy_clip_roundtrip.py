import numpy as np
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        arr = x.detach().cpu().numpy()
        clipped = np.clip(arr, -1, 1)
        return torch.from_numpy(clipped) * 2
