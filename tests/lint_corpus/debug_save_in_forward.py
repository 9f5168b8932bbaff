import os

import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        h = x.exp()
        torch.save({"h": h.detach()}, os.devnull)  # break
        return h
