"""Convolutional VAE with free-bits KL and a beta warm-up, for 32x32 images.

`forward` returns the reconstruction together with the ELBO terms. The
reparameterisation noise is drawn from a dedicated generator so evaluation
runs (which we use for checkpoint selection) are reproducible.
"""
import math
import warnings
from dataclasses import dataclass
from typing import Dict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class VAEConfig:
    in_channels: int = 3
    latent_dim: int = 16
    hidden_dims: tuple = (16, 32, 64)
    beta: float = 1.0
    free_bits: float = 0.05  # nats per latent dim
    eval_seed: int = 42
    collapse_warn_nats: float = 0.1


class Encoder(nn.Module):
    def __init__(self, cfg: VAEConfig):
        super().__init__()
        layers, ch = [], cfg.in_channels
        for h in cfg.hidden_dims:
            layers += [nn.Conv2d(ch, h, 3, stride=2, padding=1), nn.BatchNorm2d(h), nn.LeakyReLU()]
            ch = h
        self.conv = nn.Sequential(*layers)
        self.fc_mu = nn.Linear(ch * 4 * 4, cfg.latent_dim)
        self.fc_var = nn.Linear(ch * 4 * 4, cfg.latent_dim)

    def forward(self, x):
        h = torch.flatten(self.conv(x), start_dim=1)
        return self.fc_mu(h), self.fc_var(h)


class Decoder(nn.Module):
    def __init__(self, cfg: VAEConfig):
        super().__init__()
        hidden = list(reversed(cfg.hidden_dims))
        self.first_ch = hidden[0]
        self.fc = nn.Linear(cfg.latent_dim, hidden[0] * 4 * 4)
        layers = []
        for a, b in zip(hidden[:-1], hidden[1:]):
            layers += [nn.ConvTranspose2d(a, b, 3, stride=2, padding=1, output_padding=1), nn.BatchNorm2d(b), nn.LeakyReLU()]
        layers += [nn.ConvTranspose2d(hidden[-1], hidden[-1], 3, stride=2, padding=1, output_padding=1),
                   nn.LeakyReLU(), nn.Conv2d(hidden[-1], cfg.in_channels, 3, padding=1)]
        self.net = nn.Sequential(*layers)

    def forward(self, z):
        return self.net(self.fc(z).view(-1, self.first_ch, 4, 4))


def gaussian_kl(mu, logvar):
    """KL(q(z|x) || N(0, I)) per latent dimension."""
    return -0.5 * (1 + logvar - mu.pow(2) - logvar.exp())


class VAE(nn.Module):
    def __init__(self, cfg: VAEConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)

    def reparameterize(self, mu, logvar, generator=None):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn(std.shape, generator=generator, dtype=std.dtype, device=std.device)
        return mu + eps * std

    def forward(self, x, kl_weight: float = 1.0) -> Dict[str, torch.Tensor]:
        mu, logvar = self.encoder(x)
        gen = None
        if not self.training:
            gen = torch.Generator(device=x.device)
            gen.manual_seed(self.cfg.eval_seed)
        z = self.reparameterize(mu, logvar, gen)
        recon = self.decoder(z)

        rec_loss = F.mse_loss(recon, x, reduction="sum") / x.shape[0]
        kl_per_dim = gaussian_kl(mu, logvar).mean(0)
        kl_raw = kl_per_dim.sum()
        if kl_raw < self.cfg.collapse_warn_nats:
            warnings.warn(f"KL is {kl_raw:.4f} nats, the posterior may have collapsed")
        kl = torch.clamp(kl_per_dim, min=self.cfg.free_bits).sum()
        loss = rec_loss + self.cfg.beta * kl_weight * kl
        bpd = loss / (math.log(2) * x[0].numel())
        return {"recon": recon, "loss": loss, "rec": rec_loss, "kl": kl_raw, "bpd": bpd, "z": z}


def build():
    torch.manual_seed(0)
    model = VAE(VAEConfig()).eval()
    x = torch.rand(4, 3, 32, 32)
    return model, (x, 0.5)
