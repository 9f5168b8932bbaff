"""DGCNN (Wang et al., 2019) classification network with EdgeConv on kNN graphs.

The kNN graph is recomputed in feature space after every EdgeConv layer
("dynamic" graph). Inputs are point clouds of shape (B, 3, N).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def knn(x: torch.Tensor, k: int) -> torch.Tensor:
    """x: (B, C, N) -> indices of k nearest neighbours, (B, N, k)."""
    inner = -2 * torch.matmul(x.transpose(2, 1), x)
    xx = torch.sum(x ** 2, dim=1, keepdim=True)
    pairwise_distance = -xx - inner - xx.transpose(2, 1)
    return pairwise_distance.topk(k=k, dim=-1)[1]


def get_graph_feature(x: torch.Tensor, k: int = 8, idx: torch.Tensor = None) -> torch.Tensor:
    batch_size, num_dims, num_points = x.shape
    if idx is None:
        idx = knn(x, k=k)
    idx_base = torch.arange(0, batch_size, device=x.device).view(-1, 1, 1) * num_points
    idx = (idx + idx_base).view(-1)
    x = x.transpose(2, 1).contiguous()
    feature = x.view(batch_size * num_points, -1)[idx, :]
    feature = feature.view(batch_size, num_points, k, num_dims)
    x = x.view(batch_size, num_points, 1, num_dims).repeat(1, 1, k, 1)
    feature = torch.cat((feature - x, x), dim=3).permute(0, 3, 1, 2).contiguous()
    return feature  # (B, 2C, N, k)


class EdgeConv(nn.Module):
    def __init__(self, in_ch, out_ch, k):
        super().__init__()
        self.k = k
        self.conv = nn.Sequential(
            nn.Conv2d(in_ch * 2, out_ch, kernel_size=1, bias=False),
            nn.BatchNorm2d(out_ch),
            nn.LeakyReLU(negative_slope=0.2),
        )

    def forward(self, x):
        x = get_graph_feature(x, k=self.k)
        x = self.conv(x)
        return x.max(dim=-1, keepdim=False)[0]


class DGCNN(nn.Module):
    def __init__(self, k=8, emb_dims=64, output_channels=15, dropout=0.5):
        super().__init__()
        self.k = k
        self.ec1 = EdgeConv(3, 16, k)
        self.ec2 = EdgeConv(16, 16, k)
        self.ec3 = EdgeConv(16, 32, k)
        self.conv5 = nn.Sequential(
            nn.Conv1d(64, emb_dims, kernel_size=1, bias=False),
            nn.BatchNorm1d(emb_dims),
            nn.LeakyReLU(negative_slope=0.2),
        )
        self.linear1 = nn.Linear(emb_dims * 2, 64, bias=False)
        self.bn6 = nn.BatchNorm1d(64)
        self.dp1 = nn.Dropout(p=dropout)
        self.linear2 = nn.Linear(64, output_channels)

    def forward(self, x):
        batch_size = x.size(0)
        x1 = self.ec1(x)
        x2 = self.ec2(x1)
        x3 = self.ec3(x2)
        x = self.conv5(torch.cat((x1, x2, x3), dim=1))
        x1 = F.adaptive_max_pool1d(x, 1).view(batch_size, -1)
        x2 = F.adaptive_avg_pool1d(x, 1).view(batch_size, -1)
        x = torch.cat((x1, x2), 1)
        x = F.leaky_relu(self.bn6(self.linear1(x)), negative_slope=0.2)
        x = self.dp1(x)
        return self.linear2(x)


def build():
    torch.manual_seed(0)
    model = DGCNN().eval()
    pts = torch.randn(2, 3, 128)
    return model, (pts,)
