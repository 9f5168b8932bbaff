"""GIN (Xu et al., 2019) graph classifier on mini-batches of disjoint graphs.

A batch is given the PyG way: node features stacked, edge_index offset per
graph, plus `num_nodes_per_graph`. The `batch` assignment vector is derived from
it, and readout is sum/mean pooling with a jumping-knowledge concat.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GINConfig:
    in_dim: int = 9
    hidden: int = 32
    num_layers: int = 3
    num_tasks: int = 2
    eps_trainable: bool = True
    readout: str = "mean"
    dropout: float = 0.5


def scatter_sum(src, index, dim_size):
    out = src.new_zeros((dim_size,) + src.shape[1:])
    return out.index_add_(0, index, src)


def global_mean_pool(x, batch, size=None):
    size = int(batch.max()) + 1 if size is None else size
    counts = torch.bincount(batch, minlength=size).clamp(min=1).to(x.dtype)
    return scatter_sum(x, batch, size) / counts.unsqueeze(-1)


def global_add_pool(x, batch, size=None):
    size = int(batch.max()) + 1 if size is None else size
    return scatter_sum(x, batch, size)


class GINConv(nn.Module):
    def __init__(self, mlp: nn.Module, eps: float = 0.0, train_eps: bool = False):
        super().__init__()
        self.mlp = mlp
        if train_eps:
            self.eps = nn.Parameter(torch.tensor([eps]))
        else:
            self.register_buffer("eps", torch.tensor([eps]))

    def forward(self, x, edge_index):
        src, dst = edge_index
        agg = scatter_sum(x[src], dst, x.size(0))
        return self.mlp((1 + self.eps) * x + agg)


class GIN(nn.Module):
    def __init__(self, cfg: GINConfig):
        super().__init__()
        self.cfg = cfg
        self.convs = nn.ModuleList()
        self.norms = nn.ModuleList()
        dim = cfg.in_dim
        for _ in range(cfg.num_layers):
            mlp = nn.Sequential(nn.Linear(dim, cfg.hidden), nn.BatchNorm1d(cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, cfg.hidden))
            self.convs.append(GINConv(mlp, train_eps=cfg.eps_trainable))
            self.norms.append(nn.BatchNorm1d(cfg.hidden))
            dim = cfg.hidden
        self.pool = global_mean_pool if cfg.readout == "mean" else global_add_pool
        self.head = nn.Sequential(nn.Linear(cfg.hidden * cfg.num_layers, cfg.hidden), nn.ReLU(),
                                  nn.Dropout(cfg.dropout), nn.Linear(cfg.hidden, cfg.num_tasks))

    def forward(self, x, edge_index, num_nodes_per_graph):
        batch = torch.repeat_interleave(torch.arange(num_nodes_per_graph.numel()), num_nodes_per_graph)
        num_graphs = num_nodes_per_graph.numel()
        hs = []
        for conv, norm in zip(self.convs, self.norms):
            x = F.relu(norm(conv(x, edge_index)))
            hs.append(self.pool(x, batch))
        graph_emb = torch.cat(hs, dim=-1)
        assert graph_emb.shape[0] == num_graphs
        return self.head(graph_emb)


def make_batch(sizes, in_dim, edges_per_node=2):
    xs, eis, offset = [], [], 0
    for n in sizes:
        xs.append(torch.randn(n, in_dim))
        src = torch.randint(0, n, (n * edges_per_node,))
        dst = torch.randint(0, n, (n * edges_per_node,))
        eis.append(torch.stack([torch.cat([src, dst]), torch.cat([dst, src])]) + offset)
        offset += n
    return torch.cat(xs), torch.cat(eis, dim=1), torch.tensor(sizes)


def build():
    torch.manual_seed(0)
    cfg = GINConfig()
    model = GIN(cfg).eval()
    x, edge_index, sizes = make_batch([7, 12, 5, 9], cfg.in_dim)
    return model, (x, edge_index, sizes)
