"""PointNet++ (Qi et al., 2017) SSG classifier, pure PyTorch utilities.

sampling / grouping helpers are adapted from the widely used
Pointnet_Pointnet2_pytorch port (no CUDA ops). For evaluation FPS starts from
point 0 instead of a random point so that results are reproducible.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def square_distance(src, dst):
    """src: [B, N, C], dst: [B, M, C] -> [B, N, M] squared euclidean distances."""
    dist = -2 * torch.matmul(src, dst.permute(0, 2, 1))
    dist += torch.sum(src ** 2, -1).unsqueeze(-1)
    dist += torch.sum(dst ** 2, -1).unsqueeze(1)
    return dist


def index_points(points, idx):
    B = points.shape[0]
    view_shape = list(idx.shape)
    view_shape[1:] = [1] * (len(view_shape) - 1)
    repeat_shape = list(idx.shape)
    repeat_shape[0] = 1
    batch_indices = torch.arange(B, dtype=torch.long, device=points.device).view(view_shape).repeat(repeat_shape)
    return points[batch_indices, idx, :]


def farthest_point_sample(xyz, npoint, random_start=False):
    device = xyz.device
    B, N, C = xyz.shape
    centroids = torch.zeros(B, npoint, dtype=torch.long, device=device)
    distance = torch.ones(B, N, device=device) * 1e10
    if random_start:
        farthest = torch.randint(0, N, (B,), dtype=torch.long, device=device)
    else:
        farthest = torch.zeros(B, dtype=torch.long, device=device)
    batch_indices = torch.arange(B, dtype=torch.long, device=device)
    for i in range(npoint):
        centroids[:, i] = farthest
        centroid = xyz[batch_indices, farthest, :].view(B, 1, 3)
        dist = torch.sum((xyz - centroid) ** 2, -1)
        mask = dist < distance
        distance[mask] = dist[mask]
        farthest = torch.max(distance, -1)[1]
    return centroids


def query_ball_point(radius, nsample, xyz, new_xyz):
    B, N, C = xyz.shape
    _, S, _ = new_xyz.shape
    group_idx = torch.arange(N, dtype=torch.long, device=xyz.device).view(1, 1, N).repeat([B, S, 1])
    sqrdists = square_distance(new_xyz, xyz)
    group_idx[sqrdists > radius ** 2] = N
    group_idx = group_idx.sort(dim=-1)[0][:, :, :nsample]
    group_first = group_idx[:, :, 0].view(B, S, 1).repeat([1, 1, nsample])
    mask = group_idx == N
    group_idx[mask] = group_first[mask]
    return group_idx


class SetAbstraction(nn.Module):
    def __init__(self, npoint, radius, nsample, in_channel, mlp, group_all=False):
        super().__init__()
        self.npoint, self.radius, self.nsample, self.group_all = npoint, radius, nsample, group_all
        layers = []
        last = in_channel
        for out in mlp:
            layers += [nn.Conv2d(last, out, 1), nn.BatchNorm2d(out), nn.ReLU()]
            last = out
        self.mlp = nn.Sequential(*layers)

    def forward(self, xyz, points):
        """xyz: [B, N, 3], points: [B, N, D] or None."""
        if self.group_all:
            new_xyz = xyz.new_zeros(xyz.shape[0], 1, 3)
            grouped = xyz.unsqueeze(1)
            if points is not None:
                grouped = torch.cat([grouped, points.unsqueeze(1)], dim=-1)
        else:
            fps_idx = farthest_point_sample(xyz, self.npoint)
            new_xyz = index_points(xyz, fps_idx)
            idx = query_ball_point(self.radius, self.nsample, xyz, new_xyz)
            grouped_xyz = index_points(xyz, idx) - new_xyz.unsqueeze(2)
            grouped = grouped_xyz
            if points is not None:
                grouped = torch.cat([grouped_xyz, index_points(points, idx)], dim=-1)
        grouped = grouped.permute(0, 3, 2, 1)  # [B, C, nsample, npoint]
        new_points = self.mlp(grouped).max(dim=2)[0]
        return new_xyz, new_points.transpose(1, 2)


class PointNet2Cls(nn.Module):
    def __init__(self, num_classes=10, normal_channel=False):
        super().__init__()
        in_ch = 6 if normal_channel else 3
        self.normal_channel = normal_channel
        self.sa1 = SetAbstraction(32, 0.4, 8, in_ch, [16, 16, 32])
        self.sa2 = SetAbstraction(8, 0.8, 8, 32 + 3, [32, 32, 64])
        self.sa3 = SetAbstraction(None, None, None, 64 + 3, [64, 128], group_all=True)
        self.fc = nn.Sequential(nn.Linear(128, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.4), nn.Linear(64, num_classes))

    def forward(self, xyz):
        # xyz: [B, C, N]
        xyz = xyz.transpose(1, 2)
        if self.normal_channel:
            norm, xyz = xyz[..., 3:], xyz[..., :3]
        else:
            norm = None
        l1_xyz, l1_points = self.sa1(xyz, norm)
        l2_xyz, l2_points = self.sa2(l1_xyz, l1_points)
        _, l3_points = self.sa3(l2_xyz, l2_points)
        x = self.fc(l3_points.squeeze(1))
        return F.log_softmax(x, -1)


def build():
    torch.manual_seed(0)
    model = PointNet2Cls().eval()
    pts = torch.randn(2, 3, 128)
    return model, (pts,)
