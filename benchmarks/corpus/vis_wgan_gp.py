"""WGAN-GP critic step (Gulrajani et al., 2017) on a small ResNet-free DCGAN pair.

The critic loss including the gradient penalty is computed inside forward so
that the training loop only has to call backward() on the returned scalar.
Interpolation coefficients come from a generator the caller passes in, which
keeps the step reproducible.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class WGANConfig:
    z_dim: int = 32
    img_channels: int = 3
    g_width: int = 32
    d_width: int = 32
    lambda_gp: float = 10.0
    drift: float = 1e-3


class Generator(nn.Module):
    def __init__(self, z_dim, width, out_ch):
        super().__init__()
        self.fc = nn.Linear(z_dim, width * 4 * 4 * 4)
        self.width = width
        self.net = nn.Sequential(
            nn.BatchNorm2d(width * 4), nn.ReLU(True),
            nn.ConvTranspose2d(width * 4, width * 2, 4, 2, 1), nn.BatchNorm2d(width * 2), nn.ReLU(True),
            nn.ConvTranspose2d(width * 2, width, 4, 2, 1), nn.BatchNorm2d(width), nn.ReLU(True),
            nn.Conv2d(width, out_ch, 3, padding=1), nn.Tanh(),
        )

    def forward(self, z):
        return self.net(self.fc(z).view(-1, self.width * 4, 4, 4))


class Critic(nn.Module):
    """No batch norm in the critic, since the gradient penalty is taken per sample."""

    def __init__(self, in_ch, width):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_ch, width, 3, 1, 1), nn.LeakyReLU(0.2),
            nn.Conv2d(width, width * 2, 4, 2, 1), nn.LeakyReLU(0.2),
            nn.Conv2d(width * 2, width * 4, 4, 2, 1), nn.LeakyReLU(0.2),
        )
        self.fc = nn.Linear(width * 4 * 4 * 4, 1)

    def forward(self, x):
        return self.fc(self.net(x).flatten(1)).squeeze(1)


def gradient_penalty(critic, real, fake, alpha):
    interpolates = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    d_interp = critic(interpolates)
    grads = torch.autograd.grad(
        outputs=d_interp,
        inputs=interpolates,
        grad_outputs=torch.ones_like(d_interp),
        create_graph=True,
        retain_graph=True,
    )[0]
    grads = grads.reshape(grads.size(0), -1)
    return ((grads.norm(2, dim=1) - 1) ** 2).mean()


class WGANGP(nn.Module):
    def __init__(self, cfg: WGANConfig):
        super().__init__()
        self.cfg = cfg
        self.G = Generator(cfg.z_dim, cfg.g_width, cfg.img_channels)
        self.D = Critic(cfg.img_channels, cfg.d_width)

    def forward(self, real, z, alpha_gen: torch.Generator):
        with torch.enable_grad():
            fake = self.G(z).detach()
            d_real = self.D(real)
            d_fake = self.D(fake)
            alpha = torch.rand(real.size(0), 1, 1, 1, generator=alpha_gen)
            gp = gradient_penalty(self.D, real, fake, alpha)
            wdist = d_real.mean() - d_fake.mean()
            loss_d = -wdist + self.cfg.lambda_gp * gp + self.cfg.drift * (d_real ** 2).mean()
        return loss_d.detach(), wdist.detach(), gp.detach()


class SeededWGANGP(nn.Module):
    """Wrapper for evaluation runs: re-seeds the interpolation RNG on every call so the
    logged gradient penalty is comparable across checkpoints."""

    def __init__(self, cfg: WGANConfig, seed: int = 1234):
        super().__init__()
        self.model = WGANGP(cfg)
        self.seed = seed

    def forward(self, real, z):
        g = torch.Generator().manual_seed(self.seed)
        return self.model(real, z, g)


def build():
    torch.manual_seed(0)
    model = SeededWGANGP(WGANConfig()).eval()
    real = torch.rand(4, 3, 16, 16) * 2 - 1
    z = torch.randn(4, 32)
    return model, (real, z)
