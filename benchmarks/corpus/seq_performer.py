"""Performer encoder with FAVOR+ attention (Choromanski et al., ICLR 2021).

Random features are orthogonal Gaussian projections. We redraw them on every
forward pass from a fixed seed so that evaluation is reproducible across runs
and devices (the projection matrix is not stored in checkpoints).
"""
import math
from typing import Optional

import torch
import torch.nn as nn


def orthogonal_matrix_chunk(cols: int, generator: torch.Generator, device=None):
    unstructured = torch.randn((cols, cols), generator=generator, device=device)
    q, _ = torch.linalg.qr(unstructured, mode="reduced")
    return q.t()


def gaussian_orthogonal_random_matrix(nb_rows, nb_cols, generator, scaling=0, device=None):
    nb_full_blocks = nb_rows // nb_cols
    blocks = [orthogonal_matrix_chunk(nb_cols, generator, device) for _ in range(nb_full_blocks)]
    remaining = nb_rows - nb_full_blocks * nb_cols
    if remaining > 0:
        blocks.append(orthogonal_matrix_chunk(nb_cols, generator, device)[:remaining])
    final = torch.cat(blocks)
    if scaling == 0:
        multiplier = torch.randn((nb_rows, nb_cols), generator=generator, device=device).norm(dim=1)
    else:
        multiplier = math.sqrt(float(nb_cols)) * torch.ones((nb_rows,), device=device)
    return torch.diag(multiplier) @ final


def softmax_kernel(data, projection_matrix, is_query, eps=1e-4):
    d = data.shape[-1]
    normalizer = d ** -0.25
    ratio = projection_matrix.shape[0] ** -0.5
    data_dash = torch.einsum("...id,jd->...ij", normalizer * data, projection_matrix)
    diag = (data ** 2).sum(-1, keepdim=True) * 0.5 * normalizer ** 2
    if is_query:
        stab = data_dash.amax(dim=-1, keepdim=True)
    else:
        stab = data_dash.amax(dim=(-1, -2), keepdim=True)
    return ratio * (torch.exp(data_dash - diag - stab) + eps)


def linear_attention(q, k, v):
    k_cumsum = k.sum(dim=-2)
    d_inv = 1.0 / torch.einsum("...nd,...d->...n", q, k_cumsum.type_as(q))
    context = torch.einsum("...nd,...ne->...de", k, v)
    return torch.einsum("...de,...nd,...n->...ne", context, q, d_inv)


class FastAttention(nn.Module):
    def __init__(self, dim_heads, nb_features: Optional[int] = None, seed: int = 1234):
        super().__init__()
        self.dim_heads = dim_heads
        self.nb_features = nb_features or int(dim_heads * math.log(dim_heads))
        self.seed = seed

    def forward(self, q, k, v):
        g = torch.Generator(device=q.device)
        g.manual_seed(self.seed)
        proj = gaussian_orthogonal_random_matrix(self.nb_features, self.dim_heads, g, device=q.device)
        q = softmax_kernel(q, proj, is_query=True)
        k = softmax_kernel(k, proj, is_query=False)
        return linear_attention(q, k, v)


class PerformerLayer(nn.Module):
    def __init__(self, dim, heads, ff_mult=4, seed=0):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.to_qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.attn = FastAttention(dim // heads, seed=seed)
        self.to_out = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, dim * ff_mult), nn.GELU(), nn.Linear(dim * ff_mult, dim))

    def forward(self, x):
        B, N, D = x.shape
        q, k, v = self.to_qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (t.view(B, N, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        out = self.attn(q, k, v).transpose(1, 2).reshape(B, N, D)
        x = x + self.to_out(out)
        return x + self.ff(self.norm2(x))


class PerformerLM(nn.Module):
    """Bidirectional Performer encoder used for masked-LM on long sequences."""

    def __init__(self, num_tokens=256, dim=64, depth=2, heads=4, max_seq_len=128):
        super().__init__()
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)
        self.layers = nn.ModuleList([PerformerLayer(dim, heads, seed=1234 + i) for i in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.to_logits = nn.Linear(dim, num_tokens)

    def forward(self, x):
        h = self.token_emb(x) + self.pos_emb(torch.arange(x.size(1), device=x.device))
        for layer in self.layers:
            h = layer(h)
        return self.to_logits(self.norm(h))


def build():
    torch.manual_seed(0)
    model = PerformerLM().eval()
    x = torch.randint(0, 256, (2, 64))
    return model, (x,)
