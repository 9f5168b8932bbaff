"""DDIM sampling (Song et al., 2021) wrapped as a module so the whole sampler can be traced.

Scheduler logic mirrors diffusers' DDIMScheduler (linear betas, "leading"
timestep spacing, eta=0 => deterministic). The denoiser is a tiny conv net
conditioned on the timestep through FiLM.
"""
import logging
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger(__name__)


@dataclass
class DDIMConfig:
    num_train_timesteps: int = 1000
    beta_start: float = 0.0001
    beta_end: float = 0.02
    clip_sample: bool = True
    clip_sample_range: float = 1.0
    set_alpha_to_one: bool = True


class DDIMScheduler:
    def __init__(self, cfg: DDIMConfig):
        self.cfg = cfg
        self.betas = torch.linspace(cfg.beta_start, cfg.beta_end, cfg.num_train_timesteps, dtype=torch.float32)
        self.alphas_cumprod = torch.cumprod(1.0 - self.betas, dim=0)
        self.final_alpha_cumprod = torch.tensor(1.0) if cfg.set_alpha_to_one else self.alphas_cumprod[0]
        self.num_inference_steps = None
        self.timesteps = torch.arange(0, cfg.num_train_timesteps).flip(0)

    def set_timesteps(self, num_inference_steps: int):
        self.num_inference_steps = num_inference_steps
        step_ratio = self.cfg.num_train_timesteps // num_inference_steps
        self.timesteps = (torch.arange(0, num_inference_steps) * step_ratio).flip(0).long()

    def step(self, model_output, timestep, sample):
        prev_timestep = timestep - self.cfg.num_train_timesteps // self.num_inference_steps
        alpha_prod_t = self.alphas_cumprod[timestep]
        alpha_prod_t_prev = self.alphas_cumprod[prev_timestep] if prev_timestep >= 0 else self.final_alpha_cumprod
        beta_prod_t = 1 - alpha_prod_t
        pred_original_sample = (sample - beta_prod_t ** 0.5 * model_output) / alpha_prod_t ** 0.5
        if self.cfg.clip_sample:
            r = self.cfg.clip_sample_range
            pred_original_sample = pred_original_sample.clamp(-r, r)
        pred_sample_direction = (1 - alpha_prod_t_prev) ** 0.5 * model_output
        prev_sample = alpha_prod_t_prev ** 0.5 * pred_original_sample + pred_sample_direction
        return prev_sample, pred_original_sample


class TinyEpsNet(nn.Module):
    def __init__(self, channels=3, hidden=32, temb_dim=32):
        super().__init__()
        self.temb_dim = temb_dim
        self.temb = nn.Sequential(nn.Linear(temb_dim, hidden), nn.SiLU(), nn.Linear(hidden, 2 * hidden))
        self.conv_in = nn.Conv2d(channels, hidden, 3, padding=1)
        self.conv_mid = nn.Conv2d(hidden, hidden, 3, padding=1)
        self.norm = nn.GroupNorm(8, hidden)
        self.conv_out = nn.Conv2d(hidden, channels, 3, padding=1)

    def embed(self, t):
        half = self.temb_dim // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
        args = t.float().reshape(-1, 1) * freqs[None]
        return torch.cat([args.sin(), args.cos()], dim=-1)

    def forward(self, x, t):
        scale, shift = self.temb(self.embed(t)).chunk(2, dim=-1)
        h = F.silu(self.conv_in(x))
        h = self.norm(self.conv_mid(h)) * (1 + scale[..., None, None]) + shift[..., None, None]
        return self.conv_out(F.silu(h))


class DDIMPipeline(nn.Module):
    def __init__(self, cfg: DDIMConfig = DDIMConfig(), num_inference_steps: int = 8):
        super().__init__()
        self.unet = TinyEpsNet()
        self.scheduler = DDIMScheduler(cfg)
        self.num_inference_steps = num_inference_steps

    @torch.no_grad()
    def forward(self, latents):
        self.scheduler.set_timesteps(self.num_inference_steps)
        sample = latents
        for i, t in enumerate(self.scheduler.timesteps):
            eps = self.unet(sample, t.expand(sample.shape[0]))
            sample, x0 = self.scheduler.step(eps, t, sample)
            logger.debug("step %d/%d t=%d |x0|=%.4f", i + 1, self.num_inference_steps, int(t), x0.abs().mean())
        image = (sample / 2 + 0.5).clamp(0, 1)
        return image


def build():
    torch.manual_seed(0)
    model = DDIMPipeline().eval()
    latents = torch.randn(2, 3, 16, 16)
    return model, (latents,)
