"""Tokenizer-free byte-level language model with a MEGABYTE-style patch hierarchy.

Bytes are grouped into fixed-size patches. A global transformer runs over patch
embeddings (shifted by one patch) and a small local transformer predicts the
bytes inside each patch conditioned on the global output.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class MegabyteConfig:
    patch_size: int = 4
    d_global: int = 64
    d_local: int = 32
    n_global_layers: int = 2
    n_local_layers: int = 1
    n_heads: int = 4
    max_patches: int = 32
    pad_id: int = 256
    vocab: int = 257  # 256 bytes + pad


def causal_mask(n: int, device=None) -> torch.Tensor:
    return torch.triu(torch.full((n, n), float("-inf"), device=device), diagonal=1)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class Megabyte(nn.Module):
    def __init__(self, cfg: MegabyteConfig):
        super().__init__()
        self.cfg = cfg
        P = cfg.patch_size
        self.global_byte_emb = nn.Embedding(cfg.vocab, cfg.d_global // P)
        self.global_pos = nn.Parameter(torch.zeros(1, cfg.max_patches, cfg.d_global))
        self.global_pad = nn.Parameter(torch.randn(1, 1, cfg.d_global) * 0.02)
        self.global_blocks = nn.ModuleList([Block(cfg.d_global, cfg.n_heads) for _ in range(cfg.n_global_layers)])
        self.global_to_local = nn.Linear(cfg.d_global // P, cfg.d_local)
        self.local_byte_emb = nn.Embedding(cfg.vocab, cfg.d_local)
        self.local_pos = nn.Parameter(torch.zeros(1, P, cfg.d_local))
        self.local_blocks = nn.ModuleList([Block(cfg.d_local, cfg.n_heads) for _ in range(cfg.n_local_layers)])
        self.ln_f = nn.LayerNorm(cfg.d_local)
        self.lm_head = nn.Linear(cfg.d_local, cfg.vocab, bias=False)

    def forward(self, bytes_in: torch.Tensor):
        cfg, P = self.cfg, self.cfg.patch_size
        B, T = bytes_in.shape
        if T % P:
            bytes_in = F.pad(bytes_in, (0, P - T % P), value=cfg.pad_id)
        K = bytes_in.size(1) // P
        patches = bytes_in.view(B, K, P)

        # global model: each patch embedding is the concat of its byte embeddings
        g = self.global_byte_emb(patches).reshape(B, K, cfg.d_global)
        g = torch.cat([self.global_pad.expand(B, 1, -1), g[:, :-1]], dim=1) + self.global_pos[:, :K]
        gmask = causal_mask(K, g.device)
        for blk in self.global_blocks:
            g = blk(g, gmask)

        # local model, one independent sequence per patch
        g_local = self.global_to_local(g.view(B, K, P, cfg.d_global // P))
        prev = torch.cat([torch.full_like(patches[..., :1], cfg.pad_id), patches[..., :-1]], dim=-1)
        h = self.local_byte_emb(prev) + self.local_pos + g_local
        h = h.view(B * K, P, cfg.d_local)
        lmask = causal_mask(P, h.device)
        for blk in self.local_blocks:
            h = blk(h, lmask)
        logits = self.lm_head(self.ln_f(h)).view(B, K * P, cfg.vocab)

        loss = F.cross_entropy(
            logits.reshape(-1, cfg.vocab), bytes_in.reshape(-1), ignore_index=cfg.pad_id
        )
        return logits[:, :T], loss


def build():
    torch.manual_seed(0)
    model = Megabyte(MegabyteConfig()).eval()
    text = "The quick brown fox jumps over the lazy dog!"
    b1 = torch.tensor(list(text.encode("utf-8")))
    b2 = torch.tensor(list(text[::-1].encode("utf-8")))
    return model, (torch.stack([b1, b2]),)
