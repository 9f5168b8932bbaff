import numpy as np
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.k = 3.0

    def forward(self, x):
        err = (x * 2).pow(2)
        err_np = err.detach().cpu().numpy()
        threshold = np.mean(err_np) + self.k * np.std(err_np)
        flags = torch.from_numpy((err_np > threshold).astype(np.float32))
        return err / (float(threshold) + 1e-8), flags  # break
