"""UNet building blocks for a DDPM-style denoiser.

ResBlocks take a timestep embedding (sinusoidal -> MLP) and add it as a
per-channel shift (or scale/shift with `use_scale_shift_norm`). One self-attention
block at the lowest resolution, as in Ho et al. / improved-diffusion.
"""
import math
from dataclasses import dataclass
from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


def timestep_embedding(timesteps: torch.Tensor, dim: int, max_period: int = 10000) -> torch.Tensor:
    """Create sinusoidal timestep embeddings.

    :param timesteps: a 1-D Tensor of N indices, one per batch element. These may be fractional.
    :param dim: the dimension of the output.
    """
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=timesteps.device) / half)
    args = timesteps[:, None].float() * freqs[None]
    embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
    return embedding


def normalization(channels: int, groups: int = 8) -> nn.GroupNorm:
    return nn.GroupNorm(min(groups, channels), channels)


def zero_module(module: nn.Module) -> nn.Module:
    for p in module.parameters():
        p.detach().zero_()
    return module


class ResBlock(nn.Module):
    def __init__(self, channels, emb_channels, out_channels=None, dropout=0.0, use_scale_shift_norm=True):
        super().__init__()
        self.out_channels = out_channels or channels
        self.use_scale_shift_norm = use_scale_shift_norm
        self.in_layers = nn.Sequential(normalization(channels), nn.SiLU(), nn.Conv2d(channels, self.out_channels, 3, padding=1))
        self.emb_layers = nn.Sequential(
            nn.SiLU(), nn.Linear(emb_channels, 2 * self.out_channels if use_scale_shift_norm else self.out_channels)
        )
        self.out_norm = normalization(self.out_channels)
        self.out_layers = nn.Sequential(nn.SiLU(), nn.Dropout(dropout), nn.Conv2d(self.out_channels, self.out_channels, 3, padding=1))
        self.skip = nn.Identity() if self.out_channels == channels else nn.Conv2d(channels, self.out_channels, 1)

    def forward(self, x, emb):
        h = self.in_layers(x)
        emb_out = self.emb_layers(emb).type(h.dtype)[..., None, None]
        if self.use_scale_shift_norm:
            scale, shift = emb_out.chunk(2, dim=1)
            h = self.out_norm(h) * (1 + scale) + shift
        else:
            h = self.out_norm(h + emb_out)
        h = self.out_layers(h)
        return self.skip(x) + h


class AttentionBlock(nn.Module):
    def __init__(self, channels, num_heads=2):
        super().__init__()
        self.num_heads = num_heads
        self.norm = normalization(channels)
        self.qkv = nn.Conv1d(channels, channels * 3, 1)
        self.proj_out = zero_module(nn.Conv1d(channels, channels, 1))

    def forward(self, x):
        b, c, *spatial = x.shape
        h = self.qkv(self.norm(x.reshape(b, c, -1)))
        q, k, v = h.reshape(b * self.num_heads, 3 * c // self.num_heads, -1).chunk(3, dim=1)
        scale = 1 / math.sqrt(math.sqrt(c // self.num_heads))
        weight = torch.einsum("bct,bcs->bts", q * scale, k * scale).softmax(dim=-1)
        a = torch.einsum("bts,bcs->bct", weight, v).reshape(b, -1, h.shape[-1])
        return (x.reshape(b, c, -1) + self.proj_out(a)).reshape(b, c, *spatial)


@dataclass
class UNetConfig:
    in_channels: int = 3
    model_channels: int = 16
    channel_mult: Tuple[int, ...] = (1, 2)
    dropout: float = 0.1


class SmallUNet(nn.Module):
    def __init__(self, cfg: UNetConfig):
        super().__init__()
        mc = cfg.model_channels
        emb_dim = mc * 4
        self.model_channels = mc
        self.time_embed = nn.Sequential(nn.Linear(mc, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim))
        self.input_conv = nn.Conv2d(cfg.in_channels, mc, 3, padding=1)
        chs = [mc]
        ch = mc
        self.down = nn.ModuleList()
        for level, mult in enumerate(cfg.channel_mult):
            self.down.append(ResBlock(ch, emb_dim, mult * mc, cfg.dropout))
            ch = mult * mc
            chs.append(ch)
        self.downsample = nn.AvgPool2d(2)
        self.mid_block1 = ResBlock(ch, emb_dim, dropout=cfg.dropout)
        self.mid_attn = AttentionBlock(ch)
        self.mid_block2 = ResBlock(ch, emb_dim, dropout=cfg.dropout)
        self.up = nn.ModuleList()
        for level, mult in reversed(list(enumerate(cfg.channel_mult))):
            skip_ch = chs.pop()
            self.up.append(ResBlock(ch + skip_ch, emb_dim, mult * mc, cfg.dropout))
            ch = mult * mc
        self.out = nn.Sequential(normalization(ch), nn.SiLU(), zero_module(nn.Conv2d(ch, cfg.in_channels, 3, padding=1)))

    def forward(self, x, timesteps):
        emb = self.time_embed(timestep_embedding(timesteps, self.model_channels))
        h = self.input_conv(x)
        hs = []
        for i, block in enumerate(self.down):
            h = block(h, emb)
            hs.append(h)
            if i < len(self.down) - 1:
                h = self.downsample(h)
        h = self.mid_block2(self.mid_attn(self.mid_block1(h, emb)), emb)
        for i, block in enumerate(self.up):
            skip = hs.pop()
            if h.shape[-1] != skip.shape[-1]:
                h = F.interpolate(h, size=skip.shape[-2:], mode="nearest")
            h = block(torch.cat([h, skip], dim=1), emb)
        return self.out(h)


def build():
    torch.manual_seed(0)
    model = SmallUNet(UNetConfig()).eval()
    x = torch.randn(2, 3, 16, 16)
    t = torch.tensor([10, 500])
    return model, (x, t)
