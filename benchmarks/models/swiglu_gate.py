"""The gate of a SwiGLU MLP (LLaMA): silu of the gate projection times the up projection."""

import torch.nn.functional as F
from torch import nn


class SwiGLUGate(nn.Module):
    def forward(self, gate, up):
        return F.silu(gate) * up
