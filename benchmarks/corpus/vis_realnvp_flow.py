"""RealNVP (Dinh et al., 2017) density model on flat vectors.

Stack of affine coupling layers with alternating binary masks; the scale
network output goes through tanh and a learned per-dimension rescale for
stability. forward() maps data -> latent and returns log p(x) under a standard
normal base distribution.
"""
import math
from typing import List, Tuple

import torch
import torch.nn as nn


class Rescale(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * x


def mlp(in_dim, hidden, out_dim, n_hidden=2):
    layers: List[nn.Module] = [nn.Linear(in_dim, hidden), nn.LeakyReLU(0.01)]
    for _ in range(n_hidden - 1):
        layers += [nn.Linear(hidden, hidden), nn.LeakyReLU(0.01)]
    layers.append(nn.Linear(hidden, out_dim))
    return nn.Sequential(*layers)


class AffineCoupling(nn.Module):
    def __init__(self, dim, hidden, mask: torch.Tensor):
        super().__init__()
        self.register_buffer("mask", mask)
        self.s_net = mlp(dim, hidden, dim)
        self.t_net = mlp(dim, hidden, dim)
        self.rescale = Rescale(dim)
        nn.init.zeros_(self.s_net[-1].weight)
        nn.init.zeros_(self.s_net[-1].bias)

    def forward(self, x) -> Tuple[torch.Tensor, torch.Tensor]:
        x_masked = x * self.mask
        s = self.rescale(torch.tanh(self.s_net(x_masked))) * (1 - self.mask)
        t = self.t_net(x_masked) * (1 - self.mask)
        y = x_masked + (1 - self.mask) * (x * torch.exp(s) + t)
        return y, s.sum(dim=1)

    def inverse(self, y):
        y_masked = y * self.mask
        s = self.rescale(torch.tanh(self.s_net(y_masked))) * (1 - self.mask)
        t = self.t_net(y_masked) * (1 - self.mask)
        return y_masked + (1 - self.mask) * (y - t) * torch.exp(-s)


class ActNorm1d(nn.Module):
    """Per-dimension affine with log-det; initialised to identity here."""

    def __init__(self, dim):
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(dim))
        self.log_scale = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return (x + self.loc) * torch.exp(self.log_scale), self.log_scale.sum().expand(x.shape[0])


class RealNVP(nn.Module):
    def __init__(self, dim=8, hidden=64, num_couplings=6):
        super().__init__()
        self.dim = dim
        checker = (torch.arange(dim) % 2).float()
        layers = []
        for i in range(num_couplings):
            mask = checker if i % 2 == 0 else 1 - checker
            layers.append(AffineCoupling(dim, hidden, mask))
            layers.append(ActNorm1d(dim))
        self.layers = nn.ModuleList(layers)

    def base_log_prob(self, z):
        return -0.5 * (z ** 2).sum(dim=1) - 0.5 * self.dim * math.log(2 * math.pi)

    def forward(self, x):
        log_det = torch.zeros(x.shape[0], device=x.device)
        z = x
        for layer in self.layers:
            z, ld = layer(z)
            log_det = log_det + ld
        assert torch.isfinite(log_det).all(), f"non-finite log-det: {log_det}"
        log_prob = self.base_log_prob(z) + log_det
        bits_per_dim = -log_prob.mean() / (self.dim * math.log(2))
        return z, log_prob, bits_per_dim

    @torch.no_grad()
    def sample_from(self, z):
        for layer in reversed(self.layers):
            if isinstance(layer, AffineCoupling):
                z = layer.inverse(z)
            else:
                z = z * torch.exp(-layer.log_scale) - layer.loc
        return z


def build():
    torch.manual_seed(0)
    model = RealNVP().eval()
    for p in model.parameters():
        p.data.add_(0.01 * torch.randn_like(p))
    x = torch.randn(32, 8) * 1.5 + 0.3
    return model, (x,)
