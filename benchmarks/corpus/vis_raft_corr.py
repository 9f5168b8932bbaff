"""RAFT-style optical flow (Teed & Deng, 2020), small variant.

All-pairs correlation volume with a 2-level pyramid, local lookup around the
current flow estimate, ConvGRU update operator. At inference we stop iterating
once the mean flow update falls below `tol` (adaptive-iterations variant).
"""
import copy
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class RAFTConfig:
    fdim: int = 32
    hdim: int = 24
    cdim: int = 24
    corr_levels: int = 2
    corr_radius: int = 2
    iters: int = 6
    tol: float = 1e-3


def coords_grid(batch, ht, wd, device=None):
    y, x = torch.meshgrid(torch.arange(ht, device=device), torch.arange(wd, device=device), indexing="ij")
    coords = torch.stack([x, y], dim=0).float()
    return coords[None].repeat(batch, 1, 1, 1)


def bilinear_sampler(img, coords):
    H, W = img.shape[-2:]
    xgrid, ygrid = coords.split([1, 1], dim=-1)
    xgrid = 2 * xgrid / (W - 1) - 1
    ygrid = 2 * ygrid / (H - 1) - 1
    return F.grid_sample(img, torch.cat([xgrid, ygrid], dim=-1), align_corners=True)


class CorrBlock:
    def __init__(self, fmap1, fmap2, num_levels=2, radius=2):
        self.num_levels, self.radius = num_levels, radius
        B, D, H, W = fmap1.shape
        corr = torch.matmul(fmap1.view(B, D, H * W).transpose(1, 2), fmap2.view(B, D, H * W))
        corr = (corr / torch.sqrt(torch.tensor(D).float())).reshape(B * H * W, 1, H, W)
        self.pyramid = [corr]
        for _ in range(num_levels - 1):
            corr = F.avg_pool2d(corr, 2, stride=2)
            self.pyramid.append(corr)

    def __call__(self, coords):
        r = self.radius
        coords = coords.permute(0, 2, 3, 1)
        B, H, W, _ = coords.shape
        out = []
        for i, corr in enumerate(self.pyramid):
            d = torch.linspace(-r, r, 2 * r + 1, device=coords.device)
            delta = torch.stack(torch.meshgrid(d, d, indexing="ij"), dim=-1).view(1, 2 * r + 1, 2 * r + 1, 2)
            centroid = coords.reshape(B * H * W, 1, 1, 2) / 2 ** i
            sampled = bilinear_sampler(corr, centroid + delta)
            out.append(sampled.view(B, H, W, -1))
        return torch.cat(out, dim=-1).permute(0, 3, 1, 2).contiguous().float()


class Encoder(nn.Module):
    def __init__(self, out_dim, norm=True):
        super().__init__()
        Norm = nn.InstanceNorm2d if norm else nn.Identity
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 7, stride=2, padding=3), Norm(16), nn.ReLU(inplace=True),
            nn.Conv2d(16, 24, 3, stride=2, padding=1), Norm(24), nn.ReLU(inplace=True),
            nn.Conv2d(24, out_dim, 1),
        )

    def forward(self, x):
        return self.net(x)


class ConvGRU(nn.Module):
    def __init__(self, hidden_dim, input_dim):
        super().__init__()
        self.convz = nn.Conv2d(hidden_dim + input_dim, hidden_dim, 3, padding=1)
        self.convr = nn.Conv2d(hidden_dim + input_dim, hidden_dim, 3, padding=1)
        self.convq = nn.Conv2d(hidden_dim + input_dim, hidden_dim, 3, padding=1)

    def forward(self, h, x):
        hx = torch.cat([h, x], dim=1)
        z = torch.sigmoid(self.convz(hx))
        r = torch.sigmoid(self.convr(hx))
        q = torch.tanh(self.convq(torch.cat([r * h, x], dim=1)))
        return (1 - z) * h + z * q


class UpdateBlock(nn.Module):
    def __init__(self, cfg: RAFTConfig):
        super().__init__()
        cor_planes = cfg.corr_levels * (2 * cfg.corr_radius + 1) ** 2
        self.convc = nn.Conv2d(cor_planes, 32, 1)
        self.convf = nn.Conv2d(2, 16, 7, padding=3)
        self.conv = nn.Conv2d(48, 32 - 2, 3, padding=1)
        self.gru = ConvGRU(cfg.hdim, cfg.cdim + 32)
        self.flow_head = nn.Sequential(nn.Conv2d(cfg.hdim, 32, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(32, 2, 3, padding=1))

    def forward(self, net, inp, corr, flow):
        motion = F.relu(self.conv(torch.cat([F.relu(self.convc(corr)), F.relu(self.convf(flow))], dim=1)))
        motion = torch.cat([motion, flow], dim=1)
        net = self.gru(net, torch.cat([inp, motion], dim=1))
        return net, self.flow_head(net)


class RAFTSmall(nn.Module):
    def __init__(self, cfg: RAFTConfig = RAFTConfig()):
        super().__init__()
        self.cfg = cfg
        self.fnet = Encoder(cfg.fdim)
        self.cnet = Encoder(cfg.hdim + cfg.cdim, norm=False)
        self.update_block = UpdateBlock(cfg)

    def forward(self, image1, image2):
        cfg = self.cfg
        image1 = 2 * (image1 / 255.0) - 1.0
        image2 = 2 * (image2 / 255.0) - 1.0
        fmap1, fmap2 = self.fnet(image1), self.fnet(image2)
        corr_fn = CorrBlock(fmap1, fmap2, cfg.corr_levels, cfg.corr_radius)
        net, inp = torch.split(self.cnet(image1), [cfg.hdim, cfg.cdim], dim=1)
        net, inp = torch.tanh(net), F.relu(inp)

        N, _, H, W = fmap1.shape
        coords0 = coords_grid(N, H, W, device=image1.device)
        coords1 = copy.deepcopy(coords0)
        for itr in range(cfg.iters):
            coords1 = coords1.detach()
            corr = corr_fn(coords1)
            net, delta_flow = self.update_block(net, inp, corr, coords1 - coords0)
            coords1 = coords1 + delta_flow
            if not self.training and delta_flow.abs().mean() < cfg.tol:
                break
        flow_low = coords1 - coords0
        flow_up = 4 * F.interpolate(flow_low, scale_factor=4, mode="bilinear", align_corners=True)
        return flow_low, flow_up


def build():
    torch.manual_seed(0)
    model = RAFTSmall().eval()
    img1 = torch.rand(1, 3, 32, 32) * 255
    img2 = torch.roll(img1, shifts=(1, 2), dims=(2, 3))
    return model, (img1, img2)
