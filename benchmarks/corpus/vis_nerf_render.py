"""Front-to-back ray marching renderer for a small NeRF MLP.

Samples are evaluated in chunks along the ray (`march_chunk` steps at a time),
alpha-composited front to back, and marching stops once every ray in the batch
is opaque -- the usual early-ray-termination trick from volume rendering.
"""
import math
from dataclasses import dataclass
from typing import Dict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class RenderConfig:
    near: float = 2.0
    far: float = 6.0
    num_samples: int = 48
    march_chunk: int = 8
    early_stop_eps: float = 1e-3
    white_bkgd: bool = True
    multires: int = 6
    multires_views: int = 2


class PositionalEncoding(nn.Module):
    def __init__(self, num_freqs: int, include_input: bool = True):
        super().__init__()
        self.include_input = include_input
        self.register_buffer("freq_bands", 2.0 ** torch.linspace(0.0, num_freqs - 1, num_freqs))

    def out_dim(self, in_dim):
        return in_dim * (int(self.include_input) + 2 * len(self.freq_bands))

    def forward(self, x):
        xb = x[..., None, :] * self.freq_bands[:, None]
        enc = torch.cat([torch.sin(xb), torch.cos(xb)], dim=-1).flatten(-2)
        return torch.cat([x, enc], dim=-1) if self.include_input else enc


class NeRFMLP(nn.Module):
    def __init__(self, cfg: RenderConfig, width=64, depth=4, skips=(2,)):
        super().__init__()
        self.pe = PositionalEncoding(cfg.multires)
        self.pe_dir = PositionalEncoding(cfg.multires_views)
        in_ch, in_dir = self.pe.out_dim(3), self.pe_dir.out_dim(3)
        self.skips = skips
        self.pts_linears = nn.ModuleList(
            [nn.Linear(in_ch, width)] + [nn.Linear(width + (in_ch if i in skips else 0), width) for i in range(1, depth)]
        )
        self.sigma = nn.Linear(width, 1)
        self.feature = nn.Linear(width, width)
        self.rgb = nn.Sequential(nn.Linear(width + in_dir, width // 2), nn.ReLU(), nn.Linear(width // 2, 3))

    def forward(self, pts, viewdirs):
        x_in = self.pe(pts)
        h = x_in
        for i, layer in enumerate(self.pts_linears):
            if i in self.skips:
                h = torch.cat([x_in, h], dim=-1)
            h = F.relu(layer(h))
        sigma = F.softplus(self.sigma(h).squeeze(-1) - 1.0)
        rgb = torch.sigmoid(self.rgb(torch.cat([self.feature(h), self.pe_dir(viewdirs)], dim=-1)))
        return rgb, sigma


class RayMarcher(nn.Module):
    def __init__(self, cfg: RenderConfig = RenderConfig()):
        super().__init__()
        self.cfg = cfg
        self.field = NeRFMLP(cfg)

    def forward(self, rays_o: torch.Tensor, rays_d: torch.Tensor) -> Dict[str, torch.Tensor]:
        cfg = self.cfg
        n_rays = rays_o.shape[0]
        viewdirs = F.normalize(rays_d, dim=-1)
        t_vals = torch.linspace(cfg.near, cfg.far, cfg.num_samples + 1, device=rays_o.device)
        t_mids = 0.5 * (t_vals[1:] + t_vals[:-1])
        deltas = (t_vals[1:] - t_vals[:-1]) * rays_d.norm(dim=-1, keepdim=True)  # (R, S)

        color = rays_o.new_zeros(n_rays, 3)
        depth = rays_o.new_zeros(n_rays)
        transmittance = rays_o.new_ones(n_rays)
        for start in range(0, cfg.num_samples, cfg.march_chunk):
            end = min(start + cfg.march_chunk, cfg.num_samples)
            t = t_mids[start:end]
            pts = rays_o[:, None, :] + rays_d[:, None, :] * t[None, :, None]
            rgb, sigma = self.field(pts, viewdirs[:, None, :].expand_as(pts))
            alpha = 1.0 - torch.exp(-sigma * deltas[:, start:end])
            trans = torch.cumprod(torch.cat([transmittance[:, None], 1.0 - alpha + 1e-10], dim=-1), dim=-1)
            weights = alpha * trans[:, :-1]
            color = color + (weights[..., None] * rgb).sum(dim=1)
            depth = depth + (weights * t[None]).sum(dim=1)
            transmittance = trans[:, -1]
            if transmittance.max() < cfg.early_stop_eps:
                break

        acc = 1.0 - transmittance
        if cfg.white_bkgd:
            color = color + transmittance[:, None]
        return {"rgb": color, "depth": depth / acc.clamp(min=1e-6), "acc": acc}


def get_rays(H, W, focal, c2w):
    j, i = torch.meshgrid(torch.arange(H, dtype=torch.float32), torch.arange(W, dtype=torch.float32), indexing="ij")
    dirs = torch.stack([(i - W * 0.5) / focal, -(j - H * 0.5) / focal, -torch.ones_like(i)], dim=-1)
    rays_d = (dirs[..., None, :] * c2w[:3, :3]).sum(-1)
    rays_o = c2w[:3, -1].expand(rays_d.shape)
    return rays_o.reshape(-1, 3), rays_d.reshape(-1, 3)


def build():
    torch.manual_seed(0)
    model = RayMarcher().eval()
    theta = math.radians(30.0)
    c2w = torch.tensor([
        [math.cos(theta), 0.0, math.sin(theta), 4.0 * math.sin(theta)],
        [0.0, 1.0, 0.0, 0.0],
        [-math.sin(theta), 0.0, math.cos(theta), 4.0 * math.cos(theta)],
    ])
    rays_o, rays_d = get_rays(8, 8, 10.0, c2w)
    return model, (rays_o, rays_d)
