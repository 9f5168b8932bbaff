"""Graph Attention Network (Velickovic et al., 2018) with typed-edge masking.

Edges come as COO `edge_index` plus an `edge_type` vector; only edge types
listed in `allowed_edge_types` take part in message passing (we use this to
ablate relation types without rebuilding the dataset). Attention softmax over
incoming edges is implemented with scatter_reduce, no torch_scatter needed.
"""
import logging
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F


def remove_self_loops(edge_index, edge_attr=None):
    mask = edge_index[0] != edge_index[1]
    edge_index = edge_index[:, mask]
    if edge_attr is not None:
        edge_attr = edge_attr[mask]
    return edge_index, edge_attr


def add_self_loops(edge_index, num_nodes):
    loop = torch.arange(num_nodes, device=edge_index.device)
    return torch.cat([edge_index, loop.unsqueeze(0).repeat(2, 1)], dim=1)


def segment_softmax(src, index, num_nodes):
    """Softmax of `src` (E, H) grouped by destination node `index` (E,)."""
    H = src.size(1)
    idx = index.unsqueeze(-1).expand(-1, H)
    src_max = torch.full((num_nodes, H), float("-inf"), device=src.device).scatter_reduce(0, idx, src, reduce="amax", include_self=True)
    out = (src - src_max[index]).exp()
    denom = torch.zeros((num_nodes, H), device=src.device).index_add_(0, index, out)
    return out / (denom[index] + 1e-16)


class GATConv(nn.Module):
    def __init__(self, in_channels, out_channels, heads=4, concat=True, negative_slope=0.2, dropout=0.0):
        super().__init__()
        self.heads, self.out_channels, self.concat = heads, out_channels, concat
        self.negative_slope = negative_slope
        self.dropout = dropout
        self.lin = nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        self.bias = nn.Parameter(torch.zeros(heads * out_channels if concat else out_channels))
        nn.init.xavier_uniform_(self.lin.weight)
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)
        self.logger = logging.getLogger(self.__class__.__name__)

    def forward(self, x, edge_index):
        N, H, C = x.size(0), self.heads, self.out_channels
        edge_index, _ = remove_self_loops(edge_index)
        edge_index = add_self_loops(edge_index, N)
        src, dst = edge_index

        x = self.lin(x).view(N, H, C)
        alpha_src = (x * self.att_src).sum(-1)
        alpha_dst = (x * self.att_dst).sum(-1)
        alpha = F.leaky_relu(alpha_src[src] + alpha_dst[dst], self.negative_slope)
        alpha = segment_softmax(alpha, dst, N)
        self.logger.debug("attention entropy: %s", repr(-(alpha * alpha.clamp_min(1e-12).log()).sum(0)))
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)

        out = torch.zeros(N, H, C, device=x.device).index_add_(0, dst, x[src] * alpha.unsqueeze(-1))
        out = out.reshape(N, H * C) if self.concat else out.mean(dim=1)
        return out + self.bias


class TypedGAT(nn.Module):
    def __init__(self, in_dim=12, hidden=8, heads=4, num_classes=5, allowed_edge_types: Sequence[int] = (0, 2)):
        super().__init__()
        self.register_buffer("allowed_edge_types", torch.tensor(list(allowed_edge_types)))
        self.conv1 = GATConv(in_dim, hidden, heads=heads, dropout=0.6)
        self.conv2 = GATConv(hidden * heads, num_classes, heads=1, concat=False, dropout=0.6)

    def forward(self, x, edge_index, edge_type):
        keep = torch.isin(edge_type, self.allowed_edge_types)
        edge_index = edge_index[:, keep]
        x = F.dropout(x, p=0.6, training=self.training)
        x = F.elu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.6, training=self.training)
        x = self.conv2(x, edge_index)
        return F.log_softmax(x, dim=-1)


def build():
    torch.manual_seed(0)
    model = TypedGAT().eval()
    num_nodes, num_edges = 40, 160
    x = torch.randn(num_nodes, 12)
    edge_index = torch.randint(0, num_nodes, (2, num_edges))
    edge_type = torch.randint(0, 3, (num_edges,))
    return model, (x, edge_index, edge_type)
