"""DLRM (Naumov et al., 2019) -- compact re-implementation for CTR prediction.

Dense features go through a bottom MLP, sparse (categorical) features through
EmbeddingBags; pairwise dot-product interactions are concatenated with the
dense representation and fed to a top MLP.
"""
from dataclasses import dataclass, field
from typing import List

import torch
import torch.nn as nn


@dataclass
class DLRMConfig:
    num_dense: int = 13
    table_sizes: List[int] = field(default_factory=lambda: [100, 50, 200, 30, 80])
    embedding_dim: int = 16
    bottom_mlp: List[int] = field(default_factory=lambda: [64, 32, 16])
    top_mlp: List[int] = field(default_factory=lambda: [64, 32, 1])
    interaction_self: bool = False


def make_mlp(in_dim: int, sizes: List[int], sigmoid_last: bool = False) -> nn.Sequential:
    layers = []
    for i, out in enumerate(sizes):
        layers.append(nn.Linear(in_dim, out))
        last = i == len(sizes) - 1
        if not last:
            layers.append(nn.ReLU())
        elif sigmoid_last:
            layers.append(nn.Sigmoid())
        in_dim = out
    return nn.Sequential(*layers)


class DotInteraction(nn.Module):
    def __init__(self, num_features: int, self_interaction: bool = False):
        super().__init__()
        offset = 0 if self_interaction else -1
        li, lj = torch.tril_indices(num_features, num_features, offset=offset)
        self.register_buffer("li", li, persistent=False)
        self.register_buffer("lj", lj, persistent=False)

    def forward(self, dense: torch.Tensor, sparse: List[torch.Tensor]) -> torch.Tensor:
        t = torch.stack([dense] + sparse, dim=1)  # (B, F, D)
        z = torch.bmm(t, t.transpose(1, 2))
        zflat = z[:, self.li, self.lj]
        return torch.cat([dense, zflat], dim=1)


class DLRM(nn.Module):
    def __init__(self, cfg: DLRMConfig):
        super().__init__()
        assert cfg.bottom_mlp[-1] == cfg.embedding_dim
        self.cfg = cfg
        self.bot = make_mlp(cfg.num_dense, cfg.bottom_mlp)
        self.emb = nn.ModuleList(
            [nn.EmbeddingBag(n, cfg.embedding_dim, mode="sum") for n in cfg.table_sizes]
        )
        n_feat = len(cfg.table_sizes) + 1
        self.interact = DotInteraction(n_feat, cfg.interaction_self)
        n_pairs = n_feat * (n_feat + 1) // 2 if cfg.interaction_self else n_feat * (n_feat - 1) // 2
        self.top = make_mlp(cfg.embedding_dim + n_pairs, cfg.top_mlp, sigmoid_last=True)

    def forward(self, dense_x, lS_o, lS_i):
        x = self.bot(torch.log1p(dense_x.clamp_min(0)))
        ly = [emb(lS_i[k], lS_o[k]) for k, emb in enumerate(self.emb)]
        z = self.interact(x, ly)
        p = self.top(z)
        return p.squeeze(-1)


def build():
    torch.manual_seed(0)
    cfg = DLRMConfig()
    model = DLRM(cfg).eval()
    B, L = 8, 3  # 3 lookups per bag
    dense = torch.rand(B, cfg.num_dense) * 100
    offsets = torch.stack([torch.arange(0, B * L, L) for _ in cfg.table_sizes])
    indices = torch.stack([torch.randint(0, n, (B * L,)) for n in cfg.table_sizes])
    return model, (dense, offsets, indices)
