"""N-BEATS (Oreshkin et al., ICLR 2020), interpretable configuration.

Stacks of fully-connected blocks with trend (polynomial) and seasonality
(Fourier) basis expansions; doubly residual topology.
"""
from typing import List

import numpy as np
import torch
import torch.nn as nn


def linspace(backcast_length: int, forecast_length: int):
    lin = np.linspace(-backcast_length, forecast_length, backcast_length + forecast_length, dtype=np.float32)
    return lin[:backcast_length] / backcast_length, lin[backcast_length:] / forecast_length


class TrendBasis(nn.Module):
    def __init__(self, degree: int, backcast_length: int, forecast_length: int):
        super().__init__()
        b, f = linspace(backcast_length, forecast_length)
        self.register_buffer("T_b", torch.tensor(np.stack([b ** i for i in range(degree + 1)])), persistent=False)
        self.register_buffer("T_f", torch.tensor(np.stack([f ** i for i in range(degree + 1)])), persistent=False)

    def forward(self, theta_b, theta_f):
        return theta_b @ self.T_b, theta_f @ self.T_f


class SeasonalityBasis(nn.Module):
    def __init__(self, harmonics: int, backcast_length: int, forecast_length: int):
        super().__init__()
        b, f = linspace(backcast_length, forecast_length)
        freq = np.arange(harmonics, dtype=np.float32)
        self.register_buffer("S_b", self._basis(b, freq), persistent=False)
        self.register_buffer("S_f", self._basis(f, freq), persistent=False)

    @staticmethod
    def _basis(t, freq):
        grid = 2 * np.pi * freq[:, None] * t[None, :]
        return torch.tensor(np.concatenate([np.cos(grid), np.sin(grid)], axis=0), dtype=torch.float32)

    def forward(self, theta_b, theta_f):
        return theta_b @ self.S_b, theta_f @ self.S_f


class NBeatsBlock(nn.Module):
    def __init__(self, input_size: int, theta_size: int, basis: nn.Module, layers: int = 4, units: int = 64):
        super().__init__()
        fc = [nn.Linear(input_size, units), nn.ReLU()]
        for _ in range(layers - 1):
            fc += [nn.Linear(units, units), nn.ReLU()]
        self.fc = nn.Sequential(*fc)
        self.theta_b = nn.Linear(units, theta_size, bias=False)
        self.theta_f = nn.Linear(units, theta_size, bias=False)
        self.basis = basis

    def forward(self, x):
        h = self.fc(x)
        return self.basis(self.theta_b(h), self.theta_f(h))


class NBeats(nn.Module):
    def __init__(self, backcast_length=24, forecast_length=6, blocks_per_stack=2, degree=2, harmonics=4, units=64):
        super().__init__()
        self.forecast_length = forecast_length
        blocks: List[nn.Module] = []
        for _ in range(blocks_per_stack):
            blocks.append(NBeatsBlock(backcast_length, degree + 1, TrendBasis(degree, backcast_length, forecast_length), units=units))
        for _ in range(blocks_per_stack):
            blocks.append(NBeatsBlock(backcast_length, 2 * harmonics, SeasonalityBasis(harmonics, backcast_length, forecast_length), units=units))
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x, input_mask):
        residuals = x.flip(dims=(1,))
        input_mask = input_mask.flip(dims=(1,))
        forecast = x[:, -1:]
        stack_outputs = []
        for block in self.blocks:
            backcast, block_forecast = block(residuals)
            residuals = (residuals - backcast) * input_mask
            forecast = forecast + block_forecast
            stack_outputs.append(block_forecast)
        return forecast, torch.stack(stack_outputs, dim=1)


def build():
    torch.manual_seed(0)
    model = NBeats().eval()
    t = torch.arange(24, dtype=torch.float32)
    x = torch.stack([torch.sin(t / 3) + 0.1 * t, torch.cos(t / 4)])
    mask = torch.ones_like(x)
    mask[1, :4] = 0
    return model, (x, mask)
