"""Sparse top-k Mixture-of-Experts feed-forward layer (Mixtral-style routing).

Tokens are routed to their top-k experts; each expert only processes the
tokens that were assigned to it. Also returns the Switch-Transformer
load-balancing auxiliary loss.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class MoEConfig:
    hidden_size: int = 32
    ffn_size: int = 64
    num_experts: int = 4
    top_k: int = 2
    router_jitter: float = 0.0


class ExpertMLP(nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        self.w1 = nn.Linear(hidden, ffn, bias=False)
        self.w3 = nn.Linear(hidden, ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def load_balancing_loss(router_probs: torch.Tensor, expert_mask: torch.Tensor) -> torch.Tensor:
    # router_probs: (N, E); expert_mask: (N, k, E)
    tokens_per_expert = expert_mask.float().mean(dim=(0, 1))
    prob_per_expert = router_probs.mean(0)
    return router_probs.size(-1) * torch.sum(tokens_per_expert * prob_per_expert)


class SparseMoEBlock(nn.Module):
    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.cfg = cfg
        self.gate = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)
        self.experts = nn.ModuleList([ExpertMLP(cfg.hidden_size, cfg.ffn_size) for _ in range(cfg.num_experts)])

    def forward(self, hidden_states: torch.Tensor):
        b, t, d = hidden_states.shape
        x = hidden_states.view(-1, d)
        router_logits = self.gate(x)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        topk_w, selected = torch.topk(routing_weights, self.cfg.top_k, dim=-1)
        topk_w = topk_w / topk_w.sum(dim=-1, keepdim=True)
        topk_w = topk_w.to(x.dtype)

        out = torch.zeros_like(x)
        expert_mask = F.one_hot(selected, num_classes=self.cfg.num_experts)  # (N, k, E)
        per_expert = expert_mask.permute(2, 1, 0)  # (E, k, N)

        for e, expert in enumerate(self.experts):
            slot, token_idx = torch.where(per_expert[e])
            if token_idx.numel() == 0:
                continue
            cur = expert(x[token_idx]) * topk_w[token_idx, slot, None]
            out.index_add_(0, token_idx, cur)

        aux = load_balancing_loss(routing_weights, expert_mask)
        return out.view(b, t, d), router_logits, aux


class MoETransformerLayer(nn.Module):
    def __init__(self, cfg: MoEConfig, n_heads: int = 4):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.hidden_size)
        self.attn = nn.MultiheadAttention(cfg.hidden_size, n_heads, batch_first=True)
        self.norm2 = nn.LayerNorm(cfg.hidden_size)
        self.moe = SparseMoEBlock(cfg)

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        moe_out, logits, aux = self.moe(self.norm2(x))
        return x + moe_out, aux


def build():
    torch.manual_seed(0)
    model = MoETransformerLayer(MoEConfig()).eval()
    x = torch.randn(2, 10, 32)
    return model, (x,)
