"""T5-style encoder with bucketed relative position bias (Raffel et al., 2020).

Only the first layer owns a relative attention bias table; it is shared by
all later layers, as in the original Mesh-TF implementation. Uses RMS-style
T5LayerNorm and no biases in linear layers.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class T5Config:
    vocab_size: int = 512
    d_model: int = 64
    d_kv: int = 16
    d_ff: int = 128
    num_layers: int = 2
    num_heads: int = 4
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    dropout_rate: float = 0.1
    layer_norm_epsilon: float = 1e-6


class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states


def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    rel_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    rel_if_large = torch.min(rel_if_large, torch.full_like(rel_if_large, num_buckets - 1))
    relative_buckets += torch.where(is_small, relative_position, rel_if_large)
    return relative_buckets


class T5Attention(nn.Module):
    def __init__(self, cfg: T5Config, has_relative_attention_bias=False):
        super().__init__()
        self.cfg = cfg
        self.n_heads = cfg.num_heads
        self.d_kv = cfg.d_kv
        inner = cfg.num_heads * cfg.d_kv
        self.q = nn.Linear(cfg.d_model, inner, bias=False)
        self.k = nn.Linear(cfg.d_model, inner, bias=False)
        self.v = nn.Linear(cfg.d_model, inner, bias=False)
        self.o = nn.Linear(inner, cfg.d_model, bias=False)
        self.has_relative_attention_bias = has_relative_attention_bias
        if has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(cfg.relative_attention_num_buckets, cfg.num_heads)

    def compute_bias(self, q_len, k_len, device):
        ctx = torch.arange(q_len, dtype=torch.long, device=device)[:, None]
        mem = torch.arange(k_len, dtype=torch.long, device=device)[None, :]
        buckets = relative_position_bucket(
            mem - ctx,
            bidirectional=True,
            num_buckets=self.cfg.relative_attention_num_buckets,
            max_distance=self.cfg.relative_attention_max_distance,
        )
        return self.relative_attention_bias(buckets).permute(2, 0, 1).unsqueeze(0)

    def forward(self, x, mask, position_bias=None):
        B, T, _ = x.shape
        shape = lambda t: t.view(B, -1, self.n_heads, self.d_kv).transpose(1, 2)
        q, k, v = shape(self.q(x)), shape(self.k(x)), shape(self.v(x))
        scores = q @ k.transpose(3, 2)  # T5 does not scale
        if position_bias is None:
            position_bias = self.compute_bias(T, T, x.device) + mask
        attn = F.softmax(scores.float() + position_bias, dim=-1).type_as(scores)
        out = (attn @ v).transpose(1, 2).reshape(B, T, -1)
        return self.o(out), position_bias


class T5Block(nn.Module):
    def __init__(self, cfg: T5Config, has_bias: bool):
        super().__init__()
        self.ln_att = T5LayerNorm(cfg.d_model, cfg.layer_norm_epsilon)
        self.attn = T5Attention(cfg, has_bias)
        self.ln_ff = T5LayerNorm(cfg.d_model, cfg.layer_norm_epsilon)
        self.wi = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.wo = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)
        self.drop = nn.Dropout(cfg.dropout_rate)

    def forward(self, x, mask, position_bias=None):
        h, position_bias = self.attn(self.ln_att(x), mask, position_bias)
        x = x + self.drop(h)
        x = x + self.drop(self.wo(self.drop(F.relu(self.wi(self.ln_ff(x))))))
        return x, position_bias


class T5Encoder(nn.Module):
    def __init__(self, cfg: T5Config):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.block = nn.ModuleList([T5Block(cfg, has_bias=(i == 0)) for i in range(cfg.num_layers)])
        self.final_layer_norm = T5LayerNorm(cfg.d_model, cfg.layer_norm_epsilon)
        self.dropout = nn.Dropout(cfg.dropout_rate)

    def forward(self, input_ids, attention_mask):
        x = self.dropout(self.embed_tokens(input_ids))
        ext = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        position_bias = None
        for blk in self.block:
            x, position_bias = blk(x, ext, position_bias)
        return self.dropout(self.final_layer_norm(x))


def build():
    torch.manual_seed(0)
    model = T5Encoder(T5Config()).eval()
    ids = torch.randint(0, 512, (2, 20))
    mask = torch.ones(2, 20, dtype=torch.long)
    mask[1, 15:] = 0
    return model, (ids, mask)
