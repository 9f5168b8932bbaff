"""EDM (Karras et al., 2022) preconditioned denoiser with the deterministic Heun sampler.

Sampler follows k-diffusion's `sample_heun`; the noise schedule is the
Karras rho-schedule. With s_churn=0 no noise is injected, so sampling from a
fixed x_T is deterministic.
"""
import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class EDMConfig:
    sigma_min: float = 0.002
    sigma_max: float = 80.0
    sigma_data: float = 0.5
    rho: float = 7.0
    num_steps: int = 6
    s_churn: float = 0.0
    s_tmin: float = 0.05
    s_tmax: float = 50.0
    s_noise: float = 1.003


def get_sigmas_karras(n, sigma_min, sigma_max, rho=7.0):
    ramp = torch.linspace(0, 1, n)
    min_inv_rho = sigma_min ** (1 / rho)
    max_inv_rho = sigma_max ** (1 / rho)
    sigmas = (max_inv_rho + ramp * (min_inv_rho - max_inv_rho)) ** rho
    return torch.cat([sigmas, sigmas.new_zeros([1])])


def append_dims(x, target_dims):
    return x[(...,) + (None,) * (target_dims - x.ndim)]


class FourierNoiseEmbedding(nn.Module):
    def __init__(self, dim, scale=16.0):
        super().__init__()
        self.register_buffer("freqs", torch.randn(dim // 2) * scale)

    def forward(self, c_noise):
        x = c_noise.reshape(-1, 1) * self.freqs[None] * 2 * math.pi
        return torch.cat([x.cos(), x.sin()], dim=1)


class DenoiserBackbone(nn.Module):
    def __init__(self, ch=3, hidden=32, emb=32):
        super().__init__()
        self.noise_emb = FourierNoiseEmbedding(emb)
        self.emb_proj = nn.Linear(emb, hidden)
        self.c1 = nn.Conv2d(ch, hidden, 3, padding=1)
        self.c2 = nn.Conv2d(hidden, hidden, 3, padding=1)
        self.c3 = nn.Conv2d(hidden, ch, 3, padding=1)

    def forward(self, x, c_noise):
        e = self.emb_proj(self.noise_emb(c_noise))[:, :, None, None]
        h = F.silu(self.c1(x) + e)
        h = F.silu(self.c2(h))
        return self.c3(h)


class EDMPrecond(nn.Module):
    def __init__(self, net: nn.Module, sigma_data: float):
        super().__init__()
        self.net = net
        self.sigma_data = sigma_data

    def forward(self, x, sigma):
        sigma = sigma.reshape(-1, 1, 1, 1).to(x.dtype)
        c_skip = self.sigma_data ** 2 / (sigma ** 2 + self.sigma_data ** 2)
        c_out = sigma * self.sigma_data / (sigma ** 2 + self.sigma_data ** 2).sqrt()
        c_in = 1 / (self.sigma_data ** 2 + sigma ** 2).sqrt()
        c_noise = sigma.log() / 4
        F_x = self.net(c_in * x, c_noise.flatten())
        return c_skip * x + c_out * F_x


class EDMSampler(nn.Module):
    def __init__(self, cfg: EDMConfig = EDMConfig()):
        super().__init__()
        self.cfg = cfg
        self.denoiser = EDMPrecond(DenoiserBackbone(), cfg.sigma_data)

    def to_d(self, x, sigma, denoised):
        return (x - denoised) / append_dims(sigma, x.ndim)

    @torch.no_grad()
    def forward(self, noise, generator: Optional[torch.Generator] = None):
        cfg = self.cfg
        sigmas = get_sigmas_karras(cfg.num_steps, cfg.sigma_min, cfg.sigma_max, cfg.rho)
        x = noise * sigmas[0]
        s_in = x.new_ones([x.shape[0]])
        for i in range(len(sigmas) - 1):
            gamma = min(cfg.s_churn / (len(sigmas) - 1), 2 ** 0.5 - 1) if cfg.s_tmin <= sigmas[i] <= cfg.s_tmax else 0.0
            sigma_hat = sigmas[i] * (gamma + 1)
            if gamma > 0:
                eps = torch.randn(x.shape, generator=generator, dtype=x.dtype) * cfg.s_noise
                x = x + eps * (sigma_hat ** 2 - sigmas[i] ** 2) ** 0.5
            denoised = self.denoiser(x, sigma_hat * s_in)
            d = self.to_d(x, sigma_hat * s_in, denoised)
            dt = sigmas[i + 1] - sigma_hat
            if sigmas[i + 1] == 0:
                # Euler step on the last interval
                x = x + d * dt
            else:
                x_2 = x + d * dt
                denoised_2 = self.denoiser(x_2, sigmas[i + 1] * s_in)
                d_2 = self.to_d(x_2, sigmas[i + 1] * s_in, denoised_2)
                x = x + (d + d_2) / 2 * dt
        return x.clamp(-1, 1)


def build():
    torch.manual_seed(0)
    model = EDMSampler().eval()
    noise = torch.randn(2, 3, 16, 16)
    return model, (noise,)
