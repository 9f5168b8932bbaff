"""LoRA (Hu et al., 2021) applied to the attention projections of a small GPT block.

`LoRALinear` wraps a frozen nn.Linear and adds a low-rank update B @ A scaled
by alpha / r. `merge()` folds the update into the base weight for deployment.
"""
import math
from dataclasses import dataclass
from typing import Iterable

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LoraConfig:
    r: int = 4
    alpha: int = 8
    dropout: float = 0.05
    target_modules: tuple = ("q_proj", "v_proj")


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, r: int, alpha: int, dropout: float = 0.0):
        super().__init__()
        self.base = base
        self.r = r
        self.scaling = alpha / r
        self.lora_A = nn.Parameter(torch.zeros(r, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))
        self.lora_dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.merged = False
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        # B is normally zero-initialised; small values so the adapter path is visible
        nn.init.normal_(self.lora_B, std=0.02)
        for p in self.base.parameters():
            p.requires_grad = False

    def forward(self, x):
        out = self.base(x)
        if self.merged or self.r == 0:
            return out
        return out + (self.lora_dropout(x) @ self.lora_A.t() @ self.lora_B.t()) * self.scaling

    @torch.no_grad()
    def merge(self):
        if not self.merged:
            self.base.weight += (self.lora_B @ self.lora_A) * self.scaling
            self.merged = True


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        B, T, C = x.shape
        h = self.n_heads
        q = self.q_proj(x).view(B, T, h, C // h).transpose(1, 2)
        k = self.k_proj(x).view(B, T, h, C // h).transpose(1, 2)
        v = self.v_proj(x).view(B, T, h, C // h).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, C))


class GPTBlock(nn.Module):
    def __init__(self, d_model=64, n_heads=4):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(approximate="tanh"), nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=300, d_model=64, n_layers=2, n_heads=4, block_size=32):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(block_size, d_model)
        self.blocks = nn.ModuleList([GPTBlock(d_model, n_heads) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


def inject_lora(model: nn.Module, cfg: LoraConfig, targets: Iterable[str] = None) -> nn.Module:
    targets = tuple(targets or cfg.target_modules)
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if child_name in targets and isinstance(child, nn.Linear):
                setattr(module, child_name, LoRALinear(child, cfg.r, cfg.alpha, cfg.dropout))
    return model


def build():
    torch.manual_seed(0)
    model = inject_lora(TinyGPT(), LoraConfig()).eval()
    idx = torch.randint(0, 300, (2, 24))
    return model, (idx,)
