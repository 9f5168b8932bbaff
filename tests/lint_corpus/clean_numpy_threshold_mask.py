import numpy as np
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        h = x * 2
        values = h.detach().cpu().numpy()
        threshold = np.mean(values) + 2.0 * np.std(values)
        mask = torch.from_numpy((values > threshold).astype(np.float32))
        return h * mask + len(values)
