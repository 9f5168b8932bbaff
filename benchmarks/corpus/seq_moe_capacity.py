"""GShard / Switch style MoE with a fixed expert capacity.

Dispatch and combine are expressed as dense einsums over a (tokens, experts,
capacity) tensor, as in the Mesh-TensorFlow reference, so shapes are static.
Tokens that overflow an expert's capacity are dropped (pass through residual).
"""
import math
from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


class Top1Router(nn.Module):
    def __init__(self, d_model: int, num_experts: int, capacity_factor: float = 1.25):
        super().__init__()
        self.num_experts = num_experts
        self.capacity_factor = capacity_factor
        self.classifier = nn.Linear(d_model, num_experts, bias=False)

    def capacity(self, num_tokens: int) -> int:
        return int(math.ceil(num_tokens / self.num_experts * self.capacity_factor))

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # x: (G, S, D) groups of tokens
        logits = self.classifier(x)
        probs = logits.softmax(-1)
        expert_index = probs.argmax(-1)
        expert_mask = F.one_hot(expert_index, self.num_experts).to(x.dtype)  # (G, S, E)

        cap = self.capacity(x.size(1))
        position_in_expert = torch.cumsum(expert_mask, dim=1) * expert_mask  # 1-based
        expert_mask = expert_mask * (position_in_expert <= cap).to(x.dtype)
        position_in_expert = (position_in_expert - 1).clamp(0, cap - 1).long()

        gate = (probs * expert_mask).sum(-1)  # (G, S)
        pos_oh = F.one_hot(position_in_expert, cap).to(x.dtype)  # (G, S, E, C)
        dispatch = expert_mask.unsqueeze(-1) * pos_oh
        combine = gate[..., None, None] * dispatch

        density = expert_mask.mean(1)
        density_proxy = probs.mean(1)
        aux_loss = (density * density_proxy).mean() * self.num_experts ** 2
        return dispatch, combine, aux_loss


class ExpertsFFN(nn.Module):
    """All experts' weights stacked so that they run as a single bmm."""

    def __init__(self, num_experts: int, d_model: int, d_ff: int):
        super().__init__()
        self.wi = nn.Parameter(torch.randn(num_experts, d_model, d_ff) / math.sqrt(d_model))
        self.wo = nn.Parameter(torch.randn(num_experts, d_ff, d_model) / math.sqrt(d_ff))

    def forward(self, x):  # (E, G*C, D)
        return torch.bmm(F.gelu(torch.bmm(x, self.wi)), self.wo)


class SwitchFFN(nn.Module):
    def __init__(self, d_model=32, d_ff=64, num_experts=4, group_size=8):
        super().__init__()
        self.group_size = group_size
        self.router = Top1Router(d_model, num_experts)
        self.experts = ExpertsFFN(num_experts, d_model, d_ff)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, hidden):
        b, t, d = hidden.shape
        x = self.norm(hidden).reshape(-1, self.group_size, d)  # (G, S, D)
        dispatch, combine, aux = self.router(x)
        G, S, E, C = dispatch.shape
        expert_in = torch.einsum("gsec,gsd->egcd", dispatch, x).reshape(E, G * C, d)
        expert_out = self.experts(expert_in).reshape(E, G, C, d)
        y = torch.einsum("gsec,egcd->gsd", combine, expert_out)
        return hidden + y.reshape(b, t, d), aux


def build():
    torch.manual_seed(0)
    model = SwitchFFN().eval()
    return model, (torch.randn(2, 16, 32),)
