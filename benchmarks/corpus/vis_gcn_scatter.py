"""Two-layer GCN (Kipf & Welling) written with plain index_add_ message passing.

No torch_geometric dependency: edges are given as a (2, E) LongTensor in COO
format, self-loops are appended and the symmetric normalisation
D^-1/2 (A + I) D^-1/2 is computed on the fly.
"""
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


def add_self_loops(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    loop = torch.arange(num_nodes, device=edge_index.device)
    return torch.cat([edge_index, torch.stack([loop, loop])], dim=1)


def gcn_norm(edge_index: torch.Tensor, num_nodes: int, edge_weight: Optional[torch.Tensor] = None):
    row, col = edge_index
    if edge_weight is None:
        edge_weight = torch.ones(edge_index.size(1), device=edge_index.device)
    deg = torch.zeros(num_nodes, device=edge_weight.device).index_add_(0, col, edge_weight)
    deg_inv_sqrt = deg.pow(-0.5)
    deg_inv_sqrt = deg_inv_sqrt.masked_fill(torch.isinf(deg_inv_sqrt), 0.0)
    return deg_inv_sqrt[row] * edge_weight * deg_inv_sqrt[col]


class GCNConv(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, bias: bool = True):
        super().__init__()
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        nn.init.xavier_uniform_(self.lin.weight)

    def forward(self, x, edge_index, edge_weight=None):
        num_nodes = x.size(0)
        edge_index = add_self_loops(edge_index, num_nodes)
        if edge_weight is not None:
            edge_weight = torch.cat([edge_weight, edge_weight.new_ones(num_nodes)])
        norm = gcn_norm(edge_index, num_nodes, edge_weight)
        x = self.lin(x)
        src, dst = edge_index
        msg = x[src] * norm.unsqueeze(-1)
        out = torch.zeros_like(x).index_add_(0, dst, msg)
        if self.bias is not None:
            out = out + self.bias
        return out


class GCN(nn.Module):
    def __init__(self, in_dim, hidden_dim, num_classes, dropout=0.5):
        super().__init__()
        self.conv1 = GCNConv(in_dim, hidden_dim)
        self.conv2 = GCNConv(hidden_dim, num_classes)
        self.dropout = dropout

    def forward(self, x, edge_index, edge_weight=None):
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = F.relu(self.conv1(x, edge_index, edge_weight))
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = self.conv2(x, edge_index, edge_weight)
        return F.log_softmax(x, dim=1)


def random_graph(num_nodes, num_edges, generator=None):
    src = torch.randint(0, num_nodes, (num_edges,), generator=generator)
    dst = torch.randint(0, num_nodes, (num_edges,), generator=generator)
    # make undirected
    return torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)


def build():
    torch.manual_seed(0)
    model = GCN(in_dim=16, hidden_dim=32, num_classes=7).eval()
    x = torch.randn(50, 16)
    edge_index = random_graph(50, 120)
    edge_weight = torch.rand(edge_index.size(1))
    return model, (x, edge_index, edge_weight)
